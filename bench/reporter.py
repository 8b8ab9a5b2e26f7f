#!/usr/bin/env python3
"""The exit reporter's time on a big claude stream-json output, with the
outcome-flag parsing (issue 14) against a baseline.

The reporter runs on every turn end, so reading a turn's flags must cost
next to nothing however long the turn talked. This writes a stream-json
`output.log` of `--mb` MB (an init event, assistant events, a `result`
event with permission denials at the end), and times
`spex internal turn-exit` on it (p50 of N, alternated so machine load hits
both alike):

- `flags`: this tree, the turn's harness parser on (claude);
- `baseline`: with `--baseline DIR`, the reporter of that checkout (its own
  .venv, e.g. /work/main: what the reporter cost before flags); without it,
  this tree with no parser (the flag parsing alone is the difference).

Then the usage parsing (issue 26) alone, in process, on a `--mb` output of
each CLI in its real format (claude's stream-json, codex's exec --json,
opencode's run --format json with a step every ~12 KB, pi's --mode json):
`outcome.read` of this tree against that of `--baseline`'s outcome.py (the
flags without usage), target < +2 ms.

    python bench/reporter.py [--mb 10] [--n 15] [--baseline /work/main]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SESSION = "bench"
TURN = "20261130T000000Z-bench0"


def write_output(path: Path, mb: int) -> None:
    sid = "3f1c2d4e-0000-4000-8000-000000000000"
    text = "x" * 700
    step = json.dumps(
        {
            "type": "assistant",
            "message": {"content": [{"type": "text", "text": text}]},
            "session_id": sid,
        }
    ).encode()
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "num_turns": 40,
        "result": "Done. Should I also update the docs?",
        "session_id": sid,
        "permission_denials": [{"tool_name": "Write", "tool_use_id": "t1", "tool_input": {}}],
        # What claude 2.1 prints (tests/fixtures/real/claude/answer.out).
        "total_cost_usd": 0.088119,
        "usage": {"input_tokens": 29343, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "output_tokens": 6},
        "modelUsage": {"claude-sonnet-4-5": {"inputTokens": 29343, "outputTokens": 6,
                       "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0,
                       "costUSD": 0.088119}},
    }  # fmt: skip
    with path.open("wb") as f:
        f.write(json.dumps({"type": "system", "subtype": "init", "session_id": sid}).encode())
        f.write(b"\n")
        written = 0
        while written < mb * 1_000_000:
            f.write(step + b"\n")
            written += len(step) + 1
        f.write(json.dumps(result).encode() + b"\n")


def write_cli_output(path: Path, cli: str, mb: int) -> None:
    """`mb` MB of `cli`'s structured output, its usage events where the real
    CLI prints them (tests/fixtures/real)."""
    text = "x" * 700
    big = "y" * 10_000
    steps: list[dict[str, Any]]
    end: list[dict[str, Any]]
    if cli == "codex":
        step = {"type": "item.completed", "item": {"id": "i", "type": "command_execution",
                "command": "ls", "aggregated_output": text, "exit_code": 0}}  # fmt: skip
        end = [
            {"type": "item.completed", "item": {"type": "agent_message", "text": "done"}},
            {"type": "turn.completed", "usage": {"input_tokens": 9642, "cached_input_tokens": 0,
             "cache_write_input_tokens": 0, "output_tokens": 6, "reasoning_output_tokens": 0}},
        ]  # fmt: skip
        steps = [step]
    elif cli == "opencode":
        tokens = {"total": 7778, "input": 7772, "output": 6, "reasoning": 0,
                  "cache": {"write": 0, "read": 0}}  # fmt: skip
        steps = [
            {"type": "step_start", "part": {"type": "step-start"}},
            {"type": "tool_use", "part": {"tool": "bash", "state": {"output": big}}},
            {"type": "text", "part": {"type": "text", "text": text}},
            {"type": "step_finish",
             "part": {"reason": "tool-calls", "tokens": tokens, "cost": 0}},
        ]  # fmt: skip
        end = [{"type": "step_finish", "part": {"reason": "stop", "tokens": tokens, "cost": 0}}]
        end.insert(0, steps[0])
    elif cli == "pi":
        usage = {"input": 1434, "output": 6, "cacheRead": 0, "cacheWrite": 0,
                 "totalTokens": 1440, "cost": {"total": 0}}  # fmt: skip
        message = {"role": "assistant", "model": "fake-model", "usage": usage,
                   "content": [{"type": "text", "text": text}],
                   "stopReason": "toolUse"}  # fmt: skip
        steps = [
            {"type": "message_update", "message": {"role": "assistant", "content": text}},
            {"type": "message_end", "message": message},
        ]
        last = {**message, "stopReason": "stop"}
        end = [{"type": "message_end", "message": last},
               {"type": "agent_end", "messages": [message] * 20 + [last]}]  # fmt: skip
    else:
        write_output(path, mb)
        return
    lines = [json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in steps]
    with path.open("wb") as f:
        written = 0
        while written < mb * 1_000_000:
            for line in lines:
                f.write(line)
                written += len(line)
        for e in end:
            f.write(json.dumps(e, separators=(",", ":")).encode() + b"\n")


def usage_parse(baseline: Path, mb: int, n: int) -> None:
    """`outcome.read` per CLI, this tree's (flags and usage) against the
    baseline's outcome.py (flags only), p50 of n, alternated."""
    import importlib.util

    from spexsup.adapters import outcome

    spec = importlib.util.spec_from_file_location("baseline_outcome", baseline)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {baseline}")
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    scratch = Path(tempfile.mkdtemp(prefix="spexuse"))
    print(f"usage parsing on a {mb} MB output, in process, p50 of {n} (target: < +2 ms):")
    try:
        for cli in ("claude", "codex", "opencode", "pi"):
            path = scratch / f"{cli}.log"
            write_cli_output(path, cli, mb)
            theirs, ours = [], []
            for _ in range(n):
                t0 = time.perf_counter()
                base.read(path, cli)
                theirs.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                found = outcome.read(path, cli)
                ours.append((time.perf_counter() - t0) * 1000)
            b, o = statistics.median(theirs), statistics.median(ours)
            spent = found.spent
            parts = {k[0] or "-": v[:2] for k, v in spent.parts.items()}
            print(
                f"  {cli:<9} baseline {b:6.2f} ms, with usage {o:6.2f} ms ({o - b:+.2f} ms);"
                f" read {parts}, exact {spent.exact}"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class Home:
    """A state home made by one checkout's spex, holding one running claude turn."""

    def __init__(self, python: str, output: Path, parser: str | None) -> None:
        self.python = python
        self.root = Path(tempfile.mkdtemp(prefix="spexrep"))
        self.home = self.root / "state"
        # A SPEXSUP_HOME (or --home) not made yet is refused: made here, private.
        self.home.mkdir(mode=0o700)
        self.env = {
            **os.environ,
            "SPEXSUP_HOME": str(self.home),
            "SPEXSUP_TMUX": f"spexrep-{os.getpid()}-{self.root.name}",
            "TMUX_TMPDIR": str(self.root),
            "HOME": str(self.root),
            "SHELL": "/bin/sh",
        }
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run(
            [python, "-m", "spexsup", "--home", str(self.home), "ls"],
            env=self.env,
            capture_output=True,
            check=True,
        )
        directory = self.home / "turns" / SESSION / TURN
        directory.mkdir(parents=True)
        os.link(output, directory / "output.log")
        meta = {"session": SESSION, "turn": TURN, "harness": "claude", "outcome": parser}
        (directory / "meta.json").write_text(json.dumps(meta))
        self.db = sqlite3.connect(self.home / "state.db", isolation_level=None)
        self.db.execute(
            "INSERT INTO sessions (name, harness, cwd, env, created_at, state, current_turn)"
            " VALUES (?, 'claude', ?, '{}', ?, 'running', ?)",
            (SESSION, str(self.root), time.time(), TURN),
        )
        self.db.execute(
            "INSERT INTO turns (id, session, state, started_at) VALUES (?, ?, 'running', ?)",
            (TURN, SESSION, time.time()),
        )

    def report(self, rc: int) -> float:
        self.db.execute("UPDATE turns SET state = 'running' WHERE id = ?", (TURN,))
        argv = [self.python, "-m", "spexsup", "--home", str(self.home)]
        argv += ["internal", "turn-exit", SESSION, TURN, str(rc)]
        t0 = time.perf_counter()
        r = subprocess.run(argv, env=self.env, capture_output=True, check=False)
        spent = (time.perf_counter() - t0) * 1000
        if r.returncode != 0:
            raise SystemExit(f"reporter rc={r.returncode}: {r.stderr.decode()}")
        return spent

    def flags(self) -> str:
        columns = [r[1] for r in self.db.execute("PRAGMA table_info(turns)")]
        if "flags" not in columns:
            return "(no flags column)"
        row = self.db.execute("SELECT flags FROM turns WHERE id = ?", (TURN,)).fetchone()
        return str(row[0])

    def close(self) -> None:
        self.db.close()
        shutil.rmtree(self.root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=10)
    parser.add_argument("--n", type=int, default=15)
    parser.add_argument("--baseline", metavar="DIR", help="a checkout with its own .venv")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(repo / "spexsup")], check=True)
    scratch = Path(tempfile.mkdtemp(prefix="spexout"))
    output = scratch / "output.log"
    write_output(output, args.mb)
    if args.baseline:
        base_python = str(Path(args.baseline) / ".venv" / "bin" / "python")
        base_src = Path(args.baseline) / "spexsup"
        subprocess.run([base_python, "-m", "compileall", "-q", str(base_src)], check=True)
        base = Home(base_python, output, None)
        label = f"baseline ({args.baseline})"
    else:
        base = Home(sys.executable, output, None)
        label = "baseline (this tree, no parser)"
    ours = Home(sys.executable, output, "claude")
    size = output.stat().st_size / 1e6
    try:
        for home in (base, ours):
            home.report(0)  # warm the page cache and the bytecode
        times: dict[str, list[float]] = {"base": [], "ours": []}
        for _ in range(args.n):
            times["base"].append(base.report(0))
            times["ours"].append(ours.report(0))
        b, o = statistics.median(times["base"]), statistics.median(times["ours"])
        print(f"exit reporter on a {size:.1f} MB claude stream-json output, p50 of {args.n}:")
        print(f"  {label:<40} {b:7.1f} ms")
        print(f"  {'with outcome flags (this tree)':<40} {o:7.1f} ms")
        print(f"  difference {o - b:+.1f} ms (budget: +20 ms)")
        print(f"  flags recorded: {ours.flags()}")
        sys.path.insert(0, str(repo))
        from spexsup.adapters import outcome

        spent = []
        for _ in range(args.n):
            t0 = time.perf_counter()
            outcome.read(output, "claude")
            spent.append((time.perf_counter() - t0) * 1000)
        print(f"  the flag parsing alone, in process: {statistics.median(spent):.2f} ms p50")
    finally:
        base.close()
        ours.close()
        shutil.rmtree(scratch, ignore_errors=True)
    baseline = Path(args.baseline or "/work/main") / "spexsup" / "outcome.py"
    if baseline.exists():
        usage_parse(baseline, args.mb, args.n)
    else:
        print(f"(no {baseline}: give --baseline DIR for the usage parsing comparison)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
