"""The turn directory, `<home>/turns/<session>/<turn>/`: the one owner of its layout.

A turn's directory is the contract between the launcher, the wrapper
(`shell/turn.sh`, which spells the same names: tests/test_layers.py holds the
two together) and every reader. Its files, written once by the launcher
unless said otherwise:

    prompt  argv  env  stdin  reporter  login  render  deadline  on-limit  meta.json
    output.log   what the harness printed (the wrapper appends)
    outcome      the outcome marker (spexsup.pane.marker)
    ended        the end's one-line detail, for the pane (the reporter)
    binary  not-found  no-login-shell  timed-out  survivors  git-start  git-start.todo
    sandbox  sandbox-probe  sandbox-gate  sandbox-probed  sandbox-held  sandbox-failed
    denied-net
    net/  netgate.log   a sandboxed turn's (spexsup.sandbox, spexsup.pane.netgate)
    stop-requested   a stop that could not take the write lock (spexsup.turn.stop)
    verify  verify-deadline  verify.log  verify-rc  verify-started  verify-timed-out
    stagger      a staggered launch (spexsup.turn.wake), whose wrapper then writes
    started      when the harness started (microseconds since the epoch)

Imports only the standard library at import time: the exit reporter loads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spexsup.procs import Liveness

TURNS = "turns"

# Written by the launcher (spexsup.turn.launch) before the wrapper starts.
PROMPT = "prompt"
ARGV = "argv"
ENV = "env"
STDIN = "stdin"
REPORTER = "reporter"
LOGIN = "login"
RENDER = "render"
DEADLINE = "deadline"
ON_LIMIT = "on-limit"
# `{"models": [...]}`: the models a failed attempt falls back to (pane.fallback).
FALLBACK = "fallback"
META = "meta.json"
GIT_START_TODO = "git-start.todo"
# Written by a staggered launch (spexsup.turn.wake) before the wrapper starts.
STAGGER = "stagger"
# Written inside the pane, by the wrapper and the processes it starts.
OUTPUT = "output.log"
OUTCOME = "outcome"
ENDED = "ended"
BINARY = "binary"
NOT_FOUND = "not-found"
NO_LOGIN_SHELL = "no-login-shell"
# A sandboxed turn (spexsup.sandbox): the engine's options (NUL-separated),
# the probe's two paths, the network gate's allowed hosts (JSON), by the
# launcher; `sandbox-held` (proven) or `sandbox-failed` (why), by the
# wrapper; `denied-net` (a host a line), by the gate.
SANDBOX = "sandbox"
SANDBOX_PROBE = "sandbox-probe"
SANDBOX_GATE = "sandbox-gate"
SANDBOX_PROBED = "sandbox-probed"
SANDBOX_HELD = "sandbox-held"
SANDBOX_FAILED = "sandbox-failed"
DENIED_NET = "denied-net"
# The gate's Unix sockets (a directory) and its error output.
NET = "net"
NETGATE_LOG = "netgate.log"
TIMED_OUT = "timed-out"
SURVIVORS = "survivors"
GIT_START = "git-start"
STARTED = "started"
# A turn's check (`--verify`, spexsup.pane.verify): its argv (NUL-separated)
# and `SECONDS GRACE`, by the launcher; its output (appended by the wrapper,
# then by `spex verify`), exit status, start time and its watchdog's mark.
VERIFY = "verify"
VERIFY_DEADLINE = "verify-deadline"
VERIFY_LOG = "verify.log"
VERIFY_RC = "verify-rc"
VERIFY_STARTED = "verify-started"
VERIFY_TIMED_OUT = "verify-timed-out"
# Left by a stop that could not take the write lock; honored by whoever records the end.
STOP_REQUEST = "stop-requested"

# How many output lines a one-line message quotes.
TAIL_LINES = 5


def root(home: Path) -> Path:
    """`<home>/turns`: every session's turn directories."""
    return home / TURNS


def of_session(home: Path, session: str) -> Path:
    return home / TURNS / session


def path(home: Path, session: str, turn: str) -> Path:
    return home / TURNS / session / turn


def meta(directory: Path) -> dict[str, Any]:
    """`meta.json` (harness, outcome parser, prompt's shape…); {} if unreadable."""
    try:
        data = json.loads((directory / META).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def output_end(directory: Path, size: int = 65536) -> str:
    """The last `size` bytes of the turn's output, decoded; "" if there is none."""
    from spexsup.outcome import output_end as end

    return end(directory / OUTPUT, size)


def output_lines(directory: Path, size: int = 65536) -> list[str]:
    """The end of the turn's output as a person reads it (JSON events rendered
    for its CLI, never shown raw; no control characters)."""
    from spexsup.pane.pretty import readable_tail

    parser = meta(directory).get("outcome")
    return readable_tail(directory / OUTPUT, parser if isinstance(parser, str) else None, size)


def output_tail(directory: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of the turn's output, joined for a one-line message
    (each cut to 200 bytes, saying what it left out)."""
    from spexsup.pane.lines import shorter

    return " | ".join(shorter(line, 200) for line in output_lines(directory)[-lines:])


def last_line(directory: Path, size: int = 65536) -> str | None:
    """What a harness that failed mid-turn said last (`API Error: 529 overloaded`)."""
    from spexsup.pane.lines import shorter

    lines = output_lines(directory, size)
    return shorter(lines[-1], 300) if lines else None


def first_line(file: Path, size: int = 4096) -> str | None:
    """The first non-blank line of one of the turn's files (its prompt, its end)."""
    try:
        with file.open("rb") as f:
            data = f.read(size).decode("utf-8", "replace")
    except OSError:
        return None
    for line in data.splitlines():
        if line.strip():
            return line.strip()[:200]
    return None


def wrapper_liveness(pid: int, directory: Path) -> Liveness:
    """Is the wrapper of this turn dir alive as `pid`? (reuse-proof: its argv names the dir)."""
    from spexsup.procs import command_line_liveness

    return command_line_liveness(pid, str(directory))
