"""The exit reporter: record a turn's end as a compare-and-swap.

Runs inside the pane on every turn end (`spex internal turn-exit`), so it
imports only the standard library and the store: no psutil, no tmux, no CLI.
The end is recorded only if the turn is still its session's current,
unfinished turn; an abort (`spex stop`) wins, and a stale or repeated report
changes nothing.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from spexsup.store import Store

RECORDED = 0
STALE = 3

ACTIVE = ("starting", "running")

# Conversation ids show early (claude's init event) or late; scan both ends.
_SCAN_BYTES = 1 << 20


def find_conversation_id(turn_dir: Path) -> str | None:
    """The harness's conversation id in the turn's output, per the pattern saved at prepare."""
    try:
        meta = json.loads((turn_dir / "meta.json").read_text())
        pattern = meta.get("id_pattern")
        if not pattern:
            return None
        with (turn_dir / "output.log").open("rb") as f:
            head = f.read(_SCAN_BYTES)
            f.seek(0, 2)
            size = f.tell()
            tail = b""
            if size > _SCAN_BYTES:
                f.seek(max(_SCAN_BYTES, size - _SCAN_BYTES))
                tail = f.read()
    except (OSError, ValueError):
        return None
    found = re.findall(pattern, (head + tail).decode("utf-8", "replace"))
    return str(found[-1]) if found else None


def remember_conversation(store: Store, session: str, turn_dir: Path) -> None:
    """Store the conversation id a running turn has printed so far, if any."""
    conversation = find_conversation_id(turn_dir)
    if conversation:
        with store.tx() as db:
            db.execute(
                "UPDATE sessions SET harness_session_id = ? WHERE name = ?", (conversation, session)
            )


def last_line(turn_dir: Path, size: int = 4096) -> str | None:
    """The last non-empty line of the turn's output, without control characters:
    what a harness that failed mid-turn said last (`API Error: 529 overloaded`)."""
    try:
        with (turn_dir / "output.log").open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - size))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(data.splitlines()):
        line = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x1f\x7f]", "", line).strip()
        if line:
            return line[:300]
    return None


def end_state(rc: int) -> str:
    return "complete" if rc == 0 else "error"


def record_exit(
    store: Store,
    session: str,
    turn: str,
    rc: int | None,
    turn_dir: Path | None = None,
    *,
    state: str | None = None,
    error: str | None = None,
) -> int:
    """CAS the turn's end; RECORDED if this call recorded it, STALE if it was a no-op."""
    conversation = find_conversation_id(turn_dir) if turn_dir else None
    state = state or end_state(rc if rc is not None else 1)
    if error is None and rc and turn_dir is not None:
        error = last_line(turn_dir)
    with store.tx() as db:
        row = db.execute(
            "SELECT t.state FROM sessions s JOIN turns t ON t.id = s.current_turn"
            " WHERE s.name = ? AND t.id = ?",
            (session, turn),
        ).fetchone()
        if row is None or row["state"] not in ACTIVE:
            if row is not None and conversation:
                # An aborted turn's conversation still exists: keep its id.
                db.execute(
                    "UPDATE sessions SET harness_session_id = ? WHERE name = ?",
                    (conversation, session),
                )
            return STALE
        db.execute(
            "UPDATE turns SET state = ?, rc = ?, ended_at = ?, error = coalesce(?, error)"
            " WHERE id = ?",
            (state, rc, time.time(), error, turn),
        )
        db.execute(
            "UPDATE sessions SET state = CASE WHEN state = 'stopped' THEN state ELSE ? END,"
            " harness_session_id = coalesce(?, harness_session_id) WHERE name = ?",
            ("idle" if state == "complete" else "error", conversation, session),
        )
    return RECORDED
