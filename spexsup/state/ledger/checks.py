"""Verification transitions (issue 27, DESIGN §16): a turn's check starts,
ends, and is run again by `spex verify`."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from spexsup.state import events
from spexsup.states import FAILED, IDLE, VERIFYING, EventKind, session_state_after

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence

# --- verification (issue 27, DESIGN §16) ------------------------------------------


def verifying(
    db: sqlite3.Connection, session: str, turn: str, *, command: Sequence[str], at: float
) -> int:
    """The turn's check starts (attempt 1 by its wrapper, later ones by `spex
    verify`): its row `verifying` and the `verifying` event; the attempt."""
    (last,) = db.execute(
        "SELECT coalesce(max(attempt), 0) FROM verifications WHERE turn = ?", (turn,)
    ).fetchone()
    attempt = int(last) + 1
    db.execute(
        "INSERT INTO verifications (turn, attempt, session, command, state, started_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (turn, attempt, session, json.dumps(list(command)), VERIFYING, at),
    )
    events.record(db, EventKind.VERIFYING, session=session, turn=turn, attempt=attempt)
    return attempt


def verification_ended(
    db: sqlite3.Connection,
    session: str,
    turn: str,
    *,
    state: str,
    rc: int | None,
    tail: str | None,
    command: Sequence[str],
    started_at: float | None,
) -> None:
    """How the turn's latest check ended (one of states.VERIFICATIONS); a
    check whose start went unrecorded (its `verifying` transaction lost the
    race with the end) gets its row now."""
    now = time.time()
    cur = db.execute(
        "UPDATE verifications SET state = ?, rc = ?, tail = ?, ended_at = ?"
        " WHERE turn = ? AND state = ? AND attempt ="
        " (SELECT max(attempt) FROM verifications WHERE turn = ?)",
        (state, rc, tail, now, turn, VERIFYING, turn),
    )
    if not cur.rowcount:
        attempt = verifying(db, session, turn, command=command, at=started_at or now)
        db.execute(
            "UPDATE verifications SET state = ?, rc = ?, tail = ?, ended_at = ?"
            " WHERE turn = ? AND attempt = ?",
            (state, rc, tail, now, turn, attempt),
        )


def reverified(
    db: sqlite3.Connection,
    session: str,
    turn: str,
    *,
    attempt: int,
    state: str,
    rc: int | None,
    tail: str | None,
    judged: tuple[str, list[str], str | None, str | None] | None,
) -> None:
    """A `spex verify` rerun ended: its row, the `verified` event, and, when
    the turn's end was its verification's (`judged`: the new state, flags,
    cause and error), the turn's end changed to match."""
    db.execute(
        "UPDATE verifications SET state = ?, rc = ?, tail = ?, ended_at = ?"
        " WHERE turn = ? AND attempt = ?",
        (state, rc, tail, time.time(), turn, attempt),
    )
    payload: dict[str, Any] = {"attempt": attempt, "verify_rc": rc, "verification": state}
    if judged is not None:
        new_state, flags, cause, error = judged
        db.execute(
            "UPDATE turns SET state = ?, flags = ?, cause = ?, error = ? WHERE id = ?",
            (new_state, json.dumps(flags), cause, error, turn),
        )
        payload["state"] = new_state
        db.execute(
            "UPDATE sessions SET state = ? WHERE name = ? AND current_turn = ? AND state IN (?, ?)",
            (session_state_after(new_state), session, turn, IDLE, FAILED),
        )
    events.record(db, EventKind.VERIFIED, session=session, turn=turn, rc=rc, **payload)
