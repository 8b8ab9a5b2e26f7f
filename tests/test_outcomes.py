"""Honest outcomes (issue 14): time limits, outcome flags from the agents'
structured output, strict mode and usage limits, against fakes under
tests/fakes/ that print what the real CLIs print."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from conftest import Env, harness, retry_until
from test_turns import show, turn_processes_alive, wake_json

from spexsup import durations
from spexsup.adapters import outcome
from spexsup.adapters.harness import BUILTIN
from spexsup.adapters.registry import load_registry
from spexsup.durations import parse

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
    assert show(env, "t")["state"] == "failed"


FREEZER = Path("/sys/fs/cgroup/freezer")


@pytest.mark.skipif(not os.access(FREEZER, os.W_OK), reason="needs a writable cgroup v1 freezer")
def test_a_process_that_survives_the_time_limit_is_recorded_on_the_turn(env: Env) -> None:
    """A frozen process outlives SIGKILL: the deadline used to print it in the
    pane only. Its pid is recorded on the turn and shown by `spex show`."""
    (env.home).mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text("grace = 0.5\n")
    child = env.root / "child-pid"
    r = env.run(
        "new", "t", "--cwd", str(env.root), "--env", f"CHILD_PID={child}",
        "--", harness("frozen_child.sh"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    cgroup = FREEZER / f"spex-test-{os.getpid()}-{env.root.name}"
    cgroup.mkdir()
    pid = 0
    try:
        code, v = wake_json(env, "t", "work", "--timeout", "3s", "--window", "0.3")
        assert code == 0 and v["verdict"] == "confirmed", v
        assert retry_until(child.exists)
        pid = int(child.read_text())
        (cgroup / "cgroup.procs").write_text(f"{pid}\n")
        (cgroup / "freezer.state").write_text("FROZEN\n")
        assert retry_until(lambda: (cgroup / "freezer.state").read_text().strip() == "FROZEN")
        code, line, turn = wait(env, "t")
        assert code == 1, line
        assert turn["state"] == "timed-out" and turn["survivors"] == [pid], turn
        shown = show(env, "t")["turns"][0]
        assert shown["survivors"] == [pid]
        assert f"process(es) {pid} survived SIGKILL" in shown["error"]
        text = env.run("show", "t").stdout
        assert f"ran past its time limit (3s); process(es) {pid} survived SIGKILL" in text, text
        assert Path(f"/proc/{pid}").exists()  # it did survive
        ended = [json.loads(x) for x in env.run("events", "--json").stdout.splitlines()]
        assert [e["payload"].get("survivors") for e in ended if e["kind"] == "timed-out"] == [
            [pid]
        ], ended
    finally:
        (cgroup / "freezer.state").write_text("THAWED\n")
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert retry_until(lambda: not (cgroup / "cgroup.procs").read_text().strip())
        cgroup.rmdir()


def test_timeout_within_the_window_is_a_failed_verdict(env: Env) -> None:
    env.run("new", "t", "--cwd", str(env.root), "--timeout", "1s", "--", harness("sleeper.sh"))
    assert show(env, "t")["timeout"] == 1.0
    code, v = wake_json(env, "t", "work", "--window", "8")
    assert code == 1 and v["verdict"] == "failed" and v["rc"] == 124, v
    assert v["error"] == "ran past its time limit (1s)"
    # The wrapper's own last steps (after the final marker) may still be exiting.
    assert retry_until(lambda: turn_processes_alive(v["turn"]) == [], 10)


def test_a_tiny_time_limit_reads_in_milliseconds(env: Env) -> None:
    """A 0.001 s limit read "ran past its time limit (0h)"."""
    env.run("new", "t", "--cwd", str(env.root), "--", harness("sleeper.sh"))
    code, v = wake_json(env, "t", "work", "--timeout", "0.001", "--window", "8")
    assert code == 1 and v["rc"] == 124, v
    assert v["error"] == "ran past its time limit (1ms)"
    assert durations.span(0.25) == "250ms" and durations.span(1.5) == "1.5s"
    span = durations.span
    assert span(60) == "1m" and span(5400) == "90m" and span(0) == "0s"
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
    assert r.returncode == 2 and r.stderr.startswith("spex: invalid --timeout"), r.stderr
    assert "Traceback" not in r.stderr
    assert show(env, "t")["turn"] is None


def test_durations() -> None:
    assert parse("90s", "--timeout") == 90 and parse("15m", "--timeout") == 900
    assert parse("2h", "--timeout") == 7200 and parse("45", "--timeout") == 45
    span = durations.span
    assert span(90) == "90s" and span(900) == "15m" and span(7200) == "2h"


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
    assert code == 1 and turn["state"] == "failed" and turn["cause"] == "strict"
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
    assert v["error"] == "Provider returned error: 500 Internal Server Error"
    assert show(env, "o")["turn"]["cause"] == "agent-error"
    # An error it recovered from (an answer followed) is no failure.
    code, v = wake_json(env, "o", "go [recover]", "--window", "10")
    assert code == 0 and v["verdict"] == "completed" and v["flags"] == [], v


def test_opencode_commentary_is_not_its_answer(env: Env) -> None:
    """On OpenAI's Responses API a model sends progress notes on its
    `commentary` channel (opencode keeps the `phase` in the text part's
    metadata) and its answer on `final_answer`: only that one is the answer
    (issue 42, item 6). A run whose last text was commentary (here asking a
    question) has no answer; it asked nothing of the user."""
    new(env, "o", "opencode", FAKE_OPENCODE_ONLINE="1")
    code, v = wake_json(env, "o", "go [commentary]", "--window", "10")
    assert code == 0 and v["flags"] == [], v
    code, v = wake_json(env, "o", "go [commentary-only]", "--window", "10")
    assert code == 0 and v["flags"] == ["no-answer"], v


def test_an_opencode_model_it_does_not_know_is_named_model_not_found(env: Env) -> None:
    """opencode 1.18 prints only `Unexpected server error` of a misspelled
    model; the built-in harness has it print its error log too, which names
    the model (issue 26, item 6: it was "no model provider configured")."""
    new(env, "o", "opencode", "--", "--model", "fake/typo-model", FAKE_OPENCODE_ONLINE="1")
    code, v = wake_json(env, "o", "go", "--window", "10")
    assert code == 1 and v["verdict"] == "failed", v
    turn = show(env, "o")["turn"]
    assert turn["cause"] == "model-not-found", turn
    assert turn["error"] == "Model not found: fake/typo-model. Did you mean: fake-model?", turn
    r = env.run("show", "o")
    assert "model-not-found" in r.stdout and "fake/typo-model" in r.stdout, r.stdout
    # A resumed turn too: its log's ProviderModelNotFoundError is no lost conversation.
    assert env.run("edit", "o", "--clear-args").returncode == 0
    assert wake_json(env, "o", "go", "--window", "10")[1]["verdict"] == "completed"
    conversation = show(env, "o")["harness_session_id"]
    assert env.run("edit", "o", "--", "--model", "fake/typo-model").returncode == 0
    code, v = wake_json(env, "o", "go", "--window", "10")
    assert code == 1 and show(env, "o")["turn"]["cause"] == "model-not-found", v
    assert show(env, "o")["harness_session_id"] == conversation


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
    # pi exits 0 after its retries give up: still a failure, without --strict,
    # with the agent's own line as the message.
    code, v = wake_json(env, "p", "go [error]", "--window", "10")
    assert code == 1 and v["verdict"] == "failed" and v["rc"] == 0, v
    assert v["flags"] == ["agent-error:Connection error."], v
    assert v["error"] == "Connection error."
    assert show(env, "p")["turn"]["cause"] == "agent-error"
    code, v = wake_json(env, "p", "go [ask]", "--strict", "--window", "10")
    assert code == 1 and v["error"] == "strict: ended asking a question", v


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


def limit_of(env: Env, name: str) -> tuple[str | None, float | None]:
    turn = show(env, name)["turn"]
    return turn["cause"], turn["limit_reset"]


def test_claude_2_1_session_limit_message(env: Env) -> None:
    new(env, "c", "claude", FAKE_LIMIT_SECONDS="600", FAKE_LIMIT_FORM="session", **ONLINE)
    code, v = wake_json(env, "c", "go [limit]", "--window", "10")
    assert code == 1 and v["error"].startswith("claude hit its usage limit (resets "), v
    cause, reset = limit_of(env, "c")
    # `resets 2:50am (UTC)`: to the minute.
    assert cause == "usage-limit" and reset is not None and abs(reset - time.time() - 600) < 90


@pytest.mark.parametrize(
    ("form", "seconds", "ahead"), [("at", 600, 600), ("in", 7500, 7500), ("later", 600, None)]
)
def test_codex_usage_limit_messages(env: Env, form: str, seconds: int, ahead: int | None) -> None:
    (env.root / ".git").mkdir()
    new(env, "x", "codex", FAKE_CODEX_ONLINE="1", FAKE_LIMIT_FORM=form,
        FAKE_LIMIT_SECONDS=str(seconds))  # fmt: skip
    code, v = wake_json(env, "x", "go [limit]", "--window", "10")
    assert code == 1 and v["verdict"] == "failed", v
    cause, reset = limit_of(env, "x")
    assert cause == "usage-limit"
    if ahead is None:
        assert reset is None and v["error"] == "codex hit its usage limit (reset time not given)"
    else:
        assert reset is not None and abs(reset - time.time() - ahead) < 90, (reset, v)


@pytest.mark.parametrize(
    ("cli", "online", "form", "seconds", "ahead"),
    [
        ("opencode", "FAKE_OPENCODE_ONLINE", "go", 7200, 7200),
        ("opencode", "FAKE_OPENCODE_ONLINE", "free", 7200, None),
        ("pi", "FAKE_PI_ONLINE", "chatgpt", 1800, 1800),
    ],
)
def test_opencode_and_pi_usage_limit_messages(
    env: Env, cli: str, online: str, form: str, seconds: int, ahead: int | None
) -> None:
    new(env, "a", cli, **{online: "1", "FAKE_LIMIT_FORM": form, "FAKE_LIMIT_SECONDS": str(seconds)})
    code, v = wake_json(env, "a", "go [limit]", "--window", "10")
    # Both exit 0 after the error; the usage limit still fails the turn.
    assert code == 1 and v["verdict"] == "failed" and v["rc"] == 0, v
    cause, reset = limit_of(env, "a")
    assert cause == "usage-limit", v
    if ahead is None:
        assert reset is None and v["error"] == f"{cli} hit its usage limit (reset time not given)"
    else:
        assert reset is not None and abs(reset - time.time() - ahead) < 90, (reset, v)


def test_a_rate_limit_is_named_as_one_not_as_a_usage_limit(env: Env) -> None:
    """Anthropic's API-key 429 that pi's auto-retry gave up on: a rate limit,
    with the provider's message as the line, not its JSON body."""
    new(env, "a", "pi", FAKE_PI_ONLINE="1", FAKE_LIMIT_FORM="anthropic")
    code, v = wake_json(env, "a", "go [limit]", "--window", "10")
    assert code == 1 and v["verdict"] == "failed" and v["rc"] == 0, v
    assert limit_of(env, "a") == ("rate-limited", None)
    assert v["error"] == (
        "429 This request would exceed your account's rate limit. Please try again later."
    )


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC: codex and claude print resets in the machine's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


NOW = 1_700_000_000.0  # Tue 2023-11-14 22:13:20 UTC


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, zone: str = "UTC") -> float:
    return dt.datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(zone)).timestamp()


def event(kind: str, **fields: object) -> str:
    return json.dumps({"type": kind, **fields}, ensure_ascii=False)  # as Node and serde print


CHATGPT_429 = json.dumps({"error": {
    "type": "usage_limit_reached", "message": "The usage limit has been reached",
    "plan_type": "plus", "resets_at": 1_700_013_872, "eligible_promo": None,
    "resets_in_seconds": 13872}}, separators=(",", ":"))  # fmt: skip

# What each CLI really prints when it hits its limit (sources in spexsup/adapters/harness.py,
# next to each pattern), and the reset spex reads from it.
# fmt: off
REAL_LIMITS: list[tuple[str, str, float | None]] = [
    # claude, 1.0.x print mode (anthropics/claude-code#6119)
    ("claude", event("result", subtype="success", is_error=True,
                     result="Claude AI usage limit reached|1700003600"), 1_700_003_600),
    ("claude", "Claude usage limit reached. Your limit will reset at 11pm (Europe/Warsaw).",
     at(2023, 11, 15, 23, 0, zone="Europe/Warsaw")),  # 22:00 UTC has passed: tomorrow
    ("claude", "Claude usage limit reached. Your limit will reset at 12am.", at(2023, 11, 15)),
    # 1.0.8x-1.0.11x (#6392, #7641)
    ("claude", "5-hour limit reached ∙ resets 5am", at(2023, 11, 15, 5, 0)),
    # 2.1.x (#76151, #77122)
    ("claude", event("result", subtype="success", is_error=True,
                     result="You've hit your session limit · resets 2:50am (Asia/Muscat)"),
     at(2023, 11, 15, 2, 50, zone="Asia/Muscat")),
    ("claude", json.dumps({"result": "You've hit your session limit · resets 2:50am (UTC)"}),
     at(2023, 11, 15, 2, 50)),  # written by a JSON encoder that escapes non-ASCII
    ("claude", "You've hit your weekly limit · resets Nov 17 at 12am (Australia/Melbourne)",
     at(2023, 11, 17, 0, 0, zone="Australia/Melbourne")),
    ("claude", "You've hit your limit · resets 7pm (Europe/Berlin)",
     at(2023, 11, 15, 19, 0, zone="Europe/Berlin")),
    # codex exec --json, 0.5x on (codex-rs/protocol/src/error.rs): local time, the date
    # when it is not today
    ("codex", event("error", message="You've hit your usage limit. Upgrade to Pro"
                    " (https://chatgpt.com/explore/pro), visit https://chatgpt.com/codex/settings/"
                    "usage to purchase more credits or try again at 11:45 PM."),
     at(2023, 11, 14, 23, 45)),
    ("codex", event("turn.failed", error={"message": "You've hit your usage limit. Try again"
                                          " at Nov 16th, 2023 1:36 PM."}),
     at(2023, 11, 16, 13, 36)),
    ("codex", "ERROR: You've hit your usage limit. Upgrade to Plus to continue using Codex"
     " (https://chatgpt.com/explore/plus), or try again at Nov 21st, 2023 8:19 PM.",
     at(2023, 11, 21, 20, 19)),
    # printed to the minute: a reset within the current minute is its end, not tomorrow
    ("codex", "You've hit your usage limit. Try again at 10:13 PM.", at(2023, 11, 14, 22, 14)),
    # 0.27-0.40 (openai/codex#3031, #3899, #4104)
    ("codex", "■ You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing)"
     " or try again in 5 days 22 hours 11 minutes.", NOW + 5 * 86400 + 22 * 3600 + 11 * 60),
    ("codex", "You've hit your usage limit. Try again in 2 hours 5 minutes.", NOW + 7500),
    ("codex", "You've hit your usage limit. Try again in less than a minute.", NOW + 60),
    ("codex", event("error", message="rate limited (status 429 Too Many Requests), retry after"
                    " 30s, request id: req_1"), NOW + 30),
    ("codex", "You've hit your usage limit. Try again later.", None),
    ("codex", "You've hit your usage limit. Upgrade to Plus to continue using Codex"
     " (https://openai.com/chatgpt/pricing).", None),
    ("codex", "🖐 You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing),"
     " or wait for limits to reset (every 5h and every week.).", None),
    ("codex", event("error", message="Quota exceeded. Check your plan and billing details."), None),
    # opencode run --format json: the APIError it stopped on
    ("opencode", event("error", sessionID="ses_1", error={"name": "APIError", "data": {
        "message": "Weekly usage limit reached. Resets in 19hr", "statusCode": 429,
        "isRetryable": False, "responseHeaders": {"retry-after": "68400"}}}), NOW + 19 * 3600),
    ("opencode", event("error", sessionID="ses_1", error={"name": "APIError", "data": {
        "message": "The usage limit has been reached", "statusCode": 429,
        "responseBody": CHATGPT_429}}), 1_700_013_872),
    ("opencode", event("error", sessionID="ses_1", error={"name": "APIError", "data": {
        "message": "Too Many Requests", "statusCode": 429,
        "responseHeaders": {"retry-after": "3600"}}}), NOW + 3600),
    ("opencode", event("error", sessionID="ses_1", error={"name": "APIError", "data": {
        "message": "Free usage exceeded, add credits https://opencode.ai/zen", "statusCode": 429,
        "responseBody": '{"error":{"type":"FreeUsageLimitError"}}'}}), None),
    # pi --mode json (packages/ai/src/providers/openai-codex-responses.ts)
    ("pi", event("message_end", message={"role": "assistant", "stopReason": "error",
                  "errorMessage": "You have hit your ChatGPT usage limit (plus plan)."
                  " Try again in ~47 min."}), NOW + 47 * 60),
    ("pi", event("agent_end", messages=[{"role": "assistant", "stopReason": "error",
                 "errorMessage": "Codex error: " + CHATGPT_429}]), 1_700_013_872),
    # pi -p (text): the error on stderr (earendil-works/pi#4172)
    ("pi", "Error: Codex error: " + CHATGPT_429, 1_700_013_872),
    ("pi", "You have hit your ChatGPT usage limit (pro plan).", None),
]
# (Anthropic's API-key 429, rate_limit_error, is a rate limit: see
# test_a_rate_limit_is_named_as_one_not_as_a_usage_limit.)
# fmt: on


@pytest.mark.parametrize(("cli", "printed", "reset"), REAL_LIMITS)
def test_real_limit_messages(
    utc: None, tmp_path: Path, cli: str, printed: str, reset: float | None
) -> None:
    (tmp_path / "output.log").write_text(f"{event('step_start')}\n{printed}\n")
    limits = tuple((lim.pattern, lim.reset) for lim in BUILTIN[cli].limited)
    found = outcome.find_limit(tmp_path / "output.log", limits, NOW)
    assert found is not None, printed
    assert found.reset == reset, (found, printed)


@pytest.mark.parametrize(
    ("cli", "printed"),
    [
        ("claude", "Not logged in · Please run /login"),
        ("codex", '{"type":"error","message":"Reconnecting... 5/5 (failed to lookup address)"}'),
        (
            "opencode",
            '{"type":"error","error":{"name":"APIError","data":{"message":'
            '"Provider returned error: 500 Internal Server Error","statusCode":500}}}',
        ),
        ("pi", "No API key found for the selected model."),
    ],
)
def test_other_failures_are_no_limit(tmp_path: Path, cli: str, printed: str) -> None:
    (tmp_path / "output.log").write_text(printed + "\n")
    limits = tuple((lim.pattern, lim.reset) for lim in BUILTIN[cli].limited)
    assert outcome.find_limit(tmp_path / "output.log", limits, NOW) is None


def test_reset_times() -> None:
    now = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    assert outcome.reset_time("epoch", "1700003600", now) == 1700003600
    assert outcome.reset_time("in", "2 hours 5 minutes", now) == now + 7500
    assert outcome.reset_time("in", "5h", now) == now + 18000
    assert outcome.reset_time("in", "~47 min", now) == now + 47 * 60
    assert outcome.reset_time("in", "4hr 29min", now) == now + 4 * 3600 + 29 * 60
    assert outcome.reset_time("in", "3600", now) == now + 3600  # Retry-After
    assert outcome.reset_time("in", "less than a minute", now) == now + 60
    assert outcome.reset_time("in", "soon", now) is None
    utc = outcome.reset_time("clock", "11pm (UTC)", now)
    assert utc == 1_700_002_800  # the same day, 23:00 UTC
    assert outcome.reset_time("clock", "9:30 AM (UTC)", now) == 1_700_040_600  # the next day
    assert outcome.reset_time("clock", "Nov 17 at 12am (UTC)", now) == at(2023, 11, 17)
    assert outcome.reset_time("clock", "Jan 2 at 1pm (UTC)", now) == at(2024, 1, 2, 13, 0)
    assert outcome.reset_time("clock", "Nov 16th, 2023 1:36 PM (UTC)", now) == at(
        2023, 11, 16, 13, 36
    )
    assert outcome.reset_time("clock", "25:00", now) is None
    assert outcome.reset_time("clock", "Foo 3 at 1pm", now) is None


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
    found = outcome.find_limit(
        tmp_path / "output.log", (("quota until (?P<reset>[0-9]+)", "epoch"),), 0
    )
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
    assert outcome.read(tmp_path / "output.log", "claude").flags == ["asked-question"]
    assert outcome.read(tmp_path / "output.log", "claude", budget=1 << 16).flags == [
        "asked-question"
    ]


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
        assert leg["verdict"] == "confirmed" and leg["turn_state"] == "failed", leg
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
    limited_session(env, 600, "--on-limit", "wait:1h")
    assert show(env, "c")["on_limit"] == "wait:1h"
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
    code, v = wake_json(env, "c", "go [limit]", "--on-limit", "wait:1h", "--window", "10")
    assert code == 1 and v["error"].startswith("claude hit its usage limit (resets "), v
    assert show(env, "c")["turn"]["cause"] == "usage-limit"


def test_bad_on_limit_is_refused(env: Env) -> None:
    new(env, "c", "claude", **ONLINE)
    for bad in ("sleep", "wait:x", "wait:0", "wait:", "wait:15d"):
        r = env.run("wake", "c", "hi", "--on-limit", bad)
        assert r.returncode == 2 and r.stderr.startswith("spex: invalid --on-limit"), r.stderr


def test_on_limit_reads_the_duration_grammar_and_never_a_bare_number(env: Env) -> None:
    """`wait:6` meant 6 hours while a bare number is seconds everywhere else:
    it is refused, naming `wait:6h` (issue 38 item 11); what a session
    recorded before still means hours."""
    limited_session(env, 3 * 3600)
    for command in (["wake", "c", "hi"], ["new", "d", "--harness", "demo"], ["edit", "c"]):
        r = env.run(*command, "--on-limit", "wait:6")
        assert r.returncode == 2, (command, r)
        assert r.stderr.startswith("spex: invalid --on-limit 'wait:6'") and "wait:6h" in r.stderr
    r = env.run("fanout", "c", "-m", "hi", "--on-limit", "wait:6")
    assert r.returncode == 2 and "wait:6h" in r.stderr, r.stderr
    for good in ("wait", "wait:6h", "wait:90m", "wait:1h30m", "wait:2d"):
        assert env.run("edit", "c", "--on-limit", good).returncode == 0, good
        assert show(env, "c")["on_limit"] == good
    # A session that recorded `wait:4` before: four hours, so a reset 3h on is waited for.
    with sqlite3.connect(env.home / "state.db") as db:
        db.execute("UPDATE sessions SET on_limit = 'wait:4' WHERE name = 'c'")
    code, v = wake_json(env, "c", "go [limit]", "--window", "1")
    assert code == 0 and v["verdict"] == "confirmed", v
    assert retry_until(lambda: marker_of(env, v["turn"]).startswith("limited:"), 20)
    assert env.run("stop", "c", "--grace", "1").returncode == 0


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
    assert out[-1] == "✓ done (1 turns, $0.09)"  # the fake reports a real answer's cost
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
    assert "prompt       look at the configs\n" in out
    assert "answer       I found two config files. Which one should I change?\n" in out
    assert "(ended asking a question)" in out
    doc = show(env, "c")
    assert doc["prompt_line"] == "look at the configs"
    assert doc["answer_line"].endswith("Which one should I change?")


# --- what the real CLIs print, replayed ------------------------------------------

REAL = Path(__file__).parent / "fixtures" / "real"
HUMAN = "the agent's own line"

# (cli, scenario, resumed, end state, cause, the message or a part of it)
REAL_ENDS = [
    ("claude", "answer", False, "complete", None, None),
    ("claude", "tool-denied", False, "complete", None, None),
    ("claude", "http500", False, "failed", "agent-error", "API Error: 500 Internal server error."),
    ("claude", "http503", False, "failed", "overloaded", "API Error: 503 Overloaded."),
    ("claude", "http529", False, "failed", "overloaded", "API Error: 529 Overloaded."),
    ("claude", "ratelimit429", False, "failed", "rate-limited",
     "API Error: Request rejected (429) · This request would exceed your account's rate limit."),
    ("claude", "usage429", False, "failed", "rate-limited", "API Error: Request rejected (429)"),
    ("claude", "usage429-oauth", False, "failed", "usage-limit",
     "claude hit its usage limit (resets"),
    ("claude", "model-not-found", False, "failed", "model-not-found",
     "There's an issue with the selected model (claude-sonnet-4-5)."),
    ("claude", "unknown-resume", True, "failed", "conversation-gone", "is gone;"),
    ("codex", "answer", False, "complete", None, None),
    ("codex", "http500", False, "failed", "overloaded", "currently experiencing high demand"),
    ("codex", "http503", False, "failed", "overloaded",
     "unexpected status 503 Service Unavailable"),
    ("codex", "ratelimit429", False, "failed", "rate-limited",
     "last status: 429 Too Many Requests"),
    ("codex", "quota429", False, "failed", "usage-limit", "codex hit its usage limit"),
    ("codex", "usage429", False, "failed", "usage-limit", "codex hit its usage limit (resets"),
    ("codex", "model-not-found", False, "failed", "model-not-found", "does not exist"),
    ("codex", "unknown-resume", True, "failed", "conversation-gone", "is gone;"),
    ("opencode", "answer", False, "complete", None, None),
    ("opencode", "http500", False, "failed", "agent-error",
     "The server had an error while processing your request."),
    ("opencode", "http503", False, "failed", "overloaded", "The engine is currently overloaded"),
    ("opencode", "ratelimit429", False, "failed", "rate-limited",
     "Rate limit reached for fake-model"),
    ("opencode", "quota429", False, "failed", "usage-limit", "opencode hit its usage limit"),
    ("opencode", "usage429", False, "failed", "usage-limit",
     "opencode hit its usage limit (resets"),
    ("opencode", "model-not-found", False, "failed", "model-not-found", "does not exist"),
    ("opencode", "tool-ask", False, "complete", None, None),
    ("opencode", "tool-denied-pattern", False, "complete", None, None),
    ("opencode", "unknown-resume", True, "failed", "conversation-gone", "is gone;"),
    ("pi", "answer", False, "complete", None, None),
    ("pi", "http500", False, "failed", "agent-error", "500 The server had an error"),
    ("pi", "http503", False, "failed", "overloaded", "503 The engine is currently overloaded"),
    ("pi", "ratelimit429", False, "failed", "rate-limited",
     "429 Rate limit reached for fake-model"),
    ("pi", "quota429", False, "failed", "usage-limit", "pi hit its usage limit"),
    ("pi", "usage429", False, "failed", "usage-limit",
     "pi hit its usage limit (reset time not given)"),
    ("pi", "usage429-chatgpt", False, "failed", "usage-limit", "pi hit its usage limit (resets"),
    ("pi", "model-not-found", False, "failed", "model-not-found", "404 The model `fake-model`"),
    ("pi", "unknown-resume", True, "failed", "conversation-gone", "is gone;"),
]  # fmt: skip

DENIED = {
    ("claude", "tool-denied"): ["denied:Bash"],
    ("opencode", "tool-ask"): ["denied:bash"],
    ("opencode", "tool-denied-pattern"): ["denied:bash"],
}


@pytest.mark.parametrize(
    ("cli", "scenario", "resumed", "state", "cause", "message"),
    REAL_ENDS,
    ids=[f"{c}-{s}" for c, s, *_ in REAL_ENDS],
)
def test_what_a_real_cli_printed_gets_a_true_verdict(
    env: Env,
    cli: str,
    scenario: str,
    resumed: bool,
    state: str,
    cause: str | None,
    message: str | None,
) -> None:
    """The exact bytes and exit code of the real CLI (claude 2.1.197, codex
    0.171.0, opencode 1.18.33, pi 0.73.1) against a local model server,
    replayed as that harness: the end, its cause and its human line are
    what a person would call them."""
    base = REAL / cli / scenario
    replay = ["python3", str(Path(__file__).parent / "harnesses" / "replay.py"), str(base)]
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        f"[harness.{cli}]\n"
        f"fresh = {json.dumps(replay)}\n"
        f"resume = {json.dumps([*replay, '{session_id}'])}\n"
    )
    (env.root / ".git").mkdir()
    assert env.run("new", "a", "--harness", cli, "--cwd", str(env.root)).returncode == 0
    gone = "0b6a1c9e-1d7e-4c55-9d3e-5a3f7f1b2c3d"
    if resumed:
        with env.spex().store.tx() as db:
            db.execute("UPDATE sessions SET harness_session_id = ? WHERE name = 'a'", (gone,))
    code, v = wake_json(env, "a", "say hi", "--window", "15")
    assert v["verdict"] in ("completed", "failed"), v
    turn = show(env, "a")["turn"]
    assert (turn["state"], turn["cause"]) == (state, cause), (turn, v)
    assert code == (0 if state == "complete" else 1)
    assert turn["flags"][: len(DENIED.get((cli, scenario), []))] == DENIED.get((cli, scenario), [])
    if message is None:
        assert v["error"] is None, v
        return
    for error in (v["error"], turn["error"]):
        assert message in error, (error, HUMAN)
        assert not error.lstrip().startswith("{") and '"type"' not in error, error
        assert "\x1b" not in error
    wait = env.run("wait", "a", "--timeout", "10")
    assert message in wait.stdout + wait.stderr
    if cause == "conversation-gone":
        assert v["error"] == (
            f"conversation {gone} is gone; the next wake starts a new one (or --fresh)"
        )
        assert show(env, "a")["harness_session_id"] is None
