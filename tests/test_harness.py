"""Harness adapters against fakes that behave like the real CLIs offline:
resume ids, --fresh, named causes, lock-class retry, user harnesses in TOML."""

from __future__ import annotations

import json
import subprocess
import sys
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
    # The prompt, leading dash and all, went on stdin, never into argv.
    assert "-first, with a leading dash" not in calls[0]
    assert "turn 1: -first, with a leading dash" in env.run("log", "c", "--turn", "last~2").stdout
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


def test_an_unknown_key_in_harnesses_toml_is_a_warning_and_the_rest_applies(env: Env) -> None:
    path = write_harnesses(
        env,
        f'[harness.mine]\nfresh = ["{harness("exit0.sh")}", "{{prompt}}"]\nwindw = 1\n'
        'notes = "mine"\n[defaults]\nx = 1\n',
    )
    r = env.run("new", "s", "--harness", "mine")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stderr.splitlines()) == [
        f"spex: warning: {path}: unknown key 'defaults' at the top level, ignored (known: harness)",
        f"spex: warning: {path}: unknown key 'windw' in [harness.mine], ignored"
        " (did you mean 'window'?)",
    ]
    show = json.loads(env.run("harness", "show", "mine", "--json").stdout)
    assert show["notes"] == "mine" and show["error"] is None
    d = env.run("doctor")
    assert d.returncode == 0 and f"warn  config: {path}: unknown key 'windw'" in d.stdout


def test_doctor_fails_on_a_broken_harness_entry(env: Env) -> None:
    path = write_harnesses(env, '[harness.x]\nfresh = "not a list"\n')
    d = env.run("doctor")
    assert d.returncode == 1
    assert f"FAIL  config: {path}: harness 'x', field 'fresh'" in d.stdout


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


# --- a session's own harness arguments -------------------------------------------

SHAPES = [
    # (template, where the arguments land): every shape a template may have.
    (("a", "{args}", "-x", "{prompt}"), ["a", "--model", "m", "-x", "P"]),
    (("a", "-x", "--", "{prompt}"), ["a", "-x", "--model", "m", "--", "P"]),
    # codex resume: the `--` ends the options two elements before {prompt}.
    (("a", "--", "{session_id}", "{prompt}"), ["a", "--model", "m", "--", "S", "P"]),
    (("a", "-x", "{prompt}"), ["a", "-x", "--model", "m", "P"]),
    (("a", "{prompt}", "--tail"), ["a", "--model", "m", "P", "--tail"]),
    # A prompt on stdin: pi, or opencode as `run --format json`.
    (("a", "run", "--session", "{session_id}"), ["a", "run", "--session", "S", "--model", "m"]),
    (("a", "exec", "--", "{session_id}"), ["a", "exec", "--model", "m", "--", "S"]),
    # codex: `-` as its prompt means stdin; options go before it.
    (("a", "exec", "--json", "-"), ["a", "exec", "--json", "--model", "m", "-"]),
    (("a", "resume", "{session_id}", "-"), ["a", "resume", "S", "--model", "m", "-"]),
]


@pytest.mark.parametrize(("template", "expected"), SHAPES)
def test_session_arguments_go_before_the_prompt_in_every_template_shape(
    template: tuple[str, ...], expected: list[str]
) -> None:
    from spexsup.adapters.harness import ARGS, Harness, args_index, shown

    via = "arg" if "{prompt}" in template else "stdin"
    h = Harness("x", fresh=template, prompt_via=via, args=("--model", "m"))
    argv, on_stdin = h.argv(b"P", None, "S")
    assert [a.decode() for a in argv] == [w for w in expected if w != "P" or not on_stdin]
    assert on_stdin == (via == "stdin")
    # Without arguments the template is as it was, less its {args}.
    bare = Harness("x", fresh=template, prompt_via=via).argv(b"P", None, "S")[0]
    assert [a.decode() for a in bare] == [w for w in expected if w not in ("--model", "m")]
    # `spex harness show` prints {args} where they go: a template meaning the same.
    assert shown(template).index(ARGS) == args_index(template)
    assert Harness("x", fresh=tuple(shown(template)), prompt_via=via, args=h.args).argv(
        b"P", None, "S"
    ) == (argv, on_stdin)


def test_session_arguments_are_passed_verbatim() -> None:
    from spexsup.adapters.harness import BUILTIN

    claude = BUILTIN["claude"]._replace(args=("{prompt}", "--x={session_id}", "-"))
    argv, on_stdin = claude.argv(b"hello", "conv-1")
    assert on_stdin and argv[-5:] == [
        b"--resume",
        b"conv-1",
        b"{prompt}",
        b"--x={session_id}",
        b"-",
    ]
    # With the prompt in argv (a harness that takes it there), before `--`.
    command = BUILTIN["demo"]._replace(args=("{prompt}", "-"))
    argv, on_stdin = command.argv(b"hello", None)
    assert not on_stdin and argv[-3:] == [b"{prompt}", b"-", b"hello"]


def test_claude_session_arguments_in_fresh_and_resumed_turns(env: Env) -> None:
    log = env.root / "argv"
    r = env.run(
        "new", "c", "--harness", "claude", "--cwd", str(env.root),
        "--env", "FAKE_CLAUDE_LOGGED_IN=1", "--env", f"FAKE_ARGV_LOG={log}",
        "--", "--permission-mode", "acceptEdits", "--model", "sonnet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("created c (claude --permission-mode acceptEdits --model sonnet)")
    _, v = wake_json(env, "c", "first", "--window", "10")
    assert v["verdict"] == "completed", v
    _, v = wake_json(env, "c", "--window", "10", "--", "-second")
    assert v["verdict"] == "completed", v
    fresh, resumed = argv_log(log)
    ours = ["--permission-mode", "acceptEdits", "--model", "sonnet"]
    # The prompt goes on stdin: the session's options end the argv.
    assert fresh[-4:] == ours and "--session-id" in fresh
    assert resumed[-4:] == ours and "--resume" in resumed
    doc = show(env, "c")
    assert doc["harness_args"] == ours
    assert doc["command"] is None
    assert json.loads(env.run("ls", "--json").stdout)[0]["harness_args"] == ours
    text = env.run("show", "c").stdout
    assert (
        "harness      claude\nargs         --permission-mode acceptEdits --model sonnet\n" in text
    )


def test_pi_session_arguments_with_the_prompt_on_stdin(env: Env) -> None:
    log, got = env.root / "argv", env.root / "prompt"
    r = env.run(
        "new", "p", "--harness", "pi", "--cwd", str(env.root), "--env", "FAKE_PI_ONLINE=1",
        "--env", f"FAKE_ARGV_LOG={log}", "--env", f"FAKE_PROMPT_LOG={got}",
        "--", "--model", "a b",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    for prompt in ("one", "two"):
        _, v = wake_json(env, "p", prompt, "--window", "10")
        assert v["verdict"] == "completed", v
    fresh, resumed = argv_log(log)
    assert fresh == ["-p", "--mode", "json", "--model", "a b"]
    assert resumed[-4:] == ["--session", show(env, "p")["harness_session_id"], "--model", "a b"]
    assert got.read_bytes() == b"two"
    assert "args         --model 'a b'\n" in env.run("show", "p").stdout


def test_session_arguments_reach_the_run_after_a_usage_limit_wait(env: Env) -> None:
    from test_outcomes import limited_session, wait

    log = limited_session(env, 3, "--", "--model", "opus")
    code, v = wake_json(env, "c", "go [limit]", "--on-limit", "wait", "--window", "1")
    assert code == 0, v
    code, line, _ = wait(env, "c")
    assert code == 0, line
    first, again = argv_log(log)
    assert first[-2:] == again[-2:] == ["--model", "opus"]
    assert "--resume" in again


def test_an_args_placeholder_in_harnesses_toml(env: Env) -> None:
    log = env.root / "argv"
    write_harnesses(
        env,
        """
[harness.claude]
fresh = ["claude", "-p", "--output-format", "stream-json", "--verbose", "{args}",
         "--session-id", "{session_id}", "--", "{prompt}"]
""",
    )
    r = env.run(
        "new", "c", "--harness", "claude", "--env", "FAKE_CLAUDE_LOGGED_IN=1",
        "--env", f"FAKE_ARGV_LOG={log}", "--", "--model", "haiku",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    _, v = wake_json(env, "c", "hi", "--window", "10")
    assert v["verdict"] == "completed", v
    (fresh,) = argv_log(log)
    assert fresh[fresh.index("--verbose") + 1 :][:3] == ["--model", "haiku", "--session-id"]


BAD_ARGS_FILES = [
    ('fresh = ["a", "{args}", "{args}", "{prompt}"]', "'fresh': \"{args}\" may appear once"),
    (
        'fresh = ["a", "{prompt}"]\nresume = ["a", "--s={args}", "{session_id}", "{prompt}"]',
        "'resume': \"{args}\" must be an element of its own",
    ),
]


@pytest.mark.parametrize(("body", "expected"), BAD_ARGS_FILES)
def test_a_bad_args_placeholder_is_refused_and_creates_nothing(
    env: Env, body: str, expected: str
) -> None:
    path = write_harnesses(env, f"[harness.x]\n{body}\n")
    r = env.run("new", "s", "--harness", "x", "--", "--model", "m")
    assert r.returncode == 2
    assert r.stderr == f"spex: {path}: harness 'x', field {expected}\n"
    assert env.run("ls", "--json").stdout.strip() == "[]"
    assert env.tmux("has-session", "-t", "=s").returncode != 0
    r = env.run("harness", "show", "x")
    assert r.returncode == 2 and r.stderr == f"spex: {path}: harness 'x', field {expected}\n"


def test_arguments_for_an_unknown_harness_are_refused(env: Env) -> None:
    r = env.run("new", "s", "--harness", "nope", "--", "--model", "m")
    assert r.returncode == 2
    assert r.stderr.startswith("spex: unknown harness 'nope' (one of: claude, codex, command,")
    assert len(r.stderr.splitlines()) == 1
    assert env.run("ls", "--json").stdout.strip() == "[]"
    r = env.run("new", "s", "--harness", "claude", "--")
    assert r.returncode == 2 and r.stderr.startswith("spex: nothing after --")
    assert env.run("ls", "--json").stdout.strip() == "[]"


def test_the_command_harness_keeps_its_meaning(env: Env) -> None:
    assert env.run("new", "a", "--", harness("exit0.sh"), "--flag").returncode == 0
    assert env.run("new", "b", "--harness", "command", "--", harness("exit0.sh")).returncode == 0
    for name, command in (("a", [harness("exit0.sh"), "--flag"]), ("b", [harness("exit0.sh")])):
        doc = show(env, name)
        assert (doc["harness"], doc["command"], doc["harness_args"]) == ("command", command, [])
    _, v = wake_json(env, "a", "go", "--window", "10")
    assert v["verdict"] == "completed", v


# --- spex harness ls | show ---------------------------------------------------


def test_harness_ls_and_show_say_what_runs_and_where_it_comes_from(env: Env) -> None:
    path = write_harnesses(
        env,
        f"""
[harness.mine]
fresh = ["{harness("exit0.sh")}", "--", "{{prompt}}"]
prompt_via = "arg"

[harness.codex]
fresh = ["codex", "exec", "--json", "--skip-git-repo-check", "--", "{{prompt}}"]

[harness.broken]
fresh = ["a"]
""",
    )
    views = {v["name"]: v for v in json.loads(env.run("harness", "ls", "--json").stdout)}
    assert set(views) == {"broken", "claude", "codex", "command", "demo", "mine", "opencode", "pi"}
    claude = views["claude"]
    assert claude["source"] == "built in" and claude["schema_version"] == 1
    assert claude["fresh"][-3:] == ["--session-id", "{session_id}", "{args}"]
    assert claude["resume"][-3:] == ["--resume", "{session_id}", "{args}"]
    assert views["pi"]["fresh"] == ["pi", "-p", "--mode", "json", "{args}"]
    assert views["codex"]["source"] == str(path) and views["codex"]["overrides_builtin"]
    assert views["codex"]["fresh"][3:] == ["--skip-git-repo-check", "{args}", "--", "{prompt}"]
    assert views["codex"]["resume"] == ["codex", "exec", "resume", "--json", "{session_id}",
                                        "{args}", "-"]  # fmt: skip
    mine = views["mine"]
    assert (mine["source"], mine["overrides_builtin"], mine["builtin"]) == (str(path), False, False)
    assert mine["fresh"] == [harness("exit0.sh"), "{args}", "--", "{prompt}"]
    assert mine["resume"] is None
    assert views["broken"]["source"] == str(path)
    assert 'needs a "{prompt}" element' in views["broken"]["error"]

    text = env.run("harness", "ls").stdout.splitlines()
    assert "claude    built in" in text
    fresh = "  fresh   claude -p --output-format stream-json --verbose --session-id {session_id}"
    assert f"{fresh} {{args}}" in text
    assert f"codex     {path} (overrides the built-in)" in text
    assert f"mine      {path}" in text
    assert f"  fresh   {harness('exit0.sh')} {{args}} -- {{prompt}}" in text
    assert "  resume  - (never resumes)" in text

    out = env.run("harness", "show", "mine")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:3] == [
        "harness mine",
        f"source  {path}",
        f"fresh   {harness('exit0.sh')} {{args}} -- {{prompt}}",
    ]
    shown = json.loads(env.run("harness", "show", "claude", "--json").stdout)
    assert shown == claude
    assert "source  built in" in env.run("harness", "show", "claude").stdout
    r = env.run("harness", "show", "nope")
    assert r.returncode == 2 and r.stderr.startswith("spex: unknown harness 'nope' (one of:")
    r = env.run("harness", "show", "nope", "--json")
    assert json.loads(r.stdout)["exit_code"] == 2


def test_an_unreadable_harness_file_is_listed_as_such(env: Env) -> None:
    path = write_harnesses(env, "[harness.x\n")
    r = env.run("harness", "ls", "--json")
    assert r.returncode == 0
    last = json.loads(r.stdout)[-1]
    assert last["name"] is None and last["source"] == str(path)
    assert last["error"].startswith(f"{path}: cannot read harness file")
    assert f"(harness file)  {path}" in env.run("harness", "ls").stdout


def test_doctor_says_where_a_user_harness_comes_from(env: Env) -> None:
    path = write_harnesses(
        env,
        f"""
[harness.mine]
fresh = ["{harness("exit0.sh")}", "{{prompt}}"]

[harness.demo]
window = 0.5
""",
    )
    out = env.run("doctor").stdout
    assert f"harness mine: from {path}\n" in out
    assert f"harness demo: bundled agent simulator, from {path}\n" in out
    assert "harness claude: " in out and f"(from {path})" not in out.split("harness claude: ")[1]
    checks = json.loads(env.run("doctor", "--json").stdout)["checks"]
    assert {
        "name": "harness mine",
        "ok": True,
        "detail": f"from {path}",
        "required": False,
    } in checks


def test_a_nul_in_an_argv_word_is_refused(env: Env) -> None:
    """The turn's argv file is NUL-separated: a NUL in a harnesses.toml word
    split it into two arguments. Refused, naming the file and the field."""
    got = env.root / "got"
    path = write_harnesses(
        env, f'[harness.nul]\nfresh = ["{sys.executable}", "{harness("record.py")}", "a\\u0000b"]\n'
    )
    r = env.run("new", "n", "--harness", "nul", "--env", f"RECORD_TO={got}")
    assert r.returncode == 2
    assert r.stderr == (
        f"spex: {path}: harness 'nul', field 'fresh': an argv word must not contain a NUL"
        " (\\u0000)\n"
    )
    assert json.loads(env.run("ls", "--json").stdout) == []
