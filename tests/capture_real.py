"""Capture what the real agent CLIs print against the fake model server.

Runs each CLI directly (not through spex) in the headless JSON form spex
uses, once per scenario, and saves stdout, stderr and the exit code under
tests/fixtures/real/<cli>/<scenario>.{out,err,rc}, plus what the server saw
(<scenario>.requests.json: path, reply, model and the messages, without the
big system prompts and tool schemas) and runs.json (argv, seconds, rc).

    .venv/bin/python tests/capture_real.py [--cli claude] [--scenario answer]

Needs the CLIs of `make test-real` (SPEXSUP_REAL_CLI_BIN or the default cache).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import contextlib

import realclis
from modelserver import ModelServer, Reply, Request

OUT = Path(__file__).resolve().parent / "fixtures" / "real"
TRICKY = 'say hi\nreply "briefly", please. $(echo x) `y` -lead é ✓'


def fresh(cli: str, prompt: str | None, sid: str = "") -> list[str]:
    """The argv spex uses for a fresh turn (prompt None: left off, for stdin)."""
    tail = ["--", prompt] if prompt is not None else []
    if cli == "claude":
        return (
            ["claude", "-p", "--output-format", "stream-json", "--verbose"]
            + (["--session-id", sid] if sid else [])
            + tail
        )
    if cli == "codex":
        return ["codex", "exec", "--json", *tail]
    if cli == "opencode":
        return ["opencode", "run", "--format", "json", *tail]
    return ["pi", "-p", "--mode", "json"]


def resume(cli: str, sid: str, prompt: str | None) -> list[str]:
    tail = [prompt] if prompt is not None else []
    if cli == "claude":
        base = ["claude", "-p", "--output-format", "stream-json", "--verbose", "--resume", sid]
        return base + (["--", *tail] if tail else [])
    if cli == "codex":
        return ["codex", "exec", "resume", "--json", "--", sid, *tail]
    if cli == "opencode":
        return ["opencode", "run", "--format", "json", "--session", sid] + (
            ["--", *tail] if tail else []
        )
    return ["pi", "-p", "--mode", "json", "--session", sid]


def session_id(cli: str, out: str) -> str | None:
    for line in out.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if cli == "claude" and event.get("session_id"):
            return str(event["session_id"])
        if cli == "codex" and event.get("type") == "thread.started":
            return str(event["thread_id"])
        if cli == "opencode" and event.get("sessionID"):
            return str(event["sessionID"])
        if cli == "pi" and event.get("type") == "session":
            return str(event["id"])
    return None


@dataclass
class Run:
    name: str
    argv: list[str]
    stdin: bytes | None = None  # None: /dev/null, as spex gives an argv prompt
    rc: int | None = None
    out: str = ""
    err: str = ""
    seconds: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Box:
    """One CLI's isolated world: a HOME, a git work dir, a server."""

    cli: str
    root: Path
    server: ModelServer
    env: dict[str, str]
    work: Path
    runs: list[Run] = field(default_factory=list)

    def run(
        self,
        name: str,
        argv: list[str],
        stdin: bytes | None = None,
        timeout: int = 120,
        expect: str | None = None,
    ) -> Run:
        seen = len(self.server.requests())
        started = time.monotonic()
        try:
            p = subprocess.run(
                ["timeout", "-k", "5", str(timeout), *argv],
                cwd=self.work,
                env=self.env,
                input=stdin,
                stdin=subprocess.DEVNULL if stdin is None else None,
                capture_output=True,
                check=False,
            )
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:  # never with timeout(1), but bounded
            rc, out, err = 124, e.stdout or b"", e.stderr or b""
        run = Run(
            name, argv, stdin, rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        )
        run.seconds = round(time.monotonic() - started, 2)
        new = self.server.requests()[seen:]
        run.requests = [summary(r) for r in new]
        if expect is not None:
            mains = [r for r in new if r.main]
            # The user text that carries the prompt: the last one of the first
            # main request (earlier ones are the CLI's own context blocks).
            got = mains[0].user_texts()[-1] if mains and mains[0].user_texts() else None
            run.notes["prompt_sent"] = expect
            run.notes["prompt_received"] = got
            run.notes["byte_exact"] = any(expect in r.user_texts() for r in mains)
        self.runs.append(run)
        return run


def summary(r: Request) -> dict[str, Any]:
    body = r.body if isinstance(r.body, dict) else {}
    out: dict[str, Any] = {
        "path": r.path,
        "main": r.main,
        "reply": r.reply,
        "model": body.get("model"),
        "stream": body.get("stream"),
        "tools": len(r.tool_names()),
        "user_texts": [t if len(t) < 400 else t[:400] + "…" for t in r.user_texts()],
    }
    turns = []
    for m in r.messages():
        if not isinstance(m, dict):
            continue
        role = m.get("role") or m.get("type")
        content = m.get("content")
        if not isinstance(content, str):
            content = json.dumps(content if content is not None else m)[:300]
        turns.append(f"{role}: {content[:300]}")
    out["messages"] = turns
    return out


def box(cli: str, script: list[Reply], default: Reply | None = None, **options: Any) -> Box:
    root = Path(tempfile.mkdtemp(prefix=f"cap-{cli}-"))
    work = root / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    server = ModelServer(script, default, log=root / "requests.jsonl", retry_after_ms=200).start()
    path = f"{realclis.bin_dir()}:/usr/local/bin:/usr/bin:/bin"
    env = {"PATH": path, "TERM": "dumb", "LANG": "C.UTF-8"}
    env |= realclis.setup(cli, root / "home", server.url, **options)
    return Box(cli, root, server, env, work)


ANSWER = "Hello from the fake model."


def fresh_run(b: Box, name: str, prompt: str, expect: str | None = None) -> Run:
    sid = str(uuid.uuid4())
    if b.cli == "pi":
        return b.run(name, fresh("pi", None), prompt.encode(), expect=expect)
    return b.run(name, fresh(b.cli, prompt, sid), expect=expect)


# --- scenarios: each returns the box it ran in -------------------------------


def s_answer(cli: str) -> Box:
    b = box(cli, [Reply.answer(ANSWER)])
    fresh_run(b, "answer", "say hi")
    return b


def s_resume(cli: str) -> Box:
    b = box(cli, [Reply.answer("first answer"), Reply.answer("second answer")])
    first = fresh_run(b, "resume-turn1", "remember the word kumquat")
    sid = session_id(cli, first.out) or "?"
    stdin = b"what was the word?" if cli == "pi" else None
    b.run("resume", resume(cli, sid, None if cli == "pi" else "what was the word?"), stdin)
    return b


def s_tool(cli: str, name: str = "tool-denied", **options: Any) -> Box:
    command = "touch spex-tool-ran.txt"
    b = box(cli, [Reply.shell(command), Reply.answer("I tried to run it.")], **options)
    run = fresh_run(b, name, "create the file spex-tool-ran.txt with a shell command")
    run.err += f"\n[capture] file created by the tool: {(b.work / 'spex-tool-ran.txt').exists()}\n"
    return b


def s_tool_write(cli: str) -> Box:
    tool = {"claude": "Write", "opencode": "write", "pi": "write"}.get(cli)
    if tool is None:
        return s_tool(cli, "tool-write")
    key = {"claude": "file_path", "opencode": "filePath", "pi": "path"}[cli]
    b = box(cli, [])
    # An absolute path: the tools that want one get it, the others accept it.
    target = str(b.work / "spex-written.txt")
    b.server.push(Reply.call(tool, {key: target, "content": "x\n"}), Reply.answer("ok"))
    run = fresh_run(b, "tool-write", "write the file spex-written.txt")
    run.err += f"\n[capture] file written: {(b.work / 'spex-written.txt').exists()}\n"
    return b


def s_error(reply: Reply, name: str, **options: Any) -> Callable[[str], Box]:
    def scenario(cli: str) -> Box:
        b = box(cli, [], reply, **options)
        fresh_run(b, name, "say hi")
        return b

    return scenario


def s_unknown_resume(cli: str) -> Box:
    b = box(cli, [Reply.answer(ANSWER)])
    sid = {
        "claude": "0b6a1c9e-1d7e-4c55-9d3e-5a3f7f1b2c3d",
        "codex": "0199a1c9-1d7e-7c55-9d3e-5a3f7f1b2c3d",
        "opencode": "ses_0b6a1c9e1d7eXXXXXXXXXXXXXX",
        "pi": "0b6a1c9e-1d7e-4c55-9d3e-5a3f7f1b2c3d",
    }[cli]
    stdin = b"say hi" if cli == "pi" else None
    b.run("unknown-resume", resume(cli, sid, None if cli == "pi" else "say hi"), stdin)
    return b


def s_prompt(cli: str) -> Box:
    """Q1: the tricky prompt as argv and on stdin, fresh and resumed."""
    b = box(cli, [], Reply.answer(ANSWER))
    data = TRICKY.encode()
    x = TRICKY
    first = fresh_run(b, "prompt-argv" if cli != "pi" else "prompt-stdin", TRICKY, expect=x)
    sid = session_id(cli, first.out) or "?"
    if cli != "pi":
        b.run("prompt-stdin", fresh(cli, None, str(uuid.uuid4())), data, expect=x)
        if cli == "codex":
            b.run("prompt-stdin-dash", [*fresh(cli, None), "-"], data, expect=x)
        if cli == "opencode":
            b.run("prompt-stdin-dashdash", [*fresh(cli, None), "--"], data, expect=x)
        b.run("prompt-argv-resume", resume(cli, sid, TRICKY), expect=x)
        if cli == "codex":
            b.run("prompt-stdin-resume-dash", resume(cli, sid, "-"), data, expect=x)
    b.run("prompt-stdin-resume", resume(cli, sid, None), data, expect=x)
    # The CLI's own argv prompt with stdin /dev/null, as spex runs it: and with
    # stdin holding other bytes (codex appends stdin to an argv prompt).
    if cli == "codex":
        b.run("prompt-argv-stdin-extra", fresh(cli, "say hi"), b"EXTRA", expect="say hi")
    return b


def s_sigterm(cli: str, tool: bool = False) -> Box:
    """Q6: SIGTERM to the CLI while its stream stalls (or, `tool`, while its
    shell tool runs `sleep 300`); what is left 5 s after it exited."""
    b = box(cli, [Reply.shell("sleep 300")] if tool else [], Reply.stall())
    marker = uuid.uuid4().hex
    env = {**b.env, "SPEX_CAPTURE_MARK": marker}
    argv = fresh(cli, None if cli == "pi" else "say hi", str(uuid.uuid4()))
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=b.work,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    if cli == "pi":
        assert proc.stdin is not None
        proc.stdin.write(b"say hi")
    assert proc.stdin is not None
    proc.stdin.close()
    proc.stdin = None
    b.server.wait_for(1, timeout=60)
    time.sleep(3 if tool else 1)

    def tree() -> list[str]:
        found = []
        for p in psutil.process_iter():
            try:
                if p.environ().get("SPEX_CAPTURE_MARK") == marker:
                    ids = f"pid={p.pid} ppid={p.ppid()} pgid={os.getpgid(p.pid)}"
                    found.append(
                        f"{ids} sid={os.getsid(p.pid)} {p.status()} {' '.join(p.cmdline())[:120]}"
                    )
            except (psutil.Error, ProcessLookupError):
                continue
        return found

    before = tree()
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=15)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        rc = None
        proc.kill()
        out, err = proc.communicate()
    time.sleep(5)
    after = tree()
    run = Run(
        "sigterm-tool" if tool else "sigterm",
        argv,
        None,
        rc,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
    )
    run.seconds = round(time.monotonic() - started, 2)
    run.requests = [summary(r) for r in b.server.requests()]
    run.err += "\n[capture] processes before SIGTERM:\n" + "\n".join(before)
    run.err += "\n[capture] processes 5 s after the CLI exited:\n" + "\n".join(after) + "\n"
    for line in after:
        pid = int(line.split()[0].split("=")[1])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    b.runs.append(run)
    return b


SCENARIOS: dict[str, Callable[[str], Box]] = {
    "answer": s_answer,
    "resume": s_resume,
    "tool-denied": s_tool,
    "tool-write": s_tool_write,
    "http500": s_error(Reply.fail("server_error"), "http500"),
    "http503": s_error(Reply.fail("overloaded", status=503), "http503"),
    "http529": s_error(Reply.fail("overloaded", status=529), "http529"),
    "ratelimit429": s_error(Reply.fail("rate_limit", retry_after=1), "ratelimit429"),
    "quota429": s_error(Reply.fail("insufficient_quota"), "quota429"),
    "usage429": s_error(Reply.fail("usage_limit"), "usage429"),
    "usage429-oauth": s_error(Reply.fail("usage_limit"), "usage429-oauth", oauth=True),
    "usage429-chatgpt": s_error(Reply.fail("usage_limit"), "usage429-chatgpt", chatgpt=True),
    "answer-chatgpt": s_error(Reply.answer(ANSWER), "answer-chatgpt", chatgpt=True),
    "unknown-resume": s_unknown_resume,
    "model-not-found": s_error(Reply.fail("model_not_found"), "model-not-found"),
    "opencode-ask": lambda cli: s_tool(cli, "tool-ask", permission={"bash": "ask"}),
    "opencode-deny": lambda cli: s_tool(cli, "tool-denied", permission={"bash": "deny"}),
    "opencode-allow": lambda cli: s_tool(cli, "tool-allowed"),
    "opencode-deny-pattern": lambda cli: s_tool(
        cli, "tool-denied-pattern", permission={"bash": {"*": "allow", "touch *": "deny"}}
    ),
    "prompt": s_prompt,
    "sigterm": s_sigterm,
    "sigterm-tool": lambda cli: s_sigterm(cli, tool=True),
}
ONLY = {
    "http529": ("claude",),
    "quota429": ("codex", "opencode", "pi"),
    "usage429-oauth": ("claude",),
    "usage429-chatgpt": ("pi",),
    "answer-chatgpt": ("pi",),
    "opencode-ask": ("opencode",),
    "opencode-deny": ("opencode",),
    "opencode-allow": ("opencode",),
    "opencode-deny-pattern": ("opencode",),
}
SKIP = {"tool-denied": ("opencode",)}  # opencode's: opencode-deny


def save(b: Box, index: dict[str, Any]) -> None:
    directory = OUT / b.cli
    directory.mkdir(parents=True, exist_ok=True)
    for run in b.runs:
        (directory / f"{run.name}.out").write_text(run.out)
        (directory / f"{run.name}.err").write_text(run.err)
        (directory / f"{run.name}.rc").write_text(f"{run.rc}\n")
        (directory / f"{run.name}.requests.json").write_text(
            json.dumps(run.requests, indent=1) + "\n"
        )
        index[run.name] = {
            "argv": run.argv,
            "stdin": run.stdin.decode() if run.stdin is not None else None,
            "rc": run.rc,
            "seconds": run.seconds,
            "requests": len(run.requests),
            **run.notes,
        }
        print(f"{b.cli:8} {run.name:26} rc={run.rc} {run.seconds:6.1f}s req={len(run.requests)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", action="append", choices=realclis.CLIS)
    parser.add_argument("--scenario", action="append", choices=list(SCENARIOS))
    args = parser.parse_args()
    for cli in args.cli or realclis.CLIS:
        runs = OUT / cli / "runs.json"
        index: dict[str, Any] = json.loads(runs.read_text()) if runs.exists() else {}
        for name in args.scenario or SCENARIOS:
            if cli not in ONLY.get(name, (cli,)) or cli in SKIP.get(name, ()):
                continue
            b = SCENARIOS[name](cli)
            try:
                save(b, index)
            finally:
                b.server.close()
            runs.parent.mkdir(parents=True, exist_ok=True)
            runs.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
