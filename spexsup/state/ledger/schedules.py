"""Schedules (see `spexsup.turn.scheduled`): a session woken by the clock,
each change inside the caller's transaction, with its event."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from spexsup.record import Record
from spexsup.state import events
from spexsup.states import EventKind

if TYPE_CHECKING:
    import sqlite3

# --- schedules -----------------------------------------------------------------

_SCHEDULE_COLUMNS = frozenset(
    {"id", "session", "cron", "every", "overlap", "options", "env", "engine", "first_line"}
)


def add_schedule(db: sqlite3.Connection, **columns: Any) -> None:
    """A schedule of `columns["session"]`, kept by its engine already (so a
    row exists only for a clock that really fires); its `schedule-added` event."""
    if set(columns) != _SCHEDULE_COLUMNS:
        raise ValueError(f"schedule columns: {sorted(set(columns) ^ _SCHEDULE_COLUMNS)}")
    row = {**columns, "created_at": time.time()}
    names = ", ".join(row)
    marks = ", ".join("?" * len(row))
    db.execute(f"INSERT INTO schedules ({names}) VALUES ({marks})", tuple(row.values()))
    events.record(
        db,
        EventKind.SCHEDULE_ADDED,
        session=columns["session"],
        schedule=columns["id"],
        cron=columns["cron"],
        engine=columns["engine"],
    )


def remove_schedule(
    db: sqlite3.Connection, schedule: str, session: str, *, why: str | None = None
) -> bool:
    """A schedule gone (`spex schedule rm`, its session removed: `why`), its
    engine's entry taken away first; False if it was not there."""
    cur = db.execute("DELETE FROM schedules WHERE id = ? AND session = ?", (schedule, session))
    if cur.rowcount:
        events.record(db, EventKind.SCHEDULE_REMOVED, session=session, schedule=schedule, why=why)
    return bool(cur.rowcount)


class Firing(Record):
    """What one firing of a schedule did: the slot it was for, its wake key,
    the verdict, the turn it started or the queue entry it left (or the
    error), and whether the key had answered before (a repeat)."""

    slot: str
    key: str
    verdict: str
    turn: str | None
    queued: str | None
    error: str | None
    repeat: bool


def record_firing(db: sqlite3.Connection, schedule: str, session: str, firing: Firing) -> None:
    """What a firing of `schedule` did, on the schedule and as its
    `schedule-fired` event. A schedule removed meanwhile keeps the event only."""
    db.execute(
        "UPDATE schedules SET last_fired_at = ?, last_slot = ?, last_verdict = ?,"
        " last_turn = ?, last_queued = ?, last_error = ?, last_repeat = ? WHERE id = ?",
        (
            time.time(),
            firing.slot,
            firing.verdict,
            firing.turn,
            firing.queued,
            firing.error,
            int(firing.repeat),
            schedule,
        ),
    )
    events.record(
        db,
        EventKind.SCHEDULE_FIRED,
        session=session,
        turn=firing.turn,
        error=firing.error,
        schedule=schedule,
        slot=firing.slot,
        key=firing.key,
        verdict=firing.verdict,
        entry=firing.queued,
        repeat=firing.repeat,
    )
