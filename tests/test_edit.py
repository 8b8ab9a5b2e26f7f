"""`spex edit` through the installed command: each setting reaches the next
turn, and a refused or bad edit changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Env, harness, retry_until
from test_turns import show, wake_json
from test_worktree import Repo, repo  # noqa: F401 (the fixture)

SEEN = harness("seen.py")


def seen_session(env: Env, name: str, *args: str) -> Path:
    """A session of harness `seen` (harnesses.toml) that writes what each
    turn ran with to the returned file."""
    out = env.root / f"{name}.seen"
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        f'[harness.seen]\nfresh = ["{SEEN}", "{out}", "{{args}}", "{{prompt}}"]\n'
    )
    r = env.run("new", name, "--harness", "seen", "--cwd", str(env.root), *args)
    assert r.returncode == 0, r.stderr
    return out


def turn_saw(env: Env, name: str, out: Path, prompt: str = "go") -> dict[str, Any]:
    out.unlink(missing_ok=True)
    code, v = wake_json(env, name, prompt, "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v
    seen: dict[str, Any] = json.loads(out.read_text())
    return seen


def events_of(env: Env, kind: str) -> list[dict[str, Any]]:
    lines = env.run("events", "--json", "--kind", kind).stdout.splitlines()
    return [json.loads(line) for line in lines]


def test_env_cwd_and_args_reach_the_next_turn(env: Env) -> None:
    out = seen_session(env, "s", "--env", "EDIT_A=1", "--env", "EDIT_B=2", "--", "--one")
    first = turn_saw(env, "s", out)
    assert first == {
        "argv": ["--one", "go"],
        "cwd": str(env.root),
        "env": {"EDIT_A": "1", "EDIT_B": "2"},
    }
    other = env.root / "other"
    other.mkdir()
    r = env.run(
        "edit", "s", "--env", "EDIT_A=secret value", "--env", "EDIT_C=3", "--unset-env", "EDIT_B",
        "--cwd", str(other), "--", "--two", "x y",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "s: args --one -> --two 'x y'",
        f"s: cwd {env.root} -> {other}",
        "s: env EDIT_A set, EDIT_C set, EDIT_B unset",
        "edited s: its next turn runs with this",
    ]
    assert "secret" not in r.stdout + r.stderr
    second = turn_saw(env, "s", out)
    assert second == {
        "argv": ["--two", "x y", "go"],
        "cwd": str(other),
        "env": {"EDIT_A": "secret value", "EDIT_C": "3"},
    }
    assert env.run("edit", "s", "--clear-args").returncode == 0
    assert turn_saw(env, "s", out)["argv"] == ["go"]
    # show prints every setting, the env by name only.
    doc = show(env, "s")
    assert doc["env_keys"] == ["EDIT_A", "EDIT_C"] and doc["harness_args"] == []
    text = env.run("show", "s").stdout
    assert "env          EDIT_A, EDIT_C\n" in text and "secret" not in text
    assert "args         -\n" in text and "timeout      -\n" in text and "strict       no\n" in text


def test_a_command_session_gets_its_new_command(env: Env) -> None:
    out = env.root / "c.seen"
    assert (
        env.run("new", "c", "--cwd", str(env.root), "--", SEEN, str(out), "--old").returncode == 0
    )
    assert turn_saw(env, "c", out)["argv"] == ["--old", "go"]
    r = env.run("edit", "c", "--", SEEN, str(out), "--new")
    assert r.returncode == 0, r.stderr
    assert show(env, "c")["command"] == [SEEN, str(out), "--new"]
    assert turn_saw(env, "c", out)["argv"] == ["--new", "go"]
    # The command harness has no arguments of its own to clear.
    r = env.run("edit", "c", "--clear-args")
    assert r.returncode == 2 and "the command harness needs a command" in r.stderr, r.stderr


def test_limits_reach_the_next_turn(env: Env) -> None:
    out = seen_session(env, "s")
    r = env.run(
        "edit", "s", "--timeout", "30m", "--strict", "--on-limit", "wait:2h", "--window", "3s"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:4] == [
        "s: window - -> 3s",
        "s: timeout - -> 30m",
        "s: strict no -> yes",
        "s: on-limit - -> wait:2h",
    ]
    doc = show(env, "s")
    assert (doc["window"], doc["timeout"], doc["strict"], doc["on_limit"]) == (
        3,
        1800,
        True,
        "wait:2h",
    )
    turn_saw(env, "s", out)
    turn = show(env, "s")["turn"]
    assert (turn["timeout"], turn["strict"]) == (1800, True)
    directory = env.home / "turns" / "s" / turn["id"]
    assert (directory / "deadline").read_text().split()[0] == "1800"
    assert (directory / "on-limit").read_text().split()[0] == "7200"
    # Each --no-X clears its setting: the next turn has none of its own.
    r = env.run("edit", "s", "--no-timeout", "--no-strict", "--no-on-limit", "--no-window")
    assert r.returncode == 0, r.stderr
    turn_saw(env, "s", out)
    turn = show(env, "s")["turn"]
    assert (turn["timeout"], turn["strict"]) == (None, False)
    directory = env.home / "turns" / "s" / turn["id"]
    assert not (directory / "deadline").exists() and not (directory / "on-limit").exists()
    doc = show(env, "s")
    assert (doc["window"], doc["timeout"], doc["strict"], doc["on_limit"]) == (
        None,
        None,
        False,
        None,
    )


def test_the_window_reaches_the_next_wake(env: Env) -> None:
    assert env.run("new", "w", "--window", "0.2", "--", harness("sleeper.sh")).returncode == 0
    assert env.run("edit", "w", "--window", "2").returncode == 0
    code, v = wake_json(env, "w", "go")
    assert code == 0 and v["verdict"] == "confirmed", v
    assert v["elapsed_ms"] >= 2000, v  # confirmed only once the session's window ran out
    assert env.run("stop", "w").returncode == 0


def test_refused_while_a_turn_runs_and_nothing_changes(env: Env) -> None:
    go = env.root / "go"
    r = env.run("new", "r", "--env", f"GO={go}", "--", harness("until_go.sh"))
    assert r.returncode == 0, r.stderr
    code, v = wake_json(env, "r", "work", "--window", "0.5")
    assert code == 0 and v["verdict"] == "confirmed", v
    before = show(env, "r")
    r = env.run("edit", "r", "--timeout", "1h")
    assert r.returncode == 3, r.stderr
    assert (
        r.stderr
        == f"spex: session 'r' is busy with turn {v['turn']} (spex wait r, or spex stop r)\n"
    )
    r = env.run("edit", "r", "--timeout", "1h", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 3 and doc["ok"] is False and doc["exit_code"] == 3, doc
    assert env.run("edit", "r", "--timeout", "1h", "--dry-run").returncode == 3
    assert show(env, "r") == before
    go.touch()
    assert env.run("wait", "r").returncode == 0
    assert env.run("edit", "r", "--timeout", "1h").returncode == 0
    assert show(env, "r")["timeout"] == 3600


@pytest.mark.parametrize(
    "args",
    [
        ["--window", "abc"],
        ["--window", "0"],
        ["--timeout", "-5"],
        ["--timeout", "30m", "--no-timeout"],
        ["--on-limit", "sleep"],
        ["--env", "NOEQUALS"],
        ["--env", "1X=2"],
        ["--env", "SPEXSUP_TURN=x"],
        ["--unset-env", "NOT_SET"],
        ["--unset-env", "EDIT_A", "--env", "EDIT_A=2"],
        ["--harness", "gpt"],
        ["--harness", "command"],
        ["--cwd", "/no/such/dir"],
        ["--clear-args", "--", "--x"],
        ["stray"],
        ["--"],
        [],
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(env: Env, args: list[str]) -> None:
    seen_session(env, "s", "--env", "EDIT_A=1", "--", "--one")
    before = show(env, "s")
    r = env.run("edit", "s", *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert r.stderr.startswith("spex: ") and len(r.stderr.splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert show(env, "s") == before
    assert events_of(env, "edited") == []


def test_no_change_asked_is_a_usage_error_pointing_at_show(env: Env) -> None:
    seen_session(env, "s")
    r = env.run("edit", "s")
    assert r.returncode == 2
    assert r.stderr.startswith("spex: nothing to change (") and "spex show s" in r.stderr
    # Asking for what is so already changes nothing and records nothing.
    assert env.run("edit", "s", "--timeout", "1h").returncode == 0
    r = env.run("edit", "s", "--timeout", "60m")
    assert r.returncode == 0 and r.stdout == "s: nothing to change (it is so already)\n"
    assert len(events_of(env, "edited")) == 1


def test_unknown_and_invalid_names(env: Env) -> None:
    r = env.run("edit", "nope", "--timeout", "1h")
    assert r.returncode == 3 and r.stderr == "spex: no session named 'nope' (see spex ls)\n"
    r = env.run("edit", "nope", "--timeout", "1h", "--json")
    assert r.returncode == 3 and json.loads(r.stdout)["exit_code"] == 3
    assert env.run("edit", "a.b", "--timeout", "1h").returncode == 2


def test_the_event_is_recorded_with_the_changes_and_no_env_values(env: Env) -> None:
    seen_session(env, "s", "--env", "EDIT_A=1")
    r = env.run("edit", "s", "--env", "EDIT_A=hunter2", "--window", "5", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == show(env, "s")  # the shape of show --json
    assert doc["schema_version"] == 1 and doc["window"] == 5
    (event,) = events_of(env, "edited")
    assert event["session"] == "s"
    assert event["payload"]["changes"] == {
        "env": {"set": ["EDIT_A"], "unset": []},
        "window": {"from": None, "to": 5.0},
    }
    assert "hunter2" not in json.dumps(event)
    text = env.run("events", "--kind", "edited").stdout
    assert text.rstrip().endswith("edited s env, window"), text


def test_dry_run_says_what_would_change_and_changes_nothing(env: Env) -> None:
    seen_session(env, "s")
    before = show(env, "s")
    r = env.run("edit", "s", "--timeout", "2h", "--env", "EDIT_X=1", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "s: env EDIT_X set",
        "s: timeout - -> 2h",
        "would edit s (dry run: nothing changed)",
    ]
    r = env.run("edit", "s", "--timeout", "2h", "--dry-run", "--json")
    doc = json.loads(r.stdout)
    assert doc == {
        "schema_version": 1,
        "session": "s",
        "dry_run": True,
        "changes": {"timeout": {"from": None, "to": 7200.0}},
    }
    assert show(env, "s") == before and events_of(env, "edited") == []


def test_a_new_harness_forgets_the_conversation_and_says_so(env: Env) -> None:
    log = env.root / "argv"
    r = env.run(
        "new", "c", "--harness", "claude", "--cwd", str(env.root),
        "--env", "FAKE_CLAUDE_LOGGED_IN=1", "--env", "FAKE_PI_ONLINE=1",
        "--env", f"FAKE_ARGV_LOG={log}", "--", "--model", "haiku",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    code, v = wake_json(env, "c", "hello", "--window", "10")
    assert code == 0, v
    conversation = show(env, "c")["harness_session_id"]
    assert conversation
    r = env.run("edit", "c", "--harness", "pi")
    assert r.returncode == 0, r.stderr
    assert f"spex: note: forgot conversation {conversation}: pi cannot resume claude's" in r.stderr
    assert "spex: note: dropped claude's arguments (--model haiku)" in r.stderr
    assert "c: harness claude -> pi\n" in r.stdout and "c: args --model haiku -> -\n" in r.stdout
    doc = show(env, "c")
    assert (doc["harness"], doc["harness_session_id"], doc["harness_args"]) == ("pi", None, [])
    log.unlink()
    code, v = wake_json(env, "c", "again", "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v
    (argv,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert "--session" not in argv and "--model" not in argv, argv  # a fresh pi conversation


def test_a_worktree_sessions_cwd_is_refused(env: Env, repo: Repo) -> None:  # noqa: F811
    r = env.run("new", "wt", "--worktree", "--repo", str(repo.path))
    assert r.returncode == 0, r.stderr
    before = show(env, "wt")
    r = env.run("edit", "wt", "--cwd", str(env.root))
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith(
        f"spex: wt's cwd is its worktree {before['cwd']}, which spex manages ("
    )
    assert show(env, "wt") == before
    # Its other settings it may change.
    assert env.run("edit", "wt", "--timeout", "1h").returncode == 0


def test_refused_under_a_maintenance_lease(env: Env) -> None:
    seen_session(env, "s")
    out = env.root / "rc"
    op = env.root / "op.sh"
    op.write_text(f'#!/bin/bash\nspex edit s --timeout 1h; echo "edit=$?" >{out}\n')
    op.chmod(0o755)
    r = env.run("maint", "--all", "--", str(op))
    assert r.returncode == 0, r.stderr
    assert out.read_text().split() == ["edit=3"]
    assert "under maintenance lease 1 (" in r.stderr
    assert show(env, "s")["timeout"] is None
    assert retry_until(lambda: env.run("edit", "s", "--timeout", "1h").returncode == 0)
