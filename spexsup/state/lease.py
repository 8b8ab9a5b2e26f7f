"""Maintenance leases (DESIGN §5): one per SPEXSUP_HOME, kept in SQLite.

State `open → draining → active → open`. `acquire` moves to `draining` at
once (epoch + 1, never reused) and to `active` when every ticket older than
the lease on sessions in scope has finished or its holder is dead. While not
`open`, ordinary operations on sessions in scope are refused; the bearer's
own operations (`bearer=epoch`) are admitted while it is `active`.

Every transaction that reads the lease first recovers it: a dead holder or a
passed deadline revokes the bearer, kills what is left of the maintenance
command (its session and group, identity-checked), marks inflight
capabilities `indeterminate`, and leaves `draining` until the tickets drain,
then `open`.
Only the token's sha256 is stored; the token never leaves the wrapper.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from spexsup import states
from spexsup.adapters.procs import Liveness, identity_liveness, kill_members
from spexsup.errors import Invalid, UnderLease
from spexsup.ids import validate_name
from spexsup.record import Record
from spexsup.state import events


class Capability(Record):
    op: str  # stop | resume
    session: str
    force: bool = False


def parse_plan(stops: list[str], resumes: list[str]) -> list[Capability]:
    """`--stop NAME`… and `--resume NAME[:force]`… as the exact capability plan."""

    plan = [Capability("stop", validate_name(n)) for n in stops]
    for spec in resumes:
        name, sep, flag = spec.partition(":")
        if sep and flag != "force":
            raise Invalid(f"invalid --resume {spec!r}", hint="NAME or NAME:force")
        plan.append(Capability("resume", validate_name(name), bool(sep)))
    keys = [(c.op, c.session) for c in plan]
    if len(set(keys)) != len(keys):
        raise Invalid("the plan names the same operation on a session twice")
    return plan


def hash_token(token: bytes) -> str:
    import hashlib  # here: OpenSSL's load is the broker's cost, not every command's

    return hashlib.sha256(token).hexdigest()


def token_matches(token: bytes, stored: str | None) -> bool:
    import hmac

    return stored is not None and hmac.compare_digest(hash_token(token), stored)


def _row(db: sqlite3.Connection) -> sqlite3.Row:
    row: sqlite3.Row = db.execute("SELECT * FROM lease WHERE id = 1").fetchone()
    return row


def in_scope(row: sqlite3.Row, session: str) -> bool:
    if row["all_sessions"]:
        return True
    return session in json.loads(row["scope"] or "[]")


def _older_live_tickets(db: sqlite3.Connection, row: sqlite3.Row) -> int:
    """Tickets older than the lease on sessions in scope whose holder still lives.
    Tickets of dead holders are deleted on the way."""
    live = 0
    for t in db.execute(
        "SELECT id, session, pid, start_token FROM tickets WHERE created_at < ?",
        (row["acquired_at"],),
    ).fetchall():
        if not in_scope(row, t["session"]):
            continue
        if identity_liveness(t["pid"], t["start_token"]) is Liveness.DEAD:
            db.execute("DELETE FROM tickets WHERE id = ?", (t["id"],))
        else:
            live += 1
    return live


def recover(db: sqlite3.Connection, now: float | None = None) -> sqlite3.Row:
    """Settle the lease inside the caller's transaction; return its row."""
    now = time.time() if now is None else now
    row = _row(db)
    if row["state"] == "open":
        return row
    holder_dead = (
        row["holder_pid"] is None
        or identity_liveness(row["holder_pid"], row["holder_token"]) is Liveness.DEAD
    )
    if not row["revoked"] and (holder_dead or now > row["deadline"]):
        kill_command(row)
        db.execute(
            "UPDATE lease SET revoked = 1, state = 'draining', token_hash = NULL WHERE id = 1"
        )
        db.execute(
            "UPDATE capabilities SET state = 'indeterminate'"
            " WHERE epoch = ? AND state = 'inflight'",
            (row["epoch"],),
        )
        why = "holder died" if holder_dead else "deadline passed"
        events.record(db, states.EventKind.LEASE_RECOVERED, error=why, epoch=row["epoch"])
        row = _row(db)
    if row["revoked"] and _older_live_tickets(db, row) == 0:
        kill_command(row)  # nothing of it may outlive the lease
        db.execute(
            "UPDATE lease SET state = 'open', holder_pid = NULL, holder_token = NULL,"
            " deadline = NULL, scope = NULL, all_sessions = 0, revoked = 0,"
            " command_pid = NULL, command_token = NULL WHERE id = 1"
        )
        row = _row(db)
    elif not row["revoked"] and row["state"] == "draining" and _older_live_tickets(db, row) == 0:
        db.execute("UPDATE lease SET state = 'active' WHERE id = 1")
        row = _row(db)
    return row


def kill_command(row: sqlite3.Row) -> None:
    """SIGKILL whatever is left of the lease's command: its session and group
    (identity-checked by start time, see `procs.session_members`). The holder
    is gone or out of time, so there is no grace to give."""
    if row["command_pid"] is not None and row["command_token"] is not None:
        kill_members(row["command_pid"], row["command_token"], grace=0)


def check_admission(db: sqlite3.Connection, session: str, bearer: int | None = None) -> None:
    """Raise Refused when the lease bars operations on `session` (inside the caller's tx)."""
    _admit(recover(db), session, bearer)


def current(db: sqlite3.Connection) -> sqlite3.Row:
    """The lease's row as last recorded, not settled (no write)."""
    return _row(db)


def check_admission_unsettled(
    db: sqlite3.Connection, session: str, bearer: int | None = None
) -> None:
    """check_admission without settling the lease (no write: for a stop while
    another process holds the write lock); a lease that recovery would end
    still bars."""
    _admit(_row(db), session, bearer)


def _admit(row: sqlite3.Row, session: str, bearer: int | None) -> None:
    if row["state"] == "open" or not in_scope(row, session):
        return
    if bearer == row["epoch"] and row["state"] == "active" and not row["revoked"]:
        return
    raise UnderLease(session, row["epoch"], row["state"], row["holder_pid"])


def status(db: sqlite3.Connection) -> dict[str, Any]:
    """The lease's public view: never the token or its hash."""
    row = recover(db)
    caps = db.execute(
        "SELECT op, session, force, state FROM capabilities WHERE epoch = ? ORDER BY idx",
        (row["epoch"],),
    ).fetchall()
    return {
        "state": row["state"],
        "epoch": row["epoch"],
        "revoked": bool(row["revoked"]),
        "holder": (
            {"pid": row["holder_pid"], "start_token": row["holder_token"]}
            if row["holder_pid"]
            else None
        ),
        "deadline": row["deadline"],
        "command": (
            {"pid": row["command_pid"], "start_token": row["command_token"]}
            if row["command_pid"]
            else None
        ),
        "scope": "all" if row["all_sessions"] else json.loads(row["scope"] or "[]"),
        "plan": [
            {"op": c["op"], "session": c["session"], "force": bool(c["force"]), "state": c["state"]}
            for c in caps
        ]
        if row["state"] != "open"
        else [],
    }
