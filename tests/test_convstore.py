"""Conversation ids from a CLI's own session store: opencode's SQLite database
(>= 1.2) and its older JSON files, real files and real SQLite throughout."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAKES, Env
from test_harness import argv_log
from test_turns import show, wake_json

from spexsup.adapters import convstore


def real_schema() -> list[str]:
    """opencode's own `project` and `session` tables, as the fake opencode makes them."""
    return (FAKES / "opencode.sql").read_text().split(";")[:-1]


@pytest.mark.parametrize("store", ["sqlite", "json"])
def test_a_turn_that_dies_before_its_id_still_resumes(env: Env, store: str) -> None:
    log = env.root / "argv"
    r = env.run(
        "new", "o", "--harness", "opencode", "--cwd", str(env.root),
        "--env", "FAKE_OPENCODE_ONLINE=1", "--env", f"FAKE_OPENCODE_STORE={store}",
        "--env", f"FAKE_ARGV_LOG={log}",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    code, v = wake_json(env, "o", "go [crash]", "--window", "10")
    assert code == 1 and v["rc"] == 137, v
    assert env.run("log", "o").stdout.strip() == ""  # it printed nothing
    data = Path(env.vars["HOME"]) / ".local" / "share" / "opencode"
    assert (data / "opencode.db").exists() == (store == "sqlite")
    assert (data / "storage").exists() == (store == "json")
    conversation = show(env, "o")["harness_session_id"]
    assert conversation and conversation.startswith("ses_"), "the id comes from the store"
    code, v = wake_json(env, "o", "go on", "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v
    resumed = argv_log(log)[1]
    assert resumed[resumed.index("--session") + 1] == conversation
    assert show(env, "o")["turn"]["resumed"] == conversation


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("OPENCODE_DB", raising=False)
    root = tmp_path / "data" / "opencode"
    root.mkdir(parents=True)
    yield root


def make_db(path: Path, *, wal: bool = True) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"PRAGMA journal_mode = {'WAL' if wal else 'DELETE'}")
    for ddl in real_schema():
        db.execute(ddl)
    db.execute(
        "INSERT INTO project (id, worktree, time_created, time_updated, sandboxes)"
        " VALUES ('global', '/', 0, 0, '[]')"
    )
    return db


def add(db: sqlite3.Connection, sid: str, directory: str, updated: float, **kw: str) -> None:
    ms = int(updated * 1000)
    db.execute(
        "INSERT INTO session (id, project_id, parent_id, slug, directory, title, version,"
        " time_created, time_updated) VALUES (?, 'global', ?, 's', ?, 't', '1.18.33', ?, ?)",
        (sid, kw.get("parent"), directory, ms, ms),
    )


def write_json(data: Path, sid: str, directory: str) -> None:
    folder = data / "storage" / "session" / "global"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{sid}.json").write_text(json.dumps({"id": sid, "directory": directory}))


def test_the_newest_session_of_the_cwd_since_the_turn_began(data: Path) -> None:
    db = make_db(data / "opencode.db")
    now = time.time()
    add(db, "ses_old", "/w", now - 30)  # before the turn (ms, not s: 30 000 ms earlier)
    add(db, "ses_other_dir", "/elsewhere", now + 2)
    add(db, "ses_mine", "/w", now + 1)
    add(db, "ses_subagent", "/w", now + 3, parent="ses_mine")  # a task's child session
    assert convstore.lookup("opencode", "/w", now) == "ses_mine"
    assert convstore.lookup("opencode", "/w", now + 10) is None
    add(db, "ses_newer", "/w", now + 4)
    assert convstore.lookup("opencode", "/w", now) == "ses_newer"
    # Read while opencode still holds its connection: the rows are in the WAL.
    assert (data / "opencode.db-wal").stat().st_size > 0
    db.close()


def test_opencode_db_and_channel_databases(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    add(make_db(data / "opencode-beta.db"), "ses_beta", "/w", now)
    assert convstore.lookup("opencode", "/w", now) == "ses_beta"
    add(make_db(data / "mine.db"), "ses_named", "/w", now)
    monkeypatch.setenv("OPENCODE_DB", "mine.db")  # relative to opencode's data directory
    assert convstore.lookup("opencode", "/w", now) == "ses_named"
    elsewhere = data.parent / "abs.db"
    add(make_db(elsewhere), "ses_abs", "/w", now)
    monkeypatch.setenv("OPENCODE_DB", str(elsewhere))
    assert convstore.lookup("opencode", "/w", now) == "ses_abs"
    monkeypatch.setenv("OPENCODE_DB", ":memory:")
    assert convstore.lookup("opencode", "/w", now) is None


def test_the_json_layout_is_the_fallback(data: Path) -> None:
    now = time.time()
    write_json(data, "ses_json", "/w")
    assert convstore.lookup("opencode", "/w", now) == "ses_json"  # no database at all
    assert not (data / "opencode.db").exists()  # read-only: never created
    add(make_db(data / "opencode.db"), "ses_db", "/other", now)
    assert convstore.lookup("opencode", "/w", now) == "ses_json"  # the database has none
    add(sqlite3.connect(data / "opencode.db", isolation_level=None), "ses_db2", "/w", now)
    assert convstore.lookup("opencode", "/w", now) == "ses_db2"


@pytest.mark.parametrize("content", [b"not a database at all" * 100, b""])
def test_a_database_that_cannot_be_read_falls_back(data: Path, content: bytes) -> None:
    (data / "opencode.db").write_bytes(content)
    write_json(data, "ses_json", "/w")
    assert convstore.lookup("opencode", "/w", time.time()) == "ses_json"


def test_another_schema_falls_back(data: Path) -> None:
    db = sqlite3.connect(data / "opencode.db")
    db.execute("CREATE TABLE session (id TEXT, directory TEXT)")  # no parent_id, no times
    db.commit()
    write_json(data, "ses_json", "/w")
    assert convstore.lookup("opencode", "/w", time.time()) == "ses_json"


def hold_exclusive(path: Path, seconds: float) -> threading.Event:
    """A busy writer: a second connection's exclusive lock, held `seconds`."""
    locked = threading.Event()

    def run() -> None:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        db.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(seconds)
        db.execute("COMMIT")
        db.close()

    threading.Thread(target=run, daemon=True).start()
    assert locked.wait(10)
    return locked


def test_a_busy_database_is_waited_for_within_the_busy_timeout(data: Path) -> None:
    # Rollback-journal mode, where a writer's exclusive lock does block readers.
    now = time.time()
    add(make_db(data / "opencode.db", wal=False), "ses_db", "/w", now)
    write_json(data, "ses_json", "/w")
    hold_exclusive(data / "opencode.db", 0.5)
    started = time.monotonic()
    assert convstore.lookup("opencode", "/w", now) == "ses_db"
    assert 0.3 < time.monotonic() - started < convstore.BUSY_SECONDS
    # Held past the busy timeout: no answer from the database, the JSON one.
    hold_exclusive(data / "opencode.db", convstore.BUSY_SECONDS + 1.5)
    started = time.monotonic()
    assert convstore.lookup("opencode", "/w", now) == "ses_json"
    assert convstore.BUSY_SECONDS - 0.2 < time.monotonic() - started < convstore.BUSY_SECONDS + 1
