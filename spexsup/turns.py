"""Turns: admission, prepare, launch, startup confirmation, reconciliation.

A turn is one headless run of a session's harness, started in the session's
pane by `shell/turn.sh`, which records how it ended in the `outcome` marker
(see `marker`). `wake` tells the truth about startup within the confirmation
window (DESIGN §2.5); `reconcile` settles turns whose wrapper vanished.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spexsup import config, ids, marker, report
from spexsup.errors import Failed, Invalid, Refused, UnknownSession
from spexsup.harness import Harness
from spexsup.marker import Marker, Stage
from spexsup.paths import ensure_private_dir, wrapper_path, write_atomic
from spexsup.procs import Liveness, identity_liveness, is_zombie, own_identity, start_token
from spexsup.sessions import Session, get, validate_window
from spexsup.spex import Spex
from spexsup.tickets import ticket
from spexsup.watch import DirWatch

ACTIVE = report.ACTIVE
DEFAULT_WINDOW = 2.0
# A turn that exited just before the window closed gets this long for its
# exit reporter to finish, rather than a verdict that races the reporter.
REPORTER_GRACE = 1.0
RETRY_BACKOFF = (0.25, 0.5, 1.0, 2.0)
TAIL_LINES = 5


@dataclass
class Verdict:
    """What `spex wake` reports (DESIGN §3 `wake --json`)."""

    session: str
    turn: str | None
    verdict: str  # confirmed | completed | failed | refused
    rc: int | None = None
    pid: int | None = None
    error: str | None = None
    elapsed_ms: int = 0
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.verdict in ("confirmed", "completed")

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def new_turn_id() -> str:
    return ids.new_id()


def turn_dir(spex: Spex, session: str, turn: str) -> Path:
    return spex.home / "turns" / session / turn


def output_end(directory: Path, size: int = 65536) -> str:
    """The last `size` bytes of a turn's output, decoded; "" if there is none.

    Causes and retryable patterns show at the end of the output, and a
    harness may have written megabytes before it: never read it all.
    """
    try:
        with (directory / "output.log").open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def output_tail(directory: Path, lines: int = TAIL_LINES) -> str:
    """The last non-empty lines of a turn's output, joined for a one-line message."""
    data = output_end(directory, 8192)
    kept = [ln.strip()[:200] for ln in data.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept)


def _matches(patterns: Sequence[str], text: str) -> bool:
    return any(re.search(p, text) for p in patterns)


def failure_message(harness: Harness, directory: Path, rc: int, cas: int | None) -> str:
    """`exited rc=N`, the reporter's rc when non-zero, a named cause, the last output lines."""
    decoded = output_end(directory)
    parts = [f"exited rc={rc}"]
    if cas:
        parts.append(f"exit reporter rc={cas}")
    message = ", ".join(parts)
    for fatal in harness.fatal:
        if re.search(fatal.pattern, decoded):
            message = f"{fatal.cause}: {message}"
            break
    tail = output_tail(directory)
    return f"{message}: {tail}" if tail else message


# --- admission and launch -------------------------------------------------


def admit(
    spex: Spex, name: str, prompt: bytes, *, fresh: bool
) -> tuple[Session, str, Path, Harness]:
    """One transaction: check the session can take a turn, insert it (`starting`).

    Returns the session, the turn id, its prepared directory and the adapter
    that built its argv (loaded once per wake: it reads the harness files).
    """
    if b"\0" in prompt:
        raise Invalid("the prompt contains a NUL byte", hint="prompts are NUL-free text")
    reconcile(spex, [name])
    turn = new_turn_id()
    pid, token = own_identity()
    with spex.store.tx() as db:
        row = db.execute("SELECT * FROM sessions WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise UnknownSession(name)
        session = Session.from_row(row)
        if session.state == "stopped":
            raise Refused(f"session {name!r} is stopped", hint=f"spex resume {name}")
        if session.state == "running":
            raise Refused(
                f"session {name!r} is busy with turn {session.current_turn}",
                hint=f"spex wait {name}, or spex stop {name}",
            )
        adapter = session.adapter(spex.home)
        resume_id = None if fresh else session.harness_session_id
        argv, on_stdin = adapter.argv(prompt, resume_id)
        db.execute(
            "INSERT INTO turns (id, session, state, resumed, launcher_pid, launcher_token,"
            " started_at) VALUES (?, ?, 'starting', ?, ?, ?, ?)",
            (turn, name, resume_id, pid, token, time.time()),
        )
        db.execute(
            "UPDATE sessions SET current_turn = ?, state = 'running' WHERE name = ?", (turn, name)
        )
    directory = ensure_private_dir(turn_dir(spex, name, turn))
    _prepare(spex, session, turn, directory, prompt, argv, on_stdin, adapter)
    return session, turn, directory, adapter


def _prepare(
    spex: Spex,
    session: Session,
    turn: str,
    directory: Path,
    prompt: bytes,
    argv: list[bytes],
    on_stdin: bool,
    adapter: Harness,
) -> None:
    """The turn dir: exact prompt bytes, NUL-separated argv/env/reporter, metadata."""
    files = {
        "prompt": prompt,
        "argv": b"\0".join(argv) + b"\0",
        "env": b"".join(f"{k}={v}".encode() + b"\0" for k, v in session.env.items()),
    }
    if on_stdin:
        files["stdin"] = b""
    reporter = [
        sys.executable,
        "-m",
        "spexsup",
        "--home",
        str(spex.home),
        "internal",
        "turn-exit",
        session.name,
        turn,
    ]
    files["reporter"] = "\0".join(reporter).encode() + b"\0"
    meta = {"session": session.name, "turn": turn, "harness": adapter.name}
    meta["id_pattern"] = adapter.id_pattern or ""
    files["meta.json"] = json.dumps(meta).encode()
    # Not fsync'd: after a crash the turn is lost anyway, and these die with it.
    for name, data in files.items():
        write_atomic(directory / name, data, durable=False)


def launch(spex: Spex, session: Session, turn: str, directory: Path) -> int:
    """`respawn-pane -k` the wrapper into the home, recreating a vanished home first.

    Returns tmux's pane_pid for the new wrapper.
    """
    env = {
        "SPEXSUP_SESSION": session.name,
        "SPEXSUP_TURN": turn,
        "SPEXSUP_TURN_DIR": str(directory),
        "SPEXSUP_PROMPT_FILE": str(directory / "prompt"),
        "SPEXSUP_HOME": str(spex.home),
    }
    wrapper = os.environ.get("SPEXSUP_WRAPPER") or str(wrapper_path())
    argv = ["bash", wrapper, str(directory)]
    pane_pid = spex.tmux.respawn(session.name, session.cwd, env, argv)
    if pane_pid is None:
        spex.tmux.create(session.name, session.cwd, session.env)
        pane_pid = spex.tmux.respawn(session.name, session.cwd, env, argv)
    if pane_pid is None:
        raise Failed(f"the tmux home of {session.name!r} vanished while starting the turn")
    return pane_pid


# --- confirmation ---------------------------------------------------------


def _pid_problem(pid: int, pane_pid: int) -> str | None:
    """Why `running:<pid>` can't be trusted, or None: alive, not a zombie, the pane's pid."""
    liveness = identity_liveness(pid, None)
    if liveness is Liveness.DEAD:
        return f"wrapper pid {pid} is {'a zombie' if is_zombie(pid) else 'dead'}"
    if liveness is Liveness.UNPROVEN:
        return f"cannot inspect wrapper pid {pid}"
    if pid != pane_pid:
        return f"marker pid {pid} is not the pane's process (pane_pid {pane_pid})"
    return None


@dataclass
class Startup:
    verdict: str
    marker: Marker
    error: str | None = None
    pid: int | None = None


def confirm_startup(
    directory: Path, window: float, started: float, watch: DirWatch, pane_pid: int
) -> Startup:
    """Wait (event-driven) for the marker to prove the turn's startup, per DESIGN §2.5.

    `pane_pid` is tmux's pane_pid for the pane, read at launch. The pid checks
    run `settle` before the window ends and the re-read at its end, so a
    confirmed verdict costs no time beyond the window.
    """
    deadline = started + window
    settle = min(0.1, window / 4)
    first: Marker | None = None
    token: str | None = None
    while True:
        m = marker.read(directory)
        if m.stage is Stage.EXIT:
            return Startup("completed" if m.rc == 0 else "failed", m)
        if m.stage is Stage.INVALID:
            return Startup("failed", m, f"invalid outcome marker {m.text!r}")
        now = time.monotonic()
        if m.stage is Stage.REPORTING and now >= deadline:
            if now < deadline + REPORTER_GRACE:
                watch.wait(deadline + REPORTER_GRACE - now)
                continue
            return Startup(
                "failed", m, f"exited rc={m.rc} but its exit reporter did not finish", m.pid
            )
        if first is None and now >= deadline - settle and m.stage is not Stage.REPORTING:
            if m.stage is Stage.NONE:
                return Startup("failed", m, "never confirmed startup (no outcome marker)")
            assert m.pid is not None
            problem = _pid_problem(m.pid, pane_pid)
            if problem:
                return Startup("failed", m, problem, m.pid)
            first, token = m, start_token(m.pid)
        if first is not None and now >= deadline:
            if m != first or first.pid is None:
                return Startup("failed", m, f"marker changed while settling: {m.text!r}")
            if identity_liveness(first.pid, token) is not Liveness.ALIVE:
                return Startup("failed", m, f"wrapper pid {first.pid} died while settling")
            return Startup("confirmed", m, None, first.pid)
        target = deadline if first is not None else deadline - settle
        watch.wait(target - now)


# --- wake -----------------------------------------------------------------


def resolve_window(
    session: Session, adapter: Harness, window: float | None, configured: float | None = None
) -> float:
    """The call's window, else the session's, else config.toml's, else the harness's, else 2 s."""
    return (
        validate_window(window) or session.window or configured or adapter.window or DEFAULT_WINDOW
    )


def wake(
    spex: Spex,
    name: str,
    prompt: bytes,
    *,
    window: float | None = None,
    fresh: bool = False,
    gate: AbstractContextManager[object] | None = None,
) -> Verdict:
    """Start a turn and report what is true about it within the window.

    Refusals raise `Refused` (exit 3) and change nothing. A failed startup
    leaves no process of the turn behind and the pane back at a shell.
    `gate` (a fan-out's concurrency limit) is held around admission and
    launch only, so many turns can confirm at once.
    """
    started = time.monotonic()
    get(spex, name)
    validate_window(window)
    configured = config.load(
        spex.home
    ).window  # read before admission: a broken file changes nothing
    gate = gate or nullcontext()
    with ticket(spex, name, "wake"):
        with gate:
            session, turn, directory, adapter = admit(spex, name, prompt, fresh=fresh)
        span = resolve_window(session, adapter, window, configured)
        attempts = 0
        while True:
            attempts += 1
            with DirWatch([directory]) as watch:
                with gate:
                    pane_pid = launch(spex, session, turn, directory)
                # The window measures the harness's startup, not our own
                # admission (which may queue behind other writers).
                launched = time.monotonic()
                result = confirm_startup(directory, span, launched, watch, pane_pid)
            if not _retryable(adapter, directory, result, attempts):
                break
            _rotate_attempt(spex, turn, directory, attempts)
            time.sleep(RETRY_BACKOFF[attempts - 1])
        verdict = _settle(spex, session, turn, directory, adapter, result)
    verdict.attempts = attempts
    verdict.elapsed_ms = int((time.monotonic() - started) * 1000)
    return verdict


def _retryable(adapter: Harness, directory: Path, result: Startup, attempts: int) -> bool:
    """A lock-class startup failure (nothing ran) is retried up to 4 times."""
    if result.verdict != "failed" or result.marker.stage is not Stage.EXIT:
        return False
    if not adapter.retryable or attempts > len(RETRY_BACKOFF):
        return False
    return _matches(adapter.retryable, output_end(directory))


def _rotate_attempt(spex: Spex, turn: str, directory: Path, attempt: int) -> None:
    """Keep attempt N's marker and output beside the turn, and reopen the turn."""
    for name in ("outcome", "output.log"):
        src = directory / name
        if src.exists():
            src.rename(directory / f"attempt-{attempt}.{name}")
    with spex.store.tx() as db:
        db.execute(
            "UPDATE turns SET state = 'starting', rc = NULL, ended_at = NULL, attempts = ?"
            " WHERE id = ?",
            (attempt + 1, turn),
        )
        db.execute(
            "UPDATE sessions SET state = 'running' WHERE current_turn = ? AND state != 'stopped'",
            (turn,),
        )


def _settle(
    spex: Spex, session: Session, turn: str, directory: Path, adapter: Harness, result: Startup
) -> Verdict:
    """Record the verdict; make sure a failed startup leaves nothing running."""
    m = result.marker
    name = session.name
    error = result.error
    rc: int | None = None
    if m.stage is Stage.EXIT:
        rc = m.rc
        assert rc is not None
        if m.cas:
            # The wrapper's reporter could not record the end; we can.
            report.record_exit(spex.store, name, turn, rc, directory)
        if rc != 0:
            error = failure_message(adapter, directory, rc, m.cas)
    elif result.verdict == "failed":
        _abandon(spex, session, turn, directory, m, error or "failed")
    else:
        report.remember_conversation(spex.store, name, directory)
    with spex.store.tx() as db:
        db.execute(
            "UPDATE turns SET verdict = ?, error = coalesce(?, error),"
            " pid = coalesce(?, pid) WHERE id = ?",
            (result.verdict, error, result.pid, turn),
        )
        if result.verdict == "confirmed":
            db.execute(
                "UPDATE turns SET state = 'running' WHERE id = ? AND state = 'starting'", (turn,)
            )
    return Verdict(name, turn, result.verdict, rc, result.pid, error)


def _abandon(
    spex: Spex, session: Session, turn: str, directory: Path, m: Marker, error: str
) -> None:
    """End a turn whose startup failed without an exit: record first, then kill."""
    from spexsup.procs import terminate_tree, turn_processes

    report.record_exit(spex.store, session.name, turn, None, directory, state="error", error=error)
    terminate_tree(turn_processes(turn, m.pid), grace=0.5)
    spex.tmux.respawn_shell(session.name, session.cwd)


# --- reading and reconciliation --------------------------------------------


def wrapper_liveness(pid: int, directory: Path) -> Liveness:
    """Is the wrapper of this turn dir alive as `pid`? (reuse-proof: its argv names the dir)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return Liveness.DEAD
        return Liveness.ALIVE if str(directory) in proc.cmdline() else Liveness.DEAD
    except psutil.NoSuchProcess:
        return Liveness.DEAD
    except psutil.Error:
        return Liveness.UNPROVEN


def reconcile(spex: Spex, names: Sequence[str] | None = None) -> None:
    """Settle current unfinished turns from their markers and process liveness.

    A wrapper that is provably gone without a final marker makes the turn
    `lost`; an exit the reporter failed to record is recorded; a probe that
    proves nothing leaves the turn alone.
    """
    query = (
        "SELECT t.id, t.session, t.state, t.launcher_pid, t.launcher_token FROM sessions s"
        " JOIN turns t ON t.id = s.current_turn WHERE t.state IN ('starting', 'running')"
    )
    rows = spex.store.db.execute(query).fetchall()
    for row in rows:
        name, turn = row["session"], row["id"]
        if names is not None and name not in names:
            continue
        directory = turn_dir(spex, name, turn)
        m = marker.read(directory)
        launcher = identity_liveness(row["launcher_pid"], row["launcher_token"])
        if m.stage is Stage.EXIT:
            report.record_exit(spex.store, name, turn, m.rc, directory)
        elif m.stage in (Stage.RUNNING, Stage.REPORTING):
            assert m.pid is not None
            if wrapper_liveness(m.pid, directory) is not Liveness.DEAD:
                continue
            if m.stage is Stage.REPORTING:
                why = f"wrapper pid {m.pid} died while reporting rc={m.rc}"
                report.record_exit(spex.store, name, turn, m.rc, directory, error=why)
            else:
                why = f"wrapper pid {m.pid} vanished without a final marker"
                report.record_exit(spex.store, name, turn, None, directory, state="lost", error=why)
        elif launcher is Liveness.DEAD:
            # Only the launcher (a live `spex wake`) may still be confirming
            # a turn without a marker; with it gone, nothing will.
            why = (
                f"invalid outcome marker {m.text!r}"
                if m.stage is Stage.INVALID
                else "its launcher died before the turn confirmed startup"
            )
            report.record_exit(spex.store, name, turn, None, directory, state="lost", error=why)


def turn_json(row: Any) -> dict[str, Any]:
    """The one JSON shape of a turn, wherever a command prints one."""
    return {
        "schema_version": ids.SCHEMA_VERSION,
        "id": row["id"],
        "session": row["session"],
        "state": row["state"],
        "verdict": row["verdict"],
        "rc": row["rc"],
        "pid": row["pid"],
        "error": row["error"],
        "attempts": row["attempts"],
        "resumed": row["resumed"],
        "started_at": row["started_at"],
        "started_at_iso": ids.iso(row["started_at"]),
        "ended_at": row["ended_at"],
        "ended_at_iso": ids.iso(row["ended_at"]),
    }


def load_turn(spex: Spex, turn: str) -> dict[str, Any]:
    """One turn in its JSON shape; Refused if there is no such turn."""
    row = spex.store.db.execute("SELECT * FROM turns WHERE id = ?", (turn,)).fetchone()
    if row is None:
        raise Refused(f"no turn {turn!r}")
    return turn_json(row)


def recent_turns(spex: Spex, names: Sequence[str], limit: int) -> dict[str, list[dict[str, Any]]]:
    """The newest `limit` turns of each session, newest first, in one query."""
    if not names:
        return {}
    marks = ",".join("?" * len(names))
    rows = spex.store.db.execute(
        f"SELECT * FROM (SELECT *, row_number() OVER"
        f" (PARTITION BY session ORDER BY started_at DESC, id DESC) AS n"
        f" FROM turns WHERE session IN ({marks})) WHERE n <= ?",
        (*names, limit),
    ).fetchall()
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["session"], []).append(turn_json(row))
    return out
