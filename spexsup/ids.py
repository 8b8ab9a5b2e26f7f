"""Session names, turn and wave ids, the short forms people type for them, and times in JSON.

A session name is 1-64 of A-Z a-z 0-9 _ - (never read by tmux as target
syntax or a flag).

An id is `<UTC time>Z-<6 hex>` (a wave's, queued prompt's and schedule's
begin with `w`, `q`, `s`): it sorts by time and its `Z` says the time is
UTC. Where an id is asked for, a user may give any form spex prints it in or
a unique prefix of one (`matches`): the full id with or without its letter,
its random part (`3fa`) with or without the letter (`w3fa`), `last` (the
newest) or `last~N` (N before the newest).
"""

from __future__ import annotations

import os
import time

# (sqlite3 imports datetime: every command that reads the store has it)
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spexsup import lazyre
from spexsup.errors import Invalid, Refused

if TYPE_CHECKING:
    import sqlite3

# Every JSON document spex prints carries this (DESIGN §8 "JSON").
SCHEMA_VERSION = 1

# The per-turn options a wave document records (`turn_options`), a local
# wave's (wavedoc) and a fleet wave's (fleet) alike.
TURN_OPTIONS = (
    "window",
    "timeout",
    "strict",
    "on_limit",
    "model",
    "fallback",
    "stagger",
    "verify",
    "verify_timeout",
)


def recorded_options(doc: dict[str, Any]) -> dict[str, Any]:
    """A wave's recorded per-turn options (a wave from before one was
    recorded ran under none: None, `strict` False), and whatever else a
    local wave recorded of its legs' request (`fresh`, `budget`,
    `unsandboxed`: DESIGN §31; a fleet wave passes `--fresh` to each host)."""
    found = doc.get("turn_options") or {}
    out = {k: found.get(k, False if k == "strict" else None) for k in TURN_OPTIONS}
    return {**found, **out}


NAME_RE = lazyre.compile(r"[A-Za-z0-9_-]{1,64}")
REF_RE = lazyre.compile(r"[0-9A-Za-z_~-]{1,64}")
LAST_RE = lazyre.compile(r"last(?:~([0-9]{1,6}))?")


def new_id(prefix: str = "") -> str:
    return prefix + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + os.urandom(3).hex()


def iso(epoch: float | None) -> str | None:
    """ISO-8601 UTC with milliseconds and a Z, printed beside every epoch float."""
    if epoch is None:
        return None
    # isoformat's milliseconds cut the microseconds as strftime's %f[:-3] did,
    # at two thirds of the cost (`ls --json` prints thousands of these).
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


# The letter a wave's, a queued prompt's and a schedule's id begins with.
KIND_LETTERS = "wqs"


def matches(full: str, ref: str) -> bool:
    """Whether `ref` is a prefix of a form spex prints `full` in: the full id,
    the id without its letter (`20261201T…Z-3fa2b1` of `w20261201T…Z-3fa2b1`),
    its random part (`3fa`), or the random part after the letter (`w3fa`)."""
    tail = full.rpartition("-")[2]
    forms = [full, tail]
    if full[:1] in KIND_LETTERS and full[1:2].isdigit():
        forms += [full[1:], full[0] + tail]
    return any(f.startswith(ref) for f in forms)


def _resolve(rows: list[str], ref: str, what: str, hint: str) -> str:
    """`rows` are the candidate ids, newest first."""
    if not REF_RE.fullmatch(ref):
        raise Invalid(f"invalid {what} id {ref!r}", hint=hint)
    last = LAST_RE.fullmatch(ref)
    if last:
        back = int(last.group(1) or 0)
        if back >= len(rows):
            raise Refused(f"there is no {what} {ref!r} ({len(rows)} {what}s)", hint=hint)
        return rows[back]
    if ref in rows:
        return ref
    hits = [i for i in rows if matches(i, ref)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise Refused(f"no {what} {ref!r}", hint=hint)
    shown = ", ".join(hits[:5]) + (", …" if len(hits) > 5 else "")
    raise Invalid(f"{what} id {ref!r} is ambiguous: {shown}", hint="give more characters")


def resolve_turn(db: sqlite3.Connection, session: str, ref: str) -> str:
    """The full id of the turn of `session` that `ref` names; Refused if none."""
    rows = db.execute(
        "SELECT id FROM turns WHERE session = ? ORDER BY started_at DESC, id DESC", (session,)
    ).fetchall()
    return _resolve([r[0] for r in rows], ref, "turn", f"see spex show {session}")


def resolve_wave(db: sqlite3.Connection, ref: str) -> str:
    """The full id of the wave `ref` names; Refused if none."""
    rows = db.execute("SELECT id FROM waves ORDER BY created_at DESC, id DESC").fetchall()
    return _resolve([r[0] for r in rows], ref, "wave", "see spex wave ls")


def resolve_schedule(db: sqlite3.Connection, ref: str) -> str:
    """The full id of the schedule `ref` names; Refused if none."""
    rows = db.execute("SELECT id FROM schedules ORDER BY created_at DESC, id DESC").fetchall()
    return _resolve([r[0] for r in rows], ref, "schedule", "see spex schedule ls")


def validate_name(name: str) -> str:
    """Refuse anything tmux could read as target syntax (`.`, `:`) or a flag."""
    if not NAME_RE.fullmatch(name) or name.startswith("-"):
        raise Invalid(
            f"invalid session name {name!r}",
            hint="use 1-64 of A-Z a-z 0-9 _ -, not starting with -",
        )
    return name
