"""Every change of a turn's or a session's state, each with its event.

The only package that writes rows of `turns` and `sessions`, or of what
hangs off them (`tests/test_ledger.py` reads the source to keep it so and
names the tables): each write is a named function here, or in `queue`,
`schedules`, `checks` and `usage` beside it. Each function runs inside the caller's
transaction (`Store.tx()`), so the checks a caller makes and the change it
makes commit together. The invariants live here:

- abort wins: an end is recorded only while the turn is still active
  (`record_end` is a compare-and-swap), so a late exit report after a stop
  or a reader's verdict changes nothing;
- a stopped or removing session stays so whatever its turn's end says;
- a turn's `launched` event comes first, once, in the transaction that
  proves the launch (see `_launched`).

Lean on purpose: the exit reporter imports it on every turn's end.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from spexsup.record import Record
from spexsup.state import events
from spexsup.states import (
    ABORTED,
    ACTIVE,
    BUSY,
    CREATING,
    IDLE,
    ORPHANED,
    REMOVING,
    RUNNING,
    STARTING,
    STOPPED,
    VERIFY_FAILED,
    VERIFYING,
    EventKind,
    session_state_after,
)

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Mapping, Sequence

_ACTIVE_SQL = "('starting', 'running')"


# --- sessions ------------------------------------------------------------------


def insert_session(db: sqlite3.Connection, *, creating: bool, **columns: Any) -> None:
    """A new session, `idle`, or `creating` while its worktree is made.
    Raises sqlite3.IntegrityError when the name is taken."""
    columns["state"] = CREATING if creating else IDLE
    names = ", ".join(columns)
    marks = ", ".join("?" * len(columns))
    db.execute(f"INSERT INTO sessions ({names}) VALUES ({marks})", tuple(columns.values()))


def mark_created(db: sqlite3.Connection, name: str, **payload: Any) -> None:
    """A `creating` session is made: `idle`, and its `created` event."""
    db.execute("UPDATE sessions SET state = ? WHERE name = ? AND state = ?", (IDLE, name, CREATING))
    events.record(db, EventKind.CREATED, session=name, **payload)


def discard_session(db: sqlite3.Connection, name: str) -> None:
    """Undo an insert whose home could not be made (it never existed for anyone)."""
    db.execute("DELETE FROM sessions WHERE name = ?", (name,))


def mark_removing(db: sqlite3.Connection, name: str) -> None:
    db.execute("UPDATE sessions SET state = ? WHERE name = ?", (REMOVING, name))


def delete_session(db: sqlite3.Connection, name: str, incarnation: str) -> bool:
    """The end of `spex rm`: the session (this incarnation only, never a
    newer one of the same name) and its turns; `removed` if it was there."""
    db.execute("DELETE FROM turns WHERE session = ?", (name,))
    db.execute("DELETE FROM verifications WHERE session = ?", (name,))
    cur = db.execute("DELETE FROM sessions WHERE name = ? AND incarnation = ?", (name, incarnation))
    if cur.rowcount:
        db.execute("DELETE FROM queue WHERE session = ?", (name,))
        db.execute("DELETE FROM wake_keys WHERE session = ?", (name,))
        events.record(db, EventKind.REMOVED, session=name)
    return bool(cur.rowcount)


def mark_stopped(
    db: sqlite3.Connection, name: str, *, was: str, aborted: str | None, by_lease: bool
) -> None:
    """The session is `stopped` (its `stopped` event unless it already was)."""
    db.execute("UPDATE sessions SET state = ? WHERE name = ?", (STOPPED, name))
    if aborted or was != STOPPED:
        events.record(db, EventKind.STOPPED, session=name, turn=aborted, by_lease=by_lease)


def mark_resumed(db: sqlite3.Connection, name: str, *, force: bool) -> bool:
    """`stopped` -> what its last turn makes it (`idle`, or `failed` after a
    failed turn: `session_state_after`); False (and no event) if it was not
    stopped."""
    row = db.execute(
        "SELECT t.state FROM sessions s JOIN turns t ON t.id = s.current_turn WHERE s.name = ?",
        (name,),
    ).fetchone()
    after = session_state_after(row[0] if row is not None else None)
    cur = db.execute(
        "UPDATE sessions SET state = ? WHERE name = ? AND state = ?", (after, name, STOPPED)
    )
    if cur.rowcount:
        events.record(db, EventKind.RESUMED, session=name, force=force)
    return bool(cur.rowcount)


# What `spex edit` may change: a session's settings, never its state or turns.
EDITABLE = frozenset(
    {
        "harness",
        "queue",
        "model",
        "fallback",
        "verify",
        "verify_timeout",
        "sandbox",
        "command",
        "cwd",
        "env",
        "window",
        "timeout",
        "strict",
        "on_limit",
        "binary",
        "harness_session_id",
    }
)


def edit_session(
    db: sqlite3.Connection,
    name: str,
    *,
    was: Mapping[str, Any],
    columns: Mapping[str, Any],
    changes: Mapping[str, Any],
) -> bool:
    """A session's settings become `columns`, with its `edited` event (the
    `changes`), only if it still has the settings `was` (a compare-and-swap:
    another edit, or a turn's new conversation id, got there first) and no
    turn is active or being made: False, and nothing changed, otherwise."""
    if not set(columns) <= EDITABLE or not set(was) <= EDITABLE:
        raise ValueError(f"not a setting: {sorted(set(columns) - EDITABLE)}")
    sets = ", ".join(f"{c} = ?" for c in columns)
    same = "".join(f" AND {c} IS ?" for c in was)
    cur = db.execute(
        f"UPDATE sessions SET {sets} WHERE name = ? AND state NOT IN (?, ?, ?){same}",
        (*columns.values(), name, BUSY, CREATING, REMOVING, *was.values()),
    )
    if cur.rowcount:
        events.record(db, EventKind.EDITED, session=name, changes=dict(changes))
    return bool(cur.rowcount)


# --- turns -------------------------------------------------------------------------


def admit_turn(
    db: sqlite3.Connection,
    *,
    turn: str,
    session: str,
    fence: int,
    assigned: str | None,
    **columns: Any,
) -> None:
    """A new turn `starting`, its session `running` with it as its current
    turn and its launch fence claimed (a stop fences the pane above it)."""
    row = {"id": turn, "session": session, "state": STARTING, "fence": fence, **columns}
    names = ", ".join(row)
    marks = ", ".join("?" * len(row))
    db.execute(f"INSERT INTO turns ({names}) VALUES ({marks})", tuple(row.values()))
    db.execute(
        "UPDATE sessions SET current_turn = ?, state = ?, launch_fence = ?,"
        " harness_session_id = coalesce(?, harness_session_id) WHERE name = ?",
        (turn, BUSY, fence, assigned, session),
    )


def undo_admission(
    db: sqlite3.Connection, session: str, turn: str, *, previous_turn: str | None, was: str
) -> None:
    """Forget a turn that never launched (the pane was busy): as if never admitted."""
    cur = db.execute("DELETE FROM turns WHERE id = ? AND state = ?", (turn, STARTING))
    if cur.rowcount:
        db.execute("DELETE FROM wake_keys WHERE turn = ?", (turn,))
        db.execute("DELETE FROM wave_turns WHERE turn = ?", (turn,))
        db.execute(
            "UPDATE sessions SET current_turn = ?, state = ? WHERE name = ? AND current_turn = ?",
            (previous_turn, was, session, turn),
        )


def abort_current(
    db: sqlite3.Connection,
    session: str,
    turn: str,
    why: str,
    *,
    rc: int | None = None,
    ran: float | None = None,
    only_starting: bool = False,
    session_after: str | None = None,
) -> bool:
    """Abort `turn` if it is still active (only while `starting` with
    `only_starting`), keeping an rc it already had (else `rc`) and `ran`, an
    exited attempt's run time, with its `aborted` event; then, if given, the
    session's `session_after` state while it is still busy with this turn.
    True if this call aborted it."""
    states = (STARTING,) if only_starting else ACTIVE
    marks = ", ".join("?" * len(states))
    # An orphaned turn's survivors are the stop's to kill: none is left to name.
    cur = db.execute(
        "UPDATE turns SET state = ?, ended_at = ?, rc = coalesce(rc, ?), ran = coalesce(ran, ?),"
        f" error = coalesce(error, ?), survivors = NULL WHERE id = ? AND state IN ({marks})",
        (ABORTED, time.time(), rc, ran, why, turn, *states),
    )
    if not cur.rowcount:
        return False
    if session_after is not None:
        db.execute(
            "UPDATE sessions SET state = ? WHERE name = ? AND current_turn = ? AND state = ?",
            (session_after, session, turn, BUSY),
        )
    _close_verification(db, turn, why)
    events.record(db, EventKind.ABORTED, session=session, turn=turn, error=why)
    return True


def _close_verification(db: sqlite3.Connection, turn: str, why: str | None) -> None:
    """A check still `verifying` when its turn ended otherwise (a stop, a
    lost wrapper) did not pass: failed, with no rc, and why."""
    db.execute(
        "UPDATE verifications SET state = ?, ended_at = ?, tail = coalesce(tail, ?)"
        " WHERE turn = ? AND state = ?",
        (VERIFY_FAILED, time.time(), why, turn, VERIFYING),
    )


def _launched(db: sqlite3.Connection, *, session: str, turn: str) -> None:
    """The turn's `launched` event, once per turn, in the first transaction
    that proves the launch: the wake's confirmation, or the end recorded by
    the turn's reporter, the wake or a reconciling reader. So it always
    precedes `confirmed` and the end, and the wake adds no transaction of its
    own between launch and confirmation (where a busy writer would hold it).
    The turn keeps the event's id."""
    row = db.execute("SELECT launched_event FROM turns WHERE id = ?", (turn,)).fetchone()
    if row is None or row[0] is not None:
        return
    event = events.record(db, EventKind.LAUNCHED, session=session, turn=turn)
    db.execute("UPDATE turns SET launched_event = ? WHERE id = ?", (event, turn))


def mark_running(
    db: sqlite3.Connection, session: str, turn: str, *, pid: int | None, **confirmed: Any
) -> bool:
    """`starting` -> `running` (its `launched` and `confirmed` events); False
    if it was no longer starting (ended, or aborted meanwhile)."""
    cur = db.execute(
        "UPDATE turns SET state = ?, pid = coalesce(pid, ?) WHERE id = ? AND state = ?",
        (RUNNING, pid, turn, STARTING),
    )
    if not cur.rowcount:
        return False
    _launched(db, session=session, turn=turn)
    if pid is not None and "note" not in confirmed:
        confirmed["pid"] = pid
    events.record(db, EventKind.CONFIRMED, session=session, turn=turn, **confirmed)
    return True


def mark_orphaned(
    db: sqlite3.Connection, session: str, turn: str, *, wrapper: int, survivors: Sequence[int]
) -> bool:
    """A `running` turn whose wrapper (pid `wrapper`) is gone while
    `survivors` (processes carrying its SPEXSUP_TURN) run on: it stays
    running, flagged `orphaned` with those pids as its `survivors`; its
    `orphaned` event the first time. False if it was no longer running."""
    row = db.execute("SELECT state, flags FROM turns WHERE id = ?", (turn,)).fetchone()
    if row is None or row["state"] != RUNNING:
        return False
    db.execute(
        "UPDATE turns SET flags = ?, survivors = ? WHERE id = ?",
        (json.dumps([ORPHANED]), json.dumps(list(survivors)), turn),
    )
    if ORPHANED not in json.loads(row["flags"] or "[]"):
        pids = ", ".join(map(str, survivors))
        why = f"the turn's process (pid {wrapper}) is gone; its agent runs on as pid {pids}"
        events.record(
            db,
            ORPHANED,
            session=session,
            turn=turn,
            error=why,
            pid=wrapper,
            survivors=list(survivors),
        )
    return True


def current_turn(db: sqlite3.Connection, session: str, turn: str) -> Any:
    """The session's current turn if it is `turn` (its state, attempts and
    launcher), else None: the read a compare-and-swap of its end starts with."""
    return db.execute(
        "SELECT t.state, t.attempts, t.launcher_pid, t.launcher_token FROM sessions s"
        " JOIN turns t ON t.id = s.current_turn WHERE s.name = ? AND t.id = ?",
        (session, turn),
    ).fetchone()


class TurnEnd(Record):
    """What a turn's end says, as `record_end` writes it: its state and rc,
    the error and outcome flags, the cause (and a usage limit's reset), the
    processes that outlived it, its run time as its wrapper measured it
    (None: unknown, or it never ran, never the time between its admission
    and the record), whether it provably launched, the conversation it
    leaves, and whether a stop asked for it."""

    state: str
    rc: int | None
    error: str | None
    flags: Sequence[str] | None
    cause: str | None = None
    limit_reset: float | None = None
    survivors: Sequence[int] = ()
    ran: float | None = None
    launched: bool = False
    conversation: str | None = None
    stopped: bool = False


def record_end(
    db: sqlite3.Connection,
    session: str,
    turn: str,
    end: TurnEnd,
    event: Mapping[str, Any] | None = None,
) -> None:
    """The end of an active turn (the caller read it active in this
    transaction: `current_turn`), its `launched` event first if none
    was, its end event (with `event`'s fields), and the session's state
    after it (`stopped` when a stop asked for this end; a stopped or
    removing session stays so)."""
    db.execute(
        "UPDATE turns SET state = ?, rc = ?, ended_at = ?, error = coalesce(?, error),"
        " flags = ?, cause = ?, limit_reset = ?, waiting_until = NULL,"
        " survivors = ?, ran = ? WHERE id = ? AND state IN " + _ACTIVE_SQL,
        (
            end.state,
            end.rc,
            time.time(),
            end.error,
            json.dumps(list(end.flags)) if end.flags is not None else None,
            end.cause,
            end.limit_reset,
            json.dumps(list(end.survivors)) if end.survivors else None,
            end.ran,
            turn,
        ),
    )
    if end.launched:
        _launched(db, session=session, turn=turn)
    _close_verification(db, turn, end.error)
    payload = dict(event or {})
    events.turn_ended(
        db,
        end.state,
        session=session,
        turn=turn,
        rc=end.rc,
        cause=end.cause,
        error=end.error,
        **payload,
    )
    after = STOPPED if end.stopped else session_state_after(end.state)
    db.execute(
        "UPDATE sessions SET state = CASE WHEN state IN (?, ?) THEN state ELSE ? END,"
        " harness_session_id = coalesce(?, harness_session_id) WHERE name = ?",
        (STOPPED, REMOVING, after, end.conversation, session),
    )
    if end.stopped:
        events.record(db, EventKind.STOPPED, session=session, turn=turn, by_lease=False)


def record_run(db: sqlite3.Connection, turn: str, ran: float | None, flag: str | None) -> None:
    """What the wrapper of a turn whose end someone else recorded first (a
    stop) says of its run: its run time, if none is recorded, and the flag
    of the output it could not keep."""
    row = db.execute("SELECT flags FROM turns WHERE id = ?", (turn,)).fetchone()
    if row is None:
        return
    flags = json.loads(row["flags"] or "[]")
    if flag is not None and flag not in flags:
        flags.append(flag)
    db.execute(
        "UPDATE turns SET ran = coalesce(ran, ?), flags = ? WHERE id = ?",
        (ran, json.dumps(flags) if flags else row["flags"], turn),
    )


def claim_fence(db: sqlite3.Connection, name: str, turn: str) -> int | None:
    """A new launch fence for another attempt of `turn`; None unless the turn
    is still its session's current `starting` turn (a stop got there first).

    A stop reads the session's fence in its own transaction and then fences
    the pane with it, so an attempt either sees the abort here (or, for the
    first attempt, at admission) or is barred inside tmux: it can never
    launch after a stop.
    """
    row = db.execute(
        "SELECT t.state, s.launch_fence FROM turns t JOIN sessions s"
        " ON s.name = t.session AND s.current_turn = t.id WHERE t.id = ?",
        (turn,),
    ).fetchone()
    if row is None or row["state"] != STARTING:
        return None
    fence = int(row["launch_fence"]) + 1
    db.execute("UPDATE sessions SET launch_fence = ? WHERE name = ?", (fence, name))
    db.execute("UPDATE turns SET fence = ? WHERE id = ?", (fence, turn))
    return fence


def claim_pane_fence(db: sqlite3.Connection, name: str) -> int:
    """A new launch fence for what runs in the session's pane that is no turn
    (`.spexsup.toml`'s post_create): a later turn's launch supersedes it."""
    db.execute("UPDATE sessions SET launch_fence = launch_fence + 1 WHERE name = ?", (name,))
    (fence,) = db.execute("SELECT launch_fence FROM sessions WHERE name = ?", (name,)).fetchone()
    return int(fence)


def retry_attempt(db: sqlite3.Connection, turn: str) -> int | None:
    """A `starting` turn's startup failed in a way worth retrying: it goes on
    to its next attempt (its fence claimed first: `claim_fence`); the number
    of the attempt that failed (a fallback in the pane counts one too). None
    if it is no longer starting (a stop, or a reader that recorded the
    deferred end, got there first)."""
    cur = db.execute(
        "UPDATE turns SET attempts = attempts + 1 WHERE id = ? AND state = ?", (turn, STARTING)
    )
    if not cur.rowcount:
        return None
    (attempts,) = db.execute("SELECT attempts FROM turns WHERE id = ?", (turn,)).fetchone()
    return int(attempts) - 1


def record_verdict(
    db: sqlite3.Connection, turn: str, verdict: str, *, error: str | None, pid: int | None
) -> None:
    """What the wake's confirmation concluded of the turn's startup (and its
    message, and the harness's pid, unless some are recorded already); the
    caller moves a confirmed turn on to `running` in the same transaction."""
    db.execute(
        "UPDATE turns SET verdict = ?, error = coalesce(?, error),"
        " pid = coalesce(?, pid) WHERE id = ?",
        (verdict, error, pid, turn),
    )


def wait_for_limit(
    db: sqlite3.Connection, turn: str, *, reset: float, until: float, conversation: str
) -> None:
    """The turn's harness hit its usage limit (`--on-limit wait`): the limit's
    `reset`, when the wrapper runs it again (`until`), and the `conversation`
    it resumes then, so `spex ls`/`show` can say what it waits for."""
    db.execute(
        "UPDATE turns SET limit_reset = ?, waiting_until = ?, resumed = ? WHERE id = ?",
        (reset, until, conversation, turn),
    )


def end_limit_wait(db: sqlite3.Connection, turn: str) -> None:
    """The turn's wait for its usage limit is over: it runs again."""
    db.execute("UPDATE turns SET waiting_until = NULL WHERE id = ?", (turn,))


def fell_back(
    db: sqlite3.Connection,
    session: str,
    turn: str,
    attempt: dict[str, Any],
    model: str,
    conversation: str | None,
) -> bool:
    """A running turn's attempt failed before it did any work (`attempt`: its
    model, cause, error…) and the turn goes on with `model`, resuming
    `conversation`, as its next attempt (see `spexsup.pane.fallback`); its
    `fell-back` event.
    False if the turn is no longer running (a stop got there first)."""
    cur = db.execute(
        "UPDATE turns SET model = ?, resumed = coalesce(?, resumed), attempts = attempts + 1,"
        " fallbacks = json_insert(coalesce(fallbacks, '[]'), '$[#]', json(?))"
        " WHERE id = ? AND session = ? AND state IN (?, ?)",
        (model, conversation, json.dumps(attempt), turn, session, STARTING, RUNNING),
    )
    if not cur.rowcount:
        return False
    if conversation is not None:
        set_conversation(db, session, conversation)
    events.record(
        db,
        EventKind.FELL_BACK,
        session=session,
        turn=turn,
        cause=attempt.get("cause"),
        error=attempt.get("error"),
        model=attempt.get("model"),
        to=model,
    )
    return True


def set_conversation(db: sqlite3.Connection, session: str, conversation: str) -> None:
    """The harness's conversation id the next turn resumes."""
    db.execute("UPDATE sessions SET harness_session_id = ? WHERE name = ?", (conversation, session))


def forget_conversation(db: sqlite3.Connection, session: str, turn: str, gone: str | None) -> None:
    """The harness said its conversation `gone` no longer exists: resuming it
    can only fail again, so the next wake starts a new one."""
    db.execute(
        "UPDATE sessions SET harness_session_id = NULL WHERE name = ? AND harness_session_id IS ?",
        (session, gone),
    )
    events.record(db, EventKind.CONVERSATION_GONE, session=session, turn=turn, conversation=gone)


# --- wave legs and retention ----------------------------------------------------


def link_wave(db: sqlite3.Connection, turn: str, wave: str) -> None:
    """`turn` is a leg of `wave`, recorded in the transaction that admits it,
    so the turn's end can settle its wave without a daemon."""
    db.execute("INSERT INTO wave_turns (turn, wave) VALUES (?, ?)", (turn, wave))


def unlink_wave(db: sqlite3.Connection, wave: str) -> None:
    """A wave retention pruned (its row gone in this transaction): its legs'
    links go with it."""
    db.execute("DELETE FROM wave_turns WHERE wave = ?", (wave,))


def prune_turns(db: sqlite3.Connection, turns: Sequence[str]) -> None:
    """Ended turns retention prunes (the caller checked, in this transaction,
    that none is active, current or a leg of a wave it keeps): their rows,
    their checks, their wave links and their keys. Their directories are the
    caller's to remove once this commits."""
    db.executemany("DELETE FROM turns WHERE id = ?", [(t,) for t in turns])
    db.executemany("DELETE FROM verifications WHERE turn = ?", [(t,) for t in turns])
    db.executemany("DELETE FROM wave_turns WHERE turn = ?", [(t,) for t in turns])
    forget_keys(db, turns)


# --- salvage branches --------------------------------------------------------


def record_salvage(
    db: sqlite3.Connection, repo: str, branch: str, commit: str, session: str | None
) -> None:
    """A branch `spex rm --salvage` made in `repo` (a stash's too), kept on
    record so `spex worktree ls` finds it after the session is gone."""
    db.execute(
        "INSERT OR REPLACE INTO salvages (repo, branch, commit_sha, session, created_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (repo, branch, commit, session, time.time()),
    )


def forget_salvage(db: sqlite3.Connection, repo: str, branch: str) -> None:
    """The branch was deleted (by `spex prune --salvage`, or by hand)."""
    db.execute("DELETE FROM salvages WHERE repo = ? AND branch = ?", (repo, branch))


# Re-exported: every transition is `ledger.NAME`, wherever its code lives.
from spexsup.state.ledger.checks import reverified, verification_ended, verifying  # noqa: E402
from spexsup.state.ledger.queue import (  # noqa: E402
    claim_key,
    drop_queued,
    enqueue,
    forget_keys,
    release_key,
    skip_queued,
    take_queued,
)
from spexsup.state.ledger.schedules import (  # noqa: E402
    Firing,
    add_schedule,
    record_firing,
    remove_schedule,
)
from spexsup.state.ledger.usage import prune_usage, rebuild_usage_days, record_usage  # noqa: E402

__all__ = [
    "Firing",
    "add_schedule",
    "claim_key",
    "drop_queued",
    "enqueue",
    "forget_keys",
    "prune_usage",
    "rebuild_usage_days",
    "record_firing",
    "record_usage",
    "release_key",
    "remove_schedule",
    "reverified",
    "skip_queued",
    "take_queued",
    "verification_ended",
    "verifying",
]
