"""Honest outcomes (issue 14): time limits, outcome flags from the agents'
structured output, strict mode and usage limits, against fakes under
tests/fakes/ that print what the real CLIs print."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import Env, harness, retry_until
from test_turns import show, turn_processes_alive, wake_json

from spexsup import outcome
from spexsup.harness import load_registry, parse_duration

ONLINE = {"FAKE_CLAUDE_LOGGED_IN": "1"}


def new(env: Env, name: str, harness_name: str, *extra: str, **env_vars: str) -> None:
    args = ["new", name, "--harness", harness_name, "--cwd", str(env.root)]
    for key, value in env_vars.items():
        args += ["--env", f"{key}={value}"]
    r = env.run(*args, *extra)
    assert r.returncode == 0, r.stderr


def wait(env: Env, name: str) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    r = env.run("wait", name, "--timeout", "60")
    j = env.run("wait", name, "--json")
    return r.returncode, r.stdout.strip(), json.loads(j.stdout)[0]


# --- time limits ----------------------------------------------------------------


def test_timeout_ends_the_tree_with_rc_124(env: Env) -> None:
    (env.home).mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text("grace = 1\n")
    # Ignores SIGTERM, with a stubborn child and a setsid escapee.
    env.run("new", "t", "--cwd", str(env.root), "--", harness("ignore_term.sh"))
    started = time.monotonic()
    code, v = wake_json(env, "t", "work", "--timeout", "2s", "--window", "0.5")
    assert code == 0 and v["verdict"] == "confirmed", v
    code, line, turn = wait(env, "t")
    assert code == 1, line
    assert time.monotonic() - started < 30
    assert turn["state"] == "timed-out" and turn["rc"] == 124 and turn["cause"] == "timed-out"
    assert turn["timeout"] == 2.0
    assert line.endswith("timed-out rc=124: ran past its time limit (2s)"), line
    marker = (env.home / "turns" / "t" / turn["id"] / "outcome").read_text()
    assert marker.startswith("exit:124:cas:")
    assert retry_until(lambda: turn_processes_alive(turn["id"]) == [], 10)
    assert show(env, "t")["state"] == "error"


def test_timeout_within_the_window_is_a_failed_verdict(env: Env) -> None:
    env.run("new", "t", "--cwd", str(env.root), "--timeout", "1s", "--", harness("sleeper.sh"))
    assert show(env, "t")["timeout"] == 1.0
    code, v = wake_json(env, "t", "work", "--window", "8")
    assert code == 1 and v["verdict"] == "failed" and v["rc"] == 124, v
    assert v["error"] == "ran past its time limit (1s)"
    # The wrapper's own last steps (after the final marker) may still be exiting.
    assert retry_until(lambda: turn_processes_alive(v["turn"]) == [], 10)


def test_a_turn_that_ends_in_time_is_not_touched(env: Env) -> None:
    env.run("new", "t", "--cwd", str(env.root), "--", harness("exit0.sh"))
    code, v = wake_json(env, "t", "quick", "--timeout", "1h", "--window", "8")
    assert code == 0 and v["verdict"] == "completed", v
    turn = show(env, "t")["turn"]
    assert turn["state"] == "complete" and turn["timeout"] == 3600.0


@pytest.mark.parametrize("bad", ["5x", "0s", "-1m", "9999h", ""])
def test_bad_durations_are_refused(env: Env, bad: str) -> None:
    env.run("new", "t", "--cwd", str(env.root), "--", harness("exit0.sh"))
    r = env.run("wake", "t", "hi", f"--timeout={bad}")
    assert r.returncode == 2 and r.stderr.startswith("spex: invalid timeout"), r.stderr
    assert "Traceback" not in r.stderr
    assert show(env, "t")["turn"] is None


def test_durations() -> None:
    assert parse_duration("90s") == 90 and parse_duration("15m") == 900
    assert parse_duration("2h") == 7200 and parse_duration("45") == 45
    assert outcome.span(90) == "90s" and outcome.span(900) == "15m" and outcome.span(7200) == "2h"


# --- outcome flags --------------------------------------------------------------


def test_claude_denials_keep_the_turn_complete_but_say_so(env: Env) -> None:
    new(env, "c", "claude", **ONLINE)
    code, v = wake_json(env, "c", "write a.txt [deny]", "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v
    assert v["flags"] == ["denied:Write", "denied:Bash"]
    r = env.run("wake", "c", "again [deny]", "--window", "10")
    assert r.returncode == 0
    assert r.stdout.strip().endswith("(2 tool permissions denied: Write, Bash)"), r.stdout
    code, line, turn = wait(env, "c")
    assert code == 0
    assert line.endswith("complete rc=0 (2 tool permissions denied: Write, Bash)"), line
    assert turn["flags"] == ["denied:Write", "denied:Bash"] and turn["cause"] is None
    assert show(env, "c")["turn"]["flags"] == ["denied:Write", "denied:Bash"]


@pytest.mark.parametrize(
    ("prompt", "flags"),
    [
        ("go [max-turns]", ["max-turns"]),
        ("go [ask]", ["asked-question"]),
        ("go [silent]", ["no-answer"]),
        ("go", []),
    ],
)
def test_claude_flags(env: Env, prompt: str, flags: list[str]) -> None:
    new(env, "c", "claude", **ONLINE)
    code, v = wake_json(env, "c", prompt, "--window", "10")
    assert code == 0 and v["verdict"] == "completed" and v["flags"] == flags, v


def test_strict_fails_a_flagged_turn(env: Env) -> None:
    new(env, "c", "claude", **ONLINE)
    code, v = wake_json(env, "c", "go [ask]", "--strict", "--window", "10")
    assert code == 1 and v["verdict"] == "failed" and v["rc"] == 0, v
    assert v["error"] == "strict: ended asking a question"
    code, _, turn = wait(env, "c")
    assert code == 1 and turn["state"] == "error" and turn["cause"] == "strict"
    assert turn["strict"] is True
    # Without flags a strict turn completes.
    code, v = wake_json(env, "c", "go", "--strict", "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v


def test_strict_per_session(env: Env) -> None:
    new(env, "c", "claude", "--strict", **ONLINE)
    assert show(env, "c")["strict"] is True
    code, v = wake_json(env, "c", "go [max-turns]", "--window", "10")
    assert code == 1 and v["error"] == "strict: stopped at its max turns", v


def test_strict_per_harness(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text('[harness.claude]\nstrict = true\ntimeout = "15m"\n')
    new(env, "c", "claude", **ONLINE)
    code, v = wake_json(env, "c", "x [deny]", "--window", "10")
    assert code == 1 and v["error"].startswith("strict: 2 tool permissions denied"), v
    assert show(env, "c")["turn"]["timeout"] == 900.0


def test_opencode_error_then_exit_0_is_a_failure_without_strict(env: Env) -> None:
    new(env, "o", "opencode", FAKE_OPENCODE_ONLINE="1")
    code, v = wake_json(env, "o", "go [error]", "--window", "10")
    assert code == 1 and v["verdict"] == "failed" and v["rc"] == 0, v
    assert v["flags"] == ["agent-error:Provider returned error: 500 Internal Server Error"]
    assert v["error"].startswith("exited 0 after an error: agent error: Provider returned")
    assert show(env, "o")["turn"]["cause"] == "agent-error"
    # An error it recovered from (an answer followed) is no failure.
    code, v = wake_json(env, "o", "go [recover]", "--window", "10")
    assert code == 0 and v["verdict"] == "completed" and v["flags"] == [], v


def test_codex_flags(env: Env) -> None:
    (env.root / ".git").mkdir()
    new(env, "x", "codex", FAKE_CODEX_ONLINE="1")
    code, v = wake_json(env, "x", "go [ask]", "--window", "10")
    assert code == 0 and v["flags"] == ["asked-question"], v
    code, v = wake_json(env, "x", "go [fail]", "--window", "10")
    assert code == 1 and v["flags"] == ["agent-error:stream disconnected before completion"], v
    code, v = wake_json(env, "x", "go", "--window", "10")
    assert code == 0 and v["flags"] == [], v


def test_pi_flags(env: Env) -> None:
    new(env, "p", "pi", FAKE_PI_ONLINE="1")
    code, v = wake_json(env, "p", "go [error]", "--window", "10")
    assert code == 0 and v["flags"] == ["agent-error:Connection error."], v
    code, v = wake_json(env, "p", "go [error]", "--strict", "--window", "10")
    assert code == 1 and v["error"] == "strict: agent error: Connection error.", v


def test_command_harness_has_no_flags(env: Env) -> None:
    env.run("new", "t", "--cwd", str(env.root), "--", harness("exit0.sh"))
    code, v = wake_json(env, "t", "quick", "--strict", "--window", "8")
    assert code == 0 and v["flags"] == [], v


# --- usage limits ---------------------------------------------------------------


def test_claude_usage_limit_names_the_reset(env: Env) -> None:
    new(env, "c", "claude", FAKE_LIMIT_SECONDS="600", **ONLINE)
    code, v = wake_json(env, "c", "go [limit]", "--window", "10")
    assert code == 1 and v["verdict"] == "failed", v
    turn = show(env, "c")["turn"]
    assert turn["cause"] == "usage-limit"
    assert abs(turn["limit_reset"] - (time.time() + 600)) < 30
    clock = time.strftime("%H:%M", time.localtime(turn["limit_reset"]))
    assert v["error"] == f"claude hit its usage limit (resets {clock})"


def test_codex_usage_limit_in_relative_time(env: Env) -> None:
    (env.root / ".git").mkdir()
    new(env, "x", "codex", FAKE_CODEX_ONLINE="1")
    code, v = wake_json(env, "x", "go [limit]", "--window", "10")
    assert code == 1 and v["error"].startswith("codex hit its usage limit (resets "), v
    turn = show(env, "x")["turn"]
    assert turn["cause"] == "usage-limit" and abs(turn["limit_reset"] - time.time() - 60) < 30


def test_reset_times() -> None:
    now = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    assert outcome.reset_time("epoch", "1700003600", now) == 1700003600
    assert outcome.reset_time("in", "2 hours 5 minutes", now) == now + 7500
    assert outcome.reset_time("in", "5h", now) == now + 18000
    assert outcome.reset_time("in", "soon", now) is None
    utc = outcome.reset_time("clock", "11pm (UTC)", now)
    assert utc == 1_700_002_800  # the same day, 23:00 UTC
    assert outcome.reset_time("clock", "9:30 AM (UTC)", now) == 1_700_040_600  # the next day
    assert outcome.reset_time("clock", "25:00", now) is None


def test_limited_patterns_in_toml(env: Env, tmp_path: Path) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        "[harness.mine]\n"
        'fresh = ["mine", "{prompt}"]\n'
        "limited = [{ pattern = 'quota until (?P<reset>[0-9]+)', reset = 'epoch' }]\n"
        "[harness.bad]\n"
        'fresh = ["bad", "{prompt}"]\n'
        "limited = [{ pattern = 'x', reset = 'tomorrow' }]\n"
    )
    registry = load_registry(env.home)
    assert registry.get("mine").limited[0].reset == "epoch"
    with pytest.raises(Exception, match="limited"):
        registry.get("bad")
    (tmp_path / "output.log").write_text("working\nquota until 1900000000\n")
    found = outcome.find_limit(tmp_path, (("quota until (?P<reset>[0-9]+)", "epoch"),), 0)
    assert found is not None and found.reset == 1900000000


# --- the parser is bounded ------------------------------------------------------


def test_lines_backwards_skips_oversized_and_cut_lines(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    big = b"x" * (outcome.LINE_MAX + 10)
    log.write_bytes(b"first\n" + big + b"\nmiddle\n" + b"y" * 100 + b"\nlast\n")
    assert list(outcome.lines_backwards(log)) == [b"last", b"y" * 100, b"middle", b"first"]
    # With a budget that cuts `middle`'s line start, nothing before it is yielded.
    assert list(outcome.lines_backwards(log, budget=110)) == [b"last", b"y" * 100]


def test_the_decisive_event_is_found_at_the_end_of_a_big_output(tmp_path: Path) -> None:
    event = {"type": "assistant", "message": {"content": [{"type": "text", "text": "x" * 500}]}}
    line = json.dumps(event).encode() + b"\n"
    result = {"type": "result", "subtype": "success", "is_error": False, "result": "ok?"}
    with (tmp_path / "output.log").open("wb") as f:
        f.write(line * 4000)
        f.write(json.dumps(result).encode() + b"\n")
    assert outcome.read(tmp_path, "claude").flags == ["asked-question"]
    assert outcome.read(tmp_path, "claude", budget=1 << 16).flags == ["asked-question"]


# --- waves ----------------------------------------------------------------------


def test_fanout_strict_legs_fail_and_are_retried(env: Env) -> None:
    new(env, "a", "claude", **ONLINE)
    new(env, "b", "claude", **ONLINE)
    # Confirmed first, then ended with a question: a strict failure after launch.
    r = env.run(
        "fanout", "a", "b", "-m", "go [sleep 1.5] [ask]", "--strict", "--window", "0.5",
        "--wait", "--json",
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["state"] == "failed"
    for leg in doc["legs"]:
        assert leg["verdict"] == "confirmed" and leg["turn_state"] == "error", leg
        assert leg["flags"] == ["asked-question"] and leg["cause"] == "strict"
    r = env.run("fanout", "--retry-failed", doc["id"], "--json")
    retry = json.loads(r.stdout)
    assert sorted(leg["session"] for leg in retry["legs"]) == ["a", "b"]
    assert retry["retry_of"] == doc["id"]


def limited_session(env: Env, seconds: int, *extra: str) -> Path:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text("limit_margin = 1\n")
    log = env.root / "argv"
    new(
        env, "c", "claude", *extra,
        FAKE_LIMIT_SECONDS=str(seconds), FAKE_ARGV_LOG=str(log), **ONLINE,
    )  # fmt: skip
    return log


def marker_of(env: Env, turn: str) -> str:
    return (env.home / "turns" / "c" / turn / "outcome").read_text()


def test_on_limit_wait_resumes_the_same_conversation(env: Env) -> None:
    log = limited_session(env, 4)
    code, v = wake_json(env, "c", "go [limit]", "--on-limit", "wait", "--window", "1")
    assert code == 0 and v["verdict"] == "confirmed", v
    turn = v["turn"]
    assert retry_until(lambda: marker_of(env, turn).startswith("limited:"), 20)
    assert "waiting for usage reset" in env.run("ls").stdout
    assert "waiting for usage reset" in env.run("show", "c").stdout
    code, line, ended = wait(env, "c")
    assert code == 0 and ended["state"] == "complete" and ended["rc"] == 0, line
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(calls) == 2 and "--resume" not in calls[0]
    conversation = calls[1][calls[1].index("--resume") + 1]
    assert conversation == show(env, "c")["harness_session_id"] == ended["resumed"]
    directory = env.home / "turns" / "c" / turn
    assert "usage limit reached" in (directory / "limited-1.output.log").read_text()
    assert ended["waiting_until"] is None and ended["limit_reset"] is None


def test_stop_ends_a_usage_limit_wait(env: Env) -> None:
    limited_session(env, 600, "--on-limit", "wait:1")
    assert show(env, "c")["on_limit"] == "wait:1"
    code, v = wake_json(env, "c", "go [limit]", "--window", "1")
    assert code == 0, v
    turn = v["turn"]
    assert retry_until(lambda: marker_of(env, turn).startswith("limited:"), 20)
    t0 = time.monotonic()
    r = env.run("stop", "c", "--grace", "1")
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 10
    assert retry_until(lambda: marker_of(env, turn).startswith("exit:"), 10)
    assert show(env, "c")["turn"]["state"] == "aborted"
    assert retry_until(lambda: turn_processes_alive(turn) == [], 10)


def test_a_reset_beyond_the_longest_wait_fails_now(env: Env) -> None:
    limited_session(env, 3 * 3600)
    code, v = wake_json(env, "c", "go [limit]", "--on-limit", "wait:1", "--window", "10")
    assert code == 1 and v["error"].startswith("claude hit its usage limit (resets "), v
    assert show(env, "c")["turn"]["cause"] == "usage-limit"


def test_bad_on_limit_is_refused(env: Env) -> None:
    new(env, "c", "claude", **ONLINE)
    for bad in ("sleep", "wait:x", "wait:0"):
        r = env.run("wake", "c", "hi", "--on-limit", bad)
        assert r.returncode == 2 and r.stderr.startswith("spex: invalid --on-limit"), r.stderr


# --- pre-assigned conversation ids ----------------------------------------------


def test_claude_gets_its_id_at_admission_and_resumes_after_an_early_death(env: Env) -> None:
    log = env.root / "argv"
    new(env, "c", "claude", FAKE_ARGV_LOG=str(log), **ONLINE)
    code, v = wake_json(env, "c", "go [die-early]", "--window", "10")
    assert code == 1 and v["rc"] == 137, v
    first = json.loads(log.read_text().splitlines()[0])
    assigned = first[first.index("--session-id") + 1]
    assert show(env, "c")["harness_session_id"] == assigned
    assert "session_id" not in env.run("log", "c").stdout  # it never printed one
    code, v = wake_json(env, "c", "again", "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v
    second = json.loads(log.read_text().splitlines()[1])
    assert second[second.index("--resume") + 1] == assigned
    assert "--session-id" not in second
    assert show(env, "c")["turn"]["resumed"] == assigned
    # --fresh assigns a new one.
    code, v = wake_json(env, "c", "anew", "--fresh", "--window", "10")
    third = json.loads(log.read_text().splitlines()[2])
    assert third[third.index("--session-id") + 1] == show(env, "c")["harness_session_id"]
    assert show(env, "c")["harness_session_id"] != assigned


def test_an_override_without_session_id_drops_the_assignment(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        '[harness.claude]\nfresh = ["claude", "-p", "--output-format", "stream-json",'
        ' "--verbose", "--model", "x", "--", "{prompt}"]\n'
    )
    claude = load_registry(env.home).get("claude")
    assert claude.assign_id is None
    assert claude.argv(b"hi", None, "some-id")[0][-1] == b"hi"


@pytest.mark.parametrize(
    ("cli", "online"), [("pi", "FAKE_PI_ONLINE"), ("opencode", "FAKE_OPENCODE_ONLINE")]
)
def test_an_id_from_the_clis_own_session_store(env: Env, cli: str, online: str) -> None:
    new(env, "s", cli, **{online: "1"})
    code, v = wake_json(env, "s", "go [crash]", "--window", "10")
    assert code == 1 and v["rc"] == 137, v
    assert env.run("log", "s").stdout.strip() == ""  # it printed nothing
    conversation = show(env, "s")["harness_session_id"]
    assert conversation, "the id should come from the session store"
    code, v = wake_json(env, "s", "go", "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v
    assert show(env, "s")["turn"]["resumed"] == conversation
    assert show(env, "s")["harness_session_id"] == conversation


# --- spex log --pretty and spex show ---------------------------------------------


def test_log_pretty_renders_claude_events(env: Env) -> None:
    new(env, "c", "claude", **ONLINE)
    wake_json(env, "c", "fix it [deny]", "--window", "10")
    out = env.run("log", "c", "--pretty").stdout.splitlines()
    assert out[0].startswith("· session ")
    assert "turn 1: fix it [deny]" in out
    assert "✗ denied: Write a.txt" in out and "✗ denied: Bash make" in out
    assert out[-1] == "✓ done (1 turns)"
    assert not any(line.startswith("{") for line in out)
    # Raw output is unchanged without --pretty.
    assert env.run("log", "c").stdout.splitlines()[0].startswith("{")


def test_log_pretty_marks_errors_and_passes_text_through(env: Env) -> None:
    new(env, "o", "opencode", FAKE_OPENCODE_ONLINE="1")
    wake_json(env, "o", "go [error]", "--window", "10")
    out = env.run("log", "o", "--pretty").stdout.splitlines()
    assert out == ["✗ Provider returned error: 500 Internal Server Error"]
    env.run("new", "t", "--cwd", str(env.root), "--", harness("exit0.sh"))
    wake_json(env, "t", "plain", "--window", "8")
    assert env.run("log", "t", "--pretty").stdout == env.run("log", "t").stdout


def test_show_prints_prompt_and_answer(env: Env) -> None:
    new(env, "c", "claude", **ONLINE)
    wake_json(env, "c", "look at the configs\nand more lines [ask]", "--window", "10")
    out = env.run("show", "c").stdout
    assert "prompt    look at the configs\n" in out
    assert "answer    I found two config files. Which one should I change?\n" in out
    assert "(ended asking a question)" in out
    doc = show(env, "c")
    assert doc["prompt_line"] == "look at the configs"
    assert doc["answer_line"].endswith("Which one should I change?")
