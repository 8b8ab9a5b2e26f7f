"""Turns run with the user's login-shell PATH (issue 14): a harness found only
there, a missing one refused at `new` and failed at wake by name, --env
winning, a login shell that fails or hangs, and the cache that keeps a slow
login shell off every turn. Each test's HOME has a tiny .profile."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Env
from test_turns import show, wake_json


def agent(directory: Path, name: str, says: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\necho '{says}:' \"$@\"\n")
    path.chmod(0o755)
    return path


def harness_file(env: Env, text: str) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(text)


MINE = '[harness.mine]\nfresh = ["myagent", "{prompt}"]\nbinary = "myagent"\n'


def test_a_harness_found_only_on_the_login_path(env: Env) -> None:
    found = agent(env.root / "login-bin", "myagent", "from the login PATH")
    env.login_path(f"{found.parent}:{env.vars['PATH']}")
    harness_file(env, MINE)
    r = env.run("new", "m", "--harness", "mine", "--cwd", str(env.root))
    assert r.returncode == 0, r.stderr
    code, v = wake_json(env, "m", "hello", "--window", "8")
    assert code == 0 and v["verdict"] == "completed", v
    assert "from the login PATH: hello" in env.run("log", "m").stdout
    assert show(env, "m")["binary"] == str(found)
    assert f"binary    {found}" in env.run("show", "m").stdout


def test_the_sessions_env_path_wins(env: Env) -> None:
    agent(env.root / "login-bin", "myagent", "login")
    mine = agent(env.root / "env-bin", "myagent", "env")
    env.login_path(f"{env.root / 'login-bin'}:{env.vars['PATH']}")
    harness_file(env, MINE)
    path = f"{mine.parent}:/usr/bin:/bin"
    r = env.run("new", "m", "--harness", "mine", "--cwd", str(env.root), "--env", f"PATH={path}")
    assert r.returncode == 0, r.stderr
    code, v = wake_json(env, "m", "hi", "--window", "8")
    assert code == 0, v
    assert "env: hi" in env.run("log", "m").stdout
    assert show(env, "m")["binary"] == str(mine)


def test_a_missing_binary_is_refused_at_new_and_named_at_wake(env: Env) -> None:
    harness_file(
        env, '[harness.ghost]\nfresh = ["ghost-agent", "{prompt}"]\nbinary = "ghost-agent"\n'
    )
    r = env.run("new", "g", "--harness", "ghost", "--cwd", str(env.root))
    assert r.returncode == 3
    assert r.stderr == (
        "spex: ghost-agent is not installed or not on your login PATH"
        " (spex doctor; or --no-check)\n"
    )
    assert json.loads(env.run("ls", "--json").stdout) == []
    r = env.run("new", "g", "--harness", "ghost", "--cwd", str(env.root), "--no-check")
    assert r.returncode == 0, r.stderr
    code, v = wake_json(env, "g", "hi", "--window", "8")
    assert code == 1 and v["verdict"] == "failed" and v["rc"] == 127, v
    assert v["error"] == "ghost not found on the login PATH"
    assert "bash" not in v["error"]
    assert show(env, "g")["turn"]["cause"] == "not-found"


def test_a_hanging_login_shell_fails_the_turn_unstarted(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text("login_timeout = 1\n")
    marker = env.root / "ran"
    env.run("new", "t", "--cwd", str(env.root), "--", "touch", str(marker))
    (Path(env.vars["HOME"]) / ".profile").write_text("sleep 30\n")
    code, v = wake_json(env, "t", "x", "--window", "10")
    assert code == 1 and v["rc"] == 126, v
    assert v["error"].startswith("no login shell could be resolved - turn NOT started")
    assert v["elapsed_ms"] < 9000
    assert not marker.exists()
    assert show(env, "t")["turn"]["cause"] == "no-login-shell"


def test_login_shell_off_uses_the_panes_path(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text("login_shell = false\n")
    (Path(env.vars["HOME"]) / ".profile").write_text("sleep 30\n")
    env.run("new", "t", "--cwd", str(env.root), "--", "echo")
    code, v = wake_json(env, "t", "x", "--window", "8")
    assert code == 0 and v["verdict"] == "completed", v


def test_the_login_path_is_cached_until_an_rc_file_changes(env: Env) -> None:
    count = env.root / "logins"
    profile = Path(env.vars["HOME"]) / ".profile"
    # Counted only when not interactive: the pane's own login shell is not ours.
    once = "case $- in *i*) ;; *) echo {} >> " + str(count) + ";; esac\n"
    profile.write_text(once.format("x") + f"PATH='{env.vars['PATH']}'\n")
    env.run("new", "t", "--cwd", str(env.root), "--", "echo")
    for _ in range(2):
        code, v = wake_json(env, "t", "x", "--window", "8")
        assert code == 0, v
    assert count.read_text().count("x") == 1
    profile.write_text(once.format("y") + f"PATH='{env.vars['PATH']}'\n")
    code, v = wake_json(env, "t", "x", "--window", "8")
    assert code == 0, v
    assert count.read_text().count("y") == 1


def test_a_harness_given_as_a_path_needs_no_login_shell(env: Env) -> None:
    (Path(env.vars["HOME"]) / ".profile").write_text("sleep 30\n")
    env.run("new", "t", "--cwd", str(env.root), "--", "/bin/echo")
    code, v = wake_json(env, "t", "x", "--window", "8")
    assert code == 0 and v["verdict"] == "completed", v
    assert show(env, "t")["binary"] == "/bin/echo"
