"""A limit on running turns (issue 25, item 5) and the queue's defaults:
`max_running` in config.toml bounds the home's running turns (a wake beyond
it is refused, or queued with --queue), `fanout --max-running N` bounds a
wave's legs (the rest are `queued` in the wave document and launch as legs
end), `fanout --after` makes every leg wait for another session's turn, and
`queue = true` (config.toml, or a session's own) makes --queue the default."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

from conftest import SPEX, Env, harness, retry_until


def configure(env: Env, text: str) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text(text)


def wake(env: Env, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    r = env.run("wake", *args, "--json")
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def running(env: Env) -> int:
    """Turns the store says are starting or running, now."""
    conn = sqlite3.connect(env.home / "state.db", timeout=5)
    try:
        (count,) = conn.execute(
            "SELECT count(*) FROM turns WHERE state IN ('starting', 'running')"
        ).fetchone()
    finally:
        conn.close()
    return int(count)


def timed(env: Env, name: str, seconds: float, gate: Path | None = None) -> Path:
    """A session whose turns write their start and end times, then sleep (after
    waiting for the file `gate`, when given)."""
    log = env.root / "spans"
    now = "$(date +%s.%N)"
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done; " if gate else ""
    script = f'echo "start {now}" >> {log}; {wait}sleep {seconds}; echo "end {now}" >> {log}'
    assert env.run("new", name, "--", "bash", "-c", script).returncode == 0
    return log


def most_at_once(log: Path) -> int:
    """The largest number of turns that ran at the same time, from their own times."""
    moments = []
    for line in log.read_text().splitlines():
        kind, at = line.split()
        moments.append((float(at), 1 if kind == "start" else -1))
    # An end and a start at the same instant: the end first.
    moments.sort(key=lambda m: (m[0], m[1]))
    now = peak = 0
    for _, step in moments:
        now += step
        peak = max(peak, now)
    return peak


class Sampler:
    """Counts the store's running turns every 20 ms, in a thread, for the peak."""

    def __init__(self, env: Env) -> None:
        self.env, self.peak, self.samples = env, 0, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, running(self.env))
            self.samples += 1
            time.sleep(0.02)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(5)


def test_max_running_across_a_fanout_of_20_legs_with_4(env: Env) -> None:
    names = [f"leg{i:02d}" for i in range(20)]
    # The first four legs hold until every other leg was admitted: under load a
    # leg that ended early let the 5th start at once instead of queueing.
    go = env.root / "go"
    for name in names:
        log = timed(env, name, 0.6, gate=go)
    with Sampler(env) as sampler:
        fanout = subprocess.Popen(
            [SPEX, "fanout", *names, "-m", "go", "--max-running", "4", "--wait", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env.vars,
        )

        def queued_now() -> int:
            return len(json.loads(env.run("queue", "ls", "--json").stdout))

        try:
            assert retry_until(lambda: queued_now() == 16, 120), queued_now()
            go.touch()
            out, err = fanout.communicate(timeout=180)
        finally:
            fanout.kill()
            fanout.wait()
    r = subprocess.CompletedProcess(fanout.args, fanout.returncode, out, err)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["state"] == "complete" and doc["pacing"]["max_running"] == 4, doc
    assert [leg["turn_state"] for leg in doc["legs"]] == ["complete"] * 20
    # Never more than 4 at once: by the turns' own clocks, and by sampling the store.
    assert most_at_once(log) <= 4, log.read_text()
    assert len(log.read_text().splitlines()) == 40
    assert sampler.samples > 20 and 1 <= sampler.peak <= 4, (sampler.samples, sampler.peak)
    # 16 legs waited: each was queued, then launched by the end of another.
    queued = [leg for leg in doc["legs"] if leg.get("queued")]
    assert len(queued) == 16 and all(leg["verdict"] in ("confirmed", "completed") for leg in queued)
    kinds = [json.loads(line)["kind"] for line in env.run("events", "--json").stdout.splitlines()]
    assert kinds.count("queued") == 16 and kinds.count("dequeued") == 16
    assert json.loads(env.run("queue", "ls", "--json").stdout) == []


def test_the_wave_document_shows_queued_legs_and_a_removed_one_fails(env: Env) -> None:
    go = env.root / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.05; done"
    for name in ("a", "b", "c"):
        assert env.run("new", name, "--", "bash", "-c", script).returncode == 0
    r = env.run("fanout", "a", "b", "c", "-m", "x", "--max-running", "1", "--window", "0.3")
    assert r.returncode == 0, r.stdout + r.stderr
    counted = "3 legs: 0 complete · 0 failed · 0 skipped · 1 running · 2 queued"
    assert counted in r.stdout and r.stdout.count(": queued q") == 2, r.stdout
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    assert doc["state"] == "running"
    assert [leg["verdict"] for leg in doc["legs"]].count("queued") == 2
    assert "+1 queued" in env.run("ls").stdout
    # One queued leg removed: it fails with the reason, the other still waits.
    entries = json.loads(env.run("queue", "ls", "--json").stdout)
    assert env.run("queue", "rm", entries[0]["id"]).returncode == 0
    gone = entries[0]["session"]
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    (leg,) = [leg for leg in doc["legs"] if leg["session"] == gone]
    assert leg["verdict"] == "failed" and "removed before it launched" in leg["error"], leg
    go.touch()
    r = env.run("wait", "a", "b", "c", timeout=60)
    assert retry_until(
        lambda: json.loads(env.run("wave", "last", "--json").stdout)["state"] == "partial", 30
    )
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    done = {leg["session"]: leg["turn_state"] for leg in doc["legs"]}
    assert done[gone] is None and list(done.values()).count("complete") == 2, doc["legs"]
    # The removed leg never launched: it counts failed.
    assert "3 legs: 2 complete · 1 failed · 0 skipped · 0 running" in env.run("wave", "last").stdout


def test_a_queued_leg_whose_launcher_died_before_its_word_reads_confirmed(env: Env) -> None:
    """The end of a queued leg's turn can be recorded before its launcher
    writes the leg's verdict (it still confirms), or the launcher dies in
    between: the leg read `queued` beside its complete turn (CI caught a
    fan-out printing it). Its end proves its start: `confirmed`."""
    # Whichever process launches b's queued prompt (the one a's end starts)
    # inherits the fault: it dies between its launch and its word.
    dies = {"SPEXSUP_FAULT": "launcher-dies-before-its-word"}
    go = env.root / "go"
    hold = f"while [ ! -e {go} ]; do sleep 0.05; done"
    assert env.run("new", "a", "--", "bash", "-c", hold, extra=dies).returncode == 0
    assert env.run("new", "b", "--", "bash", "-c", "exit 0", extra=dies).returncode == 0
    configure(env, "max_running = 1\n")
    assert wake(env, "a", "hold", "--window", "0.3")[1]["verdict"] == "confirmed"
    r = env.run("fanout", "b", "-m", "x", "--window", "0.3", "--json", extra=dies)
    assert r.returncode == 0, r.stdout + r.stderr
    wave = json.loads(r.stdout)["id"]
    assert [leg["verdict"] for leg in json.loads(r.stdout)["legs"]] == ["queued"]
    go.touch()
    # Read from the store itself: a spex reader could start a launcher of its own.
    assert retry_until(lambda: state_of(env, "b") == "complete", 30)
    doc = json.loads(env.run("wave", wave, "--json").stdout)
    (leg,) = [leg for leg in doc["legs"] if leg["session"] == "b"]
    seen = (leg["verdict"], leg["turn_state"], doc["state"])
    assert seen == ("confirmed", "complete", "complete"), leg
    ended = [e for e in doc["history"] if e["event"] == "leg-ended" and e["session"] == "b"]
    assert [e["verdict"] for e in ended] == ["confirmed"], doc["history"]


def state_of(env: Env, name: str) -> str | None:
    """The session's latest turn's state, from the store itself (a spex
    reader would launch a free session's queued prompt)."""
    conn = sqlite3.connect(env.home / "state.db", timeout=5)
    try:
        row = conn.execute(
            "SELECT state FROM turns WHERE session = ? ORDER BY started_at DESC LIMIT 1", (name,)
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else str(row[0])


def test_max_running_in_config_refuses_a_wake_or_queues_it(env: Env) -> None:
    configure(env, "max_running = 1\n")
    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    record = env.root / "b.record"
    assert env.run("new", "b", "--", "bash", "-c", f'echo "$0" >> {record}').returncode == 0
    assert wake(env, "a", "work", "--window", "0.3")[1]["verdict"] == "confirmed"
    r = env.run("wake", "b", "now")
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stderr.startswith("spex: 1 turn of this home already running, the limit")
    assert "(max_running = 1)" in r.stderr and "--queue" in r.stderr
    assert running(env) == 1  # the refusal changed nothing
    code, v = wake(env, "b", "--queue", "later")
    assert (code, v["verdict"], v["waits"]) == (0, "queued", "a free slot (max_running = 1)"), v
    time.sleep(0.5)
    assert not record.exists()  # b is idle, but the home is full
    # a's end (a stop records it) frees the slot: b's prompt goes.
    assert env.run("stop", "a").returncode == 0
    assert retry_until(lambda: record.exists() and record.read_text().split() == ["later"], 30)
    r = env.run("wait", "b")
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_wave_leg_that_meets_the_homes_limit_is_queued_not_refused(env: Env) -> None:
    configure(env, "max_running = 2\n")
    for name in ("a", "b", "c"):
        log = timed(env, name, 0.5)
    r = env.run("fanout", "a", "b", "c", "-m", "go", "--wait", "--json", timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["state"] == "complete" and sum(1 for leg in doc["legs"] if leg.get("queued")) == 1
    assert most_at_once(log) <= 2


def test_fanout_after_launches_every_leg_once_the_other_turn_completes(env: Env) -> None:
    # impl works until the legs are queued behind it (a gate, not a sleep:
    # a loaded machine must not end it before the fan-out looked).
    gate = env.root / "impl.gate"
    work = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    assert env.run("new", "impl", "--", "bash", "-c", work).returncode == 0
    record = env.root / "record"
    for name in ("r1", "r2"):
        script = f'echo "{name} $0" >> {record}'
        assert env.run("new", name, "--", "bash", "-c", script).returncode == 0
    assert wake(env, "impl", "build", "--window", "0.3")[1]["verdict"] == "confirmed"
    fan = subprocess.Popen(
        [SPEX, "fanout", "r1", "r2", "--after", "impl", "-m", "review", "--wait"],
        env=env.vars, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        queued = lambda: len(json.loads(env.run("queue", "ls", "--json").stdout)) == 2  # noqa: E731
        assert retry_until(queued, 30)
    finally:
        gate.touch()
    out, err = fan.communicate(timeout=60)
    assert fan.returncode == 0, out + err
    assert sorted(record.read_text().splitlines()) == ["r1 review", "r2 review"]
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    assert doc["state"] == "complete" and doc["pacing"]["after"] == "impl"
    assert all(leg.get("queued") for leg in doc["legs"])


def test_fanout_after_a_failed_turn_skips_every_leg(env: Env) -> None:
    assert env.run("new", "impl", "--", "bash", "-c", "sleep 1; exit 3").returncode == 0
    record = env.root / "record"
    for name in ("r1", "r2"):
        assert env.run("new", name, "--", "bash", "-c", f"echo x >> {record}").returncode == 0
    assert wake(env, "impl", "build", "--window", "0.3")[1]["verdict"] == "confirmed"
    r = env.run("fanout", "r1", "r2", "--after", "impl", "-m", "review", "--wait", timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert not record.exists()
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    assert doc["state"] == "failed"
    assert [leg["turn_state"] for leg in doc["legs"]] == ["skipped", "skipped"], doc["legs"]
    assert all(leg["error"] == "after: impl ended failed" for leg in doc["legs"]), doc["legs"]
    # --after-any launches them whatever the end.
    assert wake(env, "impl", "again", "--window", "0.3")[1]["verdict"] == "confirmed"
    r = env.run("fanout", "r1", "r2", "--after-any", "impl", "-m", "look", "--wait", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert record.read_text().split() == ["x", "x"]


def test_limit_and_after_refusals_change_nothing(env: Env) -> None:
    for name in ("a", "b"):
        assert env.run("new", name, "--", "true").returncode == 0
    cases = [
        (["fanout", "a", "-m", "x", "--max-running", "0"], 2, "invalid --max-running 0"),
        (["fanout", "a", "-m", "x", "--max-running", "many"], 2, "'many' is not a valid int"),
        (["fanout", "a", "-m", "x", "--after", "a"], 2, "cannot wait for its own turn"),
        (["fanout", "a", "-m", "x", "--after", "b", "--after-any", "b"], 2, "choose one"),
        (["fanout", "a", "-m", "x", "--after", "b"], 3, "session 'b' has no turn to wait for"),
        (["fanout", "a", "-m", "x", "--after", "nope"], 3, "no session named 'nope'"),
        (["fanout", "a", "-m", "x", "--after", "../x"], 2, "invalid"),
    ]
    for args, code, words in cases:
        r = env.run(*args)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("spex: ") and words in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert env.run("waves").stdout.startswith("no waves"), env.run("waves").stdout
    for text, field in (("max_running = 0", "max_running"), ("queue = 3", "queue")):
        configure(env, text + "\n")
        r = env.run("wake", "a", "x")
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert f"field '{field}' must be" in r.stderr, r.stderr


def test_queue_true_in_config_and_per_session_makes_queue_the_default(env: Env) -> None:
    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    assert env.run("new", "s", "--queue", "--", harness("sleeper.sh")).returncode == 0
    for name in ("a", "s"):
        assert wake(env, name, "first", "--window", "0.3")[1]["verdict"] == "confirmed"
    # The session's own default: it queues; --no-queue refuses as before.
    code, v = wake(env, "s", "second")
    assert (code, v["verdict"], v["waits"]) == (0, "queued", "the session's turn"), v
    assert env.run("wake", "s", "--no-queue", "third").returncode == 3
    shown = env.run("show", "s").stdout
    assert "queue" in shown and "yes (a wake queues when busy)" in shown, shown
    assert json.loads(env.run("show", "s", "--json").stdout)["queue"] is True
    # a has none: busy refuses, until config.toml says queue = true.
    assert env.run("wake", "a", "second").returncode == 3
    configure(env, "queue = true\n")
    code, v = wake(env, "a", "second")
    assert (code, v["verdict"]) == (0, "queued"), v
    assert env.run("wake", "a", "--no-queue", "third").returncode == 3
    # spex edit turns a session's default off (and says so).
    configure(env, "")
    assert env.run("new", "t", "--queue", "--", harness("sleeper.sh")).returncode == 0
    r = env.run("edit", "t", "--no-queue")
    assert r.returncode == 0 and "queue yes -> no" in r.stdout, r.stdout + r.stderr
    assert wake(env, "t", "first", "--window", "0.3")[1]["verdict"] == "confirmed"
    assert env.run("wake", "t", "second").returncode == 3
    listed = json.loads(env.run("ls", "--json").stdout)
    assert {e["name"]: e["queued"] for e in listed} == {"a": 1, "s": 1, "t": 0}
    assert "+1 queued" in env.run("ls").stdout
    top = [line for line in env.run("top").stdout.splitlines() if line.startswith("s ")]
    assert len(top) == 1 and "1 queued" in top[0], top


def test_wait_waits_for_the_prompts_queued_behind_the_turn(env: Env) -> None:
    record, go = env.root / "record", env.root / "go"
    # The first turn runs until both prompts are queued (a 0.5 s turn ended
    # before them under load, and the second was no longer queued).
    script = f'echo "$0" >> {record}; while [ ! -e {go} ]; do sleep 0.05; done'
    assert env.run("new", "a", "--", "bash", "-c", script).returncode == 0
    assert wake(env, "a", "one", "--window", "0.2")[1]["verdict"] == "confirmed"
    for prompt in ("two", "three"):
        assert wake(env, "a", "--queue", prompt)[1]["verdict"] == "queued"
    go.touch()
    r = env.run("wait", "a", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # It returned at the last queued prompt's end, not the first turn's.
    assert record.read_text().split() == ["one", "two", "three"]
    assert json.loads(env.run("queue", "ls", "--json").stdout) == []
    # A stopped session's queue is paused: wait reports the end it has.
    assert env.run("new", "b", "--", harness("sleeper.sh")).returncode == 0
    assert wake(env, "b", "one", "--window", "0.2")[1]["verdict"] == "confirmed"
    assert wake(env, "b", "--queue", "two")[1]["verdict"] == "queued"
    assert env.run("stop", "b").returncode == 0
    r = env.run("wait", "b", timeout=30)
    assert r.returncode == 1 and "aborted" in r.stdout, r.stdout + r.stderr
    # Nothing ran and nothing queued: still refused.
    assert env.run("new", "c", "--", "true").returncode == 0
    r = env.run("wait", "c")
    assert r.returncode == 3 and "has no turn to wait for" in r.stderr
