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
    }
    with path.open("wb") as f:
        f.write(json.dumps({"type": "system", "subtype": "init", "session_id": sid}).encode())
        f.write(b"\n")
        written = 0
        while written < mb * 1_000_000:
            f.write(step + b"\n")
            written += len(step) + 1
        f.write(json.dumps(result).encode() + b"\n")


class Home:
    """A state home made by one checkout's spex, holding one running claude turn."""

    def __init__(self, python: str, output: Path, parser: str | None) -> None:
        self.python = python
        self.root = Path(tempfile.mkdtemp(prefix="spexrep"))
        self.home = self.root / "state"
        self.env = {
            **os.environ,
            "SPEXSUP_HOME": str(self.home),
            "SPEXSUP_TMUX": f"spexrep-{os.getpid()}-{self.root.name}",
            "TMUX_TMPDIR": str(self.root),
            "HOME": str(self.root),
            "SHELL": "/bin/sh",
        }
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.home.mkdir(mode=0o700)  # an explicit --home must exist (any spex reads it so)
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
        from spexsup import outcome

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
