"""`spex edit`: change a session's settings between its turns.

What `spex new` set (cwd, env, confirmation window, time limit, strict,
on-limit, the harness and its arguments) is checked by the rules `new`
checks it with (`sessions.check_harness`, `working_directory`,
`parse_env`), then written in one compare-and-swap with its `edited` event
(`ledger.edit_session`). Refused while a turn is active: a turn keeps what
it was launched with, the next one takes the new settings. The pane's idle
shell keeps the cwd and env it was started with until that next turn.

A new harness cannot resume another CLI's conversation: the stored id is
forgotten, and so are the old harness's own arguments unless new ones are
given; each is said in a note.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spexsup.adapters import sandbox as sandboxes
from spexsup.core.sessions import (
    Session,
    check_command,
    check_env_key,
    check_harness,
    get,
    parse_env,
    pinned_note,
    validate_window,
    working_directory,
)
from spexsup.core.spex import Spex
from spexsup.errors import Invalid, Refused, SessionBusy, UnknownSession
from spexsup.record import Record
from spexsup.state import lease, ledger
from spexsup.state.store import session_names
from spexsup.states import BUSY, CREATING, REMOVING
from spexsup.turn.admit import parse_on_limit
from spexsup.turn.reconcile import reconcile
from spexsup.turn.target import taken


class Edit(Record):
    """What to change; a field left at its default leaves its setting be.
    `after` is the argv after `--`, replacing the command harness's command
    or a named harness's own arguments; the `no_*` fields clear a setting
    back to its default (config.toml's, the harness's)."""

    harness: str | None = None
    after: tuple[str, ...] | None = None
    clear_args: bool = False
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    unset_env: tuple[str, ...] = ()
    window: float | None = None
    no_window: bool = False
    timeout: float | None = None
    no_timeout: bool = False
    strict: bool | None = None
    on_limit: str | None = None
    no_on_limit: bool = False
    queue: bool | None = None
    model: str | None = None
    no_model: bool = False
    fallback: tuple[str, ...] | None = None
    no_fallback: bool = False
    verify: tuple[str, ...] | None = None
    no_verify: bool = False
    verify_timeout: float | None = None
    # The sandbox (DESIGN §19): its mode (`--sandbox`, `--sandbox=optional`,
    # `--no-sandbox`), and what adds to its policy.
    sandbox: sandboxes.Mode | None = None
    network: str | None = None
    allow_write: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()

    def check(self, name: str) -> None:
        """The request on its own, before any session is read: Invalid when
        it asks for nothing, or for two contrary things."""
        if self._replace(env=self.env or None) == Edit():
            raise Invalid(
                "nothing to change",
                hint=f"say what, as spex edit --help lists; spex show {name} prints the settings",
            )
        for given, cleared, option in (
            (self.window is not None, self.no_window, "window"),
            (self.timeout is not None, self.no_timeout, "timeout"),
            (self.on_limit is not None, self.no_on_limit, "on-limit"),
            (self.model is not None, self.no_model, "model"),
            (self.fallback is not None, self.no_fallback, "fallback-model"),
            (self.verify is not None, self.no_verify, "verify"),
        ):
            if given and cleared:
                raise Invalid(f"--{option} and --no-{option}: choose one")
        if self.after is not None and self.clear_args:
            raise Invalid("-- ARGS and --clear-args: choose one")
        validate_window(self.window)
        if self.on_limit is not None:
            parse_on_limit(self.on_limit)
        env = parse_env([f"{k}={v}" for k, v in (self.env or {}).items()])
        for key in self.unset_env:
            check_env_key(key, f"--unset-env {key!r}")
            if key in env:
                raise Invalid(f"--env {key}=… and --unset-env {key}: choose one")


class Edited(Record):
    """What an edit changed (or, `dry_run`, would change): the session after
    it, the `changes` its event records (`{field: {from, to}}`; the env's as
    `{set: [KEY…], unset: [KEY…]}`, names only) and notes to say."""

    session: Session
    changes: dict[str, Any]
    notes: list[str]
    dry_run: bool = False


def edit(
    spex: Spex, name: str, change: Edit, *, check: bool = True, dry_run: bool = False
) -> Edited:
    """Change `name`'s settings as `change` asks (see the module's docstring).

    Everything is checked before anything changes: a bad value is Invalid,
    an unknown session, an active turn, a worktree's cwd or a maintenance
    lease Refused. `check` looks for the harness binary (as `spex new
    --no-check` does not). Changing nothing that differs records nothing.
    `dry_run` reads and checks the same, holds and writes nothing.
    """
    change.check(name)
    if dry_run:
        reconcile(spex, [name])
        row = _row(spex, name)
        lease.check_admission_unsettled(spex.store.db, name)
        before = Session.from_row(row)
        after, changes, notes = _plan(spex, before, change, check=check)
        return Edited(after, changes, notes, dry_run=True)
    with taken(spex, name, "edit"):
        row = _row(spex, name)
        before = Session.from_row(row)
        after, changes, notes = _plan(spex, before, change, check=check)
        if not changes:
            return Edited(before, changes, notes)
        with spex.store.tx() as db:
            if not ledger.edit_session(
                db,
                name,
                was={c: row[c] for c in ledger.EDITABLE},
                columns=_columns(after),
                changes=changes,
            ):
                now = db.execute("SELECT * FROM sessions WHERE name = ?", (name,)).fetchone()
                if now is None:
                    raise UnknownSession(name, session_names(db))
                _refuse(Session.from_row(now), change)
                raise Refused(
                    f"session {name!r} changed while this edit was checked", hint="try again"
                )
    return Edited(get(spex, name), changes, notes)


def _row(spex: Spex, name: str) -> Any:
    get(spex, name)  # the name checked, and UnknownSession
    row = spex.store.db.execute("SELECT * FROM sessions WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise UnknownSession(name, session_names(spex.store.db))
    return row


def _refuse(session: Session, change: Edit) -> None:
    """The session's own reasons to refuse any edit now (or this one)."""
    name = session.name
    if session.state == BUSY:
        raise SessionBusy(name, session.current_turn)
    if session.state == CREATING:
        raise Refused(f"session {name!r} is still being created", hint="wait for spex new")
    if session.state == REMOVING:
        raise Refused(f"session {name!r} is being removed")
    if change.cwd is not None and session.worktree is not None:
        raise Refused(
            f"{name}'s cwd is its worktree {session.worktree.path}, which spex manages",
            hint="spex new another session with --cwd DIR to work elsewhere",
        )


def _plan(
    spex: Spex, s: Session, change: Edit, *, check: bool
) -> tuple[Session, dict[str, Any], list[str]]:
    """The session as `change` makes it, checked; what differs; the notes."""
    _refuse(s, change)
    harness = change.harness or s.harness
    switched = harness != s.harness
    notes: list[str] = []
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] = ()
    if harness == "command":
        command = change.after if change.after is not None else (None if switched else s.command)
        if change.clear_args or not command:
            raise Invalid(
                "the command harness needs a command", hint=f"spex edit {s.name} -- CMD ARGS…"
            )
    elif change.after is not None:
        args = change.after
    elif not change.clear_args and not switched:
        args = s.harness_args
    elif switched and s.harness_args and not change.clear_args:
        notes.append(
            f"dropped {s.harness}'s arguments ({shlex.join(s.harness_args)});"
            f" give {harness}'s own after --"
        )
    sandbox = sandboxes.build(
        s.sandbox,
        mode=change.sandbox,
        network=change.network,
        allow_write=change.allow_write,
        deny_read=change.deny_read,
        allow_hosts=change.allow_hosts,
    )
    if sandbox is not None and sandbox.enabled and not (s.sandbox and s.sandbox.enabled):
        sandboxes.require_engine()
    env = dict(s.env)
    env.update(change.env or {})
    for key in change.unset_env:
        if key not in s.env:
            keys = ", ".join(sorted(s.env)) or "none"
            raise Invalid(f"--unset-env {key}: not in {s.name}'s env", hint=f"its keys: {keys}")
        del env[key]
    env = parse_env([f"{k}={v}" for k, v in env.items()])
    # The binary is found again where what finds it changed: the harness, or
    # the PATH its turns look on.
    rebind = switched or env.get("PATH") != s.env.get("PATH")
    harness, pinned = check_harness(spex.home, harness, command, args, env, check=check and rebind)
    if change.cwd is not None:
        cwd = str(working_directory(change.cwd, command, check=check))
    else:
        cwd = s.cwd
        if check and command and command != s.command:
            check_command(command[0], Path(cwd))
    after = s._replace(
        harness=harness,
        command=command,
        harness_args=args,
        cwd=cwd,
        env=env,
        window=None if change.no_window else change.window or s.window,
        timeout=None if change.no_timeout else change.timeout or s.timeout,
        strict=s.strict if change.strict is None else change.strict,
        queue=s.queue if change.queue is None else change.queue,
        model=None if change.no_model else change.model or s.model,
        fallback=None
        if change.no_fallback
        else change.fallback or s.fallback
        if change.fallback is None
        else change.fallback,
        on_limit=None if change.no_on_limit else change.on_limit or s.on_limit,
        verify=None if change.no_verify else s.verify if change.verify is None else change.verify,
        verify_timeout=change.verify_timeout or s.verify_timeout,
        sandbox=sandbox,
        binary=pinned if rebind else s.binary,
        harness_session_id=None if switched else s.harness_session_id,
    )
    if switched and s.harness_session_id:
        notes.append(
            f"forgot conversation {s.harness_session_id}: {harness} cannot resume"
            f" {s.harness}'s; the next turn starts a new one"
        )
    note = pinned_note(after) if after.binary != s.binary else None
    if note:
        notes.append(note)
    return after, _changes(s, after), notes


# A session's settings by the names `spex show --json` gives them.
def _settings(s: Session) -> dict[str, Any]:
    return {
        "harness": s.harness,
        "command": list(s.command) if s.command else None,
        "harness_args": list(s.harness_args),
        "cwd": s.cwd,
        "env": dict(s.env),
        "window": s.window,
        "timeout": s.timeout,
        "strict": s.strict,
        "on_limit": s.on_limit,
        "queue": s.queue,
        "model": s.model,
        "fallback": list(s.fallback) if s.fallback is not None else None,
        "verify": list(s.verify) if s.verify is not None else None,
        "verify_timeout": s.verify_timeout,
        "sandbox": s.sandbox.as_json() if s.sandbox is not None else None,
        "pinned_binary": s.binary,
        "harness_session_id": s.harness_session_id,
    }


def _changes(before: Session, after: Session) -> dict[str, Any]:
    """What differs, as the `edited` event records it (env values never)."""
    old, new = _settings(before), _settings(after)
    out: dict[str, Any] = {}
    for key in old:
        if old[key] == new[key]:
            continue
        if key == "env":
            out[key] = {
                "set": sorted(k for k, v in new[key].items() if old[key].get(k) != v),
                "unset": sorted(set(old[key]) - set(new[key])),
            }
        else:
            out[key] = {"from": old[key], "to": new[key]}
    return out


def _columns(s: Session) -> dict[str, Any]:
    """The session's settings as its row holds them (see `Session.from_row`)."""
    after = list(s.command) if s.command else list(s.harness_args)
    return {
        "harness": s.harness,
        "command": json.dumps(after) if after else None,
        "cwd": s.cwd,
        "env": json.dumps(dict(s.env)),
        "window": s.window,
        "timeout": s.timeout,
        "strict": int(s.strict),
        "on_limit": s.on_limit,
        "queue": int(s.queue),
        "model": s.model,
        "fallback": json.dumps(list(s.fallback)) if s.fallback is not None else None,
        "verify": json.dumps(list(s.verify)) if s.verify is not None else None,
        "verify_timeout": s.verify_timeout,
        "sandbox": s.sandbox.dumps() if s.sandbox is not None else None,
        "binary": s.binary,
        "harness_session_id": s.harness_session_id,
    }
