"""Queued prompts and wake keys (issues 20 and 21): a prompt waits for its
session in `queue`, and a `--key` names the turn (or the entry) its first
wake started, in `wake_keys`. Each change runs inside the caller's
transaction, with its event."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from spexsup.state import events
from spexsup.states import FAILED, IDLE, SKIPPED, EventKind, session_state_after

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence

# --- queued prompts ----------------------------------------------------------------


def enqueue(
    db: sqlite3.Connection,
    entry: str,
    session: str,
    options: str,
    first_line: str | None,
    after_turn: str | None = None,
) -> int:
    """A prompt queued behind the session's others (and, with `after_turn`,
    until that turn ends); its `queued` event. Returns its position (1 = next)."""
    (seq,) = db.execute("SELECT coalesce(max(seq), 0) + 1 FROM queue").fetchone()
    db.execute(
        "INSERT INTO queue (id, session, seq, created_at, options, first_line, after_turn)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (entry, session, seq, time.time(), options, first_line, after_turn),
    )
    (position,) = db.execute("SELECT count(*) FROM queue WHERE session = ?", (session,)).fetchone()
    events.record(db, EventKind.QUEUED, session=session, entry=entry, position=position)
    return int(position)


def take_queued(db: sqlite3.Connection, entry: str, session: str, turn: str) -> bool:
    """The admission of `turn` takes queued `entry` (in the same transaction,
    so a prompt is launched once however many processes race); False if
    another took it or it was removed."""
    cur = db.execute("DELETE FROM queue WHERE id = ? AND session = ?", (entry, session))
    if not cur.rowcount:
        return False
    # Its key (if its wake gave one) now names the turn it became.
    db.execute("UPDATE wake_keys SET turn = ? WHERE queued = ?", (turn, entry))
    events.record(db, EventKind.DEQUEUED, session=session, turn=turn, entry=entry)
    return True


def skip_queued(
    db: sqlite3.Connection,
    entry: str,
    session: str,
    turn: str,
    why: str,
    wave: str | None = None,
    cause: str = "after",
) -> bool:
    """A queued prompt whose `--after` condition failed (or, cause `budget`,
    whose wave spent its budget) ends as a turn that never launched:
    `skipped`, `why` its message; the session's current turn, the session
    `idle` (nothing ran: `session_state_after`); a fan-out leg's turn is its `wave`'s."""
    cur = db.execute("DELETE FROM queue WHERE id = ? AND session = ?", (entry, session))
    if not cur.rowcount:
        return False
    now = time.time()
    db.execute(
        "INSERT INTO turns (id, session, state, error, cause, attempts, started_at, ended_at)"
        " VALUES (?, ?, ?, ?, ?, 0, ?, ?)",
        (turn, session, SKIPPED, why, cause, now, now),
    )
    db.execute(
        "UPDATE sessions SET current_turn = ?, state = ? WHERE name = ? AND state IN (?, ?)",
        (turn, session_state_after(SKIPPED), session, IDLE, FAILED),
    )
    db.execute("UPDATE wake_keys SET turn = ? WHERE queued = ?", (turn, entry))
    if wave is not None:
        db.execute("INSERT INTO wave_turns (turn, wave) VALUES (?, ?)", (turn, wave))
    events.record(db, EventKind.DEQUEUED, session=session, turn=turn, entry=entry)
    events.turn_ended(db, SKIPPED, session=session, turn=turn, rc=None, cause=cause, error=why)
    return True


def drop_queued(
    db: sqlite3.Connection, entry: str, session: str, *, error: str | None = None
) -> bool:
    """A queued prompt removed (`spex queue rm`/`clear`, its session gone, or
    a launch that could not be admitted, `error` saying why)."""
    cur = db.execute("DELETE FROM queue WHERE id = ? AND session = ?", (entry, session))
    if cur.rowcount:
        db.execute("DELETE FROM wake_keys WHERE queued = ? AND turn IS NULL", (entry,))
        events.record(
            db, EventKind.DEQUEUED, session=session, entry=entry, error=error, dropped=True
        )
    return bool(cur.rowcount)


# --- wake keys -----------------------------------------------------------------


def claim_key(
    db: sqlite3.Connection,
    key: str,
    session: str,
    *,
    fingerprint: str,
    turn: str | None = None,
    queued: str | None = None,
) -> Any:
    """`key` names `turn` (or queue entry `queued`) of `session`, claimed in
    the transaction that admits the turn or keeps the entry, so two wakes
    with one key never both start; `fingerprint` is what the wake asked.
    Returns the row of the wake that claimed it first (and claims nothing),
    or None when this call claimed it."""
    row = db.execute("SELECT * FROM wake_keys WHERE key = ?", (key,)).fetchone()
    if row is not None:
        return row
    db.execute(
        "INSERT INTO wake_keys (key, session, turn, queued, created_at, fingerprint)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (key, session, turn, queued, time.time(), fingerprint),
    )
    return None


def release_key(db: sqlite3.Connection, turn: str) -> None:
    """The wake that admitted `turn` never launched it: its key is free again,
    so a retry with the same key can start the turn."""
    db.execute("DELETE FROM wake_keys WHERE turn = ?", (turn,))


def forget_keys(db: sqlite3.Connection, turns: Sequence[str]) -> None:
    """The keys of turns that retention prunes (a key lives as its turn does)."""
    db.executemany("DELETE FROM wake_keys WHERE turn = ?", [(t,) for t in turns])
