"""Models and fallback (issue 26, item 5): `--model` reaches the CLI through
the harness's flag (or `{model}` in its argv), and `--fallback-model A,B`
runs the same turn again on the next model when an attempt fails on its
model (usage limit, rate limit, overload, unknown model) before doing any
work: in the pane, with no watcher, resuming the conversation, every
attempt recorded on the turn."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import HARNESSES, Env, retry_until


def claude(env: Env, name: str, *extra: str, **env_vars: str) -> Path:
    """A claude session on the fake CLI, logged in; its argv logged per run."""
    log = env.root / f"{name}.argv"
    args = ["new", name, "--harness", "claude", "--cwd", str(env.root)]
    for key, value in {"FAKE_CLAUDE_LOGGED_IN": "1", "FAKE_ARGV_LOG": str(log), **env_vars}.items():
        args += ["--env", f"{key}={value}"]
    r = env.run(*args, *extra)
    assert r.returncode == 0, r.stderr
    return log


def wake(env: Env, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    r = env.run("wake", *args, "--json")
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def turn(env: Env, name: str) -> dict:  # type: ignore[type-arg]
    return json.loads(env.run("show", name, "--json").stdout)["turn"]  # type: ignore[no-any-return]


def argvs(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def model_of(argv: list[str]) -> str | None:
    return argv[argv.index("--model") + 1] if "--model" in argv else None


def test_a_usage_limit_falls_back_to_the_next_model_and_resumes_the_conversation(
    env: Env,
) -> None:
    log = claude(env, "c", FAKE_LIMITED_MODELS="opus")
    # A short window: the wake is gone before the fallback; the pane does it alone.
    code, v = wake(env, "c", "fix it", "--model", "opus", "--fallback-model", "sonnet,haiku",
                   "--window", "0.2")  # fmt: skip
    assert code == 0 and v["verdict"] == "confirmed", v
    r = env.run("wait", "c", "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    t = turn(env, "c")
    assert (t["state"], t["model"]) == ("complete", "sonnet"), t
    (attempt,) = t["fallbacks"]
    assert (attempt["model"], attempt["cause"], attempt["attempt"]) == ("opus", "usage-limit", 1)
    # It ran twice, on two models: two attempts (issue 42, item 6).
    assert t["attempts"] == 2, t
    assert "usage limit" in attempt["error"]
    runs = argvs(log)
    assert [model_of(a) for a in runs] == ["opus", "sonnet"], runs
    # The second attempt resumed the conversation the first one started.
    first_id = runs[0][runs[0].index("--session-id") + 1]
    assert runs[1][runs[1].index("--resume") + 1] == first_id
    assert json.loads(env.run("show", "c", "--json").stdout)["harness_session_id"] == first_id
    # Each attempt's output is kept; the pane said what happened.
    directory = env.home / "turns" / "c" / t["id"]
    assert "weekly limit" in (directory / "attempt-1.output.log").read_text()
    assert "falling back to sonnet" in env.run("log", "c").stdout
    events = [json.loads(line) for line in env.run("events", "--json").stdout.splitlines()]
    (fell,) = [e for e in events if e["kind"] == "fell-back"]
    assert (fell["cause"], fell["payload"]["model"], fell["payload"]["to"]) == (
        "usage-limit",
        "opus",
        "sonnet",
    )
    shown = env.run("show", "c").stdout
    assert "complete rc=0 on sonnet (fell back from opus: usage-limit)" in shown, shown
    # Both attempts' spend is the turn's (the fake reports $0.088119 a run).
    assert t["cost"]["source"] == "reported" and t["cost"]["exact"], t["cost"]
    assert abs(t["cost"]["amount"] - 2 * 0.088119) < 1e-9, t["cost"]
    assert t["usage"]["input"] == 2 * 29343, t["usage"]
    by_model = json.loads(env.run("cost", "--by", "model", "--json").stdout)
    spent = {g["key"]: g["cost"]["amount"] for g in by_model["groups"]}
    assert spent == {"opus": 0.088119, "sonnet": 0.088119}, by_model
    assert by_model["total"]["turns"] == 1


def test_every_model_out_ends_the_turn_failed_with_every_attempt(env: Env) -> None:
    log = claude(env, "c", FAKE_LIMITED_MODELS="opus,sonnet", FAKE_OVERLOADED_MODELS="haiku")
    code, v = wake(env, "c", "go", "--model", "opus", "--fallback-model", "sonnet,haiku",
                   "--window", "10")  # fmt: skip
    assert code == 1 and v["verdict"] == "failed", v
    t = turn(env, "c")
    assert (t["state"], t["cause"], t["model"]) == ("failed", "overloaded", "haiku"), t
    assert [(a["model"], a["cause"], a["attempt"]) for a in t["fallbacks"]] == [
        ("opus", "usage-limit", 1),
        ("sonnet", "usage-limit", 2),
    ]
    # Three runs, three attempts, in the turn and in the wake's verdict.
    assert t["attempts"] == 3 and v["attempts"] == 3, (t, v)
    assert [model_of(a) for a in argvs(log)] == ["opus", "sonnet", "haiku"]
    r = env.run("wake", "c", "go", "--model", "opus", "--fallback-model", "sonnet,haiku",
                "--window", "10")  # fmt: skip
    assert "after 3 attempts" in r.stdout, r.stdout


def test_without_a_fallback_list_nothing_changes(env: Env) -> None:
    log = claude(env, "c", FAKE_LIMITED_MODELS="opus")
    code, v = wake(env, "c", "go", "--model", "opus", "--window", "10")
    assert code == 1 and v["verdict"] == "failed", v
    t = turn(env, "c")
    assert (t["cause"], t["model"], t["fallbacks"]) == ("usage-limit", "opus", []), t
    assert len(argvs(log)) == 1
    # A good model: the flag reaches the CLI, and the turn records it.
    code, v = wake(env, "c", "go", "--model", "sonnet", "--window", "10")
    assert code == 0 and turn(env, "c")["model"] == "sonnet"
    assert model_of(argvs(log)[-1]) == "sonnet"
    # No --model: the CLI's own default, no flag.
    assert wake(env, "c", "go", "--window", "10")[0] == 0
    assert model_of(argvs(log)[-1]) is None and turn(env, "c")["model"] is None


def test_a_session_and_a_harness_keep_their_model_and_fallback(env: Env) -> None:
    log = claude(env, "c", "--model", "opus", "--fallback-model", "sonnet",
                 FAKE_LIMITED_MODELS="opus")  # fmt: skip
    shown = env.run("show", "c").stdout
    assert "opus" in shown and "sonnet" in shown, shown
    listed = json.loads(env.run("show", "c", "--json").stdout)
    assert (listed["model"], listed["fallback"]) == ("opus", ["sonnet"])
    assert wake(env, "c", "go", "--window", "10")[0] == 0
    assert [model_of(a) for a in argvs(log)] == ["opus", "sonnet"]
    # The wake's own wins; --fallback-model '' falls back to nothing.
    code, _ = wake(env, "c", "go", "--fallback-model", "", "--window", "10")
    assert code == 1 and turn(env, "c")["fallbacks"] == []
    # spex edit: the session's own go; then the harness's fallback applies.
    r = env.run("edit", "c", "--no-model", "--no-fallback-model")
    assert r.returncode == 0, r.stderr
    (env.home / "harnesses.toml").write_text(
        '[harness.claude]\nmodel = "opus"\nfallback = ["haiku"]\n'
    )
    assert wake(env, "c", "go", "--window", "10")[0] == 0
    assert [model_of(a) for a in argvs(log)][-2:] == ["opus", "haiku"]


def test_a_harness_spells_model_in_its_argv(env: Env) -> None:
    record = env.root / "record"
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        "[harness.rec]\n"
        f'fresh = ["python3", "{HARNESSES / "record.py"}", "--model", "{{model}}", "{{prompt}}"]\n'
    )
    r = env.run("new", "r", "--harness", "rec", "--env", f"RECORD_TO={record}")
    assert r.returncode == 0, r.stderr

    def argv_of(turn: str) -> list[bytes]:
        return (env.home / "turns" / "r" / turn / "argv").read_bytes().split(b"\0")[:-1]

    code, v = wake(env, "r", "hello", "--model", "big", "--window", "5")
    assert code == 0, v
    assert argv_of(v["turn"])[2:] == [b"--model", b"big", b"hello"]
    assert retry_until(lambda: record.exists() and record.read_text() == "hello")
    # No model: `--model {model}` is left out whole.
    code, v = wake(env, "r", "again", "--window", "5")
    assert code == 0, v
    assert argv_of(v["turn"])[2:] == [b"again"]


def test_a_fan_out_leg_that_fell_back_says_so(env: Env) -> None:
    for name in ("a", "b"):
        claude(env, name, FAKE_LIMITED_MODELS="opus")
    r = env.run("fanout", "a", "b", "-m", "go", "--model", "opus", "--fallback-model", "sonnet",
                "--wait", "--json", timeout=90)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["state"] == "complete" and doc["turn_options"]["model"] == "opus", doc
    for leg in doc["legs"]:
        assert leg["model"] == "sonnet" and leg["fallbacks"][0]["model"] == "opus", leg
    text = env.run("wave", "last").stdout
    assert "on sonnet (fell back from opus: usage-limit)" in text, text
    # Every leg's every attempt is in the wave's spend.
    shown = json.loads(env.run("wave", "last", "--json").stdout)
    assert abs(shown["cost"]["amount"] - 4 * 0.088119) < 1e-9, shown["cost"]
    assert shown["usage"]["models"] == ["opus", "sonnet"] and shown["cost"]["exact"]


def test_bad_models_are_refused_and_change_nothing(env: Env) -> None:
    claude(env, "c")
    assert env.run("new", "cmd", "--", "true").returncode == 0
    cases = [
        (["wake", "c", "x", "--model", "two words"], 2, "invalid --model 'two words'"),
        (["wake", "c", "x", "--fallback-model", "a,,b"], 2, "invalid --fallback-model ''"),
        (["wake", "cmd", "x", "--model", "m"], 2, "harness command has no way to pass a model"),
        (["wake", "cmd", "x", "--fallback-model", "m"], 2, "no way to pass a model"),
        (["new", "d", "--model", "m", "--", "true"], 2, "no way to pass a model"),
        (["edit", "c", "--model", "m", "--no-model"], 2, "choose one"),
        (["fanout", "c", "-m", "x", "--model", "a b"], 2, "invalid --model"),
    ]
    for args, code, words in cases:
        r = env.run(*args)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("spex: ") and words in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert json.loads(env.run("show", "cmd", "--json").stdout)["turn"] is None
    assert json.loads(env.run("show", "c", "--json").stdout)["turn"] is None
    assert "d" not in {s["name"] for s in json.loads(env.run("ls", "--json").stdout)}
