"""The state database damaged or lost under a home that has sessions: a
malformed state.db is named by `spex doctor`, and an emptied, deleted or
unreadable one is refused while turns/ or the home's tmux server holds
sessions, changing nothing. Real homes, real SQLite files broken for real."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from conftest import Env, harness, retry_until
from test_turns import wake_json


def _home_with_sessions(env: Env) -> None:
    for name in ("a", "b"):
        assert env.run("new", name, "--", harness("exit0.sh")).returncode == 0
    code, v = wake_json(env, "b", "hi")
    assert code == 0 and v["verdict"] == "completed", v
    # The reporter's last word in the turn dir: nothing of the turn moves on.
    outcome = env.home / "turns" / "b" / v["turn"] / "outcome"
    assert retry_until(lambda: outcome.read_bytes().startswith(b"exit:"))


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


def _checkpoint(db: Path) -> None:
    """Everything into the main file, the -wal emptied: its pages are the state."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _one_line(r: object, code: int) -> str:
    stderr = str(getattr(r, "stderr", ""))
    assert getattr(r, "returncode", None) == code, r
    assert stderr.startswith("spex: ") and stderr.count("\n") == 1, stderr
    assert "internal error" not in stderr and "Traceback" not in stderr
    return stderr


def test_doctor_fails_on_a_malformed_state_database_and_says_what_to_do(env: Env) -> None:
    _home_with_sessions(env)
    ok = json.loads(env.run("doctor", "--json").stdout)
    (check,) = [c for c in ok["checks"] if c["name"] == "state database"]
    assert check["ok"] and "quick_check ok" in check["detail"], check
    db = env.home / "state.db"
    _checkpoint(db)
    conn = sqlite3.connect(db)
    pages = [r[0] for r in conn.execute("SELECT rootpage FROM sqlite_master WHERE type='table'")]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    roots = conn.execute(
        "SELECT rootpage FROM sqlite_master WHERE name IN ('sessions', 'turns')"
    ).fetchall()
    conn.close()
    assert len(pages) > 10
    # Garbage over the pages of the sessions and turns tables (page 1, the
    # header and schema, stays readable: the database still opens).
    with db.open("r+b") as f:
        for (root,) in roots:
            f.seek((root - 1) * size)
            f.write(b"\xde\xad\xbe\xef" * (size // 4))
    r = env.run("ls")
    assert "malformed" in _one_line(r, 1) and "spex doctor says what to do" in r.stderr
    d = env.run("doctor")
    assert d.returncode == 1, d
    (line,) = [x for x in d.stdout.splitlines() if "state database" in x]
    assert line.startswith(f"FAIL  state database: {db} is damaged: "), line
    assert "restore state.db from a backup" in line and ".recover" in line, line
    doc = json.loads(env.run("doctor", "--json").stdout)
    assert doc["ok"] is False
    (check,) = [c for c in doc["checks"] if c["name"] == "state database"]
    assert not check["ok"] and check["required"] and "\n" not in check["detail"], check
    # Its schema opened, a table of it gone: named too.
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE wake_keys")
    conn.close()
    doc = json.loads(env.run("doctor", "--json").stdout)
    (check,) = [c for c in doc["checks"] if c["name"] == "state database"]
    assert not check["ok"] and "the schema lacks wake_keys" in check["detail"], check


def test_an_emptied_state_database_is_refused_while_sessions_live(env: Env) -> None:
    _home_with_sessions(env)
    db = env.home / "state.db"
    panes = env.tmux("list-panes", "-a", "-F", "#{session_name} #{pane_pid} #{@spex_owner}")
    assert panes.returncode == 0 and len(panes.stdout.splitlines()) == 2
    with db.open("r+b") as f:
        f.truncate(0)
    before = _tree(env.home)
    for args in (
        ("ls",),
        ("new", "a", "--", harness("exit0.sh")),
        ("new", "c", "--", harness("exit0.sh")),
        ("doctor",),
    ):
        r = env.run(*args)
        line = _one_line(r, 1)
        assert "the state of 2 sessions is missing: a, b" in line, (args, line)
        assert f"({db}: it is empty)" in line and "restore state.db from a backup" in line
        assert f"kill-session -t =NAME) and move {env.home}/turns aside" in line
        # Nothing changed: the files (the -wal SQLite would delete), the panes.
        assert _tree(env.home) == before, args
        again = env.tmux("list-panes", "-a", "-F", "#{session_name} #{pane_pid} #{@spex_owner}")
        assert again.stdout == panes.stdout, args
    # Unreadable (not a database; no -wal to read its pages from), or gone:
    # the same refusal.
    for leftover in env.home.glob("state.db-*"):
        leftover.unlink()
    db.write_bytes(b"not a database, " * 512)
    line = _one_line(env.run("new", "a", "--", harness("exit0.sh")), 1)
    assert "the state of 2 sessions is missing: a, b" in line and "file is not a database" in line
    for leftover in env.home.glob("state.db*"):
        leftover.unlink()
    line = _one_line(env.run("ls"), 1)
    assert f"missing: a, b ({db}: it is gone)" in line and not db.exists()
    # Only the home's tmux server holding one: still refused.
    turns = env.home / "turns"
    turns.rename(env.root / "turns.aside")
    line = _one_line(env.run("ls"), 1)
    assert "the state of 2 sessions is missing: a, b" in line
    # Given up as the hint says: a fresh home.
    assert env.tmux("kill-server").returncode == 0
    r = env.run("ls", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == [], r.stderr
