"""The event log (DESIGN §8 "Events"): every transition, in its own transaction.

`record` appends an event inside the caller's `store.tx()`, so an event exists
exactly when its transition committed; ids come from SQLite's AUTOINCREMENT
under the write lock, so they are never reused and commit in id order (a
reader that has seen id N has seen every id below it). This module is one of
the store's commit listeners (`store.CommitListener`, registered by
`spexsup.core.spex.open_store`): `before_commit` rewrites the status summary (in
commit order), `after_commit` touches `events/tick` to wake followers. The
process that commits an event is the one that announces it, and nothing
needs a daemon. The hooks listen beside it (`pending_ids` tells them what
this transaction recorded); this module knows nothing of them.

Imported by the exit reporter on every turn end, so this module costs next
to nothing to import and to run there: `os` and `time` at the top; one
summary query and a small in-place write only when the summary changed; one
in-place write of the tick file.
"""

# Plain os calls on str paths: this runs in every writer's transaction.
# ruff: noqa: PTH102
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from spexsup.states import EventKind, SessionState, TurnState

if TYPE_CHECKING:
    import sqlite3
    from pathlib import Path

    from spexsup.state.store import Store

SCHEMA_VERSION = 1
# Retention: the writer prunes every PRUNE_EVERY events, keeping KEEP.
KEEP = 100_000
PRUNE_EVERY = 1000

# Plain strings (their reprs name the kind in messages), from the one enum.
TURN_KINDS = tuple(
    k.value
    for k in (
        EventKind.LAUNCHED,
        EventKind.CONFIRMED,
        EventKind.COMPLETED,
        EventKind.FAILED,
        EventKind.ABORTED,
        EventKind.LOST,
        EventKind.INTERRUPTED,
        EventKind.TIMED_OUT,
        EventKind.SKIPPED,
        EventKind.FELL_BACK,
        EventKind.VERIFYING,
        EventKind.VERIFIED,
        EventKind.ORPHANED,
    )
)
SESSION_KINDS = tuple(
    k.value
    for k in (
        EventKind.CREATED,
        EventKind.REMOVED,
        EventKind.STOPPED,
        EventKind.RESUMED,
        EventKind.PANE_RECREATED,
        EventKind.CONVERSATION_GONE,
        EventKind.EDITED,
        EventKind.QUEUED,
        EventKind.DEQUEUED,
        EventKind.SCHEDULE_ADDED,
        EventKind.SCHEDULE_REMOVED,
        EventKind.SCHEDULE_FIRED,
    )
)
OTHER_KINDS = tuple(
    k.value
    for k in (
        EventKind.WAVE_STARTED,
        EventKind.WAVE_ENDED,
        EventKind.LEASE_ACQUIRED,
        EventKind.LEASE_RELEASED,
        EventKind.LEASE_RECOVERED,
    )
)
KINDS = (*TURN_KINDS, *SESSION_KINDS, *OTHER_KINDS)
PANE_RECREATED = EventKind.PANE_RECREATED.value
# Old names of kinds (DESIGN §24): still taken where a user names a kind (a
# hook's `on`, `spex events --kind`) and matching the events stored under
# them, which keep the name they were recorded with. Removed in a later release.
OLD_KINDS = {"home-recreated": PANE_RECREATED}


def kind_of(name: str) -> str:
    """The kind a user's word names: its own, or the one an old name became."""
    return OLD_KINDS.get(name, name)


def stored_kinds(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """`kinds` and every old name of them, as events may be stored under either."""
    old = tuple(o for o, new in OLD_KINDS.items() if new in kinds and o not in kinds)
    return (*kinds, *old)


# A turn's end state -> the event that announces it.
END_KINDS: dict[str, str] = {
    TurnState.COMPLETE: EventKind.COMPLETED,
    TurnState.FAILED: EventKind.FAILED,
    TurnState.ABORTED: EventKind.ABORTED,
    TurnState.LOST: EventKind.LOST,
    TurnState.INTERRUPTED: EventKind.INTERRUPTED,
    TurnState.TIMED_OUT: EventKind.TIMED_OUT,
    TurnState.SKIPPED: EventKind.SKIPPED,
}
DIR = "events"
TICK = "tick"
STATUS = "status"

# Event ids recorded in each connection's open transaction. Keyed by the
# connection itself, not its id(): a store without this listener never pops
# its entry, and a later connection must not inherit it by a reused id.
_pending: dict[sqlite3.Connection, list[int]] = {}


def record(
    db: sqlite3.Connection,
    kind: str,
    *,
    session: str | None = None,
    turn: str | None = None,
    rc: int | None = None,
    cause: str | None = None,
    error: str | None = None,
    **payload: Any,
) -> int:
    """Append one event inside the caller's transaction; returns its id.

    `cause` is what an end was (`rate-limited`, `not-found`, …: the turn's
    `cause`), `error` its message in the agent's or spex's words."""
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}")
    text = "{}"
    if payload:
        import json

        text = json.dumps(payload, default=str)
    cur = db.execute(
        "INSERT INTO events (at, kind, session, turn, rc, cause, error, payload)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (time.time(), kind, session, turn, rc, cause, error, text),
    )
    event = int(cur.lastrowid or 0)
    if event % PRUNE_EVERY == 0:
        db.execute("DELETE FROM events WHERE id <= ?", (event - KEEP,))
        db.execute("DELETE FROM hook_runs WHERE event <= ?", (event - KEEP,))
    _pending.setdefault(db, []).append(event)
    return event


def turn_ended(
    db: sqlite3.Connection,
    state: str,
    *,
    session: str,
    turn: str,
    rc: int | None,
    cause: str | None,
    error: str | None,
    **payload: Any,
) -> int:
    """The event of a turn's end state (`complete` -> `completed`, `failed` ->
    `failed`…; an end state this table does not know is a failure)."""
    kind = END_KINDS.get(state, "failed")
    return record(db, kind, session=session, turn=turn, rc=rc, cause=cause, error=error, **payload)


def emit(store: Store, kind: str, **fields: Any) -> int:
    """Record one event in a transaction of its own: for transitions that live
    outside SQLite (a session's pane recreated, a launch that tmux confirmed)."""
    with store.tx() as db:
        return record(db, kind, **fields)


def pending_ids(db: sqlite3.Connection) -> tuple[int, ...]:
    """The ids of the events recorded in `db`'s open transaction, oldest first."""
    return tuple(_pending.get(db, ()))


def _open_in(directory: str, name: str, mode: int) -> int:
    """Open (creating) a private file of `events/`, and the directory first if
    it is missing; never through a symlink. Raises OSError."""
    flags = mode | os.O_CREAT | os.O_NOFOLLOW
    try:
        return os.open(f"{directory}/{name}", flags, 0o600)
    except FileNotFoundError:
        os.mkdir(directory, 0o700)
        return os.open(f"{directory}/{name}", flags, 0o600)


def _touch_tick(directory: str, event: int) -> None:
    """Overwrite `events/tick` in place with the last id (fixed width): no
    truncation, which on ext4 forces a block allocation (0.5-4 ms); raises OSError."""
    fd = _open_in(directory, TICK, os.O_WRONLY)
    try:
        os.pwrite(fd, b"%020d\n" % event, 0)
    finally:
        os.close(fd)


# --- around the commit: the store's listener -----------------------------------


def migrated(store: Store) -> None:
    """A home from before the event log gets its status summary now, not at
    its first transition."""
    write_summary(store)


def before_commit(store: Store) -> None:
    """Inside the write lock, when this transaction recorded events: rewrite
    the summary if it changed, so summaries land in commit order.
    Never raises: the transition must commit whatever happens here."""
    if store.db in _pending:
        write_summary(store)


def write_summary(store: Store) -> None:
    """`events/status`, rewritten only when its text changed: in place, sealed
    with a checksum that readers verify (see `statusline` for why not a
    rename). On failure a status bar lags one transition; the next catches up."""
    from spexsup.adapters.statusline import seal

    directory = f"{store.home}/{DIR}"
    data = seal(summary_text(store.db))
    try:
        fd = _open_in(directory, STATUS, os.O_RDWR)
        try:
            old = os.pread(fd, 65536, 0)
            if old.rstrip(b"\n") != data.rstrip(b"\n"):
                # Never shorter: the rest of a longer old text becomes blank padding.
                os.pwrite(fd, data + b"\n" * max(0, len(old) - len(data)), 0)
        finally:
            os.close(fd)
    except OSError:
        pass


def after_commit(store: Store) -> None:
    """Announce what this connection just committed: wake followers (on
    failure they fall back to their coarse re-read). Never raises."""
    ids = _pending.pop(store.db, None)
    if ids:
        with contextlib.suppress(OSError):
            _touch_tick(f"{store.home}/{DIR}", ids[-1])


def discard(db: sqlite3.Connection) -> None:
    """The transaction rolled back: its events never were."""
    _pending.pop(db, None)


def log_line(home: Path | str, text: str) -> None:
    """One timestamped line in `hooks.log` (0600); never raises. Here, below
    the hooks, so that their listener can say why `hooks` did not import."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        fd = os.open(f"{home}/hooks.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, f"{stamp} {text}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


# --- the status summary ------------------------------------------------------

SUMMARY_QUERY = (
    "SELECT state, count(*), group_concat(CASE WHEN state = ? THEN name END, ' ')"
    " FROM (SELECT name, state FROM sessions ORDER BY name) GROUP BY state"
)

# A session state -> its count's key in the summary (idle sessions are `ok`).
SUMMARY_KEYS = {
    SessionState.RUNNING: "running",
    SessionState.IDLE: "ok",
    SessionState.FAILED: "failed",
    SessionState.STOPPED: "stopped",
}


def summary_text(db: sqlite3.Connection) -> bytes:
    """`events/status`: `key=value` lines that `spex status-line` reads (see
    `statusline`): counts of sessions running, ok (idle), failed and
    stopped, and `attention`, the failed sessions' names. One query."""
    counts = {"running": 0, "ok": 0, "failed": 0, "stopped": 0}
    attention = ""
    for state, count, names in db.execute(SUMMARY_QUERY, (SessionState.FAILED,)):
        key = SUMMARY_KEYS.get(state)
        if key:
            counts[key] += count
        if state == SessionState.FAILED:
            attention = names or ""
    lines = [f"{k}={v}\n" for k, v in counts.items()]
    return ("".join(lines) + f"attention={attention}\n").encode()


# --- reading -----------------------------------------------------------------


def as_json(row: sqlite3.Row) -> dict[str, Any]:
    """The one JSON shape of an event (a line of `spex events --json`)."""
    import json

    from spexsup import ids

    return {
        "schema_version": SCHEMA_VERSION,
        "id": row["id"],
        "at": row["at"],
        "at_iso": ids.iso(row["at"]),
        "kind": row["kind"],
        "session": row["session"],
        "turn": row["turn"],
        "rc": row["rc"],
        "cause": row["cause"],
        "error": row["error"],
        "payload": json.loads(row["payload"] or "{}"),
    }


def read(
    db: sqlite3.Connection,
    since: int = 0,
    *,
    sessions: tuple[str, ...] = (),
    kinds: tuple[str, ...] = (),
    limit: int = 1000,
) -> list[sqlite3.Row]:
    """Events with id > `since`, oldest first, at most `limit`."""
    where, args = _matching(sessions, kinds)
    query = f"SELECT * FROM events WHERE id > ? AND {where} ORDER BY id LIMIT ?"
    return list(db.execute(query, (since, *args, limit)))


def _matching(sessions: tuple[str, ...], kinds: tuple[str, ...]) -> tuple[str, list[Any]]:
    """The WHERE terms (and their arguments) for events of these sessions and kinds."""
    where = ["1"]
    args: list[Any] = []
    if sessions:
        where.append(f"session IN ({','.join('?' * len(sessions))})")
        args += sessions
    if kinds:
        kinds = stored_kinds(kinds)
        where.append(f"kind IN ({','.join('?' * len(kinds))})")
        args += kinds
    return " AND ".join(where), args


def pruned_after(db: sqlite3.Connection, since: int) -> tuple[int, int] | None:
    """The ids after `since` that existed and have been pruned, (first, last),
    or None. Pruning removes the oldest events first and AUTOINCREMENT never
    reuses an id, so they are the ids between `since` and the oldest kept
    (every id up to sqlite_sequence's, when none is kept)."""
    oldest = db.execute("SELECT min(id) FROM events").fetchone()[0]
    if oldest is None:
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        oldest = int(row[0]) + 1 if row else 1
    return (since + 1, int(oldest) - 1) if oldest > since + 1 else None


def tail_start(
    db: sqlite3.Connection,
    count: int,
    *,
    sessions: tuple[str, ...] = (),
    kinds: tuple[str, ...] = (),
) -> int:
    """The id after which the last `count` events (of these sessions and
    kinds) lie: `spex events -n N`."""
    if count <= 0:
        return last_id(db)
    where, args = _matching(sessions, kinds)
    row = db.execute(
        f"SELECT min(id) FROM (SELECT id FROM events WHERE {where} ORDER BY id DESC LIMIT ?)",
        (*args, count),
    ).fetchone()
    return int(row[0]) - 1 if row[0] is not None else 0


def id_before(db: sqlite3.Connection, cutoff: float) -> int:
    """The last event id recorded before `cutoff` (unix seconds); 0 if none."""
    row = db.execute("SELECT max(id) FROM events WHERE at < ?", (cutoff,)).fetchone()
    return int(row[0] or 0)


def last_id(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT max(id) FROM events").fetchone()
    return int(row[0] or 0)


def follow(
    store: Store,
    since: int = 0,
    *,
    sessions: tuple[str, ...] = (),
    kinds: tuple[str, ...] = (),
    forever: bool = True,
) -> Iterator[sqlite3.Row]:
    """Every event after `since`, in id order; with `forever`, then each new one
    as it commits (woken by inotify on `events/tick`, which every committer
    writes after its COMMIT; a coarse re-read guards against a missed wake).

    The high-water mark is read before the rows, and only rows up to it are
    yielded: ids commit in order, so nothing below it can still appear, and
    an event is never skipped or repeated (resume with `since`).
    """
    from pathlib import Path

    from spexsup.adapters.watch import COARSE_POLL, DirWatch
    from spexsup.paths import ensure_private_dir

    directory = ensure_private_dir(Path(store.home) / DIR, under=Path(store.home))
    last = since
    with DirWatch([directory], names=frozenset({TICK})) as watch:
        while True:
            # Cleared before the read, so a tick that lands after it wakes the wait.
            watch.changed.clear()
            top = last_id(store.db)
            while last < top:
                rows = read(store.db, last, sessions=sessions, kinds=kinds)
                rows = [r for r in rows if r["id"] <= top]
                yield from rows
                last = rows[-1]["id"] if rows else top
            if not forever:
                return
            watch.changed.wait(COARSE_POLL)
