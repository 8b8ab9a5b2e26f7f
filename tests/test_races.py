"""Turns under races and faults, each provoked for real.

A spex process is frozen inside one exact tmux call by the `tmux` shim in
`tests/shims` (it waits for a go file), or at a file it writes (SIGSTOP);
the racing operation runs; then the frozen one goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from conftest import HERE, SPEX, WRAPPERS, Env, end_everything, harness, retry_until, wakeups
from test_turns import show, turn_processes_alive, wake_json

from spexsup.pane import marker
from spexsup.pane.marker import Stage

SHIMS = HERE / "shims"
REAL_TMUX = shutil.which("tmux") or "tmux"


class Held:
    """A spex command frozen inside its first tmux call that mentions `word`."""

    def __init__(self, env: Env, word: str, *args: str, extra: dict[str, str] | None = None):
        self.flag = env.root / f"held-{word}-{time.monotonic_ns()}"
        shim = {
            "PATH": f"{SHIMS}:{env.vars['PATH']}",
            "SPEXSUP_SHIM_HOLD": word,
            "SPEXSUP_SHIM_FLAG": str(self.flag),
            "SPEXSUP_SHIM_TMUX": REAL_TMUX,
        }
        self.proc = subprocess.Popen(
            [SPEX, *args],
            env={**env.vars, **shim, **(extra or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert retry_until(self.flag.exists, 30), "never reached the held tmux call"

    def release(self) -> None:
        Path(f"{self.flag}.go").touch()

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        self.release()
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err


def pane_option(env: Env, name: str, option: str) -> str:
    return env.tmux("display-message", "-p", "-t", f"={name}:0.0", f"#{{{option}}}").stdout.strip()


def pane_command(env: Env, name: str) -> str:
    return env.tmux(
        "display-message", "-p", "-t", f"={name}:0.0", "#{pane_current_command}"
    ).stdout.strip()


# --- 1. a stop between admission and launch wins ---------------------------


def test_stop_before_the_launch_wins(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    wake = Held(env, "respawn-pane", "wake", "a", "x", "--window", "1")
    assert env.run("stop", "a", "--grace", "1").returncode == 0
    code, out, err = wake.finish()
    assert code == 3, (out, err)
    assert "was stopped" in err and "spex stop" in err
    assert "confirmed" not in out
    s = show(env, "a")
    assert s["state"] == "stopped"
    assert s["turn"]["state"] == "aborted"
    assert turn_processes_alive(s["turn"]["id"]) == []
    assert not (env.home / "turns" / "a" / s["turn"]["id"] / "outcome").exists()


def test_a_late_launch_never_replaces_a_newer_turn(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    old = Held(env, "respawn-pane", "wake", "a", "old", "--window", "1")
    assert env.run("stop", "a", "--grace", "1").returncode == 0
    assert env.run("resume", "a").returncode == 0
    code, new = wake_json(env, "a", "new", "--window", "1")
    assert new["verdict"] == "confirmed", new
    code, out, err = old.finish()
    assert code == 3, (out, err)
    # The newer turn still runs in the pane, untouched.
    assert env.pane_pid("a") == new["pid"]
    assert psutil.pid_exists(new["pid"])
    time.sleep(0.3)  # a late respawn would have killed it by now
    s = show(env, "a")
    assert (s["turn"]["id"], s["turn"]["state"]) == (new["turn"], "running")
    assert pane_option(env, "a", "@spex_turn") == new["turn"]
    env.run("stop", "a", "--grace", "1")


def test_rm_and_new_between_admission_and_launch(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    old = Held(env, "respawn-pane", "wake", "a", "old", "--window", "1")
    assert env.run("rm", "a", "--force").returncode == 0
    assert env.run("new", "a", "--", harness("exit0.sh")).returncode == 0
    pane_before = env.pane_pid("a")
    code, out, err = old.finish()
    assert code == 3, (out, err)
    # The new incarnation's home was neither replaced nor killed.
    assert env.pane_pid("a") == pane_before
    assert show(env, "a")["turn"] is None
    code, v = wake_json(env, "a", "x", "--window", "5")
    assert v["verdict"] == "completed"


# --- 2, 3. lock-class retries ------------------------------------------------


def _locky(env: Env, script: str) -> None:
    (env.home / "harnesses.toml").write_text(
        f"""
[harness.locky]
fresh = ["{harness(script)}", "{{prompt}}"]
retryable = ["database is locked"]
id_pattern = 'conversation: (demo-[0-9a-f]+)'
"""
    )


def test_stop_during_retry_backoff_wins(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    _locky(env, "always_locked.sh")
    env.run("new", "l", "--harness", "locky")
    wake = subprocess.Popen(
        [SPEX, "wake", "l", "go", "--window", "5"],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    turns = env.home / "turns" / "l"
    assert retry_until(lambda: any(turns.glob("*/attempt-1.outcome")), 30)
    os.kill(wake.pid, signal.SIGSTOP)
    try:
        assert env.run("stop", "l", "--grace", "1").returncode == 0
    finally:
        os.kill(wake.pid, signal.SIGCONT)
    out, err = wake.communicate(timeout=30)
    assert wake.returncode == 3, (out, err)
    turn = show(env, "l")["turn"]
    assert turn["state"] == "aborted", turn
    (directory,) = turns.iterdir()
    # No relaunch after the stop: at most the attempt that was already out.
    assert not (directory / "attempt-2.outcome").exists() or turn["attempts"] <= 2


def test_an_attempt_that_did_work_is_never_retried(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    _locky(env, "did_work_then_locked.sh")
    runs = env.root / "runs"
    env.run("new", "l", "--harness", "locky", "--env", f"RUN_LOG={runs}")
    code, v = wake_json(env, "l", "edit things", "--window", "5")
    assert code == 1
    assert v["verdict"] == "failed" and v["attempts"] == 1
    assert runs.read_text().splitlines() == ["edit things"]


def test_a_retried_attempt_is_never_published(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        f"""
[harness.locky]
fresh = ["{harness("slow_locked_twice.sh")}", "{{prompt}}"]
retryable = ["database is locked"]
"""
    )
    env.run("new", "l", "--harness", "locky", "--env", f"COUNT_FILE={env.root / 'count'}")
    wake = subprocess.Popen(
        [SPEX, "wake", "l", "go", "--window", "5", "--json"],
        env=env.vars,
        stdout=subprocess.PIPE,
        text=True,
    )
    turns = env.home / "turns" / "l"

    def turn_dirs() -> list[Path]:  # (the home's env file lives beside them)
        return [p for p in turns.iterdir() if p.is_dir()] if turns.exists() else []

    def outcome() -> marker.Marker:
        return marker.read(turn_dirs()[0])

    assert retry_until(lambda: bool(turn_dirs()), 30)
    # Freeze the launcher while its first attempt runs, before it can retry.
    assert retry_until(lambda: outcome().stage is Stage.RUNNING, 30)
    os.kill(wake.pid, signal.SIGSTOP)
    try:
        assert retry_until(lambda: outcome().stage is Stage.EXIT, 30)
        # The attempt failed, but a waiter must not see that as the turn's end.
        r = env.run("wait", "l", "--timeout", "1")
        assert r.returncode == 124, r.stdout
    finally:
        os.kill(wake.pid, signal.SIGCONT)
    out, _ = wake.communicate(timeout=60)
    assert json.loads(out)["attempts"] == 3
    r = env.run("wait", "l", "--timeout", "30", "--json")
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)[0]["state"] == "complete"


def _suspended_wake(env: Env, name: str) -> tuple[subprocess.Popen[str], Path]:
    """A wake of `name` that is SIGSTOPped (as by Ctrl-Z) once its turn runs."""
    wake = subprocess.Popen(
        [SPEX, "wake", name, "go", "--window", "60", "--json"],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    turns = env.home / "turns" / name
    assert retry_until(lambda: turns.exists() and any(turns.iterdir()), 30)
    directory = next(turns.iterdir())
    assert retry_until(lambda: marker.read(directory).stage is Stage.RUNNING, 30)
    os.kill(wake.pid, signal.SIGSTOP)
    return wake, directory


def _waited_end(env: Env, name: str) -> tuple[str, int]:
    """(state, rc) of the session's turn as `spex wait` reports its failed end."""
    r = env.run("wait", name, "--timeout", "30", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    (ended,) = json.loads(r.stdout)
    return ended["state"], ended["rc"]


def test_a_suspended_wake_does_not_hold_a_finished_turn_hostage(env: Env) -> None:
    assert env.run("new", "a", "--", harness("exit7_later.sh")).returncode == 0
    wake, directory = _suspended_wake(env, "a")
    try:
        assert retry_until(lambda: marker.read(directory).stage is Stage.EXIT, 30)
        # Its end is recorded with no help from the launcher: waiters, the
        # event log and a stop all see rc 7.
        assert _waited_end(env, "a") == ("failed", 7)
        kinds = [
            json.loads(line)["kind"]
            for line in env.run("events", "--json", "--session", "a").stdout.splitlines()
        ]
        assert "failed" in kinds, kinds
        assert env.run("stop", "a", "--grace", "1").returncode == 0
        turn = show(env, "a")["turn"]
        assert (turn["state"], turn["rc"]) == ("failed", 7), turn
    finally:
        os.kill(wake.pid, signal.SIGCONT)
    out, err = wake.communicate(timeout=30)
    assert wake.returncode == 1, (out, err)
    assert json.loads(out)["verdict"] == "failed"


def _deferred_lock_failure(env: Env) -> tuple[subprocess.Popen[str], Path]:
    """Session `l` whose attempt failed with a lock message (an end its reporter
    defers to the launcher, which would retry it) while its wake is suspended."""
    env.home.mkdir(parents=True, exist_ok=True)
    _locky(env, "slow_always_locked.sh")
    env.run("new", "l", "--harness", "locky")
    wake, directory = _suspended_wake(env, "l")
    if not retry_until(lambda: marker.read(directory).stage is Stage.EXIT, 30):
        os.kill(wake.pid, signal.SIGCONT)
        raise AssertionError("the attempt never exited")
    return wake, directory


def test_an_end_deferred_to_a_suspended_launcher_falls_to_a_reader(env: Env) -> None:
    wake, directory = _deferred_lock_failure(env)
    try:
        # Deferred to the launcher, but only for a bounded time while it is
        # not progressing.
        assert _waited_end(env, "l") == ("failed", 1)
    finally:
        os.kill(wake.pid, signal.SIGCONT)
    out, err = wake.communicate(timeout=30)
    assert wake.returncode == 1, (out, err)
    # Nothing was retried after a reader recorded the end.
    assert not (directory / "attempt-1.outcome").exists()


def test_a_stop_during_a_deferred_end_keeps_its_rc(env: Env) -> None:
    wake, _ = _deferred_lock_failure(env)
    try:
        assert env.run("stop", "l", "--grace", "1").returncode == 0
        turn = show(env, "l")["turn"]
        assert (turn["state"], turn["rc"]) == ("aborted", 1), turn
    finally:
        os.kill(wake.pid, signal.SIGCONT)
    wake.communicate(timeout=30)
    assert wake.returncode == 3


# --- 4, 5. a launcher that dies ---------------------------------------------


def test_launcher_killed_while_tmux_starts_the_wrapper(env: Env) -> None:
    env.run("new", "a", "--", "bash", "-c", "sleep 1; exit 0")
    go = env.home / "go"
    extra = {"SPEXSUP_WRAPPER": str(WRAPPERS / "slow_start.sh")}
    wake = subprocess.Popen([SPEX, "wake", "a", "x", "--window", "30"], env={**env.vars, **extra})
    assert retry_until(Path(f"{go}.waiting").exists, 30)
    wake.kill()
    wake.wait()
    # The wrapper is about to run: not lost.
    s = show(env, "a")
    assert s["turn"]["state"] == "starting", s["turn"]
    go.touch()
    # It runs, and with its launcher gone, a reader moves it on, and its
    # reporter records its end.
    assert retry_until(lambda: show(env, "a")["turn"]["state"] in ("running", "complete"), 30)
    r = env.run("wait", "a", "--timeout", "30")
    assert r.returncode == 0, r.stdout + r.stderr
    assert show(env, "a")["turn"]["state"] == "complete"


def test_launcher_killed_before_its_tmux_call_lands(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    wake = Held(env, "respawn-pane", "wake", "a", "x", "--window", "30")
    wake.proc.kill()
    wake.proc.wait()
    # The tmux call is still on its way (the shim outlives its launcher).
    s = show(env, "a")
    assert s["turn"]["state"] == "lost", s["turn"]
    wake.release()
    time.sleep(1.0)  # the orphaned tmux call lands now, or never
    assert marker.read(env.home / "turns" / "a" / s["turn"]["id"]).stage is Stage.NONE
    assert turn_processes_alive(s["turn"]["id"]) == []
    assert pane_option(env, "a", "@spex_turn") != s["turn"]["id"]


def waking(env: Env, window: str) -> tuple[subprocess.Popen[str], Path]:
    """`spex wake a x --window WINDOW` once its turn's wrapper runs, and the turn's dir."""
    wake = subprocess.Popen(
        [SPEX, "wake", "a", "x", "--window", window],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    turns = env.home / "turns" / "a"
    assert retry_until(lambda: turns.exists() and any(turns.iterdir()), 30)
    (directory,) = turns.iterdir()
    assert retry_until(lambda: marker.read(directory).stage is Stage.RUNNING, 30)
    return wake, directory


def test_ctrl_c_after_launch_leaves_a_durable_turn(env: Env) -> None:
    # Long enough to be still running after Ctrl-C on a loaded machine.
    env.run("new", "a", "--", "bash", "-c", "sleep 8; exit 0")
    wake, directory = waking(env, "30")
    wake.send_signal(signal.SIGINT)
    _, err = wake.communicate(timeout=10)
    assert wake.returncode == 130
    assert f"turn {directory.name} keeps running (spex wait a)" in err
    assert show(env, "a")["turn"]["state"] == "running"
    assert env.run("wait", "a", "--timeout", "30").returncode == 0
    assert show(env, "a")["turn"]["state"] == "complete"


def test_a_waiting_wake_sleeps_through_its_window_and_a_signal_still_ends_it(env: Env) -> None:
    """The main thread of a wake waiting out its window woke four times a
    second to look for a signal another thread might have been handed. No
    other thread of its can be: the inotify reader blocks SIGINT and SIGTERM.
    So it sleeps through, and the kernel's SIGTERM interrupts the sleep.
    Counted, not timed: a loaded machine delays wakes, it does not add them."""
    env.run("new", "a", "--", harness("sleeper.sh"))
    wake, directory = waking(env, "60")
    # The fewest wakes of three 2 s windows (the first may still hold the
    # launch's end): sleeps here are the windows counted over, not waits.
    windows = []
    for _ in range(3):
        before = wakeups(wake.pid)
        time.sleep(2)
        windows.append(wakeups(wake.pid) - before)
    assert min(windows) <= 1, f"wakes in 2 s windows: {windows}"  # 8 when it looked
    wake.send_signal(signal.SIGTERM)
    _, err = wake.communicate(timeout=20)
    assert wake.returncode == 143, err
    assert f"turn {directory.name} keeps running (spex wait a)" in err
    assert show(env, "a")["turn"]["state"] == "running"


def test_ctrl_c_inside_the_launch_call_after_tmux_started_the_wrapper(env: Env) -> None:
    # The tmux call has started the wrapper but not yet returned to spex:
    # the turn is launched, so Ctrl-C leaves it running, never aborts it.
    env.run("new", "a", "--", harness("sleeper.sh"))
    after = {"SPEXSUP_SHIM_AFTER": "1"}
    wake = Held(env, "respawn-pane", "wake", "a", "x", "--window", "30", extra=after)
    (directory,) = (env.home / "turns" / "a").iterdir()
    assert retry_until(lambda: marker.read(directory).stage is Stage.RUNNING, 30)
    wake.proc.send_signal(signal.SIGINT)
    code, _, err = wake.finish(timeout=30)
    assert code == 130, err
    assert f"turn {directory.name} keeps running (spex wait a)" in err
    assert show(env, "a")["turn"]["state"] == "running"


def test_ctrl_c_before_launch_aborts_the_turn(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    wake = Held(env, "respawn-pane", "wake", "a", "x", "--window", "30")
    wake.proc.send_signal(signal.SIGINT)
    _, err = wake.proc.communicate(timeout=30)
    assert wake.proc.returncode == 130, err
    assert "aborted before it started" in err
    wake.release()
    s = show(env, "a")
    assert s["turn"]["state"] == "aborted"
    assert s["state"] != "running"
    time.sleep(0.5)
    assert turn_processes_alive(s["turn"]["id"]) == []
    # Nothing is left in the way of the next turn.
    assert wake_json(env, "a", "y", "--window", "0.5")[1]["verdict"] == "confirmed"
    env.run("stop", "a", "--grace", "1")


# --- 6, 7. stop finds everything a turn left --------------------------------


def orphaned(env: Env, name: str) -> bool:
    """Is the current turn of `name` running on without its wrapper?"""
    t = show(env, name)["turn"]
    return t["state"] == "running" and "orphaned" in t["flags"]


def test_stop_reaps_an_orphaned_turns_survivors(env: Env) -> None:
    env.run("new", "a", "--", harness("ignore_hup.sh"))
    _, v = wake_json(env, "a", "x", "--window", "1")
    assert v["verdict"] == "confirmed"
    os.kill(v["pid"], signal.SIGKILL)
    # The harness outlived its wrapper: the turn is not lost while it runs.
    assert retry_until(lambda: orphaned(env, "a"))
    assert turn_processes_alive(v["turn"]), "the harness should have outlived its wrapper"
    r = env.run("stop", "a", "--grace", "1")
    assert r.returncode == 0, r.stderr
    assert turn_processes_alive(v["turn"]) == []
    assert show(env, "a")["turn"]["state"] == "aborted"


def test_stop_reaps_survivors_of_a_killed_server(env: Env) -> None:
    env.run("new", "a", "--", harness("ignore_hup.sh"))
    _, v = wake_json(env, "a", "x", "--window", "1")
    env.tmux("kill-server")
    assert retry_until(lambda: orphaned(env, "a"))
    assert turn_processes_alive(v["turn"])
    assert env.run("stop", "a", "--grace", "1").returncode == 0
    assert turn_processes_alive(v["turn"]) == []
    # A second stop is harmless, and the advice of resume holds.
    assert env.run("stop", "a", "--grace", "1").returncode == 0
    assert env.run("resume", "a").returncode == 0


def _outlive_the_server(env: Env, name: str) -> tuple[str, int, list[int]]:
    """A turn of hangup_proof.sh (it ignores SIGHUP and SIGTERM) whose tmux
    server was killed: its id, its wrapper's pid (gone) and the pids of what
    runs on, carrying its SPEXSUP_TURN."""
    started = env.root / f"started-{name}"
    env.run("new", name, "--env", f"STARTED={started}", "--", harness("hangup_proof.sh"))
    _, v = wake_json(env, name, "x", "--window", "1")
    assert v["verdict"] == "confirmed", v
    assert retry_until(started.exists)
    assert env.tmux("kill-server").returncode == 0

    def wrapper_gone() -> bool:
        try:
            return psutil.Process(v["pid"]).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    assert retry_until(wrapper_gone)

    def agents_only() -> bool:
        # What else carried the turn (its output's tee and counter) dies of
        # the hangup too, moments after the wrapper: wait for that.
        alive = turn_processes_alive(v["turn"])
        return bool(alive) and all(_cmdline(pid) == ["sleep", "309"] for pid in alive)

    assert retry_until(agents_only), "the agent should have outlived its wrapper and the server"
    return v["turn"], v["pid"], sorted(turn_processes_alive(v["turn"]))


def _cmdline(pid: int) -> list[str] | None:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return None


def _kill_turns(*turns: str) -> None:
    """SIGKILL whatever carries one of `turns` (a test's own, even when it failed)."""
    for turn in turns:
        for pid in turn_processes_alive(turn):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue


def test_an_agent_that_outlives_a_killed_server_is_not_lost(env: Env) -> None:
    turns: list[str] = []
    try:
        turn, wrapper, agents = _outlive_the_server(env, "a")
        turns.append(turn)
        t = show(env, "a")["turn"]
        assert (t["id"], t["state"]) == (turn, "running"), t
        assert "orphaned" in t["flags"] and sorted(t["survivors"]) == agents, t
        listed = json.loads(env.run("ls", "--json").stdout)
        assert listed[0]["turn"]["flags"] == ["orphaned"], listed
        said = env.run("show", "a").stdout
        assert "orphaned" in said and f"pid {agents[0]}" in said, said
        # No second agent beside the first in the same cwd.
        r = env.run("wake", "a", "again", "--window", "1")
        assert r.returncode == 3, r.stdout + r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("spex: "), r.stderr
        assert f"pid {agents[0]}" in r.stderr and "spex stop a" in r.stderr, r.stderr
        assert show(env, "a")["turn"]["id"] == turn
        # The stop finds it by its environment, and the end is recorded.
        r = env.run("stop", "a", "--grace", "1")
        assert r.returncode == 0, r.stderr
        assert turn_processes_alive(turn) == []
        t = show(env, "a")["turn"]
        assert (t["id"], t["state"]) == (turn, "aborted"), t
        assert t["survivors"] == [], t
        assert f"pid {wrapper}" not in (t["error"] or ""), t
    finally:
        _kill_turns(*turns)


def test_a_turn_is_lost_once_its_last_survivor_dies(env: Env) -> None:
    turns: list[str] = []
    try:
        turn, wrapper, agents = _outlive_the_server(env, "a")
        turns.append(turn)
        assert show(env, "a")["turn"]["state"] == "running"
        _kill_turns(turn)
        assert retry_until(lambda: turn_processes_alive(turn) == [])
        # The next reader records the end.
        t = show(env, "a")["turn"]
        assert (t["id"], t["state"]) == (turn, "lost"), t
        assert f"the turn's process (pid {wrapper}) is gone" in t["error"], t
        assert f"pid {agents[0]}" in t["error"] and "ran on" in t["error"], t
        assert "orphaned" in t["flags"] and t["survivors"] == [], t
        # The session takes turns again.
        _, v = wake_json(env, "a", "back", "--window", "1")
        turns.append(v["turn"])
        assert v["verdict"] == "confirmed", v
        assert env.run("stop", "a", "--grace", "1").returncode == 0
    finally:
        _kill_turns(*turns)


def test_stop_rescans_after_sigterm(env: Env) -> None:
    env.run("new", "a", "--", harness("term_spawns.sh"))
    _, v = wake_json(env, "a", "x", "--window", "1")
    assert v["verdict"] == "confirmed"
    assert env.run("stop", "a", "--grace", "2").returncode == 0
    assert turn_processes_alive(v["turn"]) == []
    spawned = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "304"]]
    assert spawned == []


# --- 8, 9. reserved env, rm fenced ------------------------------------------


def test_reserved_env_names_are_refused(env: Env) -> None:
    r = env.run("new", "a", "--env", "SPEXSUP_TURN=x", "--", harness("exit0.sh"))
    assert r.returncode == 2
    assert "reserved" in r.stderr
    assert env.run("ls", "--json").stdout.strip() == "[]"


def test_rm_refuses_during_a_stop(env: Env) -> None:
    env.run("new", "a", "--", harness("ignore_term.sh"))
    _, _v = wake_json(env, "a", "x", "--window", "1")
    stop = subprocess.Popen(
        [SPEX, "stop", "a", "--grace", "3"],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert retry_until(lambda: show(env, "a")["state"] == "stopped")
    r = env.run("rm", "a")
    assert r.returncode == 3, r.stderr
    assert "stop" in r.stderr and "in progress" in r.stderr
    _out, err = stop.communicate(timeout=30)
    assert stop.returncode == 0, err
    assert "internal error" not in err
    assert env.run("rm", "a").returncode == 0


def test_new_right_after_rm_keeps_its_home(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    wake_json(env, "a", "x", "--window", "5")
    rm = Held(env, "kill-session", "rm", "a")
    # While the removal runs, the name is not free.
    r = env.run("new", "a", "--", harness("exit0.sh"))
    assert r.returncode == 3, r.stderr
    code, _, err = rm.finish()
    assert code == 0, err
    assert env.run("new", "a", "--", harness("exit0.sh")).returncode == 0
    assert show(env, "a")["pane"] == "ok"
    _, v = wake_json(env, "a", "x", "--window", "5")
    assert v["verdict"] == "completed"
    assert (env.home / "turns" / "a" / v["turn"] / "outcome").exists()


def test_stop_of_a_session_removed_meanwhile_is_refused_cleanly(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    rm = Held(env, "kill-session", "rm", "a")
    r = env.run("stop", "a")
    assert r.returncode == 3 and "being removed" in r.stderr, r.stderr
    assert rm.finish()[0] == 0


# --- 10, 11. a finished turn is never recorded as failed ---------------------


def test_slow_reporter_under_a_held_write_lock(env: Env) -> None:
    env.run("new", "a", "--", "bash", "-c", "sleep 0.3; echo done; exit 0")
    wake = subprocess.Popen(
        [SPEX, "wake", "a", "x", "--window", "1", "--json"],
        env=env.vars,
        stdout=subprocess.PIPE,
        text=True,
    )
    turns = env.home / "turns" / "a"
    assert retry_until(lambda: turns.exists() and any(turns.iterdir()), 30)
    (directory,) = turns.iterdir()
    assert retry_until(lambda: marker.read(directory).stage is Stage.RUNNING, 30)
    db = sqlite3.connect(env.home / "state.db", isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    try:
        assert retry_until(lambda: marker.read(directory).stage is Stage.REPORTING, 10)
        time.sleep(3.5)  # well past the window and the reporter's grace
    finally:
        db.execute("ROLLBACK")
        db.close()
    out, _ = wake.communicate(timeout=60)
    v = json.loads(out)
    assert (v["verdict"], v["rc"], v["error"]) == ("completed", 0, None)
    turn = show(env, "a")["turn"]
    assert (turn["state"], turn["rc"]) == ("complete", 0)
    # The reporter was never killed: it finished (first, or finding the end
    # already recorded by the wake).
    assert retry_until(lambda: marker.read(directory).stage is Stage.EXIT, 30)
    assert marker.read(directory).cas in (0, 3)


def test_reading_a_running_turn_needs_no_write_lock(env: Env) -> None:
    """ls and show reconcile the turns they read; a running turn whose
    wrapper lives has nothing to record, so another process holding the
    write lock (a long fan-out's commit, a backup) does not hold them up."""
    env.run("new", "a", "--", harness("sleeper.sh"))
    _, v = wake_json(env, "a", "x", "--window", "0.5")
    assert v["verdict"] == "confirmed", v
    db = sqlite3.connect(env.home / "state.db", isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    try:
        for argv in (("ls", "--json"), ("show", "a", "--json")):
            r = env.run(*argv, timeout=120)
            assert r.returncode == 0, r.stderr
            assert "running" in r.stdout, r.stdout
    finally:
        db.execute("ROLLBACK")
        db.close()
    env.run("stop", "a", "--grace", "1")


def test_reading_an_ended_wave_needs_no_write_lock(env: Env) -> None:
    """A wave that ended with each leg's end recorded and no on-complete
    left to start has nothing to merge or settle: `wave ls` and `wave show`
    read it as stored, without the write lock another process holds (they
    read-merge-wrote every wave, and waited behind the lock)."""
    for name in ("a", "b"):
        env.run("new", name, "--", "bash", "-c", "exit 0")
    r = env.run("fanout", "a", "b", "-m", "x", "--window", "5", "--wait", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    listed = json.loads(env.run("wave", "ls", "--json").stdout)
    (wave,) = [w for w in listed if w["id"].startswith("w")]
    assert wave["state"] == "complete", wave
    db = sqlite3.connect(env.home / "state.db", isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    try:
        for argv in (("wave", "ls", "--json"), ("wave", "show", wave["id"], "--json")):
            r = env.run(*argv, timeout=120)
            assert r.returncode == 0, r.stderr
            assert wave["id"] in r.stdout and '"complete"' in r.stdout, r.stdout
    finally:
        db.execute("ROLLBACK")
        db.close()


def test_stop_kills_the_agent_while_another_process_holds_the_write_lock(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    _, v = wake_json(env, "a", "x", "--window", "0.5")
    assert v["verdict"] == "confirmed", v
    turn = v["turn"]
    assert turn_processes_alive(turn)
    db = sqlite3.connect(env.home / "state.db", isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    try:
        r = env.run("stop", "a", "--grace", "1", timeout=120)
        # The agent is gone although nothing could be written, and the
        # message names the lock and who holds it (not permissions).
        assert turn_processes_alive(turn) == []
        assert r.returncode == 1, r.stdout + r.stderr
        assert "write-locked by pid" in r.stderr and f"pid {os.getpid()}" in r.stderr, r.stderr
        assert "permission" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    finally:
        db.execute("ROLLBACK")
        db.close()
    # Once the lock is free, the end is recorded as the stop's abort, not
    # as a failure of the killed agent.
    t = show(env, "a")
    assert t["turn"]["state"] == "aborted", t["turn"]
    assert t["state"] == "stopped", t


def test_a_missing_working_directory_runs_nothing(env: Env) -> None:
    cwd = env.root / "work"
    cwd.mkdir()
    env.run("new", "a", "--cwd", str(cwd), "--", harness("exit0.sh"))
    cwd.rmdir()
    r = env.run("wake", "a", "x")
    assert r.returncode == 1
    assert r.stderr.strip().startswith(f"spex: a: working directory {cwd} no longer exists")
    assert show(env, "a")["turn"] is None


# --- 12-18. bad input --------------------------------------------------------


def test_wait_on_a_name_twice_and_bad_timeouts(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    wake_json(env, "a", "x", "--window", "5")
    r = env.run("wait", "a", "a", "--timeout", "10")
    assert r.returncode == 0
    assert r.stdout.count("a: turn") == 1
    for bad in ("nan", "inf", "-1"):
        r = env.run("wait", "a", "--timeout", bad)
        assert r.returncode == 2, (bad, r.stderr)
        assert r.stderr.startswith("spex: ") and "Traceback" not in r.stderr


def test_a_runaway_id_pattern_cannot_hang_spex(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    toml = env.home / "harnesses.toml"
    toml.write_text(
        """
[harness.slow]
fresh = ["bash", "-c", "printf '%s' \\"$1\\"", "x", "{prompt}"]
id_pattern = '(?:a|aa)+(b)'
"""
    )
    env.run("new", "s", "--harness", "slow")
    started = time.monotonic()
    _code, v = wake_json(env, "s", "a" * 5000, "--window", "5")
    assert v["verdict"] == "completed", v
    assert time.monotonic() - started < 20
    assert show(env, "s")["harness_session_id"] is None
    doctor = env.run("doctor")
    assert doctor.stdout.count("took over") == 1, doctor.stdout
    # Fixing the file fixes later reads: no pattern is copied into turn dirs.
    toml.write_text(toml.read_text().replace("(?:a|aa)+(b)", "(a{3})"))
    assert "id_pattern" not in (env.home / "turns" / "s" / v["turn"] / "meta.json").read_text()
    _code, v = wake_json(env, "s", "aaaa", "--window", "5")
    assert show(env, "s")["harness_session_id"] == "aaa"


def test_command_harness_keeps_braces_verbatim(env: Env) -> None:
    env.run("new", "a", "--", "echo", "{prompt}", "{session_id}")
    _, v = wake_json(env, "a", "hi", "--window", "5")
    assert v["verdict"] == "completed"
    assert env.run("log", "a").stdout.strip() == "{prompt} {session_id} hi"


def test_a_prompt_that_looks_like_an_option_is_refused(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    (env.root / "ix").write_text("secret file")
    r = subprocess.run(
        [SPEX, "wake", "a", "-fix the flaky test"],
        env=env.vars,
        cwd=env.root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert "after --" in r.stderr
    assert show(env, "a")["turn"] is None
    _, v = wake_json(env, "a", "--window", "5", "--", "-fix the flaky test")
    assert v["verdict"] == "completed"


def test_state_dirs_are_private_whatever_the_umask(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    home = env.root / "loose" / "state"
    r = subprocess.run(
        ["bash", "-c", f"umask 000; {SPEX} --home {home} --create new b -- {harness('exit0.sh')}"],
        env=env.vars,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        ["bash", "-c", f"umask 000; {SPEX} --home {home} wake b x --window 5"],
        env=env.vars,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    for d in [home.parent, home, home / "turns", home / "turns" / "b"]:
        assert d.stat().st_mode & 0o777 == 0o700, d
    (turn,) = (home / "turns" / "b").iterdir()
    assert turn.stat().st_mode & 0o777 == 0o700
    for f in ("prompt", "argv", "outcome", "output.log"):
        assert (turn / f).stat().st_mode & 0o777 == 0o600, f


def test_a_planted_symlink_is_not_followed(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    elsewhere = env.root / "elsewhere"
    elsewhere.mkdir()
    (env.home / "turns").mkdir(exist_ok=True)
    (env.home / "turns" / "a").symlink_to(elsewhere)
    r = env.run("wake", "a", "x")
    assert r.returncode == 1
    assert "symlink" in r.stderr and "Traceback" not in r.stderr
    assert list(elsewhere.iterdir()) == []
    # rm removes the link, not what it points to.
    assert env.run("rm", "a").returncode == 0
    assert elsewhere.is_dir()


def test_environment_errors_are_one_line(env: Env) -> None:
    as_file = env.root / "a-file"
    as_file.write_text("")
    r = env.run("ls", extra={"SPEXSUP_HOME": str(as_file)})
    assert r.returncode in (1, 2)
    assert r.stderr.count("\n") == 1 and str(as_file) in r.stderr
    assert "internal error" not in r.stderr
    other = env.root / "other"
    other.mkdir(mode=0o700)
    os.chown(other, 65534, 65534)
    r = env.run("ls", extra={"SPEXSUP_HOME": str(other)})
    assert r.returncode == 1 and "not to you" in r.stderr, r.stderr
    gone = env.root / "gone"
    gone.mkdir()
    r = subprocess.run(
        ["bash", "-c", f"cd {gone} && rmdir {gone} && {SPEX} new x -- true"],
        env=env.vars,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode in (1, 2), r.stderr
    assert r.stderr.startswith("spex: ") and r.stderr.count("\n") == 1, r.stderr
    assert "internal error" not in r.stderr


def _immutable(path: Path, on: bool) -> None:
    # Root ignores file modes; the immutable attribute binds root too.
    subprocess.run(["chattr", "+i" if on else "-i", str(path)], check=True)


def test_a_read_only_state_database_is_one_line(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    db = env.home / "state.db"
    _immutable(db, True)
    try:
        r = env.run("new", "b", "--", harness("exit0.sh"))
    finally:
        _immutable(db, False)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and str(db) in r.stderr, r.stderr
    assert "internal error" not in r.stderr
    assert [s["name"] for s in json.loads(env.run("ls", "--json").stdout)] == ["a"]


def test_rm_says_what_it_could_not_remove(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    _, v = wake_json(env, "a", "x", "--window", "5")
    stuck = env.home / "turns" / "a" / v["turn"] / "output.log"
    _immutable(stuck, True)
    try:
        r = env.run("rm", "a")
    finally:
        _immutable(stuck, False)
    assert r.returncode == 1
    assert str(stuck) in r.stderr and "removing" in r.stderr, r.stderr
    assert show(env, "a")["state"] == "removing"
    assert env.run("new", "a", "--", harness("exit0.sh")).returncode == 3
    assert env.run("rm", "a").returncode == 0
    assert not (env.home / "turns" / "a").exists()
    assert env.run("ls", "--json").stdout.strip() == "[]"


# --- a full disk ---------------------------------------------------------------


def _mount_tiny_tmpfs(where: Path) -> bool:
    where.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    return r.returncode == 0


def _fill(where: Path) -> Path:
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_keeps_the_rc_and_reads_working(env: Env) -> None:
    mount = env.root / "tiny"
    if os.geteuid() != 0 or not _mount_tiny_tmpfs(mount):
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    try:
        home = mount / "state"
        home.mkdir(mode=0o700)
        extra = {"SPEXSUP_HOME": str(home)}
        go = env.root / "go"
        assert (
            env.run(
                "new",
                "a",
                "--env",
                f"GO={go}",
                "--env",
                "RC=7",
                "--",
                harness("until_go.sh"),
                extra=extra,
            ).returncode
            == 0
        )
        _, v = wake_json(env, "a", "x", "--window", "0.5", extra=extra)
        assert v["verdict"] == "confirmed", v
        directory = home / "turns" / "a" / v["turn"]
        filler = _fill(mount)
        go.touch()
        # The wrapper is gone without a final marker on disk...
        assert retry_until(lambda: not turn_processes_alive(v["turn"]), 30)
        assert marker.read(directory).stage is not Stage.EXIT
        # ...and reads still work while the disk is full, naming it.
        r = env.run("ls", extra=extra)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"no space left on {mount}" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        r = env.run("show", "a", "--json", extra=extra)
        assert r.returncode == 0, r.stderr
        r = env.run("wait", "a", "--timeout", "1", extra=extra)
        assert r.returncode == 124 and "Traceback" not in r.stderr, r.stderr
        # Room again: the end is recorded with its rc, not as a vanished wrapper.
        filler.unlink()
        r = env.run("wait", "a", "--timeout", "30", "--json", extra=extra)
        assert r.returncode == 1, r.stdout + r.stderr
        (ended,) = json.loads(r.stdout)
        assert (ended["state"], ended["rc"]) == ("failed", 7), ended
    finally:
        end_everything(env)
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_launcher_slow_after_its_launch_reports_the_end_its_turn_already_had(
    env: Env,
) -> None:
    """The turn exits (rc 7) and its reporter records the end while the wake
    is still inside its launch (a fault point holds it there 2 s): the wake
    says `failed` rc 7, as the turn ended, not `stopped before it started`."""
    fault = {"SPEXSUP_FAULT": "pause-after-launch"}
    assert env.run("new", "a", "--", harness("exit7.sh")).returncode == 0
    r = env.run("wake", "a", "go", "--window", "3", "--json", extra=fault)
    assert r.returncode == 1, (r.stdout, r.stderr)
    v = json.loads(r.stdout)
    assert (v["verdict"], v["rc"]) == ("failed", 7), v
    assert show(env, "a")["turn"]["state"] == "failed"


def test_a_fresh_home_waits_for_a_lock_instead_of_failing(env: Env) -> None:
    """Commands racing on a fresh home: the one that finds the new database
    locked (another is creating or migrating it) waits for it, as for any
    lock, rather than failing at once with `database is locked` (seen as
    three racing `spex new`, two of them exit 1)."""
    import sqlite3
    import threading

    env.home.mkdir(parents=True, exist_ok=True)
    holder = sqlite3.connect(env.home / "state.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # RESERVED: readers may read, the WAL switch may not
    holder.execute("CREATE TABLE t (x)")
    threading.Timer(1.0, lambda: holder.execute("COMMIT")).start()
    r = env.run("ls")
    holder.close()
    assert r.returncode == 0, r.stderr
    assert "database is locked" not in r.stderr


def _shown_run_time(env: Env, name: str, extra: dict[str, str] | None = None) -> float:
    """The run time `spex ls` shows for NAME's turn (`…, ran 2s`), in seconds."""
    import re

    from spexsup import durations

    line = next(
        ln for ln in env.run("ls", extra=extra).stdout.splitlines() if ln.split()[:1] == [name]
    )
    found = re.search(r", ran (\S+)", line)
    assert found, line
    return durations.parse(found.group(1), "ran", allow_zero=True, maximum=None)


def _reporter_of(turn: str) -> psutil.Process | None:
    for proc in psutil.process_iter():
        try:
            seen = proc.environ()
            if seen.get("SPEXSUP_TURN") == turn and seen.get("SPEXSUP_STEP") == "report":
                return proc
        except psutil.Error:
            continue
    return None


def test_a_turn_recorded_late_keeps_the_run_time_its_wrapper_measured(env: Env) -> None:
    """The turn's reporter is SIGKILLed before it records the end (the state
    is write-locked meanwhile); a reader records it from the final marker
    3 s later. Its run time is the wrapper's own span (the harness's 1 s and
    the wrapper's steps), not the time until that reader came (`ran 14s` for
    a 3 s turn): at most from its admission to the moment its final marker
    was seen, whatever the machine's speed."""
    go = env.root / "go"
    script = 'while [ ! -e "$GO" ]; do sleep 0.05; done; sleep 1; exit 3'
    assert env.run("new", "a", "--env", f"GO={go}", "--", "bash", "-c", script).returncode == 0
    _, v = wake_json(env, "a", "x", "--window", "0.5")
    assert v["verdict"] == "confirmed", v
    directory = env.home / "turns" / "a" / v["turn"]
    holder = sqlite3.connect(env.home / "state.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the reporter waits for the write lock
    try:
        go.touch()
        assert retry_until(lambda: _reporter_of(v["turn"]) is not None, 30)
        reporter = _reporter_of(v["turn"])
        assert reporter is not None
        reporter.send_signal(signal.SIGKILL)
        assert retry_until(lambda: marker.read(directory).stage is Stage.EXIT, 30)
        seen = time.time()
    finally:
        holder.rollback()
        holder.close()
    assert marker.read(directory).cas == 128 + signal.SIGKILL
    # The lateness under test, not a wait for an event: the reader comes 3 s on.
    time.sleep(max(0.0, seen + 3 - time.time()))
    shown = _shown_run_time(env, "a")
    turn = show(env, "a")["turn"]
    assert (turn["state"], turn["rc"]) == ("failed", 3), turn
    assert turn["ended_at"] - seen >= 3, turn  # recorded by the late reader
    # `ls` shows whole seconds (half a second off at most); the reader's 3 s are not in it.
    assert 1.0 <= shown <= seen - turn["started_at"] + 0.5, (shown, seen, turn)
    assert 1.0 <= turn["ran"] <= seen - turn["started_at"], (seen, turn)


@pytest.mark.parametrize("rendered", [False, True], ids=["plain", "rendered"])
def test_output_a_full_disk_could_not_keep_is_flagged_with_how_much(
    env: Env, rendered: bool
) -> None:
    """The harness prints 1 MB and its last line while the disk is full: the
    turn ends with its verdict and the flag `output-lost:<bytes>`, the bytes
    output.log could not keep (`spex ls`, `show`, JSON), and its run time is
    the wrapper's own, not the wait until the disk had room to record it.
    Plain (tee) and rendered (a CLI of JSON events, `pretty feed`) alike."""
    mount = env.root / "tiny"
    if os.geteuid() != 0 or not _mount_tiny_tmpfs(mount):
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    last = '{"type":"result","subtype":"success","result":"the agent said this last"}'
    total = 1_000_000 + len(f"\n{last}\n")
    script = (
        'while [ ! -e "$GO" ]; do sleep 0.05; done; '
        f'yes \'{{"type":"system","subtype":"noise"}}\' | head -c 1000000; '
        f"printf '\\n%s\\n' '{last}'"
    )
    try:
        home = mount / "state"
        home.mkdir(mode=0o700)  # a SPEXSUP_HOME must exist (or --create)
        extra = {"SPEXSUP_HOME": str(home)}
        go = env.root / "go"
        how = ["--", "bash", "-c", script]
        if rendered:
            fresh = json.dumps(["bash", "-c", script, "noisy", "{prompt}"])
            (home / "harnesses.toml").write_text(
                f'[harness.noisy]\nfresh = {fresh}\noutcome = "claude"\n'
            )
            how = ["--harness", "noisy"]
        r = env.run("new", "a", "--env", f"GO={go}", *how, extra=extra)
        assert r.returncode == 0, r.stderr
        _, v = wake_json(env, "a", "x", "--window", "0.5", extra=extra)
        assert v["verdict"] == "confirmed", v
        directory = home / "turns" / "a" / v["turn"]
        assert (directory / "render").exists() is rendered
        filler = _fill(mount)
        go.touch()
        assert retry_until(lambda: not turn_processes_alive(v["turn"]), 60)
        gone = time.time()
        filler.unlink()
        r = env.run("wait", "a", "--timeout", "30", "--json", extra=extra)
        assert r.returncode == 0, r.stdout + r.stderr
        log = directory / "output.log"
        kept = log.stat().st_size if log.exists() else 0
        flag = f"output-lost:{total - kept}"
        assert kept < total
        turn = show_in(env, extra)["turn"]
        assert (turn["state"], turn["rc"]) == ("complete", 0), turn
        # (Rendered, the log lost its result event too: `no-answer` says so.)
        assert flag in turn["flags"], turn
        assert flag in env.run("ls", extra=extra).stdout
        said = env.run("show", "a", extra=extra).stdout
        assert "of its output could not be written to output.log" in said, said
        assert 0 < turn["ran"] <= gone - turn["started_at"], (gone, turn)
    finally:
        end_everything(env)
        subprocess.run(["umount", "-l", str(mount)], check=False)


def show_in(env: Env, extra: dict[str, str]) -> dict:  # type: ignore[type-arg]
    return json.loads(env.run("show", "a", "--json", extra=extra).stdout)  # type: ignore[no-any-return]


def test_the_renderer_goes_on_when_the_disk_is_full(env: Env) -> None:
    """A rendered CLI's output (`pretty feed`) on a full disk: what the log
    cannot keep is dropped as tee drops it, the rendering goes on to the end,
    and the exit status (1) tells the wrapper to count what was lost; it
    raised ENOSPC, which broke the harness's pipe."""
    from spexsup.pane import pretty

    mount = env.root / "tiny"
    if os.geteuid() != 0 or not _mount_tiny_tmpfs(mount):
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    try:
        log = mount / "output.log"
        log.touch()
        filler = _fill(mount)
        said = [{"type": "text", "text": f"said {n}"} for n in range(300)]
        events = b"".join(
            json.dumps({"type": "assistant", "message": {"content": [s]}}).encode() + b"\n"
            for s in said
        )
        assert len(events) < 60000  # under a pipe's buffer: no writer thread needed
        r, w = os.pipe()
        shown_r, shown_w = os.pipe()
        os.write(w, events)
        os.close(w)
        try:
            assert pretty.feed(str(log), "claude", stdin=r, stdout=shown_w) == 1
            os.close(shown_w)
            with os.fdopen(shown_r, "rb") as shown:
                pane = shown.read().decode()
        finally:
            os.close(r)
            with contextlib.suppress(OSError):
                os.close(shown_w)
        assert log.stat().st_size < len(events)
        assert pane.splitlines()[-1] == "said 299", pane[-200:]
        filler.unlink()
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
