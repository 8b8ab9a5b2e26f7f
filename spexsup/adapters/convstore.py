"""Conversation ids from a CLI's own session store, for a turn whose output
has none (it died before printing it, or printed it nowhere we read).

- pi keeps `~/.pi/agent/sessions/--<cwd, / and : as ->--/<time>_<uuid>.jsonl`
  (`PI_CODING_AGENT_DIR` moves `~/.pi/agent`); the first line is the
  `{"type": "session", "id": …, "cwd": …}` header.
- opencode ≥ 1.2 keeps its sessions in SQLite, `$XDG_DATA_HOME/opencode/opencode.db`
  (default `~/.local/share`; `opencode-<channel>.db` for a non-release
  channel; `OPENCODE_DB` names another file, relative to that directory):
  table `session` with `id`, `directory`, `parent_id` (set for a subagent's
  session) and `time_updated` in milliseconds. It is read read-only, with a
  busy timeout; a database that cannot be read counts as no answer.
- opencode before 1.2 kept `$XDG_DATA_HOME/opencode/storage/session/<project>/
  ses_….json`, each with its `id` and `directory`: still read when the
  database has no answer (an older opencode, or one that never migrated).

Only sessions written since the turn started (less a second) and for the
session's own working directory count; the newest wins. Bounded: one query
per database; one directory listing per project, one small read per
candidate file.

The model a conversation ran (`model`, issue 26), for the CLIs whose
structured output does not name it:

- codex keeps `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl`
  (default `~/.codex`), dated by its local creation time, which its thread
  id (a UUIDv7) carries in its first 48 bits; each `turn_context` line names
  the `model`. The newest one is read from the file's end.
- opencode's database: the newest assistant message's `modelID` in table
  `message` (its `data`), else the session's `model` (`{"id": …}`).

What opencode's subagents spent (issue 42): its `task` tool runs each in a
session of its own (`session.parent_id` names the caller's), whose usage
`run --format json` never prints; each assistant message in `message`
carries its `modelID`, `tokens` (`input`, `output`, `reasoning`, `cache`)
and `cost`, and `time.completed` once it finished.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spexsup.adapters.meter import Meter

HEADER_BYTES = 4096
# opencode holds its database for its own busy_timeout (5 s) at most; a turn's
# end must not wait that long for an id that is only a fallback.
BUSY_SECONDS = 2.0


def _pi(cwd: str, since: float) -> str | None:
    agent = os.environ.get("PI_CODING_AGENT_DIR") or str(Path.home() / ".pi" / "agent")
    slug = "--" + cwd.lstrip("/").replace("/", "-").replace(":", "-") + "--"
    best: tuple[float, str] | None = None
    try:
        entries = list(os.scandir(Path(agent).expanduser() / "sessions" / slug))
    except OSError:
        return None
    for entry in entries:
        if not entry.name.endswith(".jsonl"):
            continue
        try:
            mtime = entry.stat().st_mtime
            if mtime < since - 1 or (best and mtime <= best[0]):
                continue
            with Path(entry.path).open("rb") as f:
                header = json.loads(f.readline(HEADER_BYTES))
        except (OSError, ValueError):
            continue
        if isinstance(header, dict) and header.get("type") == "session" and header.get("id"):
            best = (mtime, str(header["id"]))
    return best[1] if best else None


def _opencode_data() -> Path:
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "opencode"


def _opencode_databases() -> list[Path]:
    """The databases opencode may be using, as its own code picks one."""
    data = _opencode_data()
    named = os.environ.get("OPENCODE_DB")
    if named:
        return [] if named == ":memory:" else [data / named]  # an absolute path stays
    try:
        channels = sorted(p for p in data.glob("opencode-*.db") if p.is_file())
    except OSError:
        channels = []
    return [data / "opencode.db", *channels]


def _opencode_connections() -> Iterator[sqlite3.Connection]:
    """Each of opencode's databases there is, open read-only (never created;
    `timeout` is the busy timeout), closed once the caller moves on."""
    for path in _opencode_databases():
        if not path.is_file():
            continue
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_SECONDS)
        except sqlite3.Error:
            continue
        try:
            yield db
        finally:
            db.close()


def _opencode_db(cwd: str, since: float) -> str | None:
    best: tuple[int, str] | None = None
    for db in _opencode_connections():
        try:
            row = db.execute(
                "SELECT time_updated, id FROM session WHERE directory = ? AND parent_id IS NULL"
                " AND time_updated >= ? ORDER BY time_updated DESC LIMIT 1",
                (cwd, int((since - 1) * 1000)),  # opencode's times are in ms
            ).fetchone()
        except sqlite3.Error:  # locked past the timeout, another schema, not a database
            row = None
        if row and isinstance(row[1], str) and (best is None or row[0] > best[0]):
            best = (int(row[0]), row[1])
    return best[1] if best else None


def _opencode(cwd: str, since: float) -> str | None:
    return _opencode_db(cwd, since) or _opencode_json(cwd, since)


def _opencode_json(cwd: str, since: float) -> str | None:
    root = _opencode_data() / "storage" / "session"
    best: tuple[float, str] | None = None
    try:
        projects = [p.path for p in os.scandir(root) if p.is_dir()]
    except OSError:
        return None
    for project in projects:
        try:
            entries = list(os.scandir(project))
        except OSError:
            continue
        for entry in entries:
            if not (entry.name.startswith("ses_") and entry.name.endswith(".json")):
                continue
            try:
                mtime = entry.stat().st_mtime
                if mtime < since - 1 or (best and mtime <= best[0]):
                    continue
                info = json.loads(Path(entry.path).read_bytes()[:65536])
            except (OSError, ValueError):
                continue
            if isinstance(info, dict) and info.get("directory") == cwd:
                best = (mtime, str(info.get("id") or entry.name[: -len(".json")]))
    return best[1] if best else None


LOOKUPS = {"pi": _pi, "opencode": _opencode}


def _codex_model(thread: str) -> str | None:
    import datetime as dt
    import re

    from spexsup.adapters.outcome import lines_backwards

    m = re.fullmatch(r"([0-9a-f]{8})-([0-9a-f]{4})-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", thread)
    if m is None:
        return None
    created = int(m.group(1) + m.group(2), 16) / 1000
    root = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex") / "sessions"
    for days in (0, -1, 1):  # its local date, or a neighbour's across a zone change
        try:
            day = dt.datetime.fromtimestamp(created) + dt.timedelta(days=days)
            found = sorted((root / day.strftime("%Y/%m/%d")).glob(f"rollout-*-{thread}.jsonl"))
        except (OSError, ValueError, OverflowError):
            continue
        for path in found:
            try:
                for line in lines_backwards(path, 1 << 22):
                    if b'"turn_context"' not in line:
                        continue
                    try:
                        payload = json.loads(line).get("payload")
                    except (ValueError, AttributeError):
                        continue
                    model = payload.get("model") if isinstance(payload, dict) else None
                    if isinstance(model, str) and model:
                        return model
            except OSError:
                continue
    return None


def _opencode_model(session: str) -> str | None:
    for db in _opencode_connections():
        found = _opencode_model_in(db, session)
        if found:
            return found
    return None


def _opencode_model_in(db: sqlite3.Connection, session: str) -> str | None:
    try:
        rows = db.execute(
            "SELECT data FROM message WHERE session_id = ? ORDER BY time_created DESC LIMIT 50",
            (session,),
        ).fetchall()
    except sqlite3.Error:  # an older schema: no message table
        rows = []
    for (data,) in rows:
        try:
            message = json.loads(data)
        except (TypeError, ValueError):
            continue
        if isinstance(message, dict) and message.get("role") == "assistant":
            model = message.get("modelID")
            if isinstance(model, str) and model:
                return model
    try:
        row = db.execute("SELECT model FROM session WHERE id = ?", (session,)).fetchone()
    except sqlite3.Error:
        return None
    if row is None or not isinstance(row[0], str) or not row[0]:
        return None
    try:
        value = json.loads(row[0])
    except ValueError:
        return row[0]
    if isinstance(value, dict):
        model = value.get("id") or value.get("modelID")
        return model if isinstance(model, str) and model else None
    return value if isinstance(value, str) and value else None


MODELS = {"codex": _codex_model, "opencode": _opencode_model}

# A turn's subagent messages read at most: more is a floor, not a stall.
SUBAGENT_MESSAGES = 20000


def opencode_subagents(
    session: str, named: Sequence[str], since: float, until: float, meter: Meter
) -> bool | None:
    """What opencode's subagents (its `task` tool) spent for `session` in
    [since, until] (unix seconds), added to `meter` per model: every
    assistant message of the sessions below it (`session.parent_id`, to any
    depth) and of those the output `named`, created in that span. True: all
    of it was read (every named session found, every message completed);
    False: some was not (a floor); None: no database has the session (none,
    another schema, locked past the busy timeout)."""
    for db in _opencode_connections():
        try:
            if db.execute("SELECT 1 FROM session WHERE id = ?", (session,)).fetchone() is None:
                continue
            return _subagents_in(db, session, named, since, until, meter)
        except sqlite3.Error:
            return None
    return None


def _subagents_in(
    db: sqlite3.Connection,
    session: str,
    named: Sequence[str],
    since: float,
    until: float,
    meter: Meter,
) -> bool:
    wanted = sorted(set(named))
    marks = ",".join("?" * len(wanted))
    seed = f"parent_id = ? OR id IN ({marks})" if wanted else "parent_id = ?"
    below = (
        "WITH RECURSIVE below(id) AS ("
        f" SELECT id FROM session WHERE ({seed}) AND id != ?"
        " UNION SELECT s.id FROM session s JOIN below ON s.parent_id = below.id)"
    )
    seeds = (session, *wanted, session)
    found = {row[0] for row in db.execute(f"{below} SELECT id FROM below", seeds)}
    whole = all(child in found for child in wanted)
    rows = db.execute(
        f"{below} SELECT m.data FROM message m JOIN below ON m.session_id = below.id"
        " WHERE m.time_created >= ? AND m.time_created <= ? LIMIT ?",
        (*seeds, int(since * 1000), int(until * 1000), SUBAGENT_MESSAGES + 1),
    ).fetchall()
    if len(rows) > SUBAGENT_MESSAGES:
        whole, rows = False, rows[:SUBAGENT_MESSAGES]
    for (data,) in rows:
        try:
            message = json.loads(data)
        except (TypeError, ValueError):
            whole = False
            continue
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        meter.metered = True
        tokens = message.get("tokens")
        if not isinstance(tokens, dict):
            whole = False
            continue
        fresh, output, reasoning = meter.counts(tokens, "tokens", "input", "output", "reasoning")
        cache = tokens.get("cache")
        read, write = meter.counts(
            cache if isinstance(cache, dict) else {}, "tokens.cache", "read", "write"
        )
        both = None if output is None or reasoning is None else output + reasoning
        cost = meter.cost(message, "", "cost")
        meter.add(message.get("modelID"), [fresh, both, read, write], cost)
        times = message.get("time")
        if not (isinstance(times, dict) and times.get("completed")):
            whole = False  # still streaming when the run ended: its count may be short
    return whole


def model(harness: str, conversation: str | None) -> str | None:
    """The model `harness`'s conversation ran, from the CLI's own store; None
    when it cannot be told (no store, another schema, a locked database)."""
    find = MODELS.get(harness)
    if find is None or not conversation:
        return None
    try:
        return find(conversation)
    except (OSError, ValueError):
        return None


def lookup(harness: str, cwd: str | None, since: float | None) -> str | None:
    """The id of the newest conversation `harness` stored for `cwd` since `since`."""
    find = LOOKUPS.get(harness)
    if find is None or not cwd or since is None:
        return None
    return find(cwd, since)
