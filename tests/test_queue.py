"""Queued prompts (issue 25, items 1-3): `wake --queue` keeps a prompt while its
session is busy, and the process that records the end launches the next one
(no wake watching), or the next reader if that process died; exactly once."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from conftest import SPEX, Env, harness, retry_until


def slow(env: Env, name: str, seconds: float = 1.5) -> Path:
    """A session whose every turn appends its prompt to a file, then sleeps."""
    log = env.root / f"{name}.order"
    script = f'echo "$0" >> {log}; sleep {seconds}'
    assert env.run("new", name, "--", "bash", "-c", script).returncode == 0
    return log


def wake(env: Env, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    r = env.run("wake", *args, "--json")
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def db(env: Env) -> sqlite3.Connection:
    conn = sqlite3.connect(env.home / "state.db", timeout=5)
    conn.row_factory = sqlite3.Row
    return conn


def turns_of(env: Env, name: str) -> list[sqlite3.Row]:
    with db(env) as conn:
        return conn.execute(
            "SELECT * FROM turns WHERE session = ? ORDER BY started_at", (name,)
        ).fetchall()


def test_three_queued_prompts_run_in_order_with_no_wake_watching(env: Env) -> None:
    log = env.root / "a.order"
    go = env.root / "go"
    # Each turn records its prompt, then works until go exists (held for the first).
    script = f'echo "$0" >> {log}; while [ ! -e {go} ]; do sleep 0.05; done; sleep 0.2'
    assert env.run("new", "a", "--", "bash", "-c", script).returncode == 0
    assert wake(env, "a", "first", "--window", "0.3")[1]["verdict"] == "confirmed"
    for n, prompt in enumerate(("second", "third", "fourth"), start=1):
        code, v = wake(env, "a", "--queue", prompt)
        assert (code, v["verdict"], v["position"], v["turn"]) == (0, "queued", n, None), v
        assert v["queued"].startswith("q") and v["ok"] is True
    listed = json.loads(env.run("queue", "ls", "--json").stdout)
    assert [(e["first_line"], e["position"]) for e in listed] == [
        ("second", 1),
        ("third", 2),
        ("fourth", 3),
    ]
    assert all(e["schema_version"] == 1 and e["created_at_iso"] for e in listed)
    go.touch()
    # Nobody waits or reads: each end's reporter starts the next.
    assert retry_until(lambda: log.exists() and len(log.read_text().split()) == 4, seconds=40)
    assert retry_until(lambda: turns_of(env, "a")[-1]["state"] == "complete", seconds=20)
    assert log.read_text().split() == ["first", "second", "third", "fourth"]
    assert [t["state"] for t in turns_of(env, "a")] == ["complete"] * 4
    assert env.run("queue").stdout.startswith("no queued prompts")
    assert not list((env.home / "queue").glob("*.prompt"))
    kinds = [json.loads(line)["kind"] for line in env.run("events", "--json").stdout.splitlines()]
    assert kinds.count("queued") == 3 and kinds.count("dequeued") == 3


def test_a_prompt_queued_for_a_free_session_launches_at_once(env: Env) -> None:
    """--queue on an idle session is an ordinary wake."""
    slow(env, "a", 0.1)
    code, v = wake(env, "a", "--queue", "now", "--window", "5")
    assert (code, v["verdict"]) == (0, "completed"), v


def test_a_reporter_that_died_before_the_dequeue_leaves_it_to_one_of_five_readers(
    env: Env,
) -> None:
    """The exit reporter records the end and dies before it starts the
    dequeuer: the queued prompt waits for a reader, and five racing readers
    launch it once."""
    fault = {"SPEXSUP_FAULT": "reporter-dies-before-dequeue"}
    log = env.root / "a.order"
    script = f'echo "$0" >> {log}; sleep 1'
    assert env.run("new", "a", "--", "bash", "-c", script, extra=fault).returncode == 0
    assert env.run("wake", "a", "first", "--window", "0.3", extra=fault).returncode == 0
    assert wake(env, "a", "--queue", "second")[1]["verdict"] == "queued"

    def ended_and_still_queued() -> bool:
        with db(env) as conn:
            first = conn.execute("SELECT state FROM turns WHERE session = 'a'").fetchone()
            queued = conn.execute("SELECT count(*) FROM queue").fetchone()[0]
        return first is not None and first[0] == "complete" and queued == 1

    assert retry_until(ended_and_still_queued, seconds=20)
    time.sleep(1.0)  # a reporter that had lived would have launched it by now
    assert len(turns_of(env, "a")) == 1
    readers = [
        subprocess.Popen([SPEX, "ls"], env=env.vars, stdout=subprocess.DEVNULL) for _ in range(5)
    ]
    assert all(r.wait(30) == 0 for r in readers)
    assert retry_until(lambda: len(turns_of(env, "a")) == 2, seconds=20)
    time.sleep(2.0)  # any second launch would have come by now
    assert len(turns_of(env, "a")) == 2
    assert retry_until(lambda: log.exists() and log.read_text().split() == ["first", "second"])
    with db(env) as conn:
        assert conn.execute("SELECT count(*) FROM queue").fetchone()[0] == 0
        dequeued = conn.execute("SELECT count(*) FROM events WHERE kind = 'dequeued'").fetchone()
    assert dequeued[0] == 1


def test_stop_pauses_the_queue_resume_continues_it_and_rm_refuses_it(env: Env) -> None:
    log = slow(env, "a", 3)
    assert wake(env, "a", "first", "--window", "0.3")[1]["verdict"] == "confirmed"
    entry = wake(env, "a", "--queue", "second")[1]["queued"]
    assert env.run("stop", "a", "--grace", "1").returncode == 0
    time.sleep(1.5)
    assert len(turns_of(env, "a")) == 1  # paused: nothing launched while stopped
    assert [e["id"] for e in json.loads(env.run("queue", "ls", "a", "--json").stdout)] == [entry]
    r = env.run("rm", "a")
    assert r.returncode == 3 and "has 1 queued prompt" in r.stderr, r.stderr
    assert env.run("resume", "a").returncode == 0
    assert retry_until(lambda: len(turns_of(env, "a")) == 2, seconds=20)
    assert retry_until(lambda: "second" in log.read_text())
    # Queued again behind a running turn, then removed with the session.
    third = wake(env, "a", "--queue", "third")[1]["queued"]
    assert (env.home / "queue" / f"{third}.prompt").read_bytes() == b"third"
    r = env.run("rm", "a", "--force")
    assert r.returncode == 0, r.stderr
    assert not (env.home / "queue" / f"{third}.prompt").exists()
    with db(env) as conn:
        assert conn.execute("SELECT count(*) FROM queue").fetchone()[0] == 0


def test_queue_rm_and_clear_and_their_refusals(env: Env) -> None:
    # The first turn runs until the test is done: its end would start the
    # next queued prompt (a 5 s turn ended before `queue clear` under load).
    go = env.root / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.05; done"
    assert env.run("new", "a", "--", "bash", "-c", script).returncode == 0
    assert wake(env, "a", "first", "--window", "0.3")[1]["verdict"] == "confirmed"
    one = wake(env, "a", "--queue", "two")[1]["queued"]
    wake(env, "a", "--queue", "three")
    wake(env, "a", "--queue", "four")
    r = env.run("queue", "rm", one.rpartition("-")[2][:4])
    assert r.returncode == 0 and r.stdout.strip() == f"a: removed queued prompt {one}", r
    r = env.run("queue", "rm", "qnothing")
    assert r.returncode == 3 and "no queued prompt 'qnothing'" in r.stderr
    r = env.run("queue", "clear", "nosuch")
    assert r.returncode == 3 and "no session named 'nosuch'" in r.stderr
    r = env.run("queue", "clear", "a")
    assert r.returncode == 0 and r.stdout.strip() == "a: removed 2 queued prompts"
    assert json.loads(env.run("queue", "ls", "--json").stdout) == []
    assert not list((env.home / "queue").glob("*.prompt"))
    assert env.run("stop", "a", "--grace", "1").returncode == 0
    assert len(turns_of(env, "a")) == 1


def test_a_queued_prompt_keeps_its_options(env: Env) -> None:
    """--timeout and --strict given at queue time apply to the turn it becomes."""
    slow(env, "a", 3)
    assert wake(env, "a", "first", "--window", "0.3")[1]["verdict"] == "confirmed"
    v = wake(env, "a", "--queue", "second", "--timeout", "1", "--strict")[1]
    assert v["verdict"] == "queued"
    assert retry_until(
        lambda: len(turns_of(env, "a")) == 2 and turns_of(env, "a")[1]["state"] == "timed-out",
        seconds=30,
    )
    second = turns_of(env, "a")[1]
    assert (second["timeout"], second["strict"]) == (1, 1)


def test_a_bad_queued_wake_changes_nothing(env: Env) -> None:
    slow(env, "a", 3)
    assert env.run("wake", "nosuch", "--queue", "x").returncode == 3
    assert env.run("wake", "a", "--queue").returncode == 2
    assert env.run("wake", "a", "--queue", "x", "--timeout", "soon").returncode == 2
    with db(env) as conn:
        assert conn.execute("SELECT count(*) FROM queue").fetchone()[0] == 0
    assert not (env.home / "queue").exists() or not list((env.home / "queue").iterdir())


def test_a_queued_prompt_waits_out_a_lease_and_starts_when_it_ends(env: Env) -> None:
    log = slow(env, "a", 0.2)
    go = env.root / "go"
    holder = subprocess.Popen(
        [SPEX, "maint", "--stop", "a", "--", harness("until_go.sh")],
        env={**env.vars, "GO": str(go)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert retry_until(
            lambda: json.loads(env.run("maint", "--status", "--json").stdout)["state"] == "active"
        )
        code, v = wake(env, "a", "--queue", "after the lease")
        assert (code, v["verdict"]) == (0, "queued"), v
        time.sleep(0.5)
        assert not log.exists()
    finally:
        go.touch()
        holder.wait(30)
    assert retry_until(lambda: log.exists() and "after" in log.read_text(), seconds=20)


def pipeline(env: Env, rc: int) -> Path:
    """impl works until the test opens its gate (`impl_done`), then exits
    `rc`; review records each prompt it gets. A gate, not a sleep: a loaded
    machine must not end impl's turn before the test looked at the queue."""
    work = f"while [ ! -e {env.root / 'impl.gate'} ]; do sleep 0.05; done; exit {rc}"
    assert env.run("new", "impl", "--", "bash", "-c", work).returncode == 0
    return slow(env, "review", 0.1)


def impl_done(env: Env) -> None:
    (env.root / "impl.gate").touch()


def test_after_launches_the_next_step_when_the_other_turn_completes(env: Env) -> None:
    log = pipeline(env, 0)
    assert wake(env, "impl", "build it", "--window", "0.3")[1]["verdict"] == "confirmed"
    code, v = wake(env, "review", "--after", "impl", "review it")
    assert (code, v["verdict"]) == (0, "queued"), v
    time.sleep(0.5)
    assert not log.exists()  # review is idle, but waits for impl's turn
    listed = json.loads(env.run("queue", "ls", "--json").stdout)
    assert listed[0]["options"]["after"] == "impl" and listed[0]["after_turn"]
    impl_done(env)
    # Nobody watches: impl's end starts review's turn.
    assert retry_until(lambda: log.exists() and log.read_text().split() == ["review", "it"], 30)
    assert retry_until(lambda: turns_of(env, "review")[-1]["state"] == "complete", seconds=20)


def test_after_a_failed_turn_the_next_step_ends_skipped_with_the_cause(env: Env) -> None:
    log = pipeline(env, 3)
    assert wake(env, "impl", "build it", "--window", "0.3")[1]["verdict"] == "confirmed"
    assert wake(env, "review", "--after", "impl", "review it")[1]["verdict"] == "queued"
    impl_done(env)
    assert retry_until(lambda: bool(turns_of(env, "review")), seconds=30)
    (turn,) = turns_of(env, "review")
    assert (turn["state"], turn["cause"]) == ("skipped", "after"), dict(turn)
    assert turn["error"] == "after: impl ended failed"
    assert not log.exists()
    r = env.run("wait", "review")
    assert r.returncode == 1 and "skipped (after): after: impl ended failed" in r.stdout, r.stdout
    kinds = [json.loads(line)["kind"] for line in env.run("events", "--json").stdout.splitlines()]
    assert "skipped" in kinds
    assert json.loads(env.run("queue", "ls", "--json").stdout) == []


def test_after_any_launches_whatever_the_end(env: Env) -> None:
    log = pipeline(env, 3)
    assert wake(env, "impl", "build it", "--window", "0.3")[1]["verdict"] == "confirmed"
    assert wake(env, "review", "--after-any", "impl", "look")[1]["verdict"] == "queued"
    impl_done(env)
    assert retry_until(lambda: log.exists() and log.read_text().split() == ["look"], seconds=30)


def test_after_a_turn_that_already_ended_decides_at_once(env: Env) -> None:
    log = pipeline(env, 0)
    impl_done(env)
    assert wake(env, "impl", "x", "--window", "5")[1]["verdict"] == "completed"
    code, v = wake(env, "review", "--after", "impl", "now", "--window", "5")
    assert (code, v["verdict"]) == (0, "completed"), v
    assert log.read_text().split() == ["now"]
    assert env.run("new", "bad", "--", "bash", "-c", "exit 4").returncode == 0
    assert wake(env, "bad", "x", "--window", "5")[1]["verdict"] == "failed"
    code, v = wake(env, "review", "--after", "bad", "never")
    assert (code, v["verdict"], v["error"]) == (1, "skipped", "after: bad ended failed"), v
    assert log.read_text().split() == ["now"]


def test_after_refusals_change_nothing(env: Env) -> None:
    pipeline(env, 0)
    cases = [
        (["--after", "nosuch", "x"], 3, "no session named 'nosuch'"),
        (["--after", "impl", "x"], 3, "session 'impl' has no turn to wait for"),
        (["--after", "review", "x"], 2, "cannot wait for its own turn"),
        (["--after", "impl", "--after-any", "impl", "x"], 2, "choose one"),
    ]
    for args, code, says in cases:
        r = env.run("wake", "review", *args)
        assert r.returncode == code and says in r.stderr, (args, r.stderr)
    with db(env) as conn:
        assert conn.execute("SELECT count(*) FROM queue").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 0


def test_a_queued_wake_waits_behind_earlier_ones_even_when_the_session_is_free(env: Env) -> None:
    """First come, first served: with a prompt still queued for a session that
    is free (its end's reporter died before it launched it), `--queue` joins
    the queue behind it instead of jumping it."""
    fault = {"SPEXSUP_FAULT": "reporter-dies-before-dequeue"}
    log, gate = env.root / "a.order", env.root / "a.gate"
    # The first turn runs until the gate opens: on a loaded machine a sleep
    # ended before `second` was queued, and `second` then simply ran.
    script = f'echo "$0" >> {log}; [ "$0" != first ] || until [ -e {gate} ]; do sleep 0.05; done'
    assert env.run("new", "a", "--", "bash", "-c", script, extra=fault).returncode == 0
    assert env.run("wake", "a", "first", "--window", "0.3").returncode == 0
    assert wake(env, "a", "--queue", "second")[1]["verdict"] == "queued"
    gate.touch()

    def free_with_one_queued() -> bool:
        with db(env) as conn:
            state = conn.execute("SELECT state FROM sessions").fetchone()[0]
            queued = conn.execute("SELECT count(*) FROM queue").fetchone()[0]
        return bool(state == "idle" and queued == 1)

    assert retry_until(free_with_one_queued, seconds=20)
    code, v = wake(env, "a", "--queue", "third")
    assert (code, v["verdict"]) == (0, "queued"), v  # behind second, which it launched
    assert retry_until(lambda: log.read_text().split() == ["first", "second", "third"], 30)


def test_a_queued_prompt_runs_on_the_tmux_server_its_session_lives_on(env: Env) -> None:
    """The turn's end starts the queued prompt in a detached process: that
    process keeps the user's TMUX_TMPDIR (it used to drop every TMUX* name),
    so it reaches the session's own server, never a new one in the default
    socket directory (a home `recreated` there, out of the user's sight)."""
    log, gate = env.root / "q.order", env.root / "q.gate"
    script = f'while [ ! -e {gate} ]; do sleep 0.05; done; echo "$0" >> {log}'
    assert env.run("new", "q", "--", "bash", "-c", script).returncode == 0
    assert wake(env, "q", "first", "--window", "0.3")[1]["verdict"] == "confirmed"
    assert wake(env, "q", "--queue", "second")[1]["verdict"] == "queued"
    gate.touch()
    assert retry_until(lambda: log.exists() and log.read_text().split() == ["first", "second"], 30)
    assert env.run("wait", "q", "--timeout", "30").returncode == 0
    kinds = [json.loads(line)["kind"] for line in env.run("events", "--json").stdout.splitlines()]
    assert "pane-recreated" not in kinds, kinds
    # No server under the socket's name outside the test's TMUX_TMPDIR.
    default = {k: v for k, v in env.vars.items() if k != "TMUX_TMPDIR"}
    stray = subprocess.run(
        ["tmux", "-L", env.socket, "list-sessions"], env=default, capture_output=True, text=True
    )
    if stray.returncode == 0:
        subprocess.run(["tmux", "-L", env.socket, "kill-server"], env=default, check=False)
    assert stray.returncode != 0, f"a second tmux server: {stray.stdout}"


def test_a_launcher_started_before_the_end_waits_for_it_and_launches_once(env: Env) -> None:
    """The exit reporter starts the dequeuer before it records the end
    (`dequeuer.start_early`): told which turn to wait for, it launches
    nothing while that turn runs, then the next prompt once, whoever else
    (the reporter's own early one) races it."""
    log = env.root / "a.order"
    go = env.root / "go"
    script = f'echo "$0" >> {log}; while [ ! -e {go} ]; do sleep 0.05; done'
    assert env.run("new", "a", "--", "bash", "-c", script).returncode == 0
    code, first = wake(env, "a", "first", "--window", "0.3")
    assert (code, first["verdict"]) == (0, "confirmed"), first
    assert wake(env, "a", "--queue", "second")[1]["verdict"] == "queued"
    early = subprocess.Popen(
        [SPEX, "internal", "dequeue", "a"],
        env={**env.vars, "SPEXSUP_DEQUEUE_AFTER": first["turn"]},
    )
    try:
        time.sleep(1.0)  # a launcher that did not wait would have launched it by now
        assert early.poll() is None
        assert len(turns_of(env, "a")) == 1
        go.touch()
        assert early.wait(60) == 0
        assert retry_until(lambda: len(turns_of(env, "a")) == 2, seconds=20)
        assert retry_until(lambda: log.read_text().split() == ["first", "second"])
        time.sleep(1.0)  # any second launch would have come by now
        assert len(turns_of(env, "a")) == 2
        with db(env) as conn:
            assert conn.execute("SELECT count(*) FROM queue").fetchone()[0] == 0
    finally:
        if early.poll() is None:
            early.kill()


KEEP_PROBE = """
import sys
from spexsup.adapters import dequeuer
from spexsup.core.spex import Spex
from spexsup.state import ledger
from spexsup.turn import queue
from spexsup.turn.admit import Verdict

spawned, launched = [], []
dequeuer.start = lambda home, name, after=None: spawned.append(name)


def start(spex, request):  # admission takes the entry; the turn ends in our hands
    entry = queue.entries(spex, ("a",))[0]
    with spex.store.tx() as db:
        ledger.drop_queued(db, entry.id, "a")
    launched.append(entry.first_line)
    if len(launched) == 1:
        dequeuer.start_waiting(spex.store.db, spex.home)  # what its end's record does
    return Verdict("a", None, "completed", rc=0)


queue.start = start
queue.dequeue(Spex.open(), "a", keep=sys.argv[1] == "keep")
print(launched, spawned)
"""


def test_a_launcher_handed_its_turns_end_launches_the_next_itself(env: Env) -> None:
    """`spex internal dequeue` (keep): the end of the turn it launched,
    recorded in its own process (its confirmation saw it), hands it the
    next prompt, which it launches itself: no second launcher's Python start
    between a short turn and the next. A plain dequeue (a wake's) starts the
    launcher instead, as before."""
    fault = {"SPEXSUP_FAULT": "reporter-dies-before-dequeue"}  # nobody else launches
    go = env.root / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.05; done"
    assert env.run("new", "a", "--", "bash", "-c", script, extra=fault).returncode == 0
    assert env.run("wake", "a", "first", "--window", "0.3", extra=fault).returncode == 0
    for prompt in ("second", "third", "fourth", "fifth"):
        assert wake(env, "a", "--queue", prompt)[1]["verdict"] == "queued"
    go.touch()
    assert retry_until(lambda: turns_of(env, "a")[-1]["state"] == "complete", seconds=20)
    for mode, launched, spawned in (
        ("keep", "['second', 'third']", "[]"),
        ("plain", "['fourth']", "['a']"),
    ):
        r = subprocess.run(
            [sys.executable, "-c", KEEP_PROBE, mode],
            env=env.vars,
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.stdout.strip() == f"{launched} {spawned}", (mode, r.stdout, r.stderr)
