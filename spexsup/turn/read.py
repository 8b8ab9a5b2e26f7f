"""Reading turns: the public view of a turn, its log (`spex log`), and waiting
for its end (`spex wait`, woken by inotify on the turn directory).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import ids, states
from spexsup.adapters.prefetch import EarlyCensus, started
from spexsup.core.sessions import Session, get, pane_status
from spexsup.core.spex import Spex
from spexsup.errors import Invalid, Refused, SpexError, TimedOut, UnknownSession
from spexsup.pane import turndir
from spexsup.paths import ensure_private_dir
from spexsup.record import Record
from spexsup.state import events, lease
from spexsup.state.store import session_names
from spexsup.states import COMPLETE, SESSION_STATES, legacy_of, read_state
from spexsup.turn.reconcile import reconcile

if TYPE_CHECKING:
    from spexsup.usage import Spend


def legacy(state: str | None) -> dict[str, str]:
    """`{"legacy_state": "error"}` beside a `failed` state, for one release
    (see `states.LEGACY`); nothing beside any other."""
    old = legacy_of(state)
    return {"legacy_state": old} if old else {}


def turn_json(
    row: Any,
    spent: Spend | None = None,
    checked: dict[str, Any] | None = None,
    so_far: Spend | None = None,
) -> dict[str, Any]:
    """The one JSON shape of a turn, wherever a command prints one; `usage`
    and `cost` (issue 26) null until its end recorded some (see `turn_spends`);
    `so_far` what a running turn has spent so far (DESIGN §31: `usage`,
    `cost` and `running: true`; `exact` says whether every step so far was
    priced), null otherwise
    (`running_spends`); `verify` (issue 27) its latest check, null without
    one (`turn_checks`)."""
    return {
        "schema_version": ids.SCHEMA_VERSION,
        "id": row["id"],
        "session": row["session"],
        "state": row["state"],
        "verdict": row["verdict"],
        "rc": row["rc"],
        "pid": row["pid"],
        "error": row["error"],
        "attempts": row["attempts"],
        "resumed": row["resumed"],
        "flags": json.loads(row["flags"]) if row["flags"] else [],
        "cause": row["cause"],
        "timeout": row["timeout"],
        "strict": bool(row["strict"]),
        # The model its (last) attempt ran, and the attempts it fell back from.
        "model": row["model"],
        "fallbacks": json.loads(row["fallbacks"]) if row["fallbacks"] else [],
        "survivors": json.loads(row["survivors"]) if row["survivors"] else [],
        "limit_reset": row["limit_reset"],
        "limit_reset_iso": ids.iso(row["limit_reset"]),
        "waiting_until": row["waiting_until"],
        "waiting_until_iso": ids.iso(row["waiting_until"]),
        "started_at": row["started_at"],
        "started_at_iso": ids.iso(row["started_at"]),
        "ended_at": row["ended_at"],
        "ended_at_iso": ids.iso(row["ended_at"]),
        # Seconds, as its wrapper measured them; null: it never ran, or unknown.
        "ran": row["ran"],
        "usage": spent.usage_json() if spent is not None else None,
        "cost": spent.cost_json() if spent is not None else None,
        "so_far": so_far_json(so_far),
        "verify": checked,
        **legacy(row["state"]),
    }


def so_far_json(spent: Spend | None) -> dict[str, Any] | None:
    """A running figure's JSON (`so_far`): `usage` and `cost` as a turn's,
    and `running: true` (the turn spends on)."""
    if spent is None:
        return None
    return {"usage": spent.usage_json(), "cost": spent.cost_json(), "running": True}


def running_spends(spex: Spex, rows: Sequence[Any]) -> dict[str, Spend]:
    """What each running turn of `rows` has spent so far, as its pane counts
    it (`pane.budget.so_far`, priced by config.toml's `[pricing]` now): one
    small file read per running turn, none for an ended one."""
    active = [r for r in rows if r["state"] in states.ACTIVE]
    if not active:
        return {}
    from spexsup import config
    from spexsup.pane import budget

    pricing = config.load(spex.home).pricing
    out = {}
    for r in active:
        spent = budget.so_far(turndir.path(spex.home, r["session"], r["id"]), pricing)
        if spent is not None:
            out[r["id"]] = spent
    return out


def check_json(row: Any) -> dict[str, Any]:
    """The one JSON shape of a turn's check (a `verifications` row)."""
    from spexsup.adapters.harness import shown_verify

    argv = json.loads(row["command"])
    return {
        "command": shown_verify(argv),
        "argv": argv,
        "attempt": row["attempt"],
        "state": row["state"],
        "rc": row["rc"],
        "tail": row["tail"],
        "started_at": row["started_at"],
        "started_at_iso": ids.iso(row["started_at"]),
        "ended_at": row["ended_at"],
        "ended_at_iso": ids.iso(row["ended_at"]),
    }


def turn_checks(spex: Spex, turns: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The latest check of each of `turns` that has one, one query per 500."""
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(turns), 500):
        chunk = list(turns[start : start + 500])
        marks = ",".join("?" * len(chunk))
        rows = spex.store.db.execute(
            f"SELECT * FROM verifications WHERE turn IN ({marks}) ORDER BY turn, attempt", chunk
        ).fetchall()
        out.update((row["turn"], check_json(row)) for row in rows)
    return out


def turn_spends(spex: Spex, turns: Sequence[str]) -> dict[str, Spend]:
    """What each of `turns` spent (those that recorded usage), one indexed
    query per 500, priced by config.toml's `[pricing]` now."""
    if not turns:
        return {}
    from spexsup import config, usage

    pricing = config.load(spex.home).pricing
    out: dict[str, Spend] = {}
    for start in range(0, len(turns), 500):
        chunk = list(turns[start : start + 500])
        where = f"turn IN ({','.join('?' * len(chunk))})"
        out.update(usage.totals(spex.store.db, "turn", pricing, where=where, params=chunk))
    return out


def turn_summary(spex: Spex, session: str, turn: str) -> dict[str, str | None]:
    """What `spex show` adds about a turn: the harness binary it resolved, its
    prompt's first line and the last line of its final answer (from the
    structured output, bounded as the exit reporter reads it)."""
    from spexsup.adapters import outcome

    directory = turndir.path(spex.home, session, turn)
    binary = turndir.first_line(directory / turndir.BINARY)
    prompt = turndir.first_line(directory / turndir.PROMPT)
    answer = None
    parser = turndir.meta(directory).get("outcome")
    if isinstance(parser, str):
        text = outcome.read(directory / turndir.OUTPUT, parser).answer
        lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
        answer = lines[-1][:200] if lines else None
    return {"binary": binary, "prompt_line": prompt, "answer_line": answer}


def load_turn(spex: Spex, turn: str) -> dict[str, Any]:
    """One turn in its JSON shape; Refused if there is no such turn."""
    row = spex.store.db.execute("SELECT * FROM turns WHERE id = ?", (turn,)).fetchone()
    if row is None:
        raise Refused(f"no turn {turn!r}")
    return turn_json(
        row,
        turn_spends(spex, [turn]).get(turn),
        turn_checks(spex, [turn]).get(turn),
        running_spends(spex, [row]).get(turn),
    )


def recent_turns(spex: Spex, names: Sequence[str], limit: int) -> dict[str, list[dict[str, Any]]]:
    """The newest `limit` turns of each session, newest first.

    One indexed lookup per session (`turns_by_session`, stopping after `limit`
    rows), not one window query: row_number() over every session's whole
    history read all 200 000 rows of a 1 000-session home (1 s, against 54 ms).
    For `ls` (one turn each) the lookups run inside one statement.
    """
    found: dict[str, list[Any]] = {}
    if limit == 1 and len(names) > 1:
        # `ls`: the same indexed lookup for every session, in one statement
        # (a thousand executes from Python cost more than the lookups).
        for row in spex.store.db.execute(
            "SELECT t.* FROM json_each(?) AS n JOIN turns AS t ON t.rowid = ("
            " SELECT rowid FROM turns WHERE session = n.value"
            " ORDER BY started_at DESC, id DESC LIMIT 1)",
            (json.dumps(list(names)),),
        ):
            found[row["session"]] = [row]
        return _turns_json(spex, found)
    for name in names:
        rows = spex.store.db.execute(
            "SELECT * FROM turns WHERE session = ? ORDER BY started_at DESC, id DESC LIMIT ?",
            (name, limit),
        ).fetchall()
        if rows:
            found[name] = rows
    return _turns_json(spex, found)


def _turns_json(spex: Spex, found: dict[str, list[Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each session's turn rows as JSON, with their spend and checks."""
    ids_ = [row["id"] for rows in found.values() for row in rows]
    spent, checks = turn_spends(spex, ids_), turn_checks(spex, ids_)
    running = running_spends(spex, [row for rows in found.values() for row in rows])
    return {
        name: [
            turn_json(row, spent.get(row["id"]), checks.get(row["id"]), running.get(row["id"]))
            for row in rows
        ]
        for name, rows in found.items()
    }


class Ended(Record):
    """How a waited-for turn ended (a Record: `show` must not pay for dataclasses)."""

    session: str
    turn: str | None
    state: str | None
    rc: int | None
    error: str | None
    flags: tuple[str, ...] = ()
    cause: str | None = None

    @property
    def exit_code(self) -> int:
        """0 for `complete`, 1 for any other end; the turn's own rc is in `rc`
        (an agent's rc must not collide with spex's own exit codes)."""
        return 0 if self.state == COMPLETE else 1

    def as_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "turn": self.turn,
            "state": self.state,
            "rc": self.rc,
            "error": self.error,
            "cause": self.cause,
            "flags": list(self.flags),
            **legacy(self.state),
        }


def _current(spex: Spex, name: str) -> tuple[str | None, Any]:
    row = spex.store.db.execute(
        "SELECT t.* FROM sessions s JOIN turns t ON t.id = s.current_turn WHERE s.name = ?",
        (name,),
    ).fetchone()
    return (row["id"] if row else None), row


def wait(
    spex: Spex,
    names: Sequence[str],
    *,
    timeout: float | None = None,
    on_end: Callable[[Ended], None] | None = None,
    on_tick: Callable[[], None] | None = None,
) -> list[Ended]:
    """Block until each session's current turn has ended (event-driven), and
    the prompts queued for it (unless it is stopped, which pauses its queue)
    have run: the end reported is then the last queued prompt's.

    `on_end` hears each end as it is found (turns already over first), and
    `on_tick` runs after every wake-up, at least once a second, for a live
    clock. Raises TimedOut (124) when `timeout` passes first. A session with
    no turn at all and nothing queued is refused.
    """
    names = list(dict.fromkeys(names))
    for name in names:
        get(spex, name)
    deadline = None if timeout is None else time.monotonic() + timeout
    ended: dict[str, Ended] = {}
    session_of: dict[str, str] = {}  # a watched turn dir -> its session
    ticks_dir = ensure_private_dir(spex.home / events.DIR, under=spex.home)
    from spexsup.adapters.watch import DirWatch  # only a waiting reader pays (issue 40)

    with (
        DirWatch([]) as watch,
        DirWatch([ticks_dir], names=frozenset({events.TICK}), changed=watch.changed) as ticks,
    ):
        watched: set[str] = set()
        # Every session is read at first, after a quiet wait and when the
        # queue moves; otherwise only those whose turn dir was written to:
        # a wait on many turns costs one session's reads per end, not all.
        looking = set(names)
        due: float | None = None
        while True:
            found = reconcile(spex, [n for n in names if n in looking and n not in ended])
            # A subset's reads keep the earlier due time of those not read.
            whole = len(looking) == len(names)
            due = found if whole or due is None else due if found is None else min(due, found)
            for name in names:
                if name in ended or name not in looking:
                    continue
                turn, row = _current(spex, name)
                queued = _queued(spex, name)
                if queued and "queue" not in watched:
                    # A queued prompt's launch takes its file from here.
                    watch.add(ensure_private_dir(spex.home / "queue", under=spex.home))
                    watched.add("queue")
                if turn is None and not queued:
                    raise Refused(f"session {name!r} has no turn to wait for")
                if turn is None:
                    continue
                if row["state"] not in states.ACTIVE and not queued:
                    flags = tuple(json.loads(row["flags"])) if row["flags"] else ()
                    ended[name] = Ended(
                        name, turn, row["state"], row["rc"], row["error"], flags, row["cause"]
                    )
                    if on_end is not None:
                        on_end(ended[name])
                elif turn not in watched and row["state"] in states.ACTIVE:
                    directory = turndir.path(spex.home, name, turn)
                    session_of[str(directory)] = name
                    watch.add(directory)
                    watched.add(turn)
            if len(ended) == len(names):
                return [ended[n] for n in names]
            if deadline is not None and time.monotonic() >= deadline:
                pending = ", ".join(n for n in names if n not in ended)
                raise TimedOut(f"timed out waiting for {pending}")
            if on_tick is not None:
                on_tick()
            remaining = 3600.0 if deadline is None else deadline - time.monotonic()
            if due is not None:  # a deferred end falls to us then
                remaining = min(remaining, max(0.05, due - time.time()))
            fired = watch.wait(remaining if on_tick is None else min(remaining, 1.0))
            touched = watch.take()
            if fired and all(d in session_of for d in touched):
                looking = {session_of[d] for d in touched}
                if ticks.take():
                    # A commit (an end is recorded before the wrapper's last
                    # marker, written after its reporter exits): one query
                    # for the sessions it may have ended.
                    looking |= _settled(spex, [n for n in names if n not in ended])
            else:
                looking = set(names)


def _settled(spex: Spex, names: list[str]) -> set[str]:
    """Of `names`, those whose current turn is no longer active (one query)."""
    if not names:
        return set()
    rows = spex.store.db.execute(
        "SELECT s.name FROM sessions s JOIN turns t ON t.id = s.current_turn"
        f" WHERE s.name IN ({','.join('?' * len(names))})"
        f" AND t.state NOT IN ({','.join('?' * len(states.ACTIVE))})",
        [*names, *states.ACTIVE],
    ).fetchall()
    return {str(r[0]) for r in rows}


def _queued(spex: Spex, name: str) -> int:
    """Prompts queued for `name` that will launch (its queue is not paused)."""
    (count,) = spex.store.db.execute(
        "SELECT count(*) FROM queue q JOIN sessions s ON s.name = q.session"
        " WHERE q.session = ? AND s.state != ?",
        (name, states.SessionState.STOPPED),
    ).fetchone()
    return int(count)


def tail_offset(path: Path, lines: int) -> int:
    """Where the last `lines` lines of `path` begin, as `tail -n` counts them (a
    final newline ends the last line). Reads backwards in blocks: agent logs run
    to megabytes."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return 0
    with f:
        end = f.seek(0, os.SEEK_END)
        if lines == 0:
            return end
        pos, seen, limit = end, 0, end - 1
        while pos > 0:
            size = min(65536, pos)
            pos -= size
            f.seek(pos)
            block = f.read(size)
            at = min(len(block), limit - pos)
            while (at := block.rfind(b"\n", 0, at)) >= 0:
                seen += 1
                if seen == lines:
                    return pos + at + 1
    return 0


def log(
    spex: Spex,
    name: str,
    *,
    turn: str | None = None,
    follow: bool = False,
    tail: int | None = None,
    stop: threading.Event | None = None,
) -> Iterator[bytes]:
    """A turn's output (default: the current or last turn), from its last `tail`
    lines when given; `follow` until it ends, or until `stop` is set (seen
    within a second even while the turn writes nothing)."""
    session = get(spex, name)
    turn = turn or session.current_turn
    if turn is None:
        raise Refused(f"session {name!r} has no turn yet")
    row = spex.store.db.execute(
        "SELECT state FROM turns WHERE id = ? AND session = ?", (turn, name)
    ).fetchone()
    if row is None:
        raise Refused(f"session {name!r} has no turn {turn!r}", hint=f"spex show {name}")
    directory = turndir.path(spex.home, name, turn)
    path = directory / turndir.OUTPUT
    offset = 0 if tail is None else tail_offset(path, tail)

    inode: int | None = None

    def drain() -> Iterator[bytes]:
        nonlocal offset, inode
        try:
            with path.open("rb") as f:
                # A usage-limit wait starts the resumed run in a new output.log.
                current = os.fstat(f.fileno()).st_ino
                if inode is not None and current != inode:
                    offset = 0
                inode = current
                f.seek(offset)
                while chunk := f.read(65536):
                    offset += len(chunk)
                    yield chunk
        except FileNotFoundError:
            return

    yield from drain()
    if not follow:
        return
    from spexsup.adapters.watch import DirWatch

    with DirWatch([directory], names=frozenset({"outcome", "output.log"})) as watch:
        while True:
            reconcile(spex, [name])
            state = spex.store.db.execute("SELECT state FROM turns WHERE id = ?", (turn,))
            done = state.fetchone()["state"] not in states.ACTIVE
            yield from drain()
            if done or (stop is not None and stop.is_set()):
                return
            watch.wait(1.0)


def describe(
    spex: Spex,
    names: Sequence[str] | None = None,
    *,
    turns: int = 1,
    worktree_status: bool = False,
    early: EarlyCensus | None = None,
) -> list[dict[str, Any]]:
    """The public view of sessions (DESIGN §3 `ls --json`), after reconciliation.

    One query for the sessions, one for their turns and one `list-panes -a`
    for every pane, however many sessions there are: `early`'s, when the
    caller started one and it is still current. A worktree session's
    `worktree` says whether it is `missing` (a stat, no git); its full git
    status only with `worktree_status` (git runs per session).
    """

    reconcile(spex, names)
    try:
        # No lease (the usual case) has nothing to settle: no write lock.
        held = lease.current(spex.store.db)
        if held["state"] != "open":
            with spex.store.tx() as db:
                held = lease.recover(db)
    except Exception as e:
        from spexsup.paths import disk_full

        if not disk_full(e):
            raise
        held = lease.current(spex.store.db)  # as last recorded: a full disk
    db = spex.store.db
    if names is None:
        rows = db.execute("SELECT * FROM sessions ORDER BY name").fetchall()
    else:
        rows = [db.execute("SELECT * FROM sessions WHERE name = ?", (n,)).fetchone() for n in names]
        for n, row in zip(names, rows, strict=True):
            if row is None:
                raise UnknownSession(n, session_names(db))
    # tmux lists the panes while the store is read (one client call, 16 ms for 1 000);
    # for one session (`show`) its panes alone (a name is never format syntax).
    one = names is not None and len(names) == 1 and ids.NAME_RE.fullmatch(names[0])
    only = names[0] if names is not None and one else None
    pending = None
    if rows:
        if early is not None and early.current(only):
            pending = early.collect
        else:
            pending = started(lambda: spex.tmux.census(only))
    recent = recent_turns(spex, [r["name"] for r in rows], turns)
    queued = dict(
        db.execute("SELECT session, count(*) FROM queue GROUP BY session").fetchall()
        if rows
        else []
    )
    census = pending() if pending else None
    out = []
    for row in rows:
        s = Session.from_row(row)
        history = recent.get(s.name, [])
        pane = pane_status(census, s, spex.home) if census else "unknown"
        entry: dict[str, Any] = {
            "schema_version": ids.SCHEMA_VERSION,
            "name": s.name,
            "harness": s.harness,
            "state": s.state,
            "cwd": s.cwd,
            # Names only: a session's env holds tokens and keys.
            "env_keys": sorted(s.env),
            "harness_session_id": s.harness_session_id,
            "turn": history[0] if history else None,
            "pane": pane,
            "home": pane,  # the old name of `pane`, for one release (DESIGN §24)
            "window": s.window,
            "timeout": s.timeout,
            "strict": s.strict,
            "on_limit": s.on_limit,
            "queue": s.queue,
            "queued": queued.get(s.name, 0),
            "model": s.model,
            "fallback": list(s.fallback) if s.fallback is not None else None,
            # Its own check (None: the repository's, else the harness's; []: none).
            "verify": list(s.verify) if s.verify is not None else None,
            "verify_timeout": s.verify_timeout,
            "command": list(s.command) if s.command else None,
            "harness_args": list(s.harness_args),
            "pinned_binary": s.binary,
            "created_at": s.created_at,
            "lease": (
                {"epoch": held["epoch"], "state": held["state"]}
                if held["state"] != "open" and lease.in_scope(held, s.name)
                else None
            ),
            "created_at_iso": ids.iso(s.created_at),
            "worktree": s.worktree.public() if s.worktree else None,
            **legacy(s.state),
        }
        if s.worktree is not None and worktree_status:
            from spexsup.core import (
                worktree as worktrees,  # dataclasses: only --worktree-status pays
            )

            entry["worktree"] = worktrees.describe(s.name, s.worktree)
        # The latest turn's resolved binary, prompt and answer: read from its
        # files, so only where a session is shown (null in `ls`); so is the
        # session's total spend.
        entry.update(binary=None, prompt_line=None, answer_line=None)
        entry.update(usage=None, cost=None, spent_turns=None)
        entry["sandbox"] = s.sandbox.as_json() if s.sandbox is not None else None
        if turns > 1:
            entry["sandbox"] = effective_sandbox(spex, s)
            entry["turns"] = history
            if history:
                entry.update(turn_summary(spex, s.name, history[0]["id"]))
            entry.update(spending(spex, s.name, s.created_at))
            entry["reports_usage"] = reports_usage(spex, s)
        out.append(entry)
    return out


def reports_usage(spex: Spex, session: Session) -> bool | None:
    """Whether its harness prints usage at all (a structured output: claude,
    codex, opencode, pi); not `command` nor `demo`. None: not known (its
    harness no longer resolves)."""
    try:
        return session.adapter(spex.home).outcome is not None
    except SpexError:
        return None


def spending(spex: Spex, name: str, since: float) -> dict[str, Any]:
    """What `spex show` adds about spend (issue 26): the session's total
    (`usage`, `cost`, `spent_turns`) over every turn this session (not an
    older one of its name, before `since`) recorded usage for."""
    from spexsup import config, usage

    pricing = config.load(spex.home).pricing
    whole = usage.total(
        spex.store.db, pricing, where="session = ? AND at >= ?", params=(name, since)
    )
    return {"usage": whole.usage_json(), "cost": whole.cost_json(), "spent_turns": whole.turns}


def natural_key(name: str) -> list[Any]:
    """`try-2` before `try-10`: digit runs compare as numbers."""
    return [
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.split(r"([0-9]+)", name)
    ]


def name_matches(name: str, patterns: Sequence[str]) -> bool:
    """Does a glob of `patterns` match the whole name (case-sensitive, as
    `spex ls PATTERN` and `spex top`'s filter read one)?"""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def listing(
    spex: Spex,
    patterns: Sequence[str] = (),
    *,
    state: str | None = None,
    early: EarlyCensus | None = None,
) -> list[dict[str, Any]]:
    """`spex ls`: every session's public view (`describe`), or those whose name
    a glob of `patterns` matches and that are in `state`, in natural order."""
    state = read_state(state) if state is not None else None
    if state is not None and state not in SESSION_STATES:
        raise Invalid(f"invalid --state {state!r}", hint=f"one of: {', '.join(SESSION_STATES)}")
    rows = describe(spex, early=early)
    if patterns:
        rows = [r for r in rows if name_matches(r["name"], patterns)]
    if state is not None:
        rows = [r for r in rows if r["state"] == state]
    return sorted(rows, key=lambda r: natural_key(r["name"]))


def effective_sandbox(spex: Spex, s: Session) -> dict[str, Any]:
    """The sandbox the session's next turn runs in, as `spex show` prints it:
    the policy, where it comes from, and its paths and hosts resolved."""
    import os

    from spexsup import config
    from spexsup.adapters import sandbox as sandboxes

    adapter = s.adapter(spex.home)
    settings = config.load(spex.home)
    policy = sandboxes.turn_policy(s.sandbox, adapter.sandbox, settings.sandbox, s.name, False)
    source = (
        "session"
        if s.sandbox is not None
        else "harness"
        if adapter.sandbox
        else "config"
        if settings.sandbox
        else "default"
    )
    doc: dict[str, Any] = {**policy.as_json(), "source": source}
    if policy.enabled:
        from spexsup.pane import netgate

        others = [
            Path(r["cwd"])
            for r in spex.store.db.execute("SELECT cwd FROM sessions WHERE worktree NOT NULL")
        ]
        hosts = [*adapter.model_hosts, *netgate.base_url_hosts({**os.environ, **s.env})]
        plan = sandboxes.plan(
            policy,
            sandboxes.Needs(adapter.sandbox_write, hosts),
            cwd=Path(s.cwd),
            spex_home=spex.home,
            turn_dir=spex.home / "turns" / s.name / "next",
            env=s.env,
            other_worktrees=others,
        )
        doc.update(plan.as_json(), source=source, engine=sandboxes.engine())
    return doc
