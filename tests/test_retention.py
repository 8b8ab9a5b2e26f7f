"""Retention and disk use (issue 17): `spex prune`, `spex du`, the writers' prune.

Histories are made through the library (admission, then the exit recorded by
the reporter's compare-and-swap), not by running thousands of turns; ages
come from moving `started_at` back, as time would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import SPEX, Env, retry_until

from spexsup import durations
from spexsup.adapters.procs import own_identity
from spexsup.conductors.waves import Wave
from spexsup.config import Retention
from spexsup.core import retention, sessions
from spexsup.core.spex import Spex
from spexsup.pane import report
from spexsup.turn.admit import admit
from spexsup.turn.request import WakeRequest

DAY = 86400.0


def history(spex: Spex, name: str, count: int, *, age_days: float = 0.0) -> list[str]:
    """`count` finished turns of `name`, oldest first, the first started
    `age_days` ago and each a second after the one before."""
    made = []
    for _ in range(count):
        _, turn, directory, _, _ = admit(spex, WakeRequest(name, b"hello", fresh=True))
        (directory / "output.log").write_bytes(b"x" * 100)
        report.record_exit(spex.store, name, turn, 0, directory)
        made.append(turn)
    start = time.time() - age_days * DAY
    with spex.store.tx() as db:
        for i, turn in enumerate(made):
            db.execute("UPDATE turns SET started_at = ? WHERE id = ?", (start + i, turn))
    return made


def rows(spex: Spex, name: str) -> set[str]:
    query = "SELECT id FROM turns WHERE session = ?"
    return {r[0] for r in spex.store.db.execute(query, (name,))}


def dirs(env: Env, name: str) -> set[str]:
    base = env.home / "turns" / name
    return {p.name for p in base.iterdir()} if base.is_dir() else set()


def du_sb(path: Path, *exclude: str) -> int:
    out = subprocess.run(
        ["du", "-sb", *[f"--exclude={e}" for e in exclude], str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[0])


def test_prune_by_count_and_age_keeps_what_is_referenced(env: Env, tmp_path: Path) -> None:
    spex = env.spex()
    for name in ("a", "b", "c"):
        sessions.create(spex, name, sessions.Spec(harness="demo", cwd=str(tmp_path)))
    old_a = history(spex, "a", 1200, age_days=200)
    old_b = history(spex, "b", 30, age_days=120)
    new_c = history(spex, "c", 20, age_days=1)
    # A wave still running refers to two old turns of a; a finished wave to one.
    running = Wave.create(spex, ["a"], b"p")
    done = Wave.create(spex, ["a"], b"q")
    with spex.store.tx() as db:
        db.execute("UPDATE waves SET state = 'complete', ended_at = ? WHERE id = ?", (1.0, done.id))
        db.executemany(
            "INSERT INTO wave_turns (turn, wave) VALUES (?, ?)",
            [(old_a[0], running.id), (old_a[1], running.id), (old_a[2], done.id)],
        )
    # A turn of c runs now (admitted by this live process, never ended).
    _, running_turn, _, _, _ = admit(spex, WakeRequest("c", b"go", fresh=True))
    config = env.home / "config.toml"
    config.write_text("[retention]\nkeep_turns = 100\nkeep_days = 90\n")

    dry = env.run("prune", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    would = json.loads(dry.stdout)
    assert would["dry_run"] is True
    assert would["sessions"] == {"a": 1197, "b": 29}
    assert rows(spex, "a") == set(old_a) and dirs(env, "a") == set(old_a)

    done_run = env.run("prune", "--json")
    assert done_run.returncode == 0, done_run.stderr
    pruned = json.loads(done_run.stdout)
    assert pruned["sessions"] == would["sessions"]
    assert pruned["bytes_freed"] == would["bytes_freed"]
    # a: everything is older than 90 days; kept: its last turn and the running wave's.
    assert rows(spex, "a") == {old_a[-1], old_a[0], old_a[1]} == dirs(env, "a")
    # b: older than 90 days but its last turn stays.
    assert rows(spex, "b") == {old_b[-1]} == dirs(env, "b")
    # c: young, under keep_turns, and its running turn untouched.
    assert rows(spex, "c") == {*new_c, running_turn} == dirs(env, "c")
    left = {r[0] for r in spex.store.db.execute("SELECT turn FROM wave_turns")}
    assert left == {old_a[0], old_a[1]}  # the finished wave's pruned turn took its link along

    # By count: keep_turns = 5 on c leaves the 4 newest finished turns and the running one.
    config.write_text("[retention]\nkeep_turns = 5\n")
    out = env.run("prune", "--session", "c")
    assert out.returncode == 0, out.stderr
    assert "removed 16 turns" in out.stdout and "c: 16 turns" in out.stdout
    assert rows(spex, "c") == {*new_c[-4:], running_turn} == dirs(env, "c")


def test_a_lease_keeps_its_sessions(env: Env, tmp_path: Path) -> None:
    spex = env.spex()
    for name in ("held", "free"):
        sessions.create(spex, name, sessions.Spec(harness="demo", cwd=str(tmp_path)))
        history(spex, name, 5, age_days=100)
    pid, token = own_identity()
    with spex.store.tx() as db:
        db.execute(
            "UPDATE lease SET state = 'active', epoch = 1, holder_pid = ?, holder_token = ?,"
            " deadline = ?, scope = ? WHERE id = 1",
            (pid, token, time.time() + 600, json.dumps(["held"])),
        )
    out = env.run("prune", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sessions"] == {"free": 4}
    assert len(rows(spex, "held")) == 5


def test_dry_run_changes_nothing(env: Env, tmp_path: Path) -> None:
    spex = env.spex()
    sessions.create(spex, "a", sessions.Spec(harness="demo", cwd=str(tmp_path)))
    history(spex, "a", 40, age_days=100)
    before = subprocess.run(
        ["find", str(env.home), "-printf", "%p %s %T@\n"], capture_output=True, text=True
    ).stdout
    db_before = [tuple(r) for r in spex.store.db.execute("SELECT * FROM turns ORDER BY id")]
    out = env.run("prune", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("would remove 39 turns, 0 waves, 0 events; would free ")
    after = subprocess.run(
        ["find", str(env.home), "-printf", "%p %s %T@\n"], capture_output=True, text=True
    ).stdout
    keep = [ln for ln in before.splitlines() if "state.db" not in ln]
    assert keep == [ln for ln in after.splitlines() if "state.db" not in ln]
    assert db_before == [tuple(r) for r in spex.store.db.execute("SELECT * FROM turns ORDER BY id")]


def test_bad_input_is_one_line_and_changes_nothing(env: Env, tmp_path: Path) -> None:
    spex = env.spex()
    sessions.create(spex, "a", sessions.Spec(harness="demo", cwd=str(tmp_path)))
    made = history(spex, "a", 10, age_days=100)
    for args, code in (
        (["--older-than", "3x"], 2),
        (["--older-than", "-1d"], 2),
        (["--session", "no:such"], 2),
        (["--session", "ghost"], 3),
        (["--session", "a", "--session", "ghost"], 3),
    ):
        out = env.run("prune", *args)
        assert out.returncode == code, (args, out.stderr)
        assert out.stderr.startswith("spex: ") and out.stderr.count("\n") == 1, out.stderr
        assert "Traceback" not in out.stderr
    (env.home / "config.toml").write_text("[retention]\nkeep_turns = -1\n")
    out = env.run("prune")
    assert out.returncode == 1
    assert out.stderr == (
        f"spex: {env.home / 'config.toml'}:2: field 'retention.keep_turns'"
        " must be an integer between 1 and 1000000000\n"
    )
    assert rows(spex, "a") == set(made) == dirs(env, "a")


def test_a_prune_killed_between_rows_and_dirs_leaves_every_command_working(
    env: Env, tmp_path: Path
) -> None:
    spex = env.spex()
    sessions.create(spex, "a", sessions.Spec(harness="demo", cwd=str(tmp_path)))
    made = history(spex, "a", 30, age_days=100)
    wave = Wave.create(spex, ["a"], b"p")
    with spex.store.tx() as db:
        db.execute("UPDATE waves SET state = 'complete', ended_at = 1 WHERE id = ?", (wave.id,))
        db.execute("INSERT INTO wave_turns (turn, wave) VALUES (?, ?)", (made[3], wave.id))
    flag = tmp_path / "paused"
    proc = subprocess.Popen(
        [SPEX, "prune"],
        env={**env.vars, retention.PAUSE_ENV: str(flag)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert retry_until(flag.exists, 30)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(10)
    # The rows went in one transaction; every directory is still there.
    assert rows(spex, "a") == {made[-1]}
    assert dirs(env, "a") == set(made)
    assert spex.store.db.execute("SELECT count(*) FROM wave_turns").fetchone()[0] == 0

    for args in (["ls"], ["show", "a"], ["log", "a"], ["waves"], ["wave", wave.id], ["doctor"]):
        out = env.run(*args)
        assert out.returncode == 0, (args, out.stdout, out.stderr)
    gone = env.run("log", "a", "--turn", made[0])
    assert gone.returncode == 3 and "no turn" in gone.stderr
    use = json.loads(env.run("du", "--json").stdout)
    assert use["orphans"]["count"] == 29
    assert use["sessions"][0]["turns"] == 1 and use["sessions"][0]["dirs"] == 30
    woke = env.run("wake", "a", "after the crash")
    assert woke.returncode == 0, woke.stderr
    assert env.run("wait", "a", "--timeout", "30").returncode == 0

    out = env.run("prune", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["orphans"] == 29
    assert dirs(env, "a") == rows(spex, "a")
    assert json.loads(env.run("du", "--json").stdout)["orphans"]["count"] == 0


def test_du_matches_du_sb(env: Env, tmp_path: Path) -> None:
    spex = env.spex()
    for name, n in (("a", 12), ("b", 3)):
        sessions.create(spex, name, sessions.Spec(harness="demo", cwd=str(tmp_path)))
        history(spex, name, n, age_days=100)
    big = env.home / "turns" / "a" / rows(spex, "a").pop() / "output.log"
    big.write_bytes(os.urandom(300_000))
    Wave.create(spex, ["a"], b"a prompt of some length" * 100)
    out = env.run("du", "--json")
    assert out.returncode == 0, out.stderr
    use = json.loads(out.stdout)
    by_name = {s["name"]: s for s in use["sessions"]}
    assert by_name["a"]["bytes"] == du_sb(env.home / "turns" / "a")
    assert by_name["b"]["bytes"] == du_sb(env.home / "turns" / "b")
    assert by_name["a"]["log_bytes"] >= 300_000
    assert use["waves"]["bytes"] == du_sb(env.home / "waves")
    assert use["turns_bytes"] == du_sb(env.home / "turns")
    # The database's -wal and -shm come and go with connections: compare without them.
    assert use["total_bytes"] - use["database_bytes"] == du_sb(env.home, "state.db*")
    assert use["prunable"]["turns"] == 11 + 2
    text = env.run("du")
    assert text.returncode == 0 and "prunable  13 turns" in text.stdout


def test_writers_prune_at_most_once_an_hour(env: Env, tmp_path: Path) -> None:
    spex = env.spex()
    sessions.create(spex, "a", sessions.Spec(harness="demo", cwd=str(tmp_path)))
    history(spex, "a", retention.AUTO_TURNS + 50, age_days=100)
    with spex.store.tx() as db:
        db.execute("DELETE FROM settings WHERE key = 'pruned_at'")
    before = len(rows(spex, "a")) + 1
    assert env.run("wake", "a", "hi").returncode == 0
    # The wake pruned, after printing its verdict, within its bounds in
    # turns and time (whole batches: the budget stops it between them).
    left = len(rows(spex, "a"))
    assert before - retention.AUTO_TURNS <= left <= before - retention.AUTO_BATCH
    assert (before - left) % retention.AUTO_BATCH == 0
    assert dirs(env, "a") == rows(spex, "a")
    assert env.run("wait", "a", "--timeout", "30").returncode == 0
    assert env.run("wake", "a", "again").returncode == 0
    assert env.run("wait", "a", "--timeout", "30").returncode == 0
    assert len(rows(spex, "a")) == left + 1  # not due again within the hour
    assert retention.maybe_prune(env.home) is None
    with spex.store.tx() as db:
        db.execute("UPDATE settings SET value = '0' WHERE key = 'pruned_at'")
    (env.home / "config.toml").write_text("[retention]\nauto = false\n")
    assert retention.maybe_prune(env.home) is None
    assert len(rows(spex, "a")) == left + 1


def test_policy_defaults() -> None:
    assert Retention() == Retention(
        keep_turns=500, keep_days=90, keep_waves=1000, keep_events=100_000, auto=True
    )
    assert durations.parse("30d", "--older-than", maximum=None) == 30 * DAY
    assert durations.parse("12h", "--older-than", maximum=None) == 12 * 3600


def test_a_turn_id_taken_this_second_is_never_given_twice(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ids are the second plus 24 random bits: fan-outs repeat one now and
    # then. The kernel's randomness is made to repeat itself here, so the
    # second admission in a second draws the id the first one holds.
    spex = env.spex()
    sessions.create(spex, "a", sessions.Spec(harness="demo", cwd=str(tmp_path)))
    real = os.urandom
    repeats = [0]
    drawn = [b""]

    def repeating(n: int) -> bytes:
        if n == 3 and repeats[0] < 2:
            repeats[0] += 1
            return drawn[0]
        return real(n)

    for attempt in range(20):  # until both admissions fall in one second
        # A value of its own each time: an attempt that crossed a second
        # boundary left its ids behind, which the next must not draw again.
        repeats[0], drawn[0] = 0, bytes([0xAB, 0xCD, attempt])
        monkeypatch.setattr(os, "urandom", repeating)
        second = int(time.time())
        first = history(spex, "a", 1)[0]
        again = history(spex, "a", 1)[0]
        monkeypatch.setattr(os, "urandom", real)
        if int(time.time()) == second and first.startswith(again.partition("-")[0]):
            break
    assert first.endswith("-" + drawn[0].hex()) and again != first, (first, again)
    assert rows(spex, "a") >= {first, again}
