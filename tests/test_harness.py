"""Harness adapters against fakes that behave like the real CLIs offline:
resume ids, --fresh, named causes, lock-class retry, user harnesses in TOML."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import Env, harness
from test_turns import show, turn_processes_alive, wake_json


def events_of(env: Env, name: str) -> list[dict]:  # type: ignore[type-arg]
    out = env.run("events", "--json", "--session", name).stdout
    return [json.loads(line) for line in out.splitlines()]


def argv_log(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_claude_logged_out_names_the_cause(env: Env) -> None:
    env.run("new", "c", "--harness", "claude", "--cwd", str(env.root))
    code, v = wake_json(env, "c", "say hi", "--window", "10")
    assert code == 1
    assert v["verdict"] == "failed" and v["rc"] == 1
    assert v["error"] == (
        "claude is not logged in (run claude /login): Not logged in · Please run /login"
    )


def test_claude_resume_and_fresh(env: Env) -> None:
    log = env.root / "argv"
    env.run(
        "new",
        "c",
        "--harness",
        "claude",
        "--env",
        "FAKE_CLAUDE_LOGGED_IN=1",
        "--env",
        f"FAKE_ARGV_LOG={log}",
    )
    _, v = wake_json(env, "c", "--window", "10", "--", "-first, with a leading dash")
    assert v["verdict"] == "completed", v
    conversation = show(env, "c")["harness_session_id"]
    assert conversation and len(conversation) == 36
    assert conversation in env.run("show", "c").stdout
    _, v = wake_json(env, "c", "second", "--window", "10")
    assert v["verdict"] == "completed"
    assert "turn 2: second" in env.run("log", "c").stdout
    _, v = wake_json(env, "c", "third", "--fresh", "--window", "10")
    calls = argv_log(log)
    assert "--resume" not in calls[0]
    assert calls[0][-2:] == ["--", "-first, with a leading dash"]
    assert calls[1][calls[1].index("--resume") + 1] == conversation
    assert "--resume" not in calls[2]
    assert show(env, "c")["harness_session_id"] != conversation


def test_rejected_resume_id_says_so_and_fresh_recovers(env: Env) -> None:
    env.run("new", "c", "--harness", "claude", "--env", "FAKE_CLAUDE_LOGGED_IN=1")
    _, v = wake_json(env, "c", "first", "--window", "10")
    conversation = show(env, "c")["harness_session_id"]
    # The harness forgets the conversation (cleared store, other machine…).
    (Path(env.vars["HOME"]) / ".claude" / "projects" / "fake" / f"{conversation}.jsonl").unlink()
    code, v = wake_json(env, "c", "again", "--window", "10")
    assert code == 1
    assert v["error"] == (
        f"conversation {conversation} is gone; the next wake starts a new one (or --fresh)"
    )
    assert show(env, "c")["turn"]["cause"] == "conversation-gone"
    # The id is cleared, and an event says so: the next wake starts anew,
    # with no --fresh, instead of failing the same way forever.
    assert show(env, "c")["harness_session_id"] is None
    gone = [e for e in events_of(env, "c") if e["kind"] == "conversation-gone"]
    assert len(gone) == 1 and gone[0]["payload"]["conversation"] == conversation
    _, v = wake_json(env, "c", "again", "--window", "10")
    assert v["verdict"] == "completed", v
    assert show(env, "c")["harness_session_id"] not in (None, conversation)


def test_codex_untrusted_directory_is_named(env: Env) -> None:
    env.run("new", "x", "--harness", "codex", "--cwd", str(env.root))
    code, v = wake_json(env, "x", "hi", "--window", "10")
    assert code == 1
    assert v["error"].startswith("codex refuses to run outside a trusted git directory")


def test_codex_offline_is_confirmed_and_stops_cleanly(env: Env) -> None:
    repo = env.root / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env.run("new", "x", "--harness", "codex", "--cwd", str(repo), "--window", "0.8")
    code, v = wake_json(env, "x", "hi")
    assert code == 0 and v["verdict"] == "confirmed", v
    assert len(turn_processes_alive(v["turn"])) >= 2  # codex and its native child
    # Its thread id is known from the output by confirmation time…
    thread = show(env, "x")["harness_session_id"]
    assert thread and len(thread) == 36
    assert env.run("stop", "x", "--grace", "1").returncode == 0
    assert turn_processes_alive(v["turn"]) == []
    # …and an aborted turn keeps it for the next wake to resume.
    assert show(env, "x")["harness_session_id"] == thread


def test_opencode_hang_is_confirmed_and_its_escaped_child_is_stopped(env: Env) -> None:
    env.run("new", "o", "--harness", "opencode", "--window", "0.8")
    code, v = wake_json(env, "o", "hi")
    assert code == 0 and v["verdict"] == "confirmed"
    assert env.run("stop", "o", "--grace", "1").returncode == 0
    assert turn_processes_alive(v["turn"]) == []


def test_pi_gets_the_prompt_on_stdin_and_names_the_cause(env: Env) -> None:
    got = env.root / "prompt"
    env.run("new", "p", "--harness", "pi", "--env", f"FAKE_PROMPT_LOG={got}")
    code, v = wake_json(env, "p", "--window", "10", "--", "--help me; $(rm -rf /)")
    assert code == 1
    assert v["error"].startswith("pi has no API key (run pi, then /login)")
    assert got.read_bytes() == b"--help me; $(rm -rf /)"
    assert show(env, "p")["harness_session_id"]  # its session event was seen


def write_harnesses(env: Env, text: str) -> Path:
    path = env.home / "harnesses.toml"
    env.home.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_lock_class_failures_are_retried(env: Env) -> None:
    count = env.root / "count"
    write_harnesses(
        env,
        f"""
[harness.locky]
fresh = ["{harness("locked_twice.sh")}", "{{prompt}}"]
retryable = ["database is locked"]
""",
    )
    env.run("new", "l", "--harness", "locky", "--env", f"COUNT_FILE={count}")
    code, v = wake_json(env, "l", "go", "--window", "10")
    assert code == 0, v
    assert v["verdict"] == "completed"
    assert v["attempts"] == 3
    turn_dir = env.home / "turns" / "l" / v["turn"]
    assert sorted(p.name for p in turn_dir.glob("attempt-*")) == [
        "attempt-1.outcome",
        "attempt-1.output.log",
        "attempt-2.outcome",
        "attempt-2.output.log",
    ]
    assert "database is locked" in (turn_dir / "attempt-1.output.log").read_text()
    assert show(env, "l")["turn"]["attempts"] == 3
    count.write_text("0")
    assert "after 3 attempts" in env.run("wake", "l", "again", "--window", "10").stdout


def test_retry_gives_up_after_four_retries_and_nothing_else_is_retried(env: Env) -> None:
    write_harnesses(
        env,
        f"""
[harness.locked]
fresh = ["{harness("always_locked.sh")}", "{{prompt}}"]
retryable = ["database is locked"]

[harness.broken]
fresh = ["{harness("exit7.sh")}", "{{prompt}}"]
retryable = ["database is locked"]
""",
    )
    env.run("new", "l", "--harness", "locked")
    code, v = wake_json(env, "l", "go", "--window", "10")
    assert code == 1 and v["attempts"] == 5
    assert "database is locked" in v["error"]
    env.run("new", "b", "--harness", "broken")
    code, v = wake_json(env, "b", "go", "--window", "10")
    assert code == 1 and v["attempts"] == 1


def test_user_harness_overrides_a_builtin(env: Env) -> None:
    write_harnesses(
        env,
        f"""
[harness.demo]
fresh = ["{harness("exit0.sh")}", "{{prompt}}"]
window = 0.2
""",
    )
    env.run("new", "d", "--harness", "demo")
    _, v = wake_json(env, "d", "x", "--window", "10")
    assert v["verdict"] == "completed"
    assert "all good" in env.run("log", "d").stdout


BAD_FILES = [
    ('[harness.x]\nfresh = "not a list"\n', "'x', field 'fresh'"),
    ('[harness.x]\nfrsh = ["a", "{prompt}"]\n', "'x', field 'frsh': unknown field"),
    ('[harness.x]\nfresh = ["a"]\n', "'x', field 'fresh'"),
    ('[harness.x]\nfresh = ["a", "{prompt}"]\nid_pattern = "(unclosed"\n', "field 'id_pattern'"),
    ('[harness.x]\nfresh = ["a", "{prompt}"]\nid_pattern = "nogroup"\n', "field 'id_pattern'"),
    ('[harness.x]\nfresh = ["a", "{prompt}"]\nwindow = -1\n', "field 'window'"),
    ('[harness.x]\nfresh = ["a", "{prompt}"]\nprompt_via = "pipe"\n', "field 'prompt_via'"),
    ('[harness.x]\nfresh = ["a", "{prompt}"]\nresume = ["a", "{prompt}"]\n', "field 'resume'"),
    ('[harness.x]\nfresh = ["a", "{prompt}"]\nfatal = [{pattern = "x"}]\n', "field 'fatal'"),
    ('[harness.x]\nresume = ["a", "{session_id}", "{prompt}"]\n', "field 'fresh': required"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_FILES)
def test_bad_harness_files_name_file_harness_and_field(env: Env, text: str, expected: str) -> None:
    path = write_harnesses(env, text)
    r = env.run("new", "s", "--harness", "x")
    assert r.returncode == 2
    assert r.stderr.startswith(f"spex: {path}: harness ")
    assert expected in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # Other commands and other harnesses are unaffected.
    assert env.run("ls").returncode == 0
    assert env.run("new", "ok", "--harness", "demo").returncode == 0
    assert "harness x" in env.run("doctor").stdout


def test_unparseable_harness_file(env: Env) -> None:
    path = write_harnesses(env, "[harness.x\nfresh = \n")
    r = env.run("new", "s", "--harness", "x")
    assert r.returncode == 2
    assert r.stderr.startswith(f"spex: {path}: cannot read harness file")
    assert env.run("new", "ok", "--harness", "claude").returncode == 0


def test_doctor_reports_binaries_and_versions(env: Env) -> None:
    out = env.run("doctor").stdout
    assert "harness claude:" in out and "2.1.197 (Claude Code)" in out
    assert "codex-cli 0.171.0" in out
    assert "harness demo: bundled agent simulator" in out
