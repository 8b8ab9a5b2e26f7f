"""Opt-in (`make test-real`): the real agent CLIs from npm, offline, with an
empty HOME — a new user's machine before login. Not in the default run: it
needs the npm packages (about 1.2 GB), which `make test-real` installs.

Each test prints what the CLI printed (run with -s to see it).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import Env, retry_until
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
    assert "does not know this conversation id (wake with --fresh)" in v["error"]


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


def test_opencode_sessions_are_read_from_its_real_database(
    real: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """opencode >= 1.2 keeps sessions in SQLite: the lookup a turn with no id
    in its output falls back to finds the one the real CLI made."""
    import time

    from spexsup import convstore

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
