"""The turn directory, `<home>/turns/<session>/<turn>/`: the one owner of its layout.

A turn's directory is the contract between the launcher, the wrapper
(`shell/turn.sh`, which spells the same names: tests/test_layers.py holds the
two together) and every reader. Its files, written once by the launcher
unless said otherwise:

    prompt  argv  env  stdin  reporter  login  render  deadline  on-limit  meta.json
    output.log   what the harness printed (the wrapper appends)
    outcome      the outcome marker (spexsup.pane.marker)
    ended        the end's one-line detail, for the pane (the reporter)
    typed        how many bytes typed into the pane during the turn the reporter dropped
    binary  not-found  no-login-shell  timed-out  survivors  git-start  git-start.todo
    sandbox  sandbox-probe  sandbox-gate  sandbox-probed  sandbox-held  sandbox-failed
    denied-net
    net/  netgate.log   a sandboxed turn's (spexsup.adapters.sandbox, spexsup.pane.netgate)
    stop-requested   a stop that could not take the write lock (spexsup.turn.stop)
    verify  verify-deadline  verify.log  verify-rc  verify-started  verify-timed-out
    attempt-N.output.log  an attempt a fallback kept (spexsup.pane.fallback)
    stagger      a staggered launch (spexsup.turn.wake), whose wrapper then writes
    started      when the harness started (microseconds since the epoch)

Every Python writer of these files is a function here (`write_plan`,
`request_stop`, `write_ended`…), called by the module whose step it is;
tests/test_turndir_owner.py fails on a write elsewhere. Outside Python: the
wrapper (shell/turn.sh) and the network gate (spexsup.pane.netgate, which
must not import pathlib or json: `denied-net`, `net/`, `sandbox-breach`).
A turn's budget (`budget`, `over-budget`) is spexsup.pane.budget's: the
renderer that trips it is what this module's readers load.

Imports only the standard library at import time: the exit reporter loads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from spexsup.record import Record

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from spexsup.adapters.procs import Liveness
    from spexsup.adapters.sandbox import Plan

TURNS = "turns"

# Written by the launcher (spexsup.turn.launch) before the wrapper starts.
PROMPT = "prompt"
ARGV = "argv"
ENV = "env"
STDIN = "stdin"
REPORTER = "reporter"
LOGIN = "login"
# The rc files' stats for the login cache's key, as the launch found them
# ("HOME<TAB>STATS": `login.rc_stats`; the wrapper stats them itself without).
LOGIN_STATS = "login-stats"
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
TYPED = "typed"
BINARY = "binary"
NOT_FOUND = "not-found"
NO_LOGIN_SHELL = "no-login-shell"
# A sandboxed turn (spexsup.adapters.sandbox): the engine's options (NUL-separated),
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
    from spexsup.adapters.outcome import output_end as end

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


def survivors(directory: Path) -> list[int]:
    """The pids in the deadline's `survivors` file (none when it is absent or garbled)."""
    try:
        words = (directory / SURVIVORS).read_text().split()
    except (OSError, UnicodeDecodeError):
        return []
    return [int(w) for w in words if w.isdigit()][:64]


def wrapper_liveness(pid: int, directory: Path) -> Liveness:
    """Is the wrapper of this turn dir alive as `pid`? (reuse-proof: its argv names the dir)."""
    from spexsup.adapters.procs import command_line_liveness

    return command_line_liveness(pid, str(directory))


# The writers. Files that die with their turn are not fsync'd (`durable=False`):
# after a crash the turn is lost anyway.


def _write(directory: Path, name: str, data: bytes, *, durable: bool = False) -> None:
    from spexsup.paths import write_atomic

    write_atomic(directory / name, data, durable=durable)


def words(items: Iterable[bytes]) -> bytes:
    """`argv`'s (and `env`'s, `reporter`'s, `sandbox`'s…) encoding: each word NUL-terminated."""
    return b"".join(w + b"\0" for w in items)


class Invocation(Record):
    """What the wrapper runs: the harness's argv, the prompt's exact bytes,
    and whether they go on the harness's stdin."""

    argv: Sequence[bytes]
    prompt: bytes
    on_stdin: bool


def write_launch(
    directory: Path, run: Invocation, *, env: Mapping[str, str], reporter: Sequence[str]
) -> None:
    """What every wrapper reads: the exact prompt bytes, the harness's argv,
    the session's env, the reporter's argv and, when the prompt goes on the
    harness's stdin, `stdin`. Written before the wrapper starts."""
    files = {
        PROMPT: run.prompt,
        ARGV: words(run.argv),
        ENV: words(f"{k}={v}".encode() for k, v in env.items()),
    }
    if run.on_stdin:
        files[STDIN] = b""
    files[REPORTER] = words(w.encode() for w in reporter)
    write_plan(directory, files)


def write_plan(directory: Path, files: Mapping[str, bytes]) -> None:
    """The launcher's other files (meta.json, deadline, verify, fallback…:
    the names above), each atomically, before the wrapper starts."""
    for name, data in files.items():
        _write(directory, name, data)


def write_sandbox(directory: Path, engine: Sequence[str], plan: Plan) -> None:
    """A sandboxed turn's `sandbox` (the engine's argv), `sandbox-probe` (the
    probe's two paths) and, when its network is gated, `sandbox-gate` (the
    allowed hosts). Before the wrapper starts."""
    from spexsup.adapters.sandbox import Network

    files = {
        SANDBOX: words(w.encode() for w in engine),
        SANDBOX_PROBE: f"{plan.probe_write}\n{plan.probe_read}\n".encode(),
    }
    if plan.policy.network is Network.ALLOW:
        files[SANDBOX_GATE] = "".join(h + "\n" for h in plan.hosts).encode()
        # The gate's sockets (the sandbox's /tmp/.spex-net), made here: no
        # `mkdir` process of the wrapper's on the way to the harness.
        (directory / NET).mkdir(mode=0o700, exist_ok=True)
    write_plan(directory, files)


def write_probe(directory: Path, engine: Sequence[str], plan: Plan) -> None:
    """A directory shaped as a sandboxed turn's for `spex doctor`'s probe: the
    sandbox's files and a stand-in `outcome`, which the probe must fail to read."""
    _write(directory, OUTCOME, b"the state home, which no sandbox may read\n")
    write_sandbox(directory, engine, plan)


def mark_git_start_todo(directory: Path) -> None:
    """`git-start.todo`: the wrapper records the work tree's state before the harness starts."""
    _write(directory, GIT_START_TODO, b"")


def write_git_start(directory: Path, doc: Mapping[str, Any]) -> None:
    """`git-start` (JSON: toplevel, head, snapshot, error), by spexsup.pane.snapshot."""
    _write(directory, GIT_START, json.dumps(doc).encode())


def write_stagger(directory: Path, spacing: float) -> None:
    """`stagger`: the spacing a staggered launch waits for (spexsup.turn.wake); fsync'd."""
    _write(directory, STAGGER, f"{spacing:g}\n".encode(), durable=True)


def request_stop(directory: Path, by: str) -> None:
    """`stop-requested` (who stopped it), for whoever records the end; fsync'd."""
    _write(directory, STOP_REQUEST, by.encode() + b"\n", durable=True)


def write_ended(directory: Path, text: str) -> None:
    """`ended`: how the turn ended, one line, for the pane (the reporter)."""
    _write(directory, ENDED, text.encode() + b"\n")


def write_typed(directory: Path, count: int) -> None:
    """`typed`: how many bytes of keys typed into the pane during the turn the
    reporter dropped from its terminal (0: none), for the pane's end line."""
    _write(directory, TYPED, b"%d\n" % count)


def write_survivors(directory: Path, pids: Iterable[int]) -> None:
    """`survivors`: what outlived SIGKILL at the deadline (spexsup.pane.deadline); fsync'd."""
    _write(directory, SURVIVORS, " ".join(map(str, pids)).encode() + b"\n", durable=True)


def mark_verify_started(directory: Path, at: float) -> None:
    """`verify-started`: when the turn's check started (spexsup.pane.verify)."""
    _write(directory, VERIFY_STARTED, f"{at:.6f}\n".encode())


def append_verify_log(directory: Path) -> BinaryIO:
    """`verify.log` opened for appending, unbuffered: a later check's output
    (`spex verify`) follows the wrapper's. Raises OSError."""
    return (directory / VERIFY_LOG).open("ab", buffering=0)


def rewrite_argv(directory: Path, argv: Sequence[bytes], *, on_stdin: bool) -> None:
    """The harness's next run, in the pane (after a usage limit's wait, on a
    fallback model): its `argv`, and `stdin` there exactly when its prompt
    goes on stdin."""
    _write(directory, ARGV, words(argv))
    if on_stdin:
        _write(directory, STDIN, b"")
    else:
        (directory / STDIN).unlink(missing_ok=True)


def kept_output(attempt: int) -> str:
    """The name an attempt's output keeps when a fallback runs the next one."""
    return f"attempt-{attempt}.{OUTPUT}"


def keep_output(directory: Path, attempt: int) -> None:
    """Move `output.log` aside as attempt `attempt`'s (`kept_output`), for the
    next attempt's to start empty."""
    (directory / OUTPUT).replace(directory / kept_output(attempt))


def write_fallback(directory: Path, models: Sequence[str], attempts: Sequence[Any]) -> None:
    """`fallback`: the models left to fall back to, and the attempts so far
    (their kept output and cause, for the reporter's usage rows)."""
    _write(
        directory,
        FALLBACK,
        json.dumps({"models": list(models), "attempts": list(attempts)}).encode(),
    )


def write_meta(directory: Path, data: Mapping[str, Any]) -> None:
    """`meta.json` rewritten (a fallback's model and the conversation it resumes)."""
    _write(directory, META, json.dumps(data).encode())
