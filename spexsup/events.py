"""The event log (DESIGN §8 "Events"): every transition, in its own transaction.

`record` appends an event inside the caller's `store.tx()`, so an event exists
exactly when its transition committed; ids come from SQLite's AUTOINCREMENT
under the write lock, so they are never reused and commit in id order (a
reader that has seen id N has seen every id below it). The store calls
`before_commit` (rewrites the status summary, in commit order) and
`after_commit` (touches `events/tick` to wake followers, then fires the
hooks of what it committed) around its COMMIT: the process that commits an
event is the one that announces it, and nothing needs a daemon.

Imported by the exit reporter on every turn end, so this module costs next
to nothing to import and to run there: `os` and `time` at the top; one
summary query and a small atomic write only when the summary changed; one
write of the tick file; the config files are read as bytes and parsed (and
`hooks` imported) only when one of them has a `[[hook]]` table.
"""

# Plain os calls on str paths: this runs in every writer's transaction.
# ruff: noqa: PTH102, PTH105, PTH111, PTH123
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3
    from pathlib import Path

    from spexsup.store import Store

SCHEMA_VERSION = 1
# Retention: the writer prunes every PRUNE_EVERY events, keeping KEEP.
KEEP = 100_000
PRUNE_EVERY = 1000

TURN_KINDS = (
    "launched",
    "confirmed",
    "completed",
    "failed",
    "aborted",
    "lost",
    "interrupted",
    "timed-out",
)
SESSION_KINDS = ("created", "removed", "stopped", "resumed", "home-recreated")
OTHER_KINDS = (
    "wave-started",
    "wave-ended",
    "lease-acquired",
    "lease-released",
    "lease-recovered",
)
KINDS = (*TURN_KINDS, *SESSION_KINDS, *OTHER_KINDS)
# A turn's end state -> the event that announces it.
END_KINDS = {
    "complete": "completed",
    "error": "failed",
    "aborted": "aborted",
    "lost": "lost",
    "interrupted": "interrupted",
    "timed-out": "timed-out",
}
DIR = "events"
TICK = "tick"
STATUS = "status"

# Event ids recorded in each connection's open transaction (by id(connection)).
_pending: dict[int, list[int]] = {}


def record(
    db: sqlite3.Connection,
    kind: str,
    *,
    session: str | None = None,
    turn: str | None = None,
    rc: int | None = None,
    cause: str | None = None,
    **payload: Any,
) -> int:
    """Append one event inside the caller's transaction; returns its id."""
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}")
    text = "{}"
    if payload:
        import json

        text = json.dumps(payload, default=str)
    cur = db.execute(
        "INSERT INTO events (at, kind, session, turn, rc, cause, payload)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (time.time(), kind, session, turn, rc, cause, text),
    )
    event = int(cur.lastrowid or 0)
    if event % PRUNE_EVERY == 0:
        db.execute("DELETE FROM events WHERE id <= ?", (event - KEEP,))
        db.execute("DELETE FROM hook_runs WHERE event <= ?", (event - KEEP,))
    _pending.setdefault(id(db), []).append(event)
    return event


def turn_ended(
    db: sqlite3.Connection,
    state: str,
    *,
    session: str,
    turn: str,
    rc: int | None,
    cause: str | None,
) -> int:
    """The event of a turn's end state (`complete` -> `completed`, `error` -> `failed`…)."""
    return record(db, END_KINDS[state], session=session, turn=turn, rc=rc, cause=cause)


def emit(store: Store, kind: str, **fields: Any) -> int:
    """Record one event in a transaction of its own: for transitions that live
    outside SQLite (a tmux home recreated, a launch that tmux confirmed)."""
    with store.tx() as db:
        return record(db, kind, **fields)


def pending(db: sqlite3.Connection) -> bool:
    return id(db) in _pending


def discard(db: sqlite3.Connection) -> None:
    _pending.pop(id(db), None)


def _write(directory: str, name: str, data: bytes, *, atomic: bool) -> None:
    """One small write under `events/` (made 0700 on first use); raises OSError.

    `atomic`: a temp file renamed into place (readers see old or new). Else
    `data` (fixed-width, for the tick) overwrites the file's start in place:
    no truncation, which on ext4 costs a forced block allocation (~0.5 ms).
    """
    path = f"{directory}/{name}"
    target = f"{directory}/.{name}.{os.getpid()}.tmp" if atomic else path
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if atomic else 0)
    try:
        fd = os.open(target, flags, 0o600)
    except FileNotFoundError:
        os.mkdir(directory, 0o700)
        fd = os.open(target, flags, 0o600)
    try:
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)
    if atomic:
        os.replace(target, path)


# --- around the commit -------------------------------------------------------


def before_commit(store: Store) -> None:
    """Inside the write lock, when this transaction recorded events: rewrite
    the summary if it changed, so summaries land in commit order."""
    directory = f"{store.home}/{DIR}"
    text = summary_text(store.db)
    try:
        with open(f"{directory}/{STATUS}", "rb") as f:
            if f.read(65536) == text:
                return
    except OSError:
        pass
    # On failure a status bar lags one transition; the next one catches up.
    with contextlib.suppress(OSError):
        _write(directory, STATUS, text, atomic=True)


def after_commit(store: Store) -> None:
    """Announce what this connection just committed: wake followers, fire hooks.

    The transition is committed whatever happens here: failures are written
    to hooks.log, never raised into the caller.
    """
    ids = _pending.pop(id(store.db), None)
    if not ids:
        return
    # On failure followers fall back to their coarse re-read.
    with contextlib.suppress(OSError):
        _write(f"{store.home}/{DIR}", TICK, b"%020d\n" % ids[-1], atomic=False)
    if hooks_disabled() or not hooks_configured(store.home):
        return
    try:
        from spexsup import hooks

        hooks.fire(store, ids, hooks.load(store.home))
    except Exception as e:
        log_line(store.home, f"hooks of events {ids[0]}..{ids[-1]} not run: {e}")


def hooks_disabled() -> bool:
    """`--no-hooks` (which sets it) or SPEXSUP_NO_HOOKS=1."""
    return os.environ.get("SPEXSUP_NO_HOOKS", "") not in ("", "0")


def hooks_configured(home: Path | str) -> bool:
    """Does a config file hold a `[[hook]]` table? Bytes and a substring only:
    the exit reporter asks on every turn end and must not pay for TOML."""
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    for path in (f"{xdg}/spexsup/config.toml", f"{home}/config.toml"):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if b"hook" in data and b"[[" in data:
            return True
    return False


def log_line(home: Path | str, text: str) -> None:
    """One timestamped line in `hooks.log` (0600); never raises."""
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
    "SELECT state, count(*), group_concat(CASE WHEN state = 'error' THEN name END, ' ')"
    " FROM (SELECT name, state FROM sessions ORDER BY name) GROUP BY state"
)


def summary_text(db: sqlite3.Connection) -> bytes:
    """`events/status`: `key=value` lines that `spex status-line` reads (see
    `statusline`): counts of sessions running, ok (idle), failed (error) and
    stopped, and `attention`, the failed sessions' names. One query."""
    counts = {"running": 0, "ok": 0, "failed": 0, "stopped": 0}
    attention = ""
    for state, count, names in db.execute(SUMMARY_QUERY):
        key = {"running": "running", "idle": "ok", "error": "failed", "stopped": "stopped"}.get(
            state
        )
        if key:
            counts[key] += count
        if state == "error":
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
    where = ["id > ?"]
    args: list[Any] = [since]
    if sessions:
        where.append(f"session IN ({','.join('?' * len(sessions))})")
        args += sessions
    if kinds:
        where.append(f"kind IN ({','.join('?' * len(kinds))})")
        args += kinds
    query = f"SELECT * FROM events WHERE {' AND '.join(where)} ORDER BY id LIMIT ?"
    return list(db.execute(query, (*args, limit)))


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

    from spexsup.paths import ensure_private_dir
    from spexsup.watch import COARSE_POLL, DirWatch

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
