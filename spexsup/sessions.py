"""Sessions: named, durable homes (a tmux pane, a cwd, a harness).

The record in SQLite is the truth; the tmux home is recreated on demand when
it has vanished (killed, server gone, reboot).
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spexsup import harness as harnesses
from spexsup import ids
from spexsup.errors import Invalid, Refused, UnknownSession
from spexsup.procs import Liveness
from spexsup.spex import Spex

NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Session:
    name: str
    harness: str
    command: tuple[str, ...] | None
    cwd: str
    env: Mapping[str, str]
    window: float | None
    state: str
    harness_session_id: str | None
    current_turn: str | None
    created_at: float

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Session:
        return cls(
            name=row["name"],
            harness=row["harness"],
            command=tuple(json.loads(row["command"])) if row["command"] else None,
            cwd=row["cwd"],
            env=json.loads(row["env"]),
            window=row["window"],
            state=row["state"],
            harness_session_id=row["harness_session_id"],
            current_turn=row["current_turn"],
            created_at=row["created_at"],
        )

    def adapter(self, home: Path) -> harnesses.Harness:
        return harnesses.resolve(self.harness, self.command, home)


def validate_name(name: str) -> str:
    """Refuse anything tmux could read as target syntax (`.`, `:`) or a flag."""
    if not NAME_RE.fullmatch(name) or name.startswith("-"):
        raise Invalid(
            f"invalid session name {name!r}",
            hint="use 1-64 of A-Z a-z 0-9 _ -, not starting with -",
        )
    return name


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not ENV_KEY_RE.fullmatch(key) or "\0" in value:
            raise Invalid(f"invalid --env {pair!r}", hint="use KEY=VALUE")
        env[key] = value
    return env


def validate_window(window: float | None) -> float | None:
    if window is not None and not (0.05 <= window <= 3600):
        raise Invalid(f"invalid window {window}", hint="between 0.05 and 3600 seconds")
    return window


def create(
    spex: Spex,
    name: str,
    *,
    harness: str | None = None,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    window: float | None = None,
    command: Sequence[str] | None = None,
) -> Session:
    """Record the session, then build its tmux home; undo the record if tmux fails.

    Two racing creates of one name: the primary key lets exactly one win.
    """
    validate_name(name)
    validate_window(window)
    if command and harness is None:
        harness = "command"
    if harness is None:
        # Never a silent default: a session must say what it runs.
        names = ", ".join(harnesses.load_registry(spex.home).names())
        raise Invalid(
            "no harness given and no default_harness in config.toml",
            hint=f"--harness one of: {names}; or -- CMD ARGS…",
        )
    if harness != "command":
        harnesses.load_registry(spex.home).get(harness)
    if harness == "command" and not command:
        raise Invalid("the command harness needs a command", hint="spex new NAME -- CMD ARGS…")
    if command and harness != "command":
        raise Invalid(f"a command after -- needs --harness command, not {harness!r}")
    directory = Path(cwd or ".").expanduser().resolve()
    if not directory.is_dir():
        raise Invalid(f"no such directory {str(directory)!r}", hint="--cwd DIR")
    env = dict(env or {})
    try:
        with spex.store.tx() as db:
            db.execute(
                "INSERT INTO sessions (name, harness, command, cwd, env, window, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
                    harness,
                    json.dumps(list(command)) if command else None,
                    str(directory),
                    json.dumps(env),
                    window,
                    time.time(),
                ),
            )
    except sqlite3.IntegrityError:
        raise Refused(f"session {name!r} already exists", hint="see spex ls") from None
    try:
        spex.tmux.kill(name)  # a stale home of a removed session must not be reused
        spex.tmux.create(name, str(directory), env)
    except BaseException:
        with spex.store.tx() as db:
            db.execute("DELETE FROM sessions WHERE name = ?", (name,))
        raise
    return get(spex, name)


def get(spex: Spex, name: str) -> Session:
    validate_name(name)
    row = spex.store.db.execute("SELECT * FROM sessions WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise UnknownSession(name)
    return Session.from_row(row)


def ensure_home(spex: Spex, session: Session) -> None:
    """Recreate the tmux home if it vanished; the record survives in SQLite."""
    spex.tmux.ensure(session.name, session.cwd, session.env)


def remove(spex: Spex, name: str, *, force: bool = False) -> None:
    """Delete the session, its turns and its home; refused while a turn runs."""
    from spexsup import control, turns
    from spexsup.tickets import ticket

    get(spex, name)
    with ticket(spex, name, "rm"):
        turns.reconcile(spex, [name])
        session = get(spex, name)
        if session.state == "running":
            if not force:
                raise Refused(
                    f"session {name!r} has a running turn {session.current_turn}",
                    hint="spex stop it first, or spex rm --force",
                )
            control.stop(spex, name)
        with spex.store.tx() as db:
            db.execute("DELETE FROM sessions WHERE name = ?", (name,))
            db.execute("DELETE FROM turns WHERE session = ?", (name,))
    spex.tmux.kill(name)
    shutil.rmtree(spex.home / "turns" / name, ignore_errors=True)


def home_status(liveness: Liveness) -> str:
    return {Liveness.ALIVE: "ok", Liveness.DEAD: "missing", Liveness.UNPROVEN: "unknown"}[liveness]


def describe(
    spex: Spex, names: Sequence[str] | None = None, *, turns: int = 1
) -> list[dict[str, Any]]:
    """The public view of sessions (DESIGN §3 `ls --json`), after reconciliation.

    One query for the sessions, one for their turns and one `list-panes -a`
    for every home, however many sessions there are.
    """
    from spexsup import turns as turn_mod

    turn_mod.reconcile(spex, names)
    db = spex.store.db
    if names is None:
        rows = db.execute("SELECT * FROM sessions ORDER BY name").fetchall()
    else:
        rows = [db.execute("SELECT * FROM sessions WHERE name = ?", (n,)).fetchone() for n in names]
        for n, row in zip(names, rows, strict=True):
            if row is None:
                raise UnknownSession(n)
    recent = turn_mod.recent_turns(spex, [r["name"] for r in rows], turns)
    census = spex.tmux.census() if rows else None
    out = []
    for row in rows:
        s = Session.from_row(row)
        history = recent.get(s.name, [])
        entry: dict[str, Any] = {
            "schema_version": ids.SCHEMA_VERSION,
            "name": s.name,
            "harness": s.harness,
            "state": s.state,
            "cwd": s.cwd,
            "harness_session_id": s.harness_session_id,
            "turn": history[0] if history else None,
            "home": home_status(census.home(s.name)) if census else "unknown",
            "window": s.window,
            "command": list(s.command) if s.command else None,
            "created_at": s.created_at,
            "created_at_iso": ids.iso(s.created_at),
        }
        if turns > 1:
            entry["turns"] = history
        out.append(entry)
    return out


def select(
    spex: Spex, names: Sequence[str], *, all_: bool = False, match: str | None = None
) -> list[str]:
    """The sessions a multi-session command acts on: the names given (checked,
    in order, without repeats), or every session, or those matching a glob."""
    if sum((bool(names), all_, match is not None)) != 1:
        raise Invalid("name the sessions, or give --all, or --match GLOB (exactly one)")
    if names:
        for n in names:
            validate_name(n)
        return list(dict.fromkeys(names))
    rows = spex.store.db.execute("SELECT name FROM sessions ORDER BY name").fetchall()
    chosen = [r["name"] for r in rows if match is None or fnmatch.fnmatchcase(r["name"], match)]
    if not chosen:
        raise Refused("no sessions" + (f" match {match!r}" if match else ""), hint="see spex ls")
    return chosen
