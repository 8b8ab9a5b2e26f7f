"""Retention: what a long-lived home may forget, and what it occupies (issue 17).

`prune` removes finished turns beyond `keep_turns` per session or older than
`keep_days`, final waves beyond `keep_waves` or older than `keep_days`,
events beyond `keep_events`, and usage rows older than `keep_days` (cost
history is a time series: it outlives `spex rm` and the turn count, not the
age limit). It never removes a session's current turn, a
turn still starting or running, a session's newest turn, a turn of a wave
that is still launching or running, or any turn of a session that a
maintenance lease (not `open`) has in scope.

Crash safety: rows go first, a bounded batch per transaction; the batch's
directories and files are removed after the commit. A crash in between
leaves only row-less directories: every reader starts from a row, so none
follows them, and nothing points at a missing row (a pruned turn's
`wave_turns` row goes in the same transaction). The next `spex prune`
sweeps such orphans; `du` counts them.

`maybe_prune` is the writers' opportunistic form: at most once an hour per
home (claimed by compare-and-swap in `settings`), bounded work per call.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import states
from spexsup.config import Retention
from spexsup.errors import UnknownSession
from spexsup.pane import turndir
from spexsup.record import Record
from spexsup.state import lease, ledger
from spexsup.state.prunestamp import AUTO_INTERVAL
from spexsup.state.store import session_names
from spexsup.states import ACTIVE

if TYPE_CHECKING:
    import sqlite3

    from spexsup.state.store import Store

DAY = 86400.0
# Opportunistic work per call: small enough to cost milliseconds.
AUTO_TURNS = 200
AUTO_WAVES = 50
AUTO_EVENTS = 5000
# ...and in time: no new batch starts after this many seconds (removing a
# directory costs milliseconds on a busy disk), in batches this small.
AUTO_BUDGET = 0.2
AUTO_BATCH = 25
# Rows deleted per transaction, so a manual prune of 100 000 turns never
# holds the write lock for long.
BATCH = 1000
# Wave files are written before the wave's row (its prompt): a row-less one
# younger than this may belong to a wave being created.
WAVE_ORPHAN_AGE = 3600.0
FINAL_WAVES = ("complete", "partial", "failed", "aborted")
WAVE_SUFFIXES = (".json", ".prompt", ".on-complete.log")
# Test-only: stop between a batch's commit and its directories' removal.
PAUSE_ENV = "SPEXSUP_TEST_PRUNE_PAUSE"


def tree_bytes(path: Path) -> int:
    """Apparent size of `path` and all below it, symlinks not followed (as `du -sb`)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return 0
    total = st.st_size
    if not stat.S_ISDIR(st.st_mode):
        return total
    stack = [str(path)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue
        with entries:
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat(follow_symlinks=False).st_size
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return total


def _remove(path: Path) -> int:
    """Remove a file or a tree; its bytes (0 if it was gone already: a retried prune)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return 0
    size = tree_bytes(path)
    if stat.S_ISDIR(st.st_mode):
        import shutil

        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    return size


class Pruned:
    """What a prune removed (or, dry, would remove). A plain class, not a
    dataclass: every writer command checks whether a prune is due, and
    dataclasses (with inspect) would cost each of them ~10 ms to import."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.turns: dict[str, int] = {}  # per session
        self.waves: list[str] = []
        self.events = 0
        self.usage = 0
        self.orphans = 0
        self.bytes = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "ok": True,
            "dry_run": self.dry_run,
            "turns": sum(self.turns.values()),
            "sessions": dict(sorted(self.turns.items())),
            "waves": len(self.waves),
            "wave_ids": self.waves,
            "events": self.events,
            "usage": self.usage,
            "orphans": self.orphans,
            "bytes_freed": self.bytes,
        }


def _held_sessions(db: sqlite3.Connection) -> tuple[bool, set[str]]:
    """(all sessions held, the sessions held) by a lease that is not `open`."""
    import json

    row = lease.recover(db)
    if row["state"] == "open":
        return False, set()
    return bool(row["all_sessions"]), set(json.loads(row["scope"] or "[]"))


def _protected(db: sqlite3.Connection) -> tuple[set[str], set[str]]:
    """The sessions' current turns, and the turns of waves not yet final."""
    current = {r[0] for r in db.execute("SELECT current_turn FROM sessions")}
    in_waves = {
        r[0]
        for r in db.execute(
            "SELECT wt.turn FROM wave_turns wt JOIN waves w ON w.id = wt.wave"
            f" WHERE w.state NOT IN {FINAL_WAVES!r}"
        )
    }
    return current, in_waves


def _turn_candidates(
    db: sqlite3.Connection,
    policy: Retention,
    cutoff: float,
    sessions: Sequence[str] | None,
    limit: int | None,
) -> list[tuple[str, str]]:
    """(session, turn) of the prunable turns, oldest first within a session.

    What a session may lose is an oldest-first prefix of its turns (beyond
    `keep_turns` from the newest, or older than `cutoff`; never the newest),
    so each session costs two indexed counts and one indexed read of at most
    `limit` rows: no ranking of the whole table, whose size is the problem.
    """
    query = "SELECT name FROM sessions WHERE state != ? ORDER BY name"
    names = [
        r[0] for r in db.execute(query, (states.SessionState.REMOVING,))
    ]  # spex rm owns a session being removed
    if sessions is not None:
        names = [n for n in names if n in sessions]
    current, in_waves = _protected(db)
    out: list[tuple[str, str]] = []
    for name in names:
        room = None if limit is None else limit - len(out)
        if room is not None and room <= 0:
            break
        (count,) = db.execute("SELECT count(*) FROM turns WHERE session = ?", (name,)).fetchone()
        (old,) = db.execute(
            "SELECT count(*) FROM turns WHERE session = ? AND started_at < ?", (name, cutoff)
        ).fetchone()
        prefix = min(count - 1, max(count - policy.keep_turns, old))
        if prefix <= 0:
            continue
        rows = db.execute(
            "SELECT id, state FROM turns WHERE session = ? ORDER BY started_at, id LIMIT ?",
            (name, prefix if room is None else min(prefix, room)),
        )
        out += [
            (name, r[0])
            for r in rows
            if r[1] not in ACTIVE and r[0] not in current and r[0] not in in_waves
        ]
    return out


def _wave_candidates(
    db: sqlite3.Connection, policy: Retention, cutoff: float, limit: int | None
) -> list[str]:
    query = (
        "SELECT id FROM (SELECT id, state, coalesce(ended_at, created_at) AS at, row_number()"
        " OVER (ORDER BY created_at DESC, id DESC) AS n FROM waves)"
        f" WHERE state IN {FINAL_WAVES!r} AND (n > ? OR at < ?) ORDER BY at, id"
    )
    if limit is not None:
        query += f" LIMIT {int(limit)}"
    return [r[0] for r in db.execute(query, (policy.keep_waves, cutoff))]


def _has_events(db: sqlite3.Connection) -> bool:
    # The events table arrives with another feature; prune it only where it exists.
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'"
    return db.execute(query).fetchone() is not None


def _event_surplus(db: sqlite3.Connection, keep: int, limit: int | None) -> int:
    if not _has_events(db):
        return 0
    (count,) = db.execute("SELECT count(*) FROM events").fetchone()
    surplus = max(0, int(count) - keep)
    return surplus if limit is None else min(surplus, limit)


def _pause_for_tests() -> None:
    flag = os.environ.get(PAUSE_ENV)
    if flag:
        Path(flag).write_text(str(os.getpid()))
        while True:  # until the test kills us
            time.sleep(60)


class Bounds(Record):
    """How much one prune may do: at most so many turns, waves and events
    (None: every one due), no new batch of `batch` rows once `budget`
    seconds are spent (None: no limit), and whether to sweep the orphans an
    interrupted prune left (it walks every directory)."""

    turns: int | None = None
    waves: int | None = None
    events: int | None = None
    budget: float | None = None
    batch: int = BATCH
    sweep: bool = True


# `spex prune`'s: everything due, and the orphans swept.
WHOLE = Bounds()
# The writers' opportunistic prune (`maybe_prune`): milliseconds, no sweep.
AUTO = Bounds(AUTO_TURNS, AUTO_WAVES, AUTO_EVENTS, AUTO_BUDGET, AUTO_BATCH, sweep=False)


def prune(
    store: Store,
    home: Path,
    policy: Retention,
    *,
    dry_run: bool = False,
    older_than: float | None = None,
    sessions: Sequence[str] | None = None,
    bounds: Bounds = WHOLE,
    now: float | None = None,
) -> Pruned:
    """Apply `policy` (`older_than` seconds replaces `keep_days` for this call),
    within `bounds`.

    With `sessions`, only those sessions' turns are pruned (waves and events
    are the home's, left alone). Unknown sessions are refused before anything
    changes. Safe to run concurrently with anything: every batch re-checks,
    inside its transaction, that its turns are still prunable.
    """
    now = time.time() if now is None else now
    cutoff = now - (older_than if older_than is not None else policy.keep_days * DAY)
    db = store.db
    if sessions is not None:
        for name in sessions:
            if db.execute("SELECT 1 FROM sessions WHERE name = ?", (name,)).fetchone() is None:
                raise UnknownSession(name, session_names(db))
    out = Pruned(dry_run)
    candidates = _turn_candidates(db, policy, cutoff, sessions, bounds.turns)
    waves = [] if sessions is not None else _wave_candidates(db, policy, cutoff, bounds.waves)
    turns_dir = turndir.root(home)
    waves_dir = home / "waves"
    if dry_run:
        with store.tx() as tx:
            every, held = _held_sessions(tx)
        for session, turn in candidates:
            if not every and session not in held:
                out.turns[session] = out.turns.get(session, 0) + 1
                out.bytes += tree_bytes(turns_dir / session / turn)
        out.waves = waves
        out.bytes += sum(tree_bytes(waves_dir / f"{w}{s}") for w in waves for s in WAVE_SUFFIXES)
        if sessions is None:
            out.events = _event_surplus(db, policy.keep_events, bounds.events)
        out.usage = _old_usage(db, cutoff, sessions)
        if bounds.sweep:
            for path in orphans(store, home, now=now):
                out.orphans += 1
                out.bytes += tree_bytes(path)
        return out
    began = time.monotonic()

    def spent() -> bool:
        return bounds.budget is not None and time.monotonic() - began > bounds.budget

    batch = bounds.batch
    for start in range(0, len(candidates), batch):
        if spent():
            return out
        _prune_turns(store, turns_dir, candidates[start : start + batch], out)
    for start in range(0, len(waves), batch):
        if spent():
            return out
        _prune_waves(store, waves_dir, waves[start : start + batch], out)
    if sessions is None:
        out.events = _prune_events(store, policy.keep_events, bounds.events)
    while not spent():
        with store.tx() as tx:
            found = _prune_usage(tx, cutoff, sessions, batch)
        out.usage += found
        if found < batch:
            break
    if bounds.sweep:
        for path in orphans(store, home, now=now):
            out.orphans += 1
            out.bytes += _remove(path)
    with store.tx() as db:  # an earlier failure, now made good
        db.execute("DELETE FROM notices WHERE key = 'prune'")
    return out


def _prune_turns(store: Store, turns_dir: Path, batch: list[tuple[str, str]], out: Pruned) -> None:
    with store.tx() as db:
        every, held = _held_sessions(db)
        if every:
            return
        # The guards again: the plan was read outside this transaction.
        current, in_waves = _protected(db)
        marks = ",".join("?" * len(batch))
        query = f"SELECT id, state FROM turns WHERE id IN ({marks})"
        states = dict(db.execute(query, [turn for _, turn in batch]).fetchall())
        gone = [
            (session, turn)
            for session, turn in batch
            if session not in held
            and turn not in current
            and turn not in in_waves
            and states.get(turn, ACTIVE[0]) not in ACTIVE
        ]
        ledger.prune_turns(db, [turn for _, turn in gone])
    _pause_for_tests()
    for session, turn in gone:
        out.bytes += _remove(turns_dir / session / turn)
        out.turns[session] = out.turns.get(session, 0) + 1


def _prune_waves(store: Store, waves_dir: Path, batch: list[str], out: Pruned) -> None:
    with store.tx() as db:
        gone = []
        for wave in batch:
            deleted = db.execute(
                f"DELETE FROM waves WHERE id = ? AND state IN {FINAL_WAVES!r}", (wave,)
            ).rowcount
            if deleted:
                ledger.unlink_wave(db, wave)
                gone.append(wave)
    for wave in gone:
        for suffix in WAVE_SUFFIXES:
            out.bytes += _remove(waves_dir / f"{wave}{suffix}")
        out.waves.append(wave)


def _old_usage(db: sqlite3.Connection, cutoff: float, sessions: Sequence[str] | None) -> int:
    """Usage rows recorded before the local day of `cutoff` (whole days, as
    `usage_days` sums them; of `sessions` only, when given)."""
    from spexsup.usage import day_start

    only = f" AND session IN ({','.join('?' * len(sessions))})" if sessions is not None else ""
    query = f"SELECT count(*) FROM usage WHERE at < ?{only}"
    (n,) = db.execute(query, [day_start(cutoff), *(sessions or ())]).fetchone()
    return int(n)


def _prune_usage(
    db: sqlite3.Connection, cutoff: float, sessions: Sequence[str] | None, limit: int
) -> int:
    """At most `limit` of those rows deleted, with their days' sums."""
    from spexsup.usage import day_start, local_day

    return ledger.prune_usage(
        db, day=local_day(cutoff), start=day_start(cutoff), sessions=sessions, limit=limit
    )


def _prune_events(store: Store, keep: int, limit: int | None) -> int:
    with store.tx() as db:
        surplus = _event_surplus(db, keep, limit)
        if surplus:
            db.execute(
                "DELETE FROM events WHERE id IN (SELECT id FROM events ORDER BY id LIMIT ?)",
                (surplus,),
            )
    return surplus


def orphans(store: Store, home: Path, *, now: float | None = None) -> list[Path]:
    """Directories and files no row owns: what an interrupted prune (or rm) left.

    A turn's row is committed before its directory is made, so a directory
    listed here before its row is looked up is an orphan for good. A wave's
    prompt is written before its row, so only old row-less wave files count.
    """
    now = time.time() if now is None else now
    db = store.db
    found: list[Path] = []
    turns_dir = turndir.root(home)
    for session_dir in _listdir(turns_dir):
        row = db.execute(
            "SELECT state FROM sessions WHERE name = ?", (session_dir.name,)
        ).fetchone()
        if row is not None and row["state"] == states.SessionState.REMOVING:
            continue  # spex rm is at work here
        children = _listdir(session_dir)
        if row is None:
            found.append(session_dir)
            continue
        known = {
            r[0] for r in db.execute("SELECT id FROM turns WHERE session = ?", (session_dir.name,))
        }
        found += [c for c in children if c.name not in known]
    known_waves = {r[0] for r in db.execute("SELECT id FROM waves")}
    for path in _listdir(home / "waves", dirs=False):
        if path.name.startswith("."):
            continue  # write_atomic's temp files
        wave = next((path.name[: -len(s)] for s in WAVE_SUFFIXES if path.name.endswith(s)), None)
        if wave is None or wave in known_waves:
            continue
        with contextlib.suppress(FileNotFoundError):
            if now - path.lstat().st_mtime > WAVE_ORPHAN_AGE:
                found.append(path)
    return found


def _listdir(path: Path, *, dirs: bool = True) -> list[Path]:
    """The entries of `path` (only directories, unless `dirs` is False); [] if none."""
    try:
        return sorted(p for p in path.iterdir() if not dirs or p.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []


# --- opportunistic ---------------------------------------------------------------


def claim_auto(store: Store, now: float | None = None) -> bool:
    """True for the one caller per hour per home that should prune; a cheap read
    when it is not due, a compare-and-swap when it is."""
    now = time.time() if now is None else now
    last = store.setting("pruned_at")
    if last is not None and now - float(last) < AUTO_INTERVAL:
        return False
    with store.tx() as db:
        row = db.execute("SELECT value FROM settings WHERE key = 'pruned_at'").fetchone()
        if row is not None and now - float(row[0]) < AUTO_INTERVAL:
            return False
        db.execute(
            "INSERT OR REPLACE INTO settings (key, value) VALUES ('pruned_at', ?)", (repr(now),)
        )
    return True


def maybe_prune(home: Path) -> Pruned | None:
    """The writers' prune: due at most once an hour, bounded, no orphan sweep
    (that walks every directory; `spex prune` does it). None when not due or
    `[retention] auto = false`."""
    import sqlite3

    from spexsup import config
    from spexsup.state import events
    from spexsup.state.store import Store

    if not (home / "state.db").is_file():
        return None
    store = Store(home, (events,))  # records no event: no hook to run
    try:
        if not claim_auto(store):
            return None
        policy = config.load(home).retention
        if not policy.auto:
            return None
        try:
            return prune(store, home, policy, bounds=AUTO)
        except (OSError, sqlite3.Error) as e:
            # Nobody waits for this prune: leave the failure for `spex doctor`.
            with store.tx() as db:
                db.execute(
                    "INSERT OR REPLACE INTO notices (key, message, at) VALUES ('prune', ?, ?)",
                    (f"opportunistic prune failed: {e} (run spex prune)", time.time()),
                )
            return None
    finally:
        store.close()


# --- disk use ----------------------------------------------------------------


def du(store: Store, home: Path, policy: Retention) -> dict[str, Any]:
    """Bytes of the home by part: each session's turn dirs (and their logs), the
    waves, the database, orphans and the rest; and what a prune would free.

    Every byte is counted once, so the parts add up to `du -sb` of the home.
    """
    db = store.db
    counts = {
        r[0]: r[1] for r in db.execute("SELECT session, count(*) FROM turns GROUP BY session")
    }
    sessions: list[dict[str, Any]] = []
    turns_dir = turndir.root(home)
    for session_dir in _listdir(turns_dir):
        logs = sum(tree_bytes(d / turndir.OUTPUT) for d in _listdir(session_dir))
        sessions.append(
            {
                "name": session_dir.name,
                "turns": counts.get(session_dir.name, 0),
                "dirs": len(_listdir(session_dir)),
                "bytes": tree_bytes(session_dir),
                "log_bytes": logs,
            }
        )
    db_bytes = sum(tree_bytes(home / f"state.db{s}") for s in ("", "-wal", "-shm", "-journal"))
    waves_bytes = tree_bytes(home / "waves")
    (wave_count,) = db.execute("SELECT count(*) FROM waves").fetchone()
    total = tree_bytes(home)
    turns_bytes = tree_bytes(turns_dir)
    stray = orphans(store, home)
    would = prune(store, home, policy, dry_run=True)
    return {
        "schema_version": 1,
        "home": str(home),
        "total_bytes": total,
        "turns_bytes": turns_bytes,
        "sessions": sessions,
        "waves": {"count": int(wave_count), "bytes": waves_bytes},
        "database_bytes": db_bytes,
        "orphans": {"count": len(stray), "bytes": sum(tree_bytes(p) for p in stray)},
        "other_bytes": total - turns_bytes - waves_bytes - db_bytes,
        "prunable": {
            "turns": sum(would.turns.values()),
            "waves": len(would.waves),
            "events": would.events,
            "bytes": would.bytes,
        },
    }


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
