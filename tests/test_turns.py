"""Turns with real wrappers in real panes: every verdict of DESIGN §2.5, provoked."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import SPEX, WRAPPERS, Env, harness, retry_until, signal_a_helper_thread

from spexsup.pane import marker, report
from spexsup.pane.marker import Stage
from spexsup.turn.confirm import Startup


def wake_json(env: Env, *args: str, extra: dict[str, str] | None = None) -> tuple[int, dict]:  # type: ignore[type-arg]
    # Options first: a prompt after `--` may itself start with a dash.
    if "--" in args:
        cut = args.index("--")
        args = (*args[:cut], "--json", *args[cut:])
    else:
        args = (*args, "--json")
    r = env.run("wake", *args, extra=extra)
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def turn_processes_alive(turn: str) -> list[int]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SPEXSUP_TURN") == turn and proc.status() != "zombie":
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def show(env: Env, name: str) -> dict:  # type: ignore[type-arg]
    return json.loads(env.run("show", name, "--json").stdout)  # type: ignore[no-any-return]


def test_exit0_is_completed(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    code, v = wake_json(env, "a", "do it", "--window", "10")
    assert code == 0
    assert v["verdict"] == "completed"
    assert v["rc"] == 0
    assert v["error"] is None
    assert set(v) >= {"session", "turn", "verdict", "rc", "pid", "error", "elapsed_ms"}
    # Completed without waiting out the window.
    assert v["elapsed_ms"] < 5000
    turn = show(env, "a")["turn"]
    assert turn["state"] == "complete" and turn["rc"] == 0
    # The wake recorded the end at `reporting:` or its reporter did (then
    # the other found it recorded: cas 3); either way never a failed report.
    directory = env.home / "turns" / "a" / v["turn"]
    assert retry_until(lambda: marker.read(directory).stage is Stage.EXIT, seconds=30)
    m = marker.read(directory)
    assert (m.rc, m.cas in (0, 3)) == (0, True), m
    assert "all good" in env.run("log", "a").stdout


def test_a_project_shadowing_the_stdlib_does_not_break_the_reporter(env: Env) -> None:
    # The wrapper runs in the session's cwd: a project with its own json.py
    # or sqlite3.py must not be what spex's reporter (or its deadline) imports.
    project = env.root / "project"
    project.mkdir()
    for module in ("json", "sqlite3", "enum", "fnmatch", "shlex"):
        (project / f"{module}.py").write_text(f"raise SystemExit('the project {module}.py ran')\n")
    go = env.root / "go"
    # Its PYTHONPATH (relative: resolved in the project) must not count either.
    env_ = ["--env", f"GO={go}", "--env", "PYTHONPATH=."]
    args = ["--cwd", str(project), *env_, "--", harness("until_go.sh")]
    env.run("new", "a", *args)
    code, v = wake_json(env, "a", "do it", "--window", "0.3", "--timeout", "1m")
    assert code == 0 and v["verdict"] == "confirmed", v
    # It ends with no spex process watching: only its reporter can record it.
    go.touch()
    directory = env.home / "turns" / "a" / v["turn"]
    assert retry_until(lambda: marker.read(directory).stage is Stage.EXIT, seconds=30)
    m = marker.read(directory)
    assert (m.rc, m.cas) == (0, 0), m
    assert "the project" not in env.run("log", "a").stdout


def test_exit7_is_failed_with_rc_and_output(env: Env) -> None:
    env.run("new", "a", "--", harness("exit7.sh"))
    code, v = wake_json(env, "a", "do it", "--window", "10")
    assert code == 1
    assert v["verdict"] == "failed"
    assert v["rc"] == 7
    assert "exited rc=7" in v["error"]
    assert "boom: something broke" in v["error"]
    assert "exit reporter" not in v["error"]
    s = show(env, "a")
    assert s["state"] == "failed"
    assert s["turn"]["state"] == "failed"
    # A failed last turn still allows the next wake.
    code, v = wake_json(env, "a", "again", "--window", "10")
    assert v["verdict"] == "failed"
    r = env.run("wake", "a", "plain", "--window", "10")
    assert r.returncode == 1
    # Said once: the rc on the verdict line, the cause after it (not `exited rc=7` again).
    assert re.fullmatch(r"a: failed turn \S+ rc=7 \(\d+ ms\): .*boom: something broke\n", r.stdout)
    assert "exited" not in r.stdout and r.stderr == "", r.stdout


def test_outliving_the_window_is_confirmed(env: Env) -> None:
    env.run("new", "a", "--window", "1", "--", harness("sleeper.sh"))
    started = time.monotonic()
    code, v = wake_json(env, "a", "long job")
    assert code == 0
    assert v["verdict"] == "confirmed"
    assert time.monotonic() - started >= 0.5
    assert v["pid"] == env.pane_pid("a")
    s = show(env, "a")
    assert s["state"] == "running"
    assert s["turn"]["state"] == "running"
    # Busy: refused, and nothing changed.
    r = env.run("wake", "a", "second")
    assert r.returncode == 3
    assert "busy" in r.stderr
    after = show(env, "a")
    assert [(t["id"], t["state"]) for t in after["turns"]] == [(v["turn"], "running")]
    assert after["state"] == "running"
    assert len(list((env.home / "turns" / "a").iterdir())) == 1
    assert env.run("stop", "a", "--grace", "1").returncode == 0
    assert turn_processes_alive(v["turn"]) == []


def test_stop_returns_once_the_wrapper_has_handed_the_pane_back(env: Env) -> None:
    # The wrapper's steps after its final marker (pane status, input flush)
    # are slow here, as on a loaded machine: the stop still leaves nothing.
    env.run("new", "a", "--", harness("sleeper.sh"))
    extra = {"SPEXSUP_WRAPPER": str(WRAPPERS / "slow_tail.sh")}
    code, v = wake_json(env, "a", "x", "--window", "0.5", extra=extra)
    assert code == 0 and v["verdict"] == "confirmed", v
    assert env.run("stop", "a", "--grace", "1").returncode == 0
    assert turn_processes_alive(v["turn"]) == []
    assert marker.read(env.home / "turns" / "a" / v["turn"]).stage is Stage.EXIT


def test_window_per_call_overrides_session(env: Env) -> None:
    # The session's window is past the test's time limit: only the call's
    # 0.3 s lets the wake return (no clock bound on a loaded machine).
    env.run("new", "a", "--window", "10m", "--", harness("sleeper.sh"))
    code, v = wake_json(env, "a", "x", "--window", "0.3")
    assert code == 0 and v["verdict"] == "confirmed"
    assert v["elapsed_ms"] < 600_000, v


def test_wrapper_that_cannot_start_never_confirms(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    missing = str(env.root / "no" / "such" / "turn.sh")
    code, v = wake_json(env, "a", "x", "--window", "0.4", extra={"SPEXSUP_WRAPPER": missing})
    assert code == 1
    assert v["verdict"] == "failed"
    assert "never confirmed startup" in v["error"]
    s = show(env, "a")
    assert s["turn"]["state"] == "failed"
    assert s["state"] == "failed"
    # The pane is a shell again and the next wake works.
    code, v = wake_json(env, "a", "x", "--window", "10")
    assert v["verdict"] == "completed"


def test_invalid_marker_fails_at_once(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    code, v = wake_json(
        env, "a", "x", "--window", "120", extra={"SPEXSUP_WRAPPER": str(WRAPPERS / "invalid.sh")}
    )
    assert code == 1
    assert "the turn's record is unreadable ('started-ish')" in v["error"]
    # Decided by the marker, not by the window running out (no clock bound:
    # a loaded machine may be slow, but never by two minutes).
    assert v["elapsed_ms"] < 120_000, v
    # Nothing of the failed startup is left running.
    assert retry_until(lambda: "sleep" not in _pane_command(env, "a"))


def _pane_command(env: Env, name: str) -> str:
    return env.tmux("display-message", "-p", "-t", f"={name}:0.0", "#{pane_current_command}").stdout


def test_zombie_wrapper_is_not_trusted(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    code, v = wake_json(
        env, "a", "x", "--window", "1", extra={"SPEXSUP_WRAPPER": str(WRAPPERS / "zombie.sh")}
    )
    assert code == 1
    assert "is a zombie" in v["error"]


def test_marker_pid_must_be_the_panes(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    code, v = wake_json(
        env, "a", "x", "--window", "1", extra={"SPEXSUP_WRAPPER": str(WRAPPERS / "other_pid.sh")}
    )
    assert code == 1
    assert "is not the pane's process" in v["error"], v


def test_reporter_that_never_finishes(env: Env) -> None:
    """`reporting:<pid>:0` at the window's end is a finished turn, not a failure:
    the wake records rc 0 itself and never kills the (stuck) reporter."""
    env.run("new", "a", "--", harness("exit0.sh"))
    stuck = str(WRAPPERS / "stuck_reporting.sh")
    code, v = wake_json(env, "a", "x", "--window", "1.5", extra={"SPEXSUP_WRAPPER": stuck})
    assert code == 0, v
    assert (v["verdict"], v["rc"], v["error"]) == ("completed", 0, None)
    turn = show(env, "a")["turn"]
    assert (turn["state"], turn["rc"]) == ("complete", 0)
    # The "reporter" (the stuck wrapper) was left alone.
    assert psutil.Process(v["pid"]).cmdline()[-1] == "300"


def test_a_clean_exit_is_recorded_without_waiting_for_the_reporter(env: Env) -> None:
    # `reporting:<pid>:0` is the end: the wake records it by the reporter's
    # own compare-and-swap, whether or not the reporter ever finishes.
    env.run("new", "a", "--", harness("exit0.sh"))
    stuck = str(WRAPPERS / "stuck_reporting.sh")
    code, v = wake_json(env, "a", "x", "--window", "60", extra={"SPEXSUP_WRAPPER": stuck})
    assert (code, v["verdict"], v["rc"]) == (0, "completed", 0), v
    assert v["elapsed_ms"] < 30_000  # not the window's 60 s
    assert show(env, "a")["turn"]["state"] == "complete"
    assert env.run("stop", "a", "--grace", "0").returncode == 0


def test_the_next_wake_leaves_the_last_turns_reporter_to_finish(env: Env) -> None:
    # The first wake returns at `reporting:` while its reporter (slow here)
    # still runs in the pane: the next launch must not respawn over it.
    env.run("new", "a", "--", harness("exit0.sh"))
    slow = {"SPEXSUP_WRAPPER": str(WRAPPERS / "slow_reporter.sh")}
    _, first = wake_json(env, "a", "one", "--window", "30", extra=slow)
    assert first["verdict"] == "completed", first
    _, second = wake_json(env, "a", "two", "--window", "30", extra=slow)
    assert second["verdict"] == "completed", second
    m = marker.read(env.home / "turns" / "a" / first["turn"])
    assert m.stage is Stage.EXIT and m.cas in (0, 3), m


def test_wrapper_sigkilled_inside_the_window(env: Env) -> None:
    env.run("new", "a", "--", harness("kill_wrapper.sh"))
    code, v = wake_json(env, "a", "x", "--window", "1")
    assert code == 1
    # Dead, or a zombie until tmux reaps it: either way not trusted.
    assert "is dead" in v["error"] or "is a zombie" in v["error"], v
    assert show(env, "a")["turn"]["state"] in ("failed", "lost")
    assert turn_processes_alive(v["turn"]) == []


def test_wrapper_sigkilled_after_the_window_is_lost(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    _, v = wake_json(env, "a", "x", "--window", "1")
    assert v["verdict"] == "confirmed"
    os.kill(v["pid"], signal.SIGKILL)
    assert retry_until(lambda: not psutil.pid_exists(v["pid"]) or _zombie(v["pid"]))
    s = show(env, "a")
    assert s["turn"]["state"] == "lost"
    assert "never recorded how it ended" in s["turn"]["error"]
    assert s["state"] == "failed"
    # The lost turn's harness is an orphan still tagged with the turn.
    for pid in turn_processes_alive(v["turn"]):
        os.kill(pid, signal.SIGKILL)
    _code, v = wake_json(env, "a", "again", "--window", "1")
    assert v["verdict"] == "confirmed"


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_reporter_failure_is_named_and_the_end_still_recorded(env: Env) -> None:
    env.run("new", "a", "--", harness("sabotage_reporter.sh"))
    code, v = wake_json(env, "a", "x", "--window", "10")
    assert code == 1
    assert "exited rc=7, exit reporter rc=127" in v["error"]
    turn = show(env, "a")["turn"]
    assert turn["state"] == "failed"
    assert turn["rc"] == 7


def test_tmux_server_killed_mid_turn(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    _, v = wake_json(env, "a", "x", "--window", "1")
    assert v["verdict"] == "confirmed"
    env.tmux("kill-server")
    assert retry_until(lambda: show(env, "a")["turn"]["state"] == "lost")
    s = show(env, "a")
    assert s["pane"] == "missing"
    _code, v = wake_json(env, "a", "back", "--window", "1")
    assert v["verdict"] == "confirmed"
    assert show(env, "a")["pane"] == "ok"


def test_wait_returns_the_rc_and_times_out(env: Env) -> None:
    env.run("new", "a", "--", "bash", "-c", 'sleep 4; echo "$0"; exit 5')
    _code, v = wake_json(env, "a", "x", "--window", "1")
    assert v["verdict"] == "confirmed"
    r = env.run("wait", "a", "--timeout", "0.2")
    assert r.returncode == 124
    assert r.stderr.startswith("spex: timed out")
    r = env.run("wait", "a", "--json")
    # The turn's rc is in the output; the exit code says "not complete" (1),
    # so an agent's rc can never pass for one of spex's own codes.
    assert r.returncode == 1
    (ended,) = json.loads(r.stdout)
    assert ended["state"] == "failed" and ended["rc"] == 5
    # Waiting on a turn that already ended answers at once.
    r = env.run("wait", "a")
    assert r.returncode == 1
    assert "failed rc=5" in r.stdout


def test_one_word_for_a_failed_end_in_every_view(env: Env) -> None:
    """A turn that fails after it started, and one that never confirmed its
    start: `failed` in ls, show, wait and events, never `error`; the wake's
    verdict is named only where it was a failure of its own."""
    env.run("new", "late", "--", "bash", "-c", "sleep 1; echo broke >&2; exit 5")
    env.run("new", "early", "--", harness("exit7.sh"))
    assert wake_json(env, "late", "x", "--window", "0.3")[1]["verdict"] == "confirmed"
    assert wake_json(env, "early", "x", "--window", "2")[1]["verdict"] == "failed"
    assert env.run("wait", "late", "early").returncode == 1
    listed = env.run("ls").stdout
    shown = {n: env.run("show", n).stdout for n in ("late", "early")}
    waited = env.run("wait", "late", "early").stdout
    logged = env.run("events", "--kind", "failed").stdout
    for text in (listed, *shown.values(), waited, logged):
        assert "failed" in text and "error" not in text, text
    assert "state        failed" in shown["late"], shown["late"]
    assert "failed rc=5" in shown["late"] and "never confirmed" not in shown["late"]
    # It ran and exited 7 inside its window: it started (issue 38 item 7).
    assert "failed rc=7" in shown["early"] and "never confirmed" not in shown["early"]
    assert {s["name"]: s["state"] for s in json.loads(env.run("ls", "--json").stdout)} == {
        "early": "failed",
        "late": "failed",
    }


def test_wait_on_several_sessions(env: Env) -> None:
    env.run("new", "ok", "--", "bash", "-c", "sleep 2")
    env.run("new", "bad", "--", "bash", "-c", "sleep 2; exit 3")
    assert wake_json(env, "ok", "x", "--window", "1")[1]["verdict"] == "confirmed"
    assert wake_json(env, "bad", "x", "--window", "1")[1]["verdict"] == "confirmed"
    r = env.run("wait", "ok", "bad", "--json")
    assert r.returncode == 1
    states = {e["session"]: e["state"] for e in json.loads(r.stdout)}
    assert states == {"ok": "complete", "bad": "failed"}
    env.run("new", "never", "--harness", "demo")
    assert env.run("wait", "never").returncode == 3


def test_stop_resume_cycle(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    _, v = wake_json(env, "a", "x", "--window", "1")
    r = env.run("stop", "a", "--grace", "2")
    assert r.returncode == 0, r.stderr
    s = show(env, "a")
    assert s["state"] == "stopped"
    assert s["turn"]["state"] == "aborted"
    assert turn_processes_alive(v["turn"]) == []
    # The pane is back at a shell, and the turn's final marker was written.
    assert retry_until(lambda: marker.read(env.home / "turns/a" / v["turn"]).stage is Stage.EXIT)
    assert retry_until(lambda: _pane_command(env, "a").strip() == "bash")
    r = env.run("wake", "a", "x")
    assert r.returncode == 3 and "stopped" in r.stderr
    assert env.run("resume", "a").returncode == 0
    assert show(env, "a")["state"] == "idle"
    # Resuming a session that is not stopped is a no-op success, like stop.
    again = env.run("resume", "a")
    assert again.returncode == 0 and "nothing to do" in again.stdout
    _code, v2 = wake_json(env, "a", "y", "--window", "1")
    assert v2["verdict"] == "confirmed"
    # Abort wins over the late exit report: the old turn stays aborted.
    assert env.run("rm", "a").returncode == 3
    assert env.run("rm", "a", "--force").returncode == 0
    assert turn_processes_alive(v2["turn"]) == []


def test_stop_escalates_to_sigkill_and_leaves_no_orphan(env: Env) -> None:
    env.run("new", "a", "--", harness("ignore_term.sh"))
    _code, v = wake_json(env, "a", "x", "--window", "1")
    assert v["verdict"] == "confirmed"
    assert len(turn_processes_alive(v["turn"])) >= 3  # harness, child, setsid escapee
    started = time.monotonic()
    assert env.run("stop", "a", "--grace", "0.5").returncode == 0
    assert time.monotonic() - started >= 0.5
    assert turn_processes_alive(v["turn"]) == []


def test_resume_refuses_while_old_turn_may_live(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    _code, v = wake_json(env, "a", "x", "--window", "1")
    assert env.run("stop", "a", "--grace", "1").returncode == 0
    # A process of the old turn shows up again (tagged with its id).
    straggler = subprocess.Popen(
        ["sleep", "60"], env={**env.vars, "SPEXSUP_TURN": v["turn"]}, start_new_session=True
    )
    try:
        r = env.run("resume", "a")
        assert r.returncode == 3
        assert f"pid {straggler.pid}" in r.stderr
        assert show(env, "a")["state"] == "stopped"
        assert env.run("resume", "a", "--force").returncode == 0
    finally:
        straggler.kill()
        straggler.wait()


def test_stop_of_idle_session_and_bad_grace(env: Env) -> None:
    env.run("new", "a", "--harness", "demo")
    assert env.run("stop", "a", "--grace", "-1").returncode == 2
    assert show(env, "a")["state"] == "idle"
    r = env.run("stop", "a")
    assert r.returncode == 0 and "aborted" not in r.stdout
    assert show(env, "a")["state"] == "stopped"


def test_demo_resumes_its_conversation(env: Env) -> None:
    env.run("new", "d", "--harness", "demo")
    _, v = wake_json(env, "d", "first", "--window", "1")
    assert v["verdict"] in ("confirmed", "completed")
    assert env.run("wait", "d").returncode == 0
    conversation = show(env, "d")["harness_session_id"]
    assert conversation and conversation.startswith("demo-")
    _, v = wake_json(env, "d", "second", "--window", "1")
    assert env.run("wait", "d").returncode == 0
    out = env.run("log", "d").stdout
    assert f"conversation: {conversation} (turn 2)" in out
    assert show(env, "d")["turn"]["resumed"] == conversation
    _, v = wake_json(env, "d", "third", "--fresh", "--window", "1")
    assert env.run("wait", "d").returncode == 0
    assert "(turn 1)" in env.run("log", "d").stdout
    assert show(env, "d")["harness_session_id"] != conversation
    _code, v = wake_json(env, "d", "please fail now", "--window", "10")
    assert v["verdict"] == "failed" and v["rc"] == 1
    assert "asked me to fail" in v["error"]


def test_command_harness_gets_prompt_and_env(env: Env) -> None:
    out = env.root / "got"
    env.run("new", "c", "--env", f"RECORD_TO={out}", "--", sys.executable, harness("record.py"))
    _code, v = wake_json(env, "c", "hello world", "--window", "30")
    assert v["verdict"] == "completed", v
    assert out.read_bytes() == b"hello world"
    seen = dict(line.split("=", 1) for line in (out.parent / "got.env").read_text().splitlines())
    turn_dir = env.home / "turns" / "c" / v["turn"]
    assert seen["SPEXSUP_SESSION"] == "c"
    assert seen["SPEXSUP_TURN"] == v["turn"]
    assert seen["SPEXSUP_TURN_DIR"] == str(turn_dir)
    assert seen["SPEXSUP_PROMPT_FILE"] == str(turn_dir / "prompt")
    assert seen["via"] == "argv"


def test_big_prompts_via_file_and_stdin(env: Env) -> None:
    """A harness that declares the stdin fallback gets a prompt too big for
    argv there (the command harness refuses one: see test_delivery)."""
    out = env.root / "got"
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        f'[harness.rec]\nfresh = ["{sys.executable}", "{harness("record.py")}", "{{prompt}}"]\n'
        "stdin_fallback = true\n"
    )
    env.run("new", "c", "--harness", "rec", "--env", f"RECORD_TO={out}")
    big = (b"x$(rm -rf /)`id`'\"\n-\xc3\xa9" * 80000)[: 1 << 20]
    (env.root / "p").write_bytes(big)
    _code, v = wake_json(env, "c", "-f", str(env.root / "p"), "--window", "30")
    assert v["verdict"] == "completed", v
    assert out.read_bytes() == big
    assert "via=stdin" in (out.parent / "got.env").read_text()
    r = env.run("wake", "c", "-f", "-", "--json", "--window", "30", input=big[:200000])
    assert json.loads(r.stdout)["verdict"] == "completed"
    assert out.read_bytes() == big[:200000]
    # Over 1 MiB: refused as invalid input, nothing started.
    turns_before = len(show(env, "c")["turns"])
    (env.root / "p").write_bytes(big + b"more")
    r = env.run("wake", "c", "-f", str(env.root / "p"))
    assert r.returncode == 2
    assert len(show(env, "c")["turns"]) == turns_before
    assert env.run("wake", "c").returncode == 2
    assert env.run("wake", "c", "x", "-f", "-").returncode == 2
    assert env.run("wake", "c", "-f", str(env.root / "nope")).returncode == 2


def test_turn_exit_is_a_compare_and_swap(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    _code, v = wake_json(env, "a", "x", "--window", "1")
    turn = v["turn"]
    spex = env.spex()
    # A report for some other turn is stale: nothing changes.
    assert report.record_exit(spex.store, "a", "20200101T000000-000000", 0) == report.STALE
    assert show(env, "a")["turn"]["state"] == "running"
    assert env.run("stop", "a", "--grace", "1").returncode == 0
    # Abort wins over a later (or repeated) exit report.
    r = subprocess.run([SPEX, "internal", "turn-exit", "a", turn, "0"], env=env.vars, check=False)
    assert r.returncode == report.STALE
    assert show(env, "a")["turn"]["state"] == "aborted"
    for bad in (["a", turn, "256"], ["a", turn, "x"], ["a.b", turn, "0"], ["a", turn]):
        r = subprocess.run(
            [SPEX, "internal", "turn-exit", *bad], env=env.vars, capture_output=True, check=False
        )
        assert r.returncode == 2, bad


def test_twenty_wakes_at_once(env: Env) -> None:
    for i in range(20):
        assert env.run("new", f"s{i}", "--", harness("sleeper.sh")).returncode == 0
    procs = [
        subprocess.Popen(
            [SPEX, "wake", f"s{i}", "go", "--json", "--window", "1"],
            env=env.vars,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(20)
    ]
    results = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, (out, err)
        assert b"database is locked" not in err
        assert json.loads(out)["verdict"] == "confirmed"
    rows = json.loads(env.run("ls", "--json").stdout)
    assert len(rows) == 20
    assert all(r["turn"]["state"] == "running" for r in rows)


def test_log_follow_streams_until_the_end(env: Env) -> None:
    env.run("new", "a", "--", "bash", "-c", "for i in 1 2 3; do echo line$i; sleep 0.7; done")
    _code, v = wake_json(env, "a", "x", "--window", "1")
    assert v["verdict"] == "confirmed"
    r = env.run("log", "a", "-f", timeout=20)
    assert r.returncode == 0
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("line")] == [
        "line1",
        "line2",
        "line3",
    ]
    assert env.run("log", "a", "--turn", v["turn"]).stdout == r.stdout
    assert env.run("log", "a", "--turn", "nope").returncode == 3


def test_wrapper_ships_in_the_wheel(tmp_path: Path) -> None:
    """The wrapper is found from an installed wheel exactly as from the repo."""
    repo = Path(__file__).resolve().parent.parent
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(repo),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:  # no hatchling in this venv: build isolated
        r = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(repo)],
            capture_output=True,
            text=True,
            check=False,
        )
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("spexsup-*.whl")
    import zipfile

    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        assert "spexsup/shell/turn.sh" in z.namelist()
        z.extractall(target)
    found = subprocess.run(
        [sys.executable, "-c", "from spexsup.paths import wrapper_path; print(wrapper_path())"],
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert found.stdout.strip() == str(target / "spexsup" / "shell" / "turn.sh")


def test_signal_death_reports_128_plus_signal(env: Env) -> None:
    env.run("new", "a", "--", "bash", "-c", "kill -KILL $$")
    _, v = wake_json(env, "a", "x", "--window", "10")
    assert v["verdict"] == "failed"
    assert v["rc"] == 128 + signal.SIGKILL
    assert show(env, "a")["turn"]["rc"] == 137


def test_wake_killed_mid_confirmation_leaves_a_durable_turn(env: Env) -> None:
    """SIGKILL the `spex wake` itself: the turn runs on and its end is recorded."""
    env.run("new", "a", "--", "bash", "-c", "sleep 1; exit 4")
    proc = subprocess.Popen([SPEX, "wake", "a", "x", "--window", "30"], env=env.vars)
    turn_dir = env.home / "turns" / "a"
    assert retry_until(lambda: turn_dir.exists() and any(turn_dir.iterdir()))
    (directory,) = turn_dir.iterdir()
    assert retry_until(lambda: marker.read(directory).stage is Stage.RUNNING)
    proc.kill()
    proc.wait()
    r = env.run("wait", "a", "--timeout", "20")
    assert r.returncode == 1
    assert "failed rc=4" in r.stdout
    assert show(env, "a")["turn"]["state"] == "failed"


def _confirm_with_a_change(env: Env, change: str) -> str:
    """Run confirm_startup on a real process and change things as the window
    ends: after its pid checks (window - 0.1 s), before its re-read. A run
    where a loaded machine made the change miss that span is run again."""
    window = 2.0
    for attempt in range(5):
        result, changed_at = _one_change(env.root / f"turn{attempt}", change, window)
        if changed_at is not None and window - 0.1 <= changed_at < window:
            assert result.verdict == "failed"
            assert result.error is not None
            return result.error
    raise AssertionError("the change never landed between the checks and the re-read")


def _one_change(directory: Path, change: str, window: float) -> tuple[Startup, float | None]:
    import threading

    from spexsup.adapters.watch import DirWatch
    from spexsup.turn.confirm import confirm_startup

    directory.mkdir()
    wrapper = subprocess.Popen(["sleep", "30"])
    other = subprocess.Popen(["sleep", "30"])
    (directory / "outcome").write_text(f"running:{wrapper.pid}")
    started = time.monotonic()
    changed_at: list[float] = []

    def late() -> None:
        time.sleep(max(0.0, started + window - 0.05 - time.monotonic()))
        if change == "kill":
            wrapper.kill()
            # The span is about a death, not a signal on its way: on a loaded
            # machine SIGKILL takes a while to land; wait for the (unreaped) zombie.
            with contextlib.suppress(psutil.Error):
                while psutil.Process(wrapper.pid).status() != psutil.STATUS_ZOMBIE:
                    time.sleep(0.001)
        else:
            tmp = directory / "outcome.tmp"
            tmp.write_text(f"running:{other.pid}")
            tmp.replace(directory / "outcome")
        changed_at.append(time.monotonic() - started)

    try:
        with DirWatch([directory]) as watch:
            threading.Thread(target=late, daemon=True).start()
            result = confirm_startup(directory, window, started, watch, wrapper.pid)
    finally:
        for p in (wrapper, other):
            p.kill()
            p.wait()
    return result, changed_at[0] if changed_at else None


def test_marker_changing_while_settling_fails(env: Env) -> None:
    error = _confirm_with_a_change(env, "rewrite")
    # Normally caught by the settle re-read; on a very loaded machine the
    # change may land before the checks, which then refuse the new pid.
    assert "changed to" in error or "is not the pane's process" in error


def test_wrapper_dying_while_settling_fails(env: Env) -> None:
    error = _confirm_with_a_change(env, "kill")
    assert any(w in error for w in ("died while its start was checked", "is a zombie", "is dead"))


def test_a_turn_dir_removed_before_it_is_watched_is_no_error(tmp_path: Path) -> None:
    """`spex rm` racing another rm (or a stop) of the same session: the turn
    dir a waiter is about to watch can vanish first (make stress found it as
    `spex: No such file or directory`). The waiter is woken to look again."""
    from spexsup.adapters.watch import DirWatch

    gone = tmp_path / "turn"
    gone.mkdir()
    gone.rmdir()
    with DirWatch([gone]) as watch:
        assert watch.wait(5.0)  # at once, not after the timeout


def test_a_process_that_vanishes_during_the_turn_scan_is_no_error() -> None:
    """A stop's hunt for a turn's processes meets processes that exit as it
    reads them (opencode forks short-lived helpers): one gone, or a zombie,
    by the time the pass reads it is simply not the turn's, and no error."""
    from spexsup.adapters.procs import turn_processes

    tag = f"t-vanish-{os.getpid()}-{time.monotonic_ns()}"
    tagged = {**os.environ, "SPEXSUP_TURN": tag}
    live, zombie, gone = (subprocess.Popen(["sleep", "30"], env=tagged) for _ in range(3))
    try:
        gone.kill()
        gone.wait()
        zombie.kill()
        os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # a zombie now, not reaped
        assert [p.pid for p in turn_processes(tag, None)] == [live.pid]
    finally:
        for child in (live, zombie):
            child.kill()
            child.wait()


def test_threads_asking_at_once_get_each_their_own_turns_processes() -> None:
    """Concurrent hunts share one pass over /proc (a stop of many sessions):
    each still gets exactly its own turn's processes, and a turn whose
    processes all ended gets none."""
    from concurrent.futures import ThreadPoolExecutor

    from spexsup.adapters.procs import turn_processes

    base = f"t-share-{os.getpid()}-{time.monotonic_ns()}"
    children = {
        f"{base}-{i}": [
            subprocess.Popen(["sleep", "30"], env={**os.environ, "SPEXSUP_TURN": f"{base}-{i}"})
            for _ in range(i % 3)
        ]
        for i in range(12)
    }
    try:
        with ThreadPoolExecutor(12) as pool:
            found = dict(
                zip(children, pool.map(lambda t: turn_processes(t, None), children), strict=True)
            )
        for turn, mine in children.items():
            assert sorted(p.pid for p in found[turn]) == sorted(c.pid for c in mine), turn
    finally:
        for mine in children.values():
            for child in mine:
                child.kill()
                child.wait()


def test_a_stop_of_several_signals_them_all_within_one_grace(env: Env) -> None:
    """`spex stop a b` stops both at once: each harness, on its SIGTERM,
    waits for the other's, and ends by itself only if that one came within
    the grace (60 s). One after another, a would sit out its grace and be
    killed before b ever heard of the stop."""
    marks = env.root / "marks"
    marks.mkdir()
    for name, other in (("a", "b"), ("b", "a")):
        body = (
            f"trap 'touch {marks}/term-{name}; while [ ! -e {marks}/term-{other} ]; do"
            f" sleep 0.01; done; touch {marks}/saw-{name}; exit 0' TERM;"
            f" touch {marks}/up-{name}; sleep 300 & wait $!"
        )
        assert env.run("new", name, "--", "bash", "-c", body).returncode == 0
        assert wake_json(env, name, "go", "--window", "1")[1]["verdict"] == "confirmed"
    assert retry_until(lambda: len(list(marks.glob("up-*"))) == 2, seconds=20)
    r = env.run("stop", "a", "b", "--grace", "60", timeout=120)
    assert r.returncode == 0, r.stderr
    assert (marks / "saw-a").exists() and (marks / "saw-b").exists(), sorted(marks.iterdir())
    assert [line.split(":")[0] for line in r.stdout.splitlines()] == ["a", "b"]


@pytest.mark.parametrize("command", ["stop", "rm"])
@pytest.mark.parametrize("names", [("a",), ("a", "b")])
@pytest.mark.parametrize("where", ["process", "helper thread"])
def test_a_signal_during_a_stop_kills_what_it_was_stopping_and_ends_it(
    env: Env, where: str, names: tuple[str, ...], command: str
) -> None:
    """A SIGTERM (to the process, or to a helper thread, where the kernel
    may hand it) during `spex stop` (or `spex rm --force`, whose grace is
    5 s), the harnesses ignoring theirs and the grace a minute: spex kills now rather than wait
    the grace out, and exits 143 with no traceback once the stops under way
    are done (DESIGN: a signal ends any command in a second or two): each
    session stopped (or removed), its turn aborted, none of its processes
    left. Before, the signal cut a stop between its record and its kill,
    and that harness ran on under an aborted turn."""
    marks = env.root / "marks"
    marks.mkdir()
    turns = {}
    for name in names:
        body = (
            f"trap 'touch {marks}/term-{name}' TERM; touch {marks}/up-{name};"
            " while :; do sleep 300 & wait $!; done"
        )
        assert env.run("new", name, "--", "bash", "-c", body).returncode == 0
        turns[name] = wake_json(env, name, "go", "--window", "1")[1]["turn"]
    assert retry_until(lambda: len(list(marks.glob("up-*"))) == len(names), seconds=20)
    argv = ["stop", *names, "--grace", "60"] if command == "stop" else ["rm", *names, "--force"]
    stopping = subprocess.Popen(
        [SPEX, *argv],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        terms = lambda: len(list(marks.glob("term-*"))) == len(names)  # noqa: E731
        assert retry_until(terms, seconds=30)
        if where == "process":
            stopping.send_signal(signal.SIGTERM)
        else:
            signal_a_helper_thread(stopping.pid, signal.SIGTERM)
        _, err = stopping.communicate(timeout=30)  # not the grace's 60 s
    finally:
        if stopping.poll() is None:
            stopping.kill()
    assert stopping.returncode == 143, err
    assert "Traceback" not in err, err
    for name, turn in turns.items():
        if command == "stop":
            shown = show(env, name)
            assert (shown["state"], shown["turn"]["state"]) == ("stopped", "aborted"), name
        else:
            assert env.run("show", name).returncode == 3, name  # removed
        assert turn_processes_alive(turn) == [], name


def test_a_stop_of_several_stops_the_others_when_one_is_refused(env: Env) -> None:
    """One session refused (held by a maintenance lease) stops none of the
    others: each stopped one says so in its order, the refused one is a
    `spex: NAME: why` line, and the command exits as that refusal (3);
    `--json` lists each, the refused one `{ok: false, error, exit_code}`."""
    for name in ("a", "leased", "c"):
        assert env.run("new", name, "--", harness("sleeper.sh")).returncode == 0
    turns = {n: wake_json(env, n, "go", "--window", "1")[1]["turn"] for n in ("a", "c")}
    out = env.root / "stop"
    op = env.root / "op.sh"
    op.write_text(
        "#!/bin/bash\n"
        f"spex stop a leased c --grace 1 >{out}.txt 2>{out}.err; echo $? >{out}.rc\n"
        f"spex stop a leased c --grace 1 --json >{out}.json; echo $? >{out}.jrc\n"
    )
    op.chmod(0o755)
    r = env.run("maint", "--stop", "leased", "--", str(op))
    assert r.returncode == 0, r.stderr
    assert (env.root / "stop.rc").read_text().strip() == "3"
    said = (env.root / "stop.txt").read_text().splitlines()
    assert said == [
        f"a: stopped (turn {turns['a']} aborted; no new turns until spex resume a)",
        f"c: stopped (turn {turns['c']} aborted; no new turns until spex resume c)",
    ]
    err = (env.root / "stop.err").read_text()
    assert err.startswith("spex: leased: ") and "maintenance lease" in err, err
    for name in ("a", "c"):
        assert show(env, name)["state"] == "stopped"
        assert show(env, name)["turn"]["state"] == "aborted"
    assert (env.root / "stop.jrc").read_text().strip() == "3"
    docs = json.loads((env.root / "stop.json").read_text())
    assert [(d["session"], d["ok"]) for d in docs] == [("a", True), ("leased", False), ("c", True)]
    assert docs[1]["exit_code"] == 3 and docs[1]["error"].startswith("leased: ")


def test_stop_and_resume_say_what_they_do(env: Env) -> None:
    """`stop` aborts (no pause), `resume` only lets turns start again, and
    the conversation that the next wake continues is named as one."""
    env.run("new", "a", "--harness", "demo")
    assert wake_json(env, "a", "hello", "--window", "3")[1]["ok"] is not False
    env.run("wait", "a")
    shown = env.run("show", "a").stdout
    assert "conversation " in shown and "resume id" not in shown, shown
    env.run("new", "s", "--", harness("sleeper.sh"))
    turn = wake_json(env, "s", "x", "--window", "1")[1]["turn"]
    r = env.run("stop", "s", "--grace", "1")
    assert r.stdout.strip() == f"s: stopped (turn {turn} aborted; no new turns until spex resume s)"
    r = env.run("resume", "s")
    assert r.stdout.strip() == "s: resumed: takes turns again (the aborted turn is not restarted)"
    assert show(env, "s")["turn"]["state"] == "aborted"  # not restarted
    assert "s: not stopped (nothing to do)" in env.run("resume", "s").stdout
    for command, words in (("stop", "ends `aborted`"), ("resume", "does not restart")):
        text = " ".join(env.run(command, "--help").stdout.split())
        assert words in text, text


def test_ctrl_c_on_wait_says_what_runs_on_and_how_to_stop_it(env: Env) -> None:
    """Issue 38, item 6: Ctrl-C on `spex wait` ends the wait, not the turns:
    it says which still run and the one command that stops them."""
    import pexpect

    for name in ("a", "b"):
        assert env.run("new", name, "--", harness("sleeper.sh")).returncode == 0
        assert env.run("wake", name, "go", "--window", "0.3").returncode == 0
    child = pexpect.spawn(SPEX, ["wait", "a", "b"], env=env.vars, encoding="utf-8", timeout=30)
    # The wait is under way once its counter line shows.
    child.expect("0/2")
    child.sendintr()
    child.expect("spex: stopped waiting; still running: a, b")
    child.expect(r"\(stop them with: spex stop a b\)")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert show(env, "a")["turn"]["state"] == "running"


def test_a_failed_turn_is_said_failed_once_by_wake_and_wait(env: Env) -> None:
    """Issue 38, item 8: `failed turn T rc=1`, `turn T failed rc=1`: the
    state once, the rc once, no `exited rc=1` after it (`--json` keeps it)."""
    env.run("new", "bad", "--", "sh", "-c", "exit 1")
    r = env.run("wake", "bad", "go", "--window", "10")
    assert r.returncode == 1
    assert re.fullmatch(r"bad: failed turn \S+ rc=1 \(\d+ ms\)\n", r.stdout), r.stdout
    r = env.run("wait", "bad", "--timeout", "10")
    assert r.returncode == 1
    assert re.fullmatch(r"bad: turn \S+ failed rc=1\n", r.stdout), r.stdout
    shown = env.run("show", "bad").stdout
    assert "exited rc=1" not in shown and "failed rc=1" in shown, shown
    code, v = wake_json(env, "bad", "again", "--window", "10")
    assert (code, v["verdict"], v["error"]) == (1, "failed", "exited rc=1"), v
