"""`spex verify NAME [--turn ID]`: run a finished turn's check again.

The check runs here, in the foreground, in the session's cwd (the turn's
worktree), with the caller's environment plus the session's `--env` and
`SPEXSUP_TURN_DIR`; its output goes to the caller and is appended to the
turn's `verify.log`. It is recorded as a new attempt of that turn's
verification (not a new turn). When the turn's end was its check's (complete,
or failed with cause `verify`/`verify-timeout`), the end follows the new
result: a pass makes it `complete`, flag `verified`; a failure makes it
`failed`, cause `verify`. A turn that failed on its own keeps its end.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from spexsup import ids, states
from spexsup.adapters.harness import shown_verify
from spexsup.core.sessions import Session, get
from spexsup.core.spex import Spex
from spexsup.errors import Failed, Invalid, Refused
from spexsup.pane import check as pane_verify
from spexsup.pane import turndir
from spexsup.record import Record
from spexsup.state import ledger
from spexsup.turn.admit import verification
from spexsup.turn.plan import DEFAULT_KILL_GRACE
from spexsup.turn.reconcile import reconcile
from spexsup.turn.request import WakeRequest

# The ends a check decides: a rerun may change them.
CHECKED_CAUSES = (states.VERIFY, states.VERIFY_TIMEOUT)


class Rerun(Record):
    """What a `spex verify` did: the turn, its check's new attempt, and the
    turn's state after it (`changed`: the rerun changed the turn's end)."""

    session: str
    turn: str
    check: dict[str, Any]
    state: str
    changed: bool
    # The signal that interrupted the check (0: none); the turn kept its end.
    interrupted: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.check["state"] == states.VERIFIED)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 128 + self.interrupted
        return 0 if self.ok else 1

    def error(self) -> str | None:
        """A failed check, in the failure document's words (DESIGN §3)."""
        if self.ok:
            return None
        said = f"its check `{self.check['command']}`"
        if self.interrupted:
            return f"{said} was interrupted (signal {self.interrupted})"
        if self.check["state"] == states.VERIFY_TIMED_OUT:
            return f"{said} ran past its time limit"
        rc = self.check["rc"]
        return f"{said} failed" + (f" (rc {rc})" if rc is not None else "")

    def as_json(self) -> dict[str, Any]:
        return {
            "schema_version": ids.SCHEMA_VERSION,
            "ok": self.ok,
            "session": self.session,
            "turn": self.turn,
            "state": self.state,
            "changed": self.changed,
            "verify": self.check,
            "error": self.error(),
            "exit_code": self.exit_code,
        }


def rerun(
    spex: Spex,
    name: str,
    turn: str | None = None,
    *,
    check: tuple[str, ...] | None = None,
    timeout: float | None = None,
    out: BinaryIO | None = None,
    interrupted: Callable[[], int] = lambda: 0,
) -> Rerun:
    """Run the check of `name`'s turn (default: its current or last) again
    and record it; Refused while the turn runs, Invalid when it has no check."""
    reconcile(spex, [name])
    session = get(spex, name)
    turn = ids.resolve_turn(spex.store.db, name, turn) if turn else session.current_turn
    if turn is None:
        raise Refused(f"session {name!r} has no turn yet")
    row = spex.store.db.execute("SELECT * FROM turns WHERE id = ?", (turn,)).fetchone()
    if row["state"] in states.ACTIVE:
        raise Refused(
            f"turn {turn} of {name} is still running; its own check runs when it ends",
            hint=f"spex wait {name}",
        )
    directory = turndir.path(spex.home, name, turn)
    argv, limit = _command(spex, session, directory, check, timeout)
    cwd = Path(session.cwd)
    if not cwd.is_dir():
        raise Failed(f"{name}: working directory {cwd} no longer exists")
    log = directory / turndir.VERIFY_LOG
    try:
        sink = turndir.append_verify_log(directory)
    except OSError as e:
        raise Failed(f"{name}: cannot write {log}: {e.strerror or e}") from None
    with sink:
        with spex.store.tx() as db:
            attempt = ledger.verifying(db, name, turn, command=argv, at=time.time())
        try:
            ran = _run(argv, cwd, _environment(session, directory), limit, sink, out, interrupted)
        except BaseException:
            with spex.store.tx() as db:  # never left `verifying`
                ledger.reverified(
                    db, name, turn, attempt=attempt, state=states.VERIFY_FAILED, rc=None,
                    tail=None, judged=None,
                )  # fmt: skip
            raise
    tail = pane_verify.tail(log) or None
    if ran.timed_out:
        outcome = states.VERIFY_TIMED_OUT
    else:
        outcome = states.VERIFIED if ran.rc == 0 else states.VERIFY_FAILED
    # An interrupted check is no verdict on the work: the turn keeps its end.
    judged = None if ran.interrupted else _judged(row, argv, outcome, ran.rc, tail, limit)
    with spex.store.tx() as db:
        ledger.reverified(
            db, name, turn, attempt=attempt, state=outcome, rc=ran.rc, tail=tail, judged=judged
        )
    if judged is not None:
        _follow_in_wave(spex, turn)
    from spexsup.turn.read import check_json

    done = spex.store.db.execute(
        "SELECT * FROM verifications WHERE turn = ? AND attempt = ?", (turn, attempt)
    ).fetchone()
    state = judged[0] if judged is not None else row["state"]
    changed = judged is not None and state != row["state"]
    return Rerun(name, turn, check_json(done), state, changed, ran.interrupted)


def _follow_in_wave(spex: Spex, turn: str) -> None:
    """A fan-out leg's turn whose end the rerun changed: its wave says so too
    (the leg's turn end, and its verdict when its check had failed it)."""
    from spexsup.core import wavedoc

    row = spex.store.db.execute("SELECT wave FROM wave_turns WHERE turn = ?", (turn,)).fetchone()
    if row is None:
        return
    t = spex.store.db.execute(
        "SELECT state, flags, cause, error FROM turns WHERE id = ?", (turn,)
    ).fetchone()

    def change(doc: wavedoc.Doc) -> None:
        for leg in doc["legs"]:
            if leg["turn"] != turn:
                continue
            leg.update(turn_state=t["state"], flags=json.loads(t["flags"] or "[]"))
            leg["cause"] = t["cause"]
            if t["state"] == states.COMPLETE:
                leg.pop("turn_error", None)
                if leg["verdict"] == states.FAILED:
                    leg["verdict"], leg["error"] = states.Verdict.COMPLETED, None
            else:
                leg["turn_error"] = t["error"]
            wavedoc.record_event(
                doc, "leg-reverified", session=leg["session"], turn=turn, turn_state=t["state"]
            )

    wavedoc.mutate(spex, row["wave"], change)


def _command(
    spex: Spex,
    session: Session,
    directory: Path,
    given: tuple[str, ...] | None,
    timeout: float | None,
) -> tuple[tuple[str, ...], float]:
    """The check to run: the one given, else the one the turn ran, else the
    one the session's next turn would run; and its time limit."""
    meta = turndir.meta(directory)
    argv = given or pane_verify.command(directory)
    limit = timeout or meta.get("verify_timeout")
    if not argv or not limit:
        now, now_limit = verification(
            spex.home, WakeRequest(session.name, b""), session, session.adapter(spex.home)
        )
        argv = argv or now
        limit = limit or now_limit
    if not argv:
        raise Invalid(
            f"{session.name}: no check to run: the turn ran none and none is configured",
            hint=f"spex verify {session.name} --verify 'make test'",
        )
    return tuple(argv), float(limit)


def _environment(session: Session, directory: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEXSUP_TURN")}
    env.update(session.env)
    env["SPEXSUP_TURN_DIR"] = str(directory)
    return env


class Ran(Record):
    """How a rerun's check ended: its rc (None: it never finished), whether
    its time limit ended it, and the signal (SIGINT, SIGTERM) that
    interrupted it (0: none)."""

    rc: int | None
    timed_out: bool
    interrupted: int


# After the check exited, how long what it left holding its output open
# (a background child) may still be read before it is ended.
DRAIN = 1.0


def _run(
    argv: Sequence[str],
    cwd: Path,
    env: dict[str, str],
    limit: float,
    sink: BinaryIO,
    out: BinaryIO | None,
    interrupted: Callable[[], int],
) -> Ran:
    """Run the check in its own session, its output teed to `out` and
    `sink` (verify.log); past `limit` (or when `interrupted`), its whole
    process tree is ended (SIGTERM, then SIGKILL). Its verdict is its own
    exit status: once it exited, what it left running in its session is
    ended too, even while it holds the output open."""
    from spexsup.adapters.procs import fd_holders, reap, session_members, start_token

    def say(data: bytes) -> None:
        nonlocal out
        sink.write(data)
        if out is not None:
            try:
                out.write(data)
                out.flush()
            except OSError:  # the caller's output is gone: the check still decides
                out = None

    say(f"{pane_verify.header(argv)} (spex verify)\n".encode())
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as e:
        say(f"spex: cannot run the check: {e}\n".encode())
        return Ran(127, False, 0)
    assert proc.stdout is not None
    born = start_token(proc.pid) or ""
    # Its output pipe: whoever else holds it is the check's (a child that
    # left its session with setsid), ended with it.
    output = [str(Path(f"/proc/self/fd/{proc.stdout.fileno()}").readlink())]

    def leftovers() -> list[int]:
        return [*session_members(proc.pid, born), *fd_holders(output, skip={os.getpid()})]

    signum = 0
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        deadline = time.monotonic() + limit
        exited: float | None = None
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0 and not (signum := interrupted()):
                if not sel.get_map():
                    # Its output is closed; the check may still run: wait, bounded.
                    try:
                        proc.wait(timeout=min(left, 0.5))
                        break
                    except subprocess.TimeoutExpired:
                        continue
                if exited is None and proc.poll() is not None:
                    exited = time.monotonic()
                if exited is not None and time.monotonic() - exited > DRAIN:
                    break  # what still writes is a leftover, not the check
                if sel.select(min(left, 0.1 if exited is not None else 0.5)):
                    chunk = proc.stdout.read(65536) or b""
                    if not chunk:
                        sel.unregister(proc.stdout)
                        continue
                    say(chunk)
                elif exited is not None:
                    break  # it exited and said all it had to
        # Its status, before its tree is reaped (a reaped child reads as rc 0).
        rc = proc.poll()
    finally:
        if proc.poll() is None or leftovers():
            import psutil

            def members() -> list[psutil.Process]:
                found = []
                for pid in set(leftovers()):
                    try:
                        found.append(psutil.Process(pid))
                    except psutil.Error:
                        continue
                return found

            reap(members, DEFAULT_KILL_GRACE)
        with contextlib.suppress(ChildProcessError):
            proc.wait()
        proc.stdout.close()
    if signum:
        say(f"[spex] the check was interrupted (signal {signum}): ended\n".encode())
        return Ran(None, False, signum)
    if rc is None:
        said = f"[spex] the check ran past its time limit ({limit:g}s): ended\n"
        say(said.encode())
        return Ran(124, True, 0)
    return Ran(128 - rc if rc < 0 else rc, False, 0)


def _judged(
    row: Any, argv: Sequence[str], outcome: str, rc: int | None, tail: str | None, limit: float
) -> tuple[str, list[str], str | None, str | None] | None:
    """The turn's end after the rerun, when its check decides it; None for a
    turn that ended otherwise (failed on its own, stopped, lost)."""
    state, cause = row["state"], row["cause"]
    if not (state == states.COMPLETE or (state == states.FAILED and cause in CHECKED_CAUSES)):
        return None
    flags = [f for f in json.loads(row["flags"] or "[]") if f != states.VERIFIED]
    if outcome == states.VERIFIED:
        return states.COMPLETE, [*flags, states.VERIFIED], None, None
    shown = shown_verify(argv)[:120]
    if outcome == states.VERIFY_TIMED_OUT:
        from spexsup.durations import span

        error = f"its check `{shown}` ran past its time limit ({span(limit)})"
        return states.FAILED, flags, states.VERIFY_TIMEOUT, error
    error = f"its check `{shown}` failed (rc {rc})" + (f": {tail}" if tail else "")
    return states.FAILED, flags, states.VERIFY, error


def interrupted_by_signal() -> Callable[[], int]:
    """The first of SIGINT and SIGTERM received (0: none), so the check's
    tree is ended first."""
    hit: list[int] = []

    def mark(signum: int, _frame: object) -> None:
        hit.append(signum)

    signal.signal(signal.SIGINT, mark)
    signal.signal(signal.SIGTERM, mark)
    return lambda: hit[0] if hit else 0
