"""The event log through the installed `spex`: the sequence of every
transition, `spex events` (filters, JSON Lines, follow across a restart),
retention, and the status line."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import SPEX, Env, harness, retry_until

from spexsup.core.spex import open_store
from spexsup.state import events
from spexsup.state.store import Store


def log(env: Env, *args: str) -> list[dict[str, Any]]:
    r = env.run("events", "--json", *args)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def kinds(env: Env, session: str) -> list[str]:
    return [e["kind"] for e in log(env, "--session", session)]


def status(env: Env) -> str:
    r = env.run("status-line")
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def until_go(env: Env, name: str) -> Path:
    go = env.root / f"go-{name}"
    assert env.run("new", name, "--env", f"GO={go}", "--", harness("until_go.sh")).returncode == 0
    return go


def test_wake_to_complete_is_launched_confirmed_completed(env: Env) -> None:
    assert status(env) == "spex: 0 running, 0 ok, 0 failed"
    go = until_go(env, "a")
    assert status(env) == "spex: 0 running, 1 ok, 0 failed"
    assert env.run("wake", "a", "x", "--window", "0.3").returncode == 0
    assert status(env) == "spex: 1 running, 0 ok, 0 failed"
    go.touch()
    assert env.run("wait", "a").returncode == 0
    assert kinds(env, "a") == ["created", "launched", "confirmed", "completed"]
    done = log(env, "--kind", "completed")[0]
    turn = json.loads(env.run("show", "a", "--json").stdout)["turn"]["id"]
    assert (done["session"], done["turn"], done["rc"], done["schema_version"]) == ("a", turn, 0, 1)
    assert status(env) == "spex: 0 running, 1 ok, 0 failed"
    # Ids are monotonic and every line is one JSON document.
    ids = [e["id"] for e in log(env)]
    assert ids == sorted(ids) == list(range(1, len(ids) + 1))


def test_failed_startup_stop_resume_rm(env: Env) -> None:
    assert env.run("new", "b", "--", harness("exit7.sh")).returncode == 0
    assert env.run("wake", "b", "x", "--window", "60").returncode == 1
    assert kinds(env, "b") == ["created", "launched", "failed"]
    failed = log(env, "--kind", "failed")[0]
    assert failed["rc"] == 7 and "boom: something broke" in failed["error"]
    assert status(env) == "spex: 0 running, 0 ok, 1 failed: b"
    assert env.run("status-line", "--format", "{failed}|{attention}").stdout == "1|b\n"

    assert env.run("new", "c", "--", harness("sleeper.sh")).returncode == 0
    assert env.run("wake", "c", "x", "--window", "0.3").returncode == 0
    assert env.run("stop", "c", "--grace", "1").returncode == 0
    assert env.run("resume", "c").returncode == 0
    assert env.run("rm", "c").returncode == 0
    assert kinds(env, "c") == [
        *["created", "launched", "confirmed", "aborted", "stopped", "resumed", "removed"]
    ]
    aborted = log(env, "--session", "c", "--kind", "aborted")[0]
    assert aborted["error"] == "stopped by spex stop" and aborted["turn"]


def test_lost_turn_and_home_recreated(env: Env) -> None:
    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    woke = json.loads(env.run("wake", "a", "x", "--window", "0.3", "--json").stdout)
    env.tmux("kill-server")
    # `spex events` only reads the log; a reader that reconciles (ls) records the loss.
    assert retry_until(
        lambda: env.run("ls").returncode == 0 and "lost" in kinds(env, "a"), seconds=30
    )
    assert env.run("up", "--all").returncode == 0
    assert kinds(env, "a")[-2:] == ["lost", "pane-recreated"]
    lost = log(env, "--kind", "lost")[0]
    assert lost["turn"] == woke["turn"] and "never recorded how it ended" in lost["error"]


def test_home_recreated_is_pane_recreated_and_old_events_still_read(env: Env) -> None:
    """The event `home-recreated` is `pane-recreated` (DESIGN §24): `--kind`
    takes either name, and an event an older spex stored under the old name
    is printed as stored and found by both."""
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    import sqlite3

    db = sqlite3.connect(env.home / "state.db")
    with db:  # as an older spex recorded it
        db.execute(
            "INSERT INTO events (at, kind, session) VALUES (?, 'home-recreated', 'a')",
            (time.time(),),
        )
    db.close()
    env.tmux("kill-session", "-t", "=a")
    assert env.run("up", "a").returncode == 0
    assert kinds(env, "a") == ["created", "home-recreated", "pane-recreated"]
    for name in ("pane-recreated", "home-recreated"):
        assert [e["kind"] for e in log(env, "--kind", name)] == ["home-recreated", "pane-recreated"]
    assert "home-recreated a" in env.run("events").stdout
    assert "pane-recreated" in env.run("events", "--help").stdout


def test_wave_and_lease_events(env: Env) -> None:
    for name in ("a", "b"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    r = env.run("fanout", "a", "b", "-m", "hi", "--window", "0.3", "--wait", "--json")
    assert r.returncode == 0, r.stderr
    wave = json.loads(r.stdout)["id"]
    started, ended = log(env, "--kind", "wave-started"), log(env, "--kind", "wave-ended")
    assert [e["payload"]["wave"] for e in started + ended] == [wave, wave]
    assert ended[0]["payload"]["state"] == "complete" and ended[0]["payload"]["counts"]["ok"] == 2
    assert started[0]["id"] < ended[0]["id"]
    r = env.run("maint", "--stop", "a", "--", SPEX, "maint-op", "stop", "a")
    assert r.returncode == 0, r.stderr
    lease = [e["kind"] for e in log(env) if e["kind"].startswith("lease") or e["kind"] == "stopped"]
    assert lease == ["lease-acquired", "stopped", "lease-released"]


def test_a_dead_lease_holder_is_recovered(env: Env) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    holder = subprocess.Popen(
        [SPEX, "maint", "--stop", "a", "--ttl", "30", "--", "sleep", "300"],
        env=env.vars,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert retry_until(lambda: bool(log(env, "--kind", "lease-acquired")), seconds=30)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert retry_until(
        lambda: env.run("ls").returncode == 0 and bool(log(env, "--kind", "lease-recovered")),
        seconds=30,
    )
    assert log(env, "--kind", "lease-recovered")[0]["error"] == "holder died"


def test_follow_sees_another_processs_events_in_order_across_a_restart(env: Env) -> None:
    def follower(since: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [SPEX, "events", "--follow", "--json", "--since", str(since)],
            env=env.vars,
            stdout=subprocess.PIPE,
            text=True,
        )

    def read(proc: subprocess.Popen[str], count: int) -> list[int]:
        assert proc.stdout is not None
        return [json.loads(proc.stdout.readline())["id"] for _ in range(count)]

    first = follower(0)
    for name in ("a", "b", "c"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    seen = read(first, 3)
    first.send_signal(signal.SIGINT)
    assert first.wait(10) == 130
    # Events committed while no one follows are picked up by --since.
    assert env.run("stop", "a").returncode == 0
    assert env.run("rm", "b").returncode == 0
    second = follower(seen[-1])
    try:
        seen += read(second, 2)
        assert env.run("resume", "a").returncode == 0
        seen += read(second, 1)
    finally:
        second.kill()
        second.wait()
    assert seen == list(range(1, 7))
    assert [e["kind"] for e in log(env)][3:] == ["stopped", "removed", "resumed"]


def test_follow_is_prompt(env: Env) -> None:
    """An event reaches a follower soon after its commit (inotify, not a poll)."""
    proc = subprocess.Popen(
        [SPEX, "events", "--follow", "--json"], env=env.vars, stdout=subprocess.PIPE, text=True
    )
    try:
        assert env.run("new", "a", "--harness", "demo").returncode == 0
        assert proc.stdout is not None
        proc.stdout.readline()
        lags = []
        for _ in range(5):
            assert env.run("stop", "a").returncode == 0
            event = json.loads(proc.stdout.readline())
            lags.append(time.time() - event["at"])
            assert env.run("resume", "a").returncode == 0
            proc.stdout.readline()
        # Generous for a loaded machine (the coarse re-read is 2 s): the best
        # of five; bench/events.py measures it.
        assert min(lags) < 1.0, lags
    finally:
        proc.kill()
        proc.wait()


def test_bad_input_changes_nothing(env: Env) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    before = log(env)
    for args, code in [
        (("--since", "-1"), 2),
        (("--since", "x"), 2),
        (("--kind", "nope"), 2),
        (("--session", "a.b"), 2),
    ]:
        r = env.run("events", *args)
        assert r.returncode == code, (args, r.stderr)
        assert r.stdout == "" and r.stderr.startswith("spex: ") and len(r.stderr.splitlines()) == 1
    r = env.run("status-line", "--format", "{nope}")
    assert r.returncode == 2 and r.stderr.startswith("spex: unknown field {nope}")
    assert log(env) == before
    assert log(env, "--session", "zz") == []


def test_retention_keeps_the_newest_and_never_reuses_an_id(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(events, "KEEP", 50)
    monkeypatch.setattr(events, "PRUNE_EVERY", 10)
    store = Store(tmp_path / "state")
    for n in range(125):
        with store.tx() as db:
            events.record(db, "created", session=f"s{n}")
    ids = [r[0] for r in store.db.execute("SELECT id FROM events ORDER BY id")]
    assert ids[-1] == 125 and len(ids) <= 60 and ids == list(range(ids[0], 126))
    store.db.execute("DELETE FROM events")
    with store.tx() as db:
        assert events.record(db, "created") == 126


def test_a_rolled_back_transition_leaves_no_event(tmp_path: Path) -> None:
    store = open_store(tmp_path / "state")
    with pytest.raises(RuntimeError), store.tx() as db:
        events.record(db, "created", session="x")
        raise RuntimeError("refused")
    assert store.db.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    assert not (tmp_path / "state" / "events" / "tick").exists()


def test_status_line_reads_no_sqlite_and_is_fast(env: Env) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        r = subprocess.run([SPEX, "status-line"], env=env.vars, capture_output=True, check=True)
        best = min(best, time.perf_counter() - started)
    assert r.stdout == b"spex: 0 running, 1 ok, 0 failed\n"
    # A status bar never opens the database, so never waits on its lock.
    (env.home / "state.db").chmod(0)
    try:
        assert env.run("status-line").stdout == "spex: 0 running, 1 ok, 0 failed\n"
    finally:
        (env.home / "state.db").chmod(0o600)
    assert best < 0.5, best  # bench/events.py gives the real number


def test_help_pages(env: Env) -> None:
    for command in (["events"], ["hooks", "test"], ["status-line"], ["hooks"]):
        page = env.run(*command, "--help", extra={"COLUMNS": "80"}).stdout
        assert "Examples:" in page and "..." not in page.split("Options:")[1], command
        assert max(len(line) for line in page.splitlines()) <= 80, command
    assert "--since ID" in env.run("events", "--help").stdout
    assert "--no-hooks" in env.run("--help").stdout


def test_wait_on_a_terminal_prints_each_end_as_it_happens(env: Env) -> None:
    import pexpect

    gos = {name: until_go(env, name) for name in ("a", "b", "c")}
    for name in gos:
        assert env.run("wake", name, "x", "--window", "0.3").returncode == 0
    child = pexpect.spawn(SPEX, ["wait", "a", "b", "c"], env=env.vars, encoding="utf-8", timeout=30)
    child.expect(r"0/3 ended · 0 failed · \dm\d\ds")
    gos["b"].touch()
    child.expect(r"b: turn \S+ complete rc=0\r\n")
    child.expect(r"1/3 ended · 0 failed")
    gos["a"].touch()
    gos["c"].touch()
    child.expect(pexpect.EOF)
    ends = [ln for ln in child.before.split("\r\n") if ": turn " in ln]
    assert sorted(ln.split(":")[0].split("\x1b[K")[-1] for ln in ends) == ["a", "c"]
    child.close()
    assert child.exitstatus == 0


def test_wait_off_a_terminal_is_plain_lines_in_end_order(env: Env) -> None:
    gos = {name: until_go(env, name) for name in ("a", "b")}
    for name in gos:
        assert env.run("wake", name, "x", "--window", "0.3").returncode == 0
    proc = subprocess.Popen(
        [SPEX, "wait", "a", "b"], env=env.vars, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    gos["b"].touch()
    first = proc.stdout.readline()
    assert first.startswith("b: turn ") and first.endswith(" complete rc=0\n")
    gos["a"].touch()
    rest = proc.stdout.read()
    assert proc.wait(30) == 0
    assert rest.startswith("a: turn ") and "\x1b" not in first + rest and "\r" not in rest


def test_a_reboot_records_interrupted(env: Env) -> None:
    boot = env.root / "boot_id"
    boot.write_text("boot-one\n")
    extra = {"SPEXSUP_BOOT_ID_FILE": str(boot)}
    assert env.run("new", "a", "--", harness("sleeper.sh"), extra=extra).returncode == 0
    assert env.run("wake", "a", "x", "--window", "0.3", extra=extra).returncode == 0
    env.tmux("kill-server")
    boot.write_text("boot-two\n")
    assert env.run("show", "a", extra=extra).returncode == 0  # a reconciling reader
    assert kinds(env, "a") == ["created", "launched", "confirmed", "interrupted"]
    assert log(env, "--kind", "interrupted")[0]["error"] == "machine rebooted"
    assert status(env) == "spex: 0 running, 0 ok, 1 failed: a"


def test_a_wake_interrupted_before_launch_is_aborted_never_launched(env: Env) -> None:
    from test_races import Held

    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    wake = Held(env, "respawn-pane", "wake", "a", "x", "--window", "30")
    wake.proc.send_signal(signal.SIGINT)
    wake.proc.communicate(timeout=60)
    wake.release()
    assert wake.proc.returncode == 130
    assert kinds(env, "a") == ["created", "aborted"]
    assert log(env, "--kind", "aborted")[0]["error"] == "spex wake was interrupted before launch"


def test_a_launch_fenced_by_a_stop_is_the_stops_abort_only(env: Env) -> None:
    from test_races import Held

    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    wake = Held(env, "respawn-pane", "wake", "a", "x", "--window", "30")
    assert env.run("stop", "a", "--grace", "1").returncode == 0
    code, _, err = wake.finish()
    assert code == 3, err
    # One abort (the stop's), and no launch: the fenced respawn never ran.
    assert kinds(env, "a") == ["created", "aborted", "stopped"]
    assert log(env, "--kind", "aborted")[0]["error"] == "stopped by spex stop"
    assert status(env) == "spex: 0 running, 0 ok, 0 failed"


def test_a_home_recreated_by_a_wake(env: Env) -> None:
    until_go(env, "a")
    env.tmux("kill-server")
    assert env.run("wake", "a", "x", "--window", "0.3").returncode == 0
    assert kinds(env, "a") == ["created", "pane-recreated", "launched", "confirmed"]
    assert env.run("stop", "a", "--grace", "1").returncode == 0


def test_a_reader_never_sees_a_torn_summary(tmp_path: Path) -> None:
    """The summary is overwritten in place (no rename: see statusline); a
    reader racing the writer sees the old summary or the new one, never a mix."""
    import threading

    from spexsup.adapters import statusline

    store = open_store(tmp_path / "state")
    name = "a-session-with-a-rather-long-name-" + "x" * 20
    with store.tx() as db:
        db.execute(
            "INSERT INTO sessions (name, harness, cwd, created_at) VALUES (?, 'demo', '/', 0)",
            (name,),
        )
        events.record(db, "created", session=name)
    seen: set[tuple[str, str, str]] = set()
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            v = statusline.read(str(tmp_path / "state"), tries=1000)
            seen.add((v["ok"], v["failed"], v["attention"]))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for n in range(300):
            with store.tx() as db:
                db.execute("UPDATE sessions SET state = ?", ("failed" if n % 2 == 0 else "idle",))
                events.record(db, "failed" if n % 2 == 0 else "completed", session=name)
    finally:
        done.set()
        thread.join()
    assert seen <= {("1", "0", ""), ("0", "1", name)}, seen
    assert statusline.unseal(b"ok=1\nsum=00000000\n") is None
    sealed = statusline.seal(b"ok=1\n")
    assert statusline.unseal(sealed + b"\n\n") == b"ok=1\n"


def test_since_an_id_that_was_pruned_says_so(env: Env) -> None:
    """`events --since N` skipped pruned ids silently: a follower resuming
    after a prune took the gap for quiet."""
    for name in ("a", "b", "c", "d"):
        assert env.run("new", name, "--", "true").returncode == 0  # one `created` each
    (env.home / "config.toml").write_text("[retention]\nkeep_events = 2\n")
    assert env.run("prune").returncode == 0
    kept = [e["id"] for e in log(env)]
    assert kept == [3, 4]
    r = env.run("events", "--since", "0")
    assert r.returncode == 0
    assert r.stderr == "spex: events 1..2 were pruned (the oldest kept is 3)\n"
    assert [line.split()[0] for line in r.stdout.splitlines()] == ["#3", "#4"]
    r = env.run("events", "--since", "1", "--json")
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert lines[0] == {
        "schema_version": 1, "pruned": {"first": 2, "last": 2}, "note": "event 2 was pruned",
    }  # fmt: skip
    assert [e["id"] for e in lines[1:]] == [3, 4]
    # Nothing requested was pruned: nothing said.
    for args in (["--since", "2"], ["--since", "9"], []):
        r = env.run("events", *args)
        assert r.returncode == 0 and r.stderr == "", args


def test_tail_n_and_since_a_time(env: Env) -> None:
    """`spex events -n N` prints the last N events of those asked for (then
    follows with -f); `--since` takes an ISO time as well as an id or a
    duration ago."""
    for name in ("a", "b", "c"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    assert env.run("stop", "b").returncode == 0

    def kinds(*args: str) -> list[tuple[str, str]]:
        r = env.run("events", "--json", *args)
        assert r.returncode == 0, r.stderr
        return [(e["kind"], e["session"]) for e in map(json.loads, r.stdout.splitlines())]

    every = kinds()
    assert kinds("-n", "2") == every[-2:]
    assert kinds("--tail", "1", "--session", "a") == [("created", "a")]
    assert kinds("-n", "1", "--kind", "created") == [("created", "c")]
    assert kinds("-n", "0") == [] and kinds("-n", "99") == every
    last = json.loads(env.run("events", "--json", "-n", "1").stdout)
    assert kinds("-n", "5", "--since", str(last["id"])) == []  # the later start wins
    assert kinds("--since", "2000-01-01T00:00:00Z") == every
    assert kinds("--since", "2999-01-01T00:00:00+00:00") == []
    from datetime import datetime

    local_now_ish = datetime.fromtimestamp(time.time() + 3600).isoformat(timespec="seconds")
    assert kinds("--since", local_now_ish) == []  # no zone: local time, as `date` prints
    for bad in (["-n", "-1"], ["--since", "2026-13-45T99:00Z"], ["--since", "yesterday"]):
        r = env.run("events", *bad)
        assert r.returncode == 2 and r.stderr.startswith("spex: ") and "Traceback" not in r.stderr
        assert r.stderr.count("\n") == 1, (bad, r.stderr)
