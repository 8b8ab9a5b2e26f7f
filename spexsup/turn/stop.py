"""Stopping and resuming: `spex stop` ends a session's turn and holds the
session; `spex resume` lets it take turns again.

A stop records the end `aborted` before it kills (abort wins over a late exit
report); under a held write lock it leaves `stop-requested` in the turn
directory, which whoever records the end honors.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import ExitStack

from spexsup import states
from spexsup.adapters import dequeuer
from spexsup.adapters.procs import Liveness, turn_processes
from spexsup.core import wavedoc
from spexsup.core.sessions import Session
from spexsup.core.spex import Spex
from spexsup.errors import Failed, Invalid, Refused, SpexError, UnknownSession
from spexsup.pane import marker, turndir
from spexsup.pane.marker import Stage
from spexsup.state import lease, ledger
from spexsup.state.store import StateLocked, session_names
from spexsup.turn.launch import kill_turn
from spexsup.turn.target import taken

DEFAULT_GRACE = 5.0


# How long a stop waits for the write lock before it kills the turn without
# recording first (see _stop_under_lock).
STOP_LOCK_WAIT = 2.0


def stop(
    spex: Spex,
    name: str,
    *,
    grace: float = DEFAULT_GRACE,
    bearer: int | None = None,
    later: list[str] | None = None,
) -> str | None:
    """Abort the running turn (recorded first, so abort wins), then kill what it left.

    The current turn's processes are hunted down whatever its recorded state
    (aborted, lost, ended with survivors): SIGTERM, rescans, SIGKILL after
    `grace`. The session becomes `stopped` whether or not a turn was running.
    Returns the aborted turn id; raises Failed naming the survivors if any
    process outlived SIGKILL. When another process holds the state's write
    lock, the turn is killed first and recorded after (`_stop_under_lock`).
    The aborted turn's wave is moved on, and what waited for it started,
    now; or, given `later`, the turn goes there for the caller to settle
    with many others at once (`settle_stops`), whether or not the kill failed.
    """
    if not 0 <= grace <= 3600:
        raise Invalid(f"invalid grace {grace}", hint="between 0 and 3600 seconds")
    with ExitStack() as held:
        try:
            held.enter_context(taken(spex, name, "stop", bearer, wait=STOP_LOCK_WAIT))
        except StateLocked:
            return _stop_under_lock(spex, name, grace, bearer)
        with spex.store.tx() as db:
            session, aborted = _record_stop(db, spex, name, bearer)
        turn = session.current_turn
        try:
            if turn is not None:
                _kill(spex, session, turn, grace)
        finally:
            if aborted is not None and later is None:
                settle_stops(spex, [aborted])
            elif aborted is not None and later is not None:
                later.append(aborted)
    return aborted


def settle_stops(spex: Spex, aborted: Sequence[str]) -> None:
    """Stopped legs move their waves on now, not when someone reads them
    (each wave written once, however many of its legs were stopped: a
    write costs as much as the wave has legs); their slots under a running
    limit are free, and an --after waits no more."""
    wavedoc.settle_turn_ends(spex, aborted)
    dequeuer.start_waiting(spex.store.db, spex.home)


def stop_each(
    spex: Spex, names: Sequence[str], *, grace: float = DEFAULT_GRACE
) -> Iterator[tuple[str, str | SpexError | None]]:
    """Stop every session of `names` at once, each as `stop` does (see
    `Spex.at_once`): yields (name, the aborted turn, or the error that
    stopped it) in their order. Their waves are settled once, at the end."""
    if not 0 <= grace <= 3600:
        raise Invalid(f"invalid grace {grace}", hint="between 0 and 3600 seconds")
    aborted: list[str] = []

    def one(mine: Spex, name: str) -> str | None:
        return stop(mine, name, grace=grace, later=aborted)

    try:
        yield from spex.at_once(names, one)
    finally:
        if aborted:
            settle_stops(spex, aborted)


def _record_stop(
    db: sqlite3.Connection, spex: Spex, name: str, bearer: int | None
) -> tuple[Session, str | None]:
    """In the caller's transaction: abort the current turn if it runs, and
    stop the session. Returns the session as read and the aborted turn."""
    session = _stoppable(db, name)
    aborted = None
    turn = session.current_turn
    if turn is not None:
        # An attempt that already exited (its end deferred to a launcher
        # that would retry it) keeps its rc on the abort.
        exited = marker.read(turndir.path(spex.home, name, turn))
        rc = exited.rc if exited.stage is Stage.EXIT else None
        ran = exited.ran if exited.stage is Stage.EXIT else None
        if ledger.abort_current(db, name, turn, STOPPED_BY, rc=rc, ran=ran):
            aborted = turn
    ledger.mark_stopped(db, name, was=session.state, aborted=aborted, by_lease=bearer is not None)
    return session, aborted


STOPPED_BY = "stopped by spex stop"


def _stoppable(db: sqlite3.Connection, name: str) -> Session:
    """The session as stored now; refused when it is gone or being removed."""
    row = db.execute("SELECT * FROM sessions WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise UnknownSession(name, session_names(db))
    session = Session.from_row(row)
    if session.state == states.SessionState.REMOVING:
        raise Refused(f"session {name!r} is being removed")
    return session


def _kill(spex: Spex, session: Session, turn: str, grace: float) -> None:
    survivors = kill_turn(spex, session, turn, grace)
    if survivors:
        pids = ", ".join(map(str, survivors))
        raise Failed(
            f"{session.name}: stopped, but process(es) {pids} of turn {turn} survived SIGKILL",
            hint="see ps; they may be stuck in the kernel",
        )


def _stop_under_lock(spex: Spex, name: str, grace: float, bearer: int | None) -> str | None:
    """Stop while another process holds the write lock: the agent must not
    run on because spex cannot write. Read what runs (no write), leave the
    abort in the turn dir for whoever records the end (`report.record_exit`
    honors it, so a late exit report cannot turn it into a failure), kill the
    turn, then record the stop, waiting for the lock as long as any writer
    does. Raises Failed naming the lock if it is still held."""

    db = spex.store.db
    session = _stoppable(db, name)
    lease.check_admission_unsettled(db, name, bearer)
    turn = session.current_turn
    if turn is not None:
        state = db.execute("SELECT state FROM turns WHERE id = ?", (turn,)).fetchone()
        directory = turndir.path(spex.home, name, turn)
        if state is not None and state["state"] in states.ACTIVE and directory.is_dir():
            turndir.request_stop(directory, STOPPED_BY)
        _kill(spex, session, turn, grace)
    try:
        with spex.store.tx() as tx:
            lease.check_admission(tx, name, bearer)
            return _record_stop(tx, spex, name, bearer)[1]
    except StateLocked as still:
        what = f"turn {turn} was killed" if turn else "no turn was running"
        raise Failed(
            f"{name}: {what}, but the stop is not recorded: {still.message}",
            hint="its end is recorded (aborted) by the next spex command once the lock is"
            f" free; or spex stop {name} again",
        ) from None


def resume(
    spex: Spex,
    name: str,
    *,
    force: bool = False,
    bearer: int | None = None,
    not_stopped_ok: bool = False,
) -> bool:
    """Leave `stopped`. Refused while any process of the old turn may still live.

    A session that is not stopped is refused, or with `not_stopped_ok` left
    alone (`spex resume`'s no-op success); returns whether it was resumed.
    """
    with taken(spex, name, "resume", bearer) as held:
        session = held.session
        if session.state != states.SessionState.STOPPED:
            if not_stopped_ok:
                return False
            raise Refused(f"session {name!r} is not stopped (it is {session.state})")
        if session.current_turn and not force:
            directory = turndir.path(spex.home, name, session.current_turn)
            m = marker.read(directory)
            row = spex.store.db.execute(
                "SELECT started_at, ended_at FROM turns WHERE id = ?", (session.current_turn,)
            ).fetchone()
            survivors = turn_processes(
                session.current_turn, m.pid, since=row["started_at"], until=row["ended_at"]
            )
            wrapper = (
                turndir.wrapper_liveness(m.pid, directory)
                if m.pid is not None and m.stage is not Stage.EXIT
                else Liveness.DEAD
            )
            if survivors or wrapper is not Liveness.DEAD:
                pids = ", ".join(str(p.pid) for p in survivors) or str(m.pid)
                raise Refused(
                    f"turn {session.current_turn} of {name!r} may still be running (pid {pids})",
                    hint=f"spex stop {name} again, or spex resume {name} --force",
                )
        with spex.store.tx() as db:
            ledger.mark_resumed(db, name, force=force)
    # A stop paused its queue: the next prompt starts now.
    for waiting in dequeuer.waiting(spex.store.db, (name,), spex.home):
        dequeuer.start(spex.home, waiting)
    return True
