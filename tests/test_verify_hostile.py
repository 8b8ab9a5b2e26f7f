"""Verified verdicts under fire (DESIGN §16): checks written to break the
pane step and `spex verify`, and turns whose wrapper or tmux server dies
while their check runs. Real tmux, real processes, real git repositories."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
from conftest import Env, retry_until
from test_verify import agent, git_repo, turn_of


def test_a_multi_line_check_is_quoted_by_its_output_not_by_its_own_lines(env: Env) -> None:
    """A check of several lines (a TOML multi-line string, `--verify
    $'make lint\\nmake test'`) once headed verify.log with all its lines: the
    failure's last lines quoted the command's rest as if the check had said it."""
    repo = git_repo(env)
    agent(env, "a", repo)
    check = "true\ntest -e nothing"
    r = env.run("wake", "a", "x", "--verify", check, "--window", "5", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    t = turn_of(env, "a")
    assert (t["cause"], t["verify"]["tail"]) == ("verify", None), t["verify"]
    assert t["error"] == f"its check `{check}` failed (rc 1)", t["error"]
    r = env.run("verify", "a", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    assert turn_of(env, "a")["verify"]["tail"] is None
    log = (env.home / "turns" / "a" / t["id"] / "verify.log").read_text()
    assert log.splitlines() == [
        "[spex] verifying: true test -e nothing",
        "[spex] verifying: true test -e nothing (spex verify)",
    ], log


def alive(pids: list[int]) -> list[int]:
    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return [pid for pid in pids if running(pid)]


@pytest.mark.parametrize("death", ["wrapper", "server"])
def test_a_check_whose_turn_is_lost_does_not_run_on(env: Env, death: str) -> None:
    """A harness dies with its pane (the hangup of its wrapper's end or of
    the tmux server's); the check, in a process session of its own, never
    got it, and its watchdog died with the wrapper: it ran on, unbounded,
    after its turn was recorded lost."""
    repo = git_repo(env)
    agent(env, "a", repo)
    pids = env.root / "pids"
    check = f"sleep 60 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    r = env.run("wake", "a", "x", "--verify", check, "--window", "0.3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert retry_until(lambda: pids.exists() and len(pids.read_text().split()) == 2, 10)
    t = turn_of(env, "a")
    outcome = env.home / "turns" / "a" / t["id"] / "outcome"
    assert outcome.read_text().startswith("verifying:")
    if death == "wrapper":
        os.kill(int(outcome.read_text().split(":")[1]), signal.SIGKILL)
    else:
        env.tmux("kill-server")
    assert retry_until(lambda: turn_of(env, "a")["state"] != "running", 15)
    t = turn_of(env, "a")
    assert (t["state"], t["verify"]["state"]) == ("lost", "verify-failed"), t
    assert alive([int(p) for p in pids.read_text().split()]) == []


def test_a_check_is_decided_by_its_exit_not_by_a_setsid_child_holding_its_output(
    env: Env,
) -> None:
    """A check that starts a server with `setsid` (out of the check's process
    session) holding its stdout, and exits 0: the wrapper waited for its
    output to close, so the turn hung until the check's time limit and
    failed `verify-timeout`. Its exit decides; what holds its output is ended."""
    repo = git_repo(env)
    agent(env, "a", repo)
    pids = env.root / "pids"
    check = f"setsid sleep 60 & echo $! >> {pids}; echo all passed"
    started = time.monotonic()
    r = env.run(
        "wake", "a", "x", "--verify", check, "--verify-timeout", "40", "--window", "30", "--json"
    )
    assert time.monotonic() - started < 20, r.stdout
    assert r.returncode == 0, r.stdout + r.stderr
    t = turn_of(env, "a")
    assert (t["state"], t["flags"]) == ("complete", ["verified"]), t
    assert (t["verify"]["rc"], t["verify"]["tail"]) == (0, "all passed"), t["verify"]
    assert retry_until(lambda: alive([int(p) for p in pids.read_text().split()]) == [], 5)
    # The same check run again by `spex verify`: what it left holding its
    # output is ended with it there too.
    r = env.run("verify", "a", "--verify-timeout", "40")
    assert r.returncode == 0, r.stdout + r.stderr
    assert retry_until(lambda: alive([int(p) for p in pids.read_text().split()]) == [], 5)
