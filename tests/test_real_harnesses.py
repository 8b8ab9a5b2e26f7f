"""Opt-in (`make test-real`): the real agent CLIs from npm. Not in the
default run: it needs the npm packages (about 1.2 GB), which `make test-real`
installs.

The first tests run them offline with an empty HOME — a new user's machine
before login. The rest point each CLI at a fake model server on 127.0.0.1
(tests/modelserver.py, configured by tests/realclis.py) and drive it through
spex: answers, resume, prompt bytes, denials, every error form, stalls, stop
and fan-out. These define the target verdicts (DESIGN §8, §9).

Each test prints what the CLI printed (run with -s to see it).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import realclis
from conftest import Env, retry_until
from modelserver import ModelServer, Reply
from test_turns import show, turn_processes_alive, wake_json

pytestmark = pytest.mark.real

BIN = os.environ.get("SPEXSUP_REAL_CLI_BIN", "")


@pytest.fixture
def real(env: Env) -> Env:
    if not BIN or not Path(BIN, "claude").exists():
        pytest.fail("SPEXSUP_REAL_CLI_BIN must name node_modules/.bin (run: make test-real)")
    system = ":".join(p for p in os.environ["PATH"].split(":") if "fakes" not in p)
    env.vars["PATH"] = f"{BIN}:{system}"
    env.login_path(env.vars["PATH"])
    return env


def report(name: str, env: Env, session: str, verdict: dict) -> None:  # type: ignore[type-arg]
    print(f"\n--- {name}: {verdict['verdict']} rc={verdict['rc']} error={verdict['error']!r}")
    print(env.run("log", session).stdout[-1500:])


def test_claude_logged_out_fails_naming_the_cause(real: Env) -> None:
    real.run("new", "c", "--harness", "claude", "--cwd", str(real.root))
    code, v = wake_json(real, "c", "say hi", "--window", "30")
    report("claude", real, "c", v)
    assert code == 1 and v["verdict"] == "failed"
    assert v["error"].startswith("claude is not logged in (run claude /login)")
    # spex chose the conversation id (--session-id) and stored it at admission;
    # the CLI used it: its init event names the same one.
    assigned = show(real, "c")["harness_session_id"]
    assert assigned and len(assigned) == 36
    assert assigned in real.run("log", "c").stdout


def test_claude_unknown_resume_id_fails_naming_it(real: Env) -> None:
    real.run("new", "c", "--harness", "claude", "--cwd", str(real.root))
    spex = real.spex()
    with spex.store.tx() as db:
        db.execute(
            "UPDATE sessions SET harness_session_id = ? WHERE name = 'c'",
            ("0b6a1c9e-1d7e-4c55-9d3e-5a3f7f1b2c3d",),
        )
    code, v = wake_json(real, "c", "say hi", "--window", "30")
    report("claude --resume unknown", real, "c", v)
    assert code == 1
    assert v["error"].startswith(
        "conversation 0b6a1c9e-1d7e-4c55-9d3e-5a3f7f1b2c3d is gone;"
        " the next wake starts a new one (or --fresh)"
    ), v


def test_pi_without_api_key_fails_naming_the_cause(real: Env) -> None:
    real.run("new", "p", "--harness", "pi", "--cwd", str(real.root))
    code, v = wake_json(real, "p", "say hi", "--window", "30")
    report("pi", real, "p", v)
    assert code == 1
    assert v["error"].startswith("pi has no API key")


@pytest.mark.parametrize("cli", ["codex", "opencode"])
def test_offline_retrying_clis_are_confirmed_and_stop_cleanly(real: Env, cli: str) -> None:
    repo = real.root / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    real.run("new", "x", "--harness", cli, "--cwd", str(repo))
    code, v = wake_json(real, "x", "say hi", "--window", "5")
    report(cli, real, "x", v)
    assert code == 0 and v["verdict"] == "confirmed", v
    assert turn_processes_alive(v["turn"])
    r = real.run("stop", "x", "--grace", "3")
    assert r.returncode == 0, r.stderr
    # The wrapper is never killed: it records the end, then its last steps
    # (the reporter, the input flush) run and it execs the shell.
    assert retry_until(lambda: turn_processes_alive(v["turn"]) == [], seconds=10)
    assert show(real, "x")["turn"]["state"] == "aborted"


def test_codex_outside_git_fails_naming_the_cause(real: Env) -> None:
    real.run("new", "x", "--harness", "codex", "--cwd", str(real.root))
    code, v = wake_json(real, "x", "say hi", "--window", "30")
    report("codex outside git", real, "x", v)
    assert code == 1
    assert v["error"].startswith("codex refuses to run outside a trusted git directory")


# --- against the fake model server -------------------------------------------

CLIS = realclis.CLIS
TRICKY = 'say hi\nreply "briefly", please. $(echo x) `y` -lead é ✓'
# Long enough for a whole turn on a loaded 2-core machine (opencode takes
# 3-6 s for one answer), so most turns end inside it: `completed`.
WINDOW = "45"


@pytest.fixture
def model(real: Env) -> Iterator[ModelServer]:
    """A running fake model server; errors carry `retry-after-ms: 200`, so the
    CLIs' own retries (bounded by their settings) are quick."""
    server = ModelServer(log=real.root / "requests.jsonl", retry_after_ms=200).start()
    try:
        yield server
    finally:
        server.close()


def session(real: Env, server: ModelServer, cli: str, name: str = "s", **options: Any) -> Path:
    """A spex session on `cli`, configured in the test's HOME to talk to
    `server` only; its cwd a git repository (codex wants one)."""
    repo = real.root / f"repo-{name}"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = realclis.setup(cli, Path(real.vars["HOME"]), server.url, **options)
    args = [f"--env={k}={v}" for k, v in env.items() if v]
    r = real.run("new", name, "--harness", cli, "--cwd", str(repo), *args)
    assert r.returncode == 0, r.stderr
    return repo


def finish(real: Env, name: str, verdict: dict[str, Any], seconds: float = 150) -> dict[str, Any]:
    """The turn once it ended: a `confirmed` one is waited for (`spex wait`)."""
    if verdict["verdict"] == "confirmed":
        r = real.run("wait", name, "--timeout", str(seconds), timeout=seconds + 30)
        assert r.returncode in (0, 1), (r.returncode, r.stdout, r.stderr)
    return show(real, name)["turn"]  # type: ignore[no-any-return]


def human(message: str | None) -> bool:
    """A line a person reads: not a JSON event."""
    if not message:
        return False
    return not message.lstrip().startswith("{") and '"type":' not in message


@pytest.mark.parametrize("cli", CLIS)
def test_turn_completes_and_the_next_resumes_it(real: Env, model: ModelServer, cli: str) -> None:
    model.push(Reply.answer("first answer"), Reply.answer("second answer"))
    session(real, model, cli)
    code, v = wake_json(real, "s", "remember the word kumquat", "--window", WINDOW)
    report(cli, real, "s", v)
    assert code == 0 and v["verdict"] in ("completed", "confirmed"), v
    turn = finish(real, "s", v)
    assert (turn["state"], turn["rc"]) == ("complete", 0), turn
    first_id = show(real, "s")["harness_session_id"]
    assert first_id, "spex found no conversation id in the turn's output"

    code, v = wake_json(real, "s", "what was the word?", "--window", WINDOW)
    report(f"{cli} resumed", real, "s", v)
    assert code == 0, v
    turn = finish(real, "s", v)
    assert (turn["state"], turn["rc"], turn["resumed"]) == ("complete", 0, first_id), turn
    assert show(real, "s")["harness_session_id"] == first_id
    # The CLI resent the whole conversation: turn 1's prompt and answer.
    last = model.last_main()
    assert last is not None
    texts = last.user_texts()
    assert any("kumquat" in t for t in texts) and any("what was the word" in t for t in texts)
    assert "first answer" in json.dumps(last.messages())


# The model each CLI runs here (tests/realclis.py), as its usage names it.
MODELS = {
    "claude": "claude-sonnet-4-5",
    "codex": "gpt-5.5",
    "opencode": "fake-model",
    "pi": "fake-model",
}


@pytest.mark.parametrize("cli", CLIS)
def test_each_turn_records_its_usage(real: Env, model: ModelServer, cli: str) -> None:
    """Issue 26: the server returns usage blocks; each CLI's turn records
    non-zero tokens for its model, and a resumed turn its own share."""
    model.push(Reply.answer("first answer"), Reply.answer("second answer"))
    session(real, model, cli)
    for prompt in ("remember the word kumquat", "what was the word?"):
        code, v = wake_json(real, "s", prompt, "--window", WINDOW)
        report(cli, real, "s", v)
        assert code == 0, v
        assert finish(real, "s", v)["state"] == "complete"
    turns = show(real, "s")["turns"]
    for t in turns:
        used = t["usage"]
        assert used is not None and used["input"] > 0 and used["output"] > 0, t
        assert used["models"] == [MODELS[cli]] and used["exact"] is True, used
    # Not the conversation's running total (codex counts one): each its own.
    assert turns[0]["usage"]["input"] < 1.5 * turns[1]["usage"]["input"], turns
    cost = turns[0]["cost"]
    # claude reports a cost; codex none; opencode and pi 0 for this unpriced model.
    assert cost["source"] == ("reported" if cli == "claude" else "unknown"), cost
    doc = json.loads(real.run("cost", "--json").stdout)
    assert doc["total"]["turns"] == 2 and doc["total"]["usage"]["input"] > 0


@pytest.mark.parametrize("cli", CLIS)
def test_prompt_arrives_byte_exact(real: Env, model: ModelServer, cli: str) -> None:
    session(real, model, cli)
    code, v = wake_json(real, "s", "--window", WINDOW, "--", TRICKY)
    assert code == 0, v
    assert finish(real, "s", v)["state"] == "complete"
    first = model.last_main()
    assert first is not None
    assert TRICKY in first.user_texts(), f"fresh turn: the server got {first.user_texts()[-1]!r}"
    # The resumed form delivers it the same way.
    code, v = wake_json(real, "s", "--window", WINDOW, "--", TRICKY)
    assert code == 0, v
    assert finish(real, "s", v)["state"] == "complete"
    second = model.last_main()
    assert second is not None and second is not first
    assert second.user_texts().count(TRICKY) == 2, f"resumed: {second.user_texts()[-1]!r}"


DENIALS = [
    ("claude", "Bash", {}),
    # `ask` in a non-interactive run: auto-rejected (state.status error).
    ("opencode", "bash", {"permission": {"bash": "ask"}}),
    # A rule that denies this command (bash itself still offered).
    ("opencode", "bash", {"permission": {"bash": {"*": "allow", "touch *": "deny"}}}),
]


@pytest.mark.parametrize(
    ("cli", "tool", "options"), DENIALS, ids=["claude", "opencode-ask", "opencode-rule"]
)
def test_a_denied_tool_is_flagged_and_strict_fails_it(
    real: Env, model: ModelServer, cli: str, tool: str, options: dict[str, Any]
) -> None:
    model.push(Reply.shell("touch spex-tool-ran.txt"), Reply.answer("I could not run it."))
    repo = session(real, model, cli, **options)
    code, v = wake_json(real, "s", "create spex-tool-ran.txt", "--window", WINDOW)
    report(cli, real, "s", v)
    turn = finish(real, "s", v)
    assert not (repo / "spex-tool-ran.txt").exists()
    assert f"denied:{tool}" in turn["flags"], turn
    assert turn["state"] == "complete", turn
    # --strict: the same denial fails the turn. (opencode ends a run on an
    # auto-rejected call without asking the model again: drop what is left.)
    model.script.clear()
    model.push(Reply.shell("touch spex-tool-ran.txt"), Reply.answer("I could not run it."))
    code, v = wake_json(real, "s", "create it again", "--window", WINDOW, "--strict")
    report(f"{cli} --strict", real, "s", v)
    turn = finish(real, "s", v)
    assert f"denied:{tool}" in turn["flags"], turn
    assert turn["state"] == "failed" and (code == 1 or v["verdict"] == "confirmed"), (v, turn)


# (scenario, the reply the server gives every main request, the cause expected)
ERRORS = [
    ("http500", Reply.fail("server_error"), "agent-error"),
    ("http503", Reply.fail("overloaded", status=503), "overloaded"),
    ("ratelimit429", Reply.fail("rate_limit", retry_after=1), "rate-limited"),
    ("usage429", Reply.fail("usage_limit"), "usage-limit"),
    ("model-not-found", Reply.fail("model_not_found"), "model-not-found"),
]
ERROR_CASES = [(cli, *e) for cli in CLIS for e in ERRORS]
ERROR_CASES.append(("claude", "http529", Reply.fail("overloaded", status=529), "overloaded"))
# codex words a 500 as its own `We're currently experiencing high demand, …`.
ERROR_CASES[ERROR_CASES.index(("codex", *ERRORS[0]))] = ("codex", *ERRORS[0][:2], "overloaded")
# The subscription forms: claude with an OAuth token, pi on its ChatGPT provider.
USAGE_OPTIONS: dict[str, dict[str, Any]] = {"claude": {"oauth": True}, "pi": {"chatgpt": True}}


@pytest.mark.parametrize(
    ("cli", "scenario", "reply", "cause"), ERROR_CASES, ids=[f"{c[0]}-{c[1]}" for c in ERROR_CASES]
)
def test_every_error_form_ends_in_error_with_its_cause(
    real: Env, model: ModelServer, cli: str, scenario: str, reply: Reply, cause: str
) -> None:
    model.default = reply
    options = USAGE_OPTIONS.get(cli, {}) if scenario == "usage429" else {}
    session(real, model, cli, **options)
    code, v = wake_json(real, "s", "say hi", "--window", WINDOW)
    report(f"{cli} {scenario}", real, "s", v)
    turn = finish(real, "s", v)
    assert model.main_requests(), "the CLI never reached the server"
    assert turn["state"] == "failed", turn
    assert turn["cause"] == cause, turn
    assert human(turn["error"]), turn["error"]
    if v["verdict"] != "confirmed":
        assert code == 1 and v["verdict"] == "failed" and human(v["error"]), v


@pytest.mark.parametrize("cli", CLIS)
def test_a_stalled_stream_times_out(real: Env, model: ModelServer, cli: str) -> None:
    model.default = Reply.stall()
    session(real, model, cli)
    code, v = wake_json(real, "s", "say hi", "--window", "3", "--timeout", "10s")
    report(f"{cli} stalled", real, "s", v)
    assert code == 0 and v["verdict"] == "confirmed", v
    turn = finish(real, "s", v, seconds=60)
    assert turn["state"] == "timed-out", turn
    assert retry_until(lambda: turn_processes_alive(v["turn"]) == [], seconds=15)


def _tool_running(turn: str) -> bool:
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SPEXSUP_TURN") == turn and "sleep 300" in " ".join(
                proc.cmdline()
            ):
                return True
        except psutil.Error:
            continue
    return False


@pytest.mark.parametrize("cli", CLIS)
def test_stop_leaves_no_process_of_the_turn(real: Env, model: ModelServer, cli: str) -> None:
    # The model runs `sleep 300` with the CLI's shell tool: claude's and
    # opencode's tool shells run in a session of their own (setsid) and
    # outlive a SIGTERM of the CLI (tests/fixtures/real/*/sigterm-tool.err).
    model.push(Reply.shell("sleep 300"))
    model.default = Reply.stall()
    session(real, model, cli)
    code, v = wake_json(real, "s", "wait a while", "--window", "3")
    report(f"{cli} before stop", real, "s", v)
    assert code == 0 and v["verdict"] == "confirmed", v
    assert retry_until(lambda: _tool_running(v["turn"]), seconds=60), "the tool never started"
    r = real.run("stop", "s", "--grace", "3")
    assert r.returncode == 0, r.stderr
    assert retry_until(lambda: turn_processes_alive(v["turn"]) == [], seconds=15), [
        " ".join(psutil.Process(p).cmdline()) for p in turn_processes_alive(v["turn"])
    ]
    assert show(real, "s")["turn"]["state"] == "aborted"


def test_fanout_to_one_session_per_cli(real: Env, model: ModelServer) -> None:
    model.default = Reply.answer("fanned out")
    for cli in CLIS:
        session(real, model, cli, name=cli)
    r = real.run(
        "fanout", *CLIS, "-m", "say hi", "--window", WINDOW, "--wait", "--json", timeout=300
    )
    print(r.stdout[-3000:], r.stderr[-2000:])
    assert r.returncode == 0, (r.stdout, r.stderr)
    for cli in CLIS:
        turn = show(real, cli)["turn"]
        assert (turn["state"], turn["rc"]) == ("complete", 0), (cli, turn)
    assert len(model.main_requests()) >= 4


def test_a_wide_opencode_fanout_completes_every_leg(real: Env, model: ModelServer) -> None:
    """Issue 42, item 4: ten `opencode run`s started at once on one opencode
    database (one HOME) each complete; none is lost to `database is locked`."""
    model.default = Reply.answer("fanned out")
    names = [f"o{i}" for i in range(10)]
    for name in names:
        session(real, model, "opencode", name=name)
    r = real.run(
        "fanout", *names, "-m", "say hi", "--window", WINDOW, "--wait", "--json", timeout=900
    )
    print(r.stdout[-3000:], r.stderr[-2000:])
    ends = {name: show(real, name)["turn"] for name in names}
    for name, turn in ends.items():
        if turn["state"] != "complete":
            print(f"--- {name}:", turn["state"], turn["error"], real.run("log", name).stdout[-800:])
    assert {n: (t["state"], t["rc"]) for n, t in ends.items()} == dict.fromkeys(
        names, ("complete", 0)
    )
    assert r.returncode == 0, (r.stdout, r.stderr)


UNKNOWN = {
    "claude": "0b6a1c9e-1d7e-4c55-9d3e-5a3f7f1b2c3d",
    "codex": "0199a1c9-1d7e-7c55-9d3e-5a3f7f1b2c3d",
    "opencode": "ses_0b6a1c9e1d7eXXXXXXXXXXXXXX",
    "pi": "0b6a1c9e-1d7e-4c55-9d3e-5a3f7f1b2c3d",
}


@pytest.mark.parametrize("cli", CLIS)
def test_an_unknown_resume_id_is_named_and_cleared(real: Env, model: ModelServer, cli: str) -> None:
    session(real, model, cli)
    gone = UNKNOWN[cli]
    with real.spex().store.tx() as db:
        db.execute("UPDATE sessions SET harness_session_id = ? WHERE name = 's'", (gone,))
    _, v = wake_json(real, "s", "say hi", "--window", WINDOW)
    report(f"{cli} unknown resume", real, "s", v)
    turn = finish(real, "s", v)
    assert turn["state"] == "failed", turn
    message = f"conversation {gone} is gone; the next wake starts a new one (or --fresh)"
    assert message in (turn["error"] or ""), turn
    assert show(real, "s")["harness_session_id"] in (None, ""), show(real, "s")
    assert not model.main_requests(), "the CLI sent the prompt somewhere"


def test_opencode_sessions_are_read_from_its_real_database(
    real: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """opencode >= 1.2 keeps sessions in SQLite: the lookup a turn with no id
    in its output falls back to finds the one the real CLI made."""
    import time

    from spexsup.adapters import convstore

    repo = real.root / "repo"
    repo.mkdir()
    real.run("new", "x", "--harness", "opencode", "--cwd", str(repo))
    started = time.time()
    code, v = wake_json(real, "x", "say hi", "--window", "5")
    assert code == 0 and v["verdict"] == "confirmed", v
    database = Path(real.vars["HOME"]) / ".local" / "share" / "opencode" / "opencode.db"
    assert retry_until(database.exists, seconds=20)
    monkeypatch.setenv("HOME", real.vars["HOME"])
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert retry_until(lambda: bool(convstore.lookup("opencode", str(repo), started)), 20)
    found = convstore.lookup("opencode", str(repo), started)
    assert found and found.startswith("ses_")
    assert real.run("stop", "x", "--grace", "3").returncode == 0
    assert show(real, "x")["harness_session_id"] in (None, found)


def test_opencode_subagents_spend_is_counted(real: Env, model: ModelServer) -> None:
    """Issue 42, item 1: the model calls opencode's `task` tool; the subagent
    runs in a session of its own (in opencode's database, `parent_id` the
    turn's), whose usage `run --format json` never prints. The turn's usage
    is its own steps' and the subagent's, exact."""
    import sqlite3

    model.push(
        Reply.call(
            "task",
            {"description": "look around", "prompt": "list the files", "subagent_type": "general"},
        ),
        Reply.answer("child answer"),
        Reply.answer("parent done"),
    )
    session(real, model, "opencode")
    code, v = wake_json(real, "s", "please delegate", "--window", WINDOW)
    report("opencode task", real, "s", v)
    assert code == 0, v
    turn = finish(real, "s", v)
    assert turn["state"] == "complete", turn
    conversation = show(real, "s")["harness_session_id"]
    log = real.run("log", "s").stdout
    own = sum(
        json.loads(line)["part"]["tokens"]["input"]
        for line in log.splitlines()
        if line.startswith('{"type":"step_finish"')
    )
    database = Path(real.vars["HOME"]) / ".local" / "share" / "opencode" / "opencode.db"
    db = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        (child,) = db.execute("SELECT id FROM session WHERE parent_id = ?", (conversation,))
        below = sum(
            json.loads(data)["tokens"]["input"]
            for (data,) in db.execute(
                "SELECT data FROM message WHERE session_id = ?"
                " AND json_extract(data, '$.role') = 'assistant'",
                child,
            )
        )
    finally:
        db.close()
    assert own > 0 and below > 0, (own, below)
    used = turn["usage"]
    assert used["input"] == own + below and used["exact"] is True, (used, own, below)
    assert used["models"] == ["fake-model"], used


def test_an_opencode_model_it_does_not_know_is_named(real: Env, model: ModelServer) -> None:
    """opencode 1.18 says only `Unexpected server error` of a misspelled
    model; its error log, which the built-in harness prints, names it."""
    repo = real.root / "repo"
    repo.mkdir()
    env = realclis.setup("opencode", Path(real.vars["HOME"]), model.url)
    args = [f"--env={k}={v}" for k, v in env.items() if v]
    r = real.run(
        "new", "o", "--harness", "opencode", "--cwd", str(repo), *args,
        "--", "--model", f"fake/{realclis.MODEL}x",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    code, v = wake_json(real, "o", "say hi", "--window", WINDOW)
    assert code == 1, v
    report("opencode --model typo", real, "o", v)
    turn = finish(real, "o", v)
    assert turn["state"] == "failed" and turn["cause"] == "model-not-found", turn
    assert turn["error"].startswith(f"Model not found: fake/{realclis.MODEL}x."), turn


def test_claude_drives_spex_mcp_and_wakes_another_session(real: Env, model: ModelServer) -> None:
    """Issue 28: claude, given `spex mcp` as an MCP server (--mcp-config), is
    scripted by the model server to call its `wake` tool (mcp__spex__wake):
    the other session, on the demo harness, runs a turn that completes, and
    claude gets the verdict document back as the tool's result."""
    from conftest import SPEX

    assert real.run("new", "target", "--harness", "demo").returncode == 0
    wake = {"name": "target", "prompt": "woken by claude 'via' MCP", "window": 20}
    model.push(Reply.call("mcp__spex__wake", wake), Reply.answer("target is awake"))
    keep = ("SPEXSUP_HOME", "SPEXSUP_TMUX", "TMUX_TMPDIR", "SPEXSUP_DEMO_DELAY", "PATH", "HOME")
    servers = {
        "mcpServers": {
            "spex": {
                "type": "stdio",
                "command": SPEX,
                "args": ["mcp"],
                "env": {k: real.vars[k] for k in keep if k in real.vars},
            }
        }
    }
    config = real.root / "mcp.json"
    config.write_text(json.dumps(servers))
    repo = real.root / "repo-agent"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = realclis.setup("claude", Path(real.vars["HOME"]), model.url)
    # claude -p sends its first request without waiting for its MCP servers
    # (2.1.197): on a loaded machine `spex mcp` was not up yet and the turn
    # ran without its tools. This makes claude wait, as the README says, and
    # for longer than its 5 s default (MCP_CONNECT_TIMEOUT_MS): beside two
    # other real CLIs on two cores, `spex mcp` took longer to answer, and
    # claude again ran without its tools (CI, 2026-12-06).
    env["MCP_CONNECTION_NONBLOCKING"] = "0"
    env["MCP_CONNECT_TIMEOUT_MS"] = "60000"
    r = real.run(
        "new", "agent", "--harness", "claude", "--cwd", str(repo),
        *[f"--env={k}={v}" for k, v in env.items() if v],
        "--", "--mcp-config", str(config), "--strict-mcp-config",
        "--allowedTools", "mcp__spex__wake",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    _code, v = wake_json(real, "agent", "wake the target session", "--window", WINDOW)
    report("claude via spex mcp", real, "agent", v)
    turn = finish(real, "agent", v)
    assert (turn["state"], turn["rc"]) == ("complete", 0), turn
    offered = model.main_requests()[0].tool_names()
    assert "mcp__spex__wake" in offered and "mcp__spex__list_sessions" in offered, offered
    target = show(real, "target")
    assert target["turn"] is not None and target["turn"]["state"] == "complete", target
    assert "woken by claude 'via' MCP" in real.run("log", "target").stdout
    # The tool's result, as claude sent it back to the model: the wake's
    # verdict document (claude passes on the structured content).
    last = model.last_main()
    assert last is not None
    results = [
        block["content"]
        for message in last.messages()
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert len(results) == 1, results
    verdict = json.loads(results[0] if isinstance(results[0], str) else results[0][0]["text"])
    assert verdict["schema_version"] == 1 and verdict["verdict"] == "completed", verdict
    assert verdict["turn"] == target["turn"]["id"], (verdict, target["turn"])


# --- inside the sandbox (DESIGN §19) -------------------------------------------

# What each CLI needs to run the model's shell command without asking, as the
# README's recipe for unattended agents has it: the sandbox is what holds it.
UNATTENDED: dict[str, tuple[str, ...]] = {
    "claude": ("--allowedTools", "Bash"),
    "codex": ("--dangerously-bypass-approvals-and-sandbox",),
    "opencode": (),
    "pi": (),
}
XDG = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")


def move_state(cli: str, home: Path, env: dict[str, str]) -> None:
    """Each CLI's state moved out of its default place, where its own
    variable says (CLAUDE_CONFIG_DIR, CODEX_HOME, XDG_*, PI_CODING_AGENT_DIR)."""
    import shutil

    alt = home / "elsewhere"
    alt.mkdir()
    if cli == "claude":
        (alt / "claude").mkdir()
        shutil.move(home / ".claude.json", alt / "claude" / ".claude.json")
        env["CLAUDE_CONFIG_DIR"] = str(alt / "claude")
    elif cli == "codex":
        shutil.move(env["CODEX_HOME"], alt / "codex")
        env["CODEX_HOME"] = str(alt / "codex")
    elif cli == "opencode":
        for var in XDG:
            shutil.move(env[var], alt / var.lower())
            env[var] = str(alt / var.lower())
    else:
        shutil.move(env["PI_CODING_AGENT_DIR"], alt / "pi")
        env["PI_CODING_AGENT_DIR"] = str(alt / "pi")


def conversations(cli: str, home: Path, env: dict[str, str]) -> Path:
    """Where `cli` keeps its conversations, in the environment `env`."""
    if cli == "claude":
        return Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude") / "projects"
    if cli == "codex":
        return Path(env["CODEX_HOME"]) / "sessions"
    if cli == "opencode":
        return Path(env["XDG_DATA_HOME"]) / "opencode" / "opencode.db"
    return Path(env["PI_CODING_AGENT_DIR"]) / "sessions"


@pytest.fixture
def sandbox_home(real: Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A HOME (and a place for repositories) outside /tmp: a sandbox's /tmp
    is its own tmpfs, where a home would be writable and every write to it
    lost; here, as on a user's machine, all of it is read-only but what the
    adapter names."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="spex-sbx-", dir="/var/tmp"))
    home = root / "home"
    home.mkdir()
    real.vars["HOME"] = str(home)
    monkeypatch.setenv("HOME", str(home))
    real.login_path(real.vars["PATH"])
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("moved", [False, True], ids=["default-state", "moved-state"])
@pytest.mark.parametrize("cli", CLIS)
def test_sandboxed_turn_resumes_and_records_a_denied_host(
    real: Env, sandbox_home: Path, model: ModelServer, cli: str, moved: bool
) -> None:
    """Issue 37: each CLI completes a turn and a resumed turn in the sandbox
    against the model server, keeping its state where it keeps it (its
    default place, or where its variable moves it), and a host the agent
    is made to fetch is denied and recorded."""
    model.push(
        Reply.answer("first answer"),
        Reply.answer("second answer"),
        Reply.shell("curl -s http://blocked.example/"),
        Reply.answer("it was blocked"),
    )
    repo = sandbox_home / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    home = Path(real.vars["HOME"])
    env = realclis.setup(cli, home, model.url)
    if moved:
        move_state(cli, home, env)
    args = [f"--env={k}={v}" for k, v in env.items() if v]
    # claude's base URL is in its env (allowed as such); the others' are in
    # their config files, which spex does not read: allowed by hand.
    if cli != "claude":
        args.append(f"--allow-host=127.0.0.1:{model.port}")
    extra = ("--", *UNATTENDED[cli]) if UNATTENDED[cli] else ()
    r = real.run("new", "s", "--harness", cli, "--cwd", str(repo), "--sandbox", *args, *extra)
    assert r.returncode == 0, r.stderr

    code, v = wake_json(real, "s", "remember the word kumquat", "--window", WINDOW)
    report(f"{cli} sandboxed", real, "s", v)
    assert code == 0, v
    turn = finish(real, "s", v)
    assert (turn["state"], turn["rc"]) == ("complete", 0), turn
    assert "sandboxed" in turn["flags"], turn
    first_id = show(real, "s")["harness_session_id"]
    assert first_id, "spex found no conversation id in the turn's output"
    kept = conversations(cli, home, env)
    assert kept.exists(), f"{cli} kept no conversation in {kept}"
    if cli == "claude":
        # Its global config, saved by a rename beside it (~/.claude.json: in
        # a read-only ~).
        config = Path(env.get("CLAUDE_CONFIG_DIR") or home) / ".claude.json"
        assert "userID" in config.read_text(), f"claude saved no {config}"

    code, v = wake_json(real, "s", "what was the word?", "--window", WINDOW)
    report(f"{cli} sandboxed, resumed", real, "s", v)
    assert code == 0, v
    turn = finish(real, "s", v)
    assert (turn["state"], turn["rc"], turn["resumed"]) == ("complete", 0, first_id), turn
    assert "sandboxed" in turn["flags"], turn
    assert show(real, "s")["harness_session_id"] == first_id
    last = model.last_main()
    assert last is not None
    texts = last.user_texts()
    assert any("kumquat" in t for t in texts) and any("what was the word" in t for t in texts)
    assert "first answer" in json.dumps(last.messages())

    code, v = wake_json(real, "s", "fetch http://blocked.example/", "--window", WINDOW)
    report(f"{cli} sandboxed, fetch", real, "s", v)
    assert code == 0, v
    turn = finish(real, "s", v)
    assert (turn["state"], turn["rc"]) == ("complete", 0), turn
    print(f"--- {cli} flags: {turn['flags']}")
    assert "denied-net:blocked.example:80" in turn["flags"], turn
    # The tool's result, as the CLI sent it back: the gate's refusal.
    last = model.last_main()
    assert last is not None
    assert "blocked by network allowlist" in json.dumps(last.messages()), last.messages()[-2:]
