"""Turns run in the user's interactive login environment (issues 14, 21): a
harness found only there (an nvm line after ~/.bashrc's interactive-only
guard, for bash and for zsh), an API key exported there, --env winning, a
binary only on the caller's PATH pinned by `spex new`, a command path that
does not exist refused, a login shell that fails, hangs or reaches for the
terminal, the cache that keeps it off every turn, and what `spex doctor`
says of it. Each test's HOME has a tiny .profile (conftest)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from conftest import FAKES, HERE, SPEX, Env, retry_until
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
    assert f"binary       {found}" in env.run("show", "m").stdout


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
    turn = show(env, "t")["turn"]
    assert (turn["state"], turn["cause"]) == ("failed", "no-login-shell"), turn


def test_login_shell_off_uses_the_panes_path(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text("login_shell = false\n")
    (Path(env.vars["HOME"]) / ".profile").write_text("sleep 30\n")
    env.run("new", "t", "--cwd", str(env.root), "--", "echo")
    code, v = wake_json(env, "t", "x", "--window", "8")
    assert code == 0 and v["verdict"] == "completed", v


# Ubuntu's /etc/skel/.bashrc starts so: nothing after it reaches a
# non-interactive shell, which is where nvm, volta, asdf and fnm add theirs.
GUARD = "case $- in\n    *i*) ;;\n      *) return;;\nesac\n"
NVM = "$HOME/.nvm/versions/node/v20/bin"


def user_home(env: Env) -> Path:
    return Path(env.vars["HOME"])


def base_path(env: Env) -> str:
    """The test PATH without the fake CLIs: where no `claude` is."""
    return ":".join(p for p in env.vars["PATH"].split(":") if p != str(FAKES))


def ubuntu_profile(env: Env, path: str) -> None:
    """~/.profile as /etc/skel has it (it sources ~/.bashrc under bash), with
    `path` as the PATH it starts from."""
    (user_home(env) / ".profile").write_text(
        f"PATH='{path}'\nexport PATH\n"
        'if [ -n "$BASH_VERSION" ]; then\n'
        '    if [ -f "$HOME/.bashrc" ]; then\n        . "$HOME/.bashrc"\n    fi\nfi\n'
    )


def dumping_cli(directory: Path, name: str, then: Path | None = None) -> Path:
    """A CLI named `name` in `directory` that records its environment in
    $HOME/harness-env (NUL-separated), then runs `then`, else echoes."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    run = f'exec "{then}" "$@"' if then else f'echo "{name} ran:" "$@"'
    path.write_text(f'#!/bin/sh\nenv -0 > "$HOME/harness-env"\n{run}\n')
    path.chmod(0o755)
    return path


def harness_env(env: Env) -> dict[str, str]:
    data = (user_home(env) / "harness-env").read_bytes()
    pairs = (item.decode().partition("=") for item in data.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


def nvm_user(env: Env) -> Path:
    """A bash user whose claude came from nvm: the PATH line and an API key in
    ~/.bashrc after the guard; a fake claude (logged in) only in nvm's bin."""
    home = user_home(env)
    nvm = Path(NVM.replace("$HOME", str(home)))
    claude = dumping_cli(nvm, "claude", then=FAKES / "claude")
    ubuntu_profile(env, base_path(env))
    (home / ".bashrc").write_text(
        GUARD + f'export PATH="{NVM}:$PATH"\nexport MY_API_KEY=from-bashrc\n'
        "export FAKE_CLAUDE_LOGGED_IN=1\n"
    )
    return claude


def test_an_nvm_cli_after_the_bashrc_guard_runs_with_the_bashrc_exports(env: Env) -> None:
    claude = nvm_user(env)
    r = env.run("new", "x", "--harness", "claude", "--cwd", str(env.root))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    code, v = wake_json(env, "x", "hello", "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v
    assert show(env, "x")["binary"] == str(claude)
    seen = harness_env(env)
    assert seen["MY_API_KEY"] == "from-bashrc"
    assert seen["PATH"].split(":")[0] == str(claude.parent)
    # The pane's own, not the lookup shell's: its terminal, spex's names.
    assert seen["SPEXSUP_TURN"] == v["turn"]
    assert seen["TMUX_PANE"].startswith("%")
    assert seen["PWD"] == str(env.root)


def test_the_sessions_env_wins_over_the_login_environment(env: Env) -> None:
    nvm_user(env)
    r = env.run(
        "new", "x", "--harness", "claude", "--cwd", str(env.root), "--env", "MY_API_KEY=other"
    )
    assert r.returncode == 0, r.stderr
    code, v = wake_json(env, "x", "hello", "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v
    assert harness_env(env)["MY_API_KEY"] == "other"


def test_a_turn_never_gets_the_environment_of_the_client_that_started_tmux(env: Env) -> None:
    """Issue 38 item 4: the first spex command, run from a `make` in a shell
    holding a secret, starts the private server; a later one carries an
    ssh agent of its own. A turn has the login environment and the session's
    --env, never what either client happened to carry."""
    nvm_user(env)
    first = {"MAKELEVEL": "1", "MAKEFLAGS": "-j2", "SECRET_TOKEN": "hunter2"}
    r = env.run("new", "x", "--harness", "claude", "--cwd", str(env.root),
                "--env", "MINE=session", extra=first)  # fmt: skip
    assert r.returncode == 0, r.stderr
    later = {"SSH_AUTH_SOCK": str(env.root / "agent.sock"), "WINDOWID": "7"}
    r = env.run("new", "y", "--harness", "claude", "--cwd", str(env.root), extra=later)
    assert r.returncode == 0, r.stderr
    for name, mine in (("x", "session"), ("y", None)):
        code, v = wake_json(env, name, "hello", "--window", "10", extra=first | later)
        assert code == 0 and v["verdict"] == "completed", v
        seen = harness_env(env)
        assert not {"MAKELEVEL", "MAKEFLAGS", "SECRET_TOKEN", "SSH_AUTH_SOCK", "WINDOWID"} & set(
            seen
        ), seen
        assert seen["MY_API_KEY"] == "from-bashrc"  # the login environment's
        assert seen.get("MINE") == mine  # the session's own --env


def test_a_zsh_user_gets_the_zshrc_environment(env: Env) -> None:
    zsh = shutil.which("zsh")
    if zsh is None:
        pytest.fail("zsh is not installed (make test installs it: contrib/system-packages.sh)")
    home = user_home(env)
    env.vars["SHELL"] = zsh
    agent = dumping_cli(home / ".local" / "zbin", "myagent")
    (home / ".zshrc").write_text(
        f"PATH='{base_path(env)}'\n"
        'path=("$HOME/.local/zbin" $path)\nexport PATH\nexport MY_API_KEY=from-zshrc\n'
    )
    harness_file(env, MINE)
    r = env.run("new", "z", "--harness", "mine", "--cwd", str(env.root))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    code, v = wake_json(env, "z", "hi", "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v
    assert "myagent ran: hi" in env.run("log", "z").stdout
    assert show(env, "z")["binary"] == str(agent)
    assert harness_env(env)["MY_API_KEY"] == "from-zshrc"
    assert f"{zsh} -il" in env.run("doctor").stdout


def ours(env: Env, argv: list[str] | None = None) -> list[psutil.Process]:
    """Live processes under the test's HOME (with this argv)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("HOME") == env.vars["HOME"] and argv in (None, proc.cmdline()):
                found.append(proc)
        except (psutil.Error, OSError):  # gone meanwhile
            continue
    return found


def stopped(env: Env) -> list[str]:
    """Those of `ours` stopped by a signal (SIGTTIN, SIGTTOU, SIGSTOP)."""
    found = []
    for proc in ours(env):
        try:
            if proc.status() == psutil.STATUS_STOPPED:
                found.append(" ".join(proc.cmdline()))
        except (psutil.Error, OSError):
            continue
    return found


def test_an_rc_file_that_hangs_is_bounded_by_login_timeout(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text("login_timeout = 1\n")
    marker = env.root / "ran"
    env.run("new", "t", "--cwd", str(env.root), "--", "touch", str(marker))
    ubuntu_profile(env, env.vars["PATH"])
    # Only an interactive shell gets past the guard, and sticks there (the
    # lookup's: the pane's own shell, on the terminal, reads .bashrc too).
    (user_home(env) / ".bashrc").write_text(GUARD + "trap '' TERM HUP\n[ -t 0 ] || sleep 100\n")
    started = time.monotonic()
    code, v = wake_json(env, "t", "x", "--window", "10")
    assert code == 1 and v["rc"] == 126, v
    assert v["error"].startswith("no login shell could be resolved - turn NOT started")
    assert time.monotonic() - started < 8
    assert not marker.exists()
    assert show(env, "t")["turn"]["cause"] == "no-login-shell"
    # Its whole process group went with it (timeout -k: SIGKILL after 1 s).
    assert retry_until(lambda: not ours(env, ["sleep", "100"]), 5)
    # And `spex new` says what happened in one line, without waiting longer.
    harness_file(env, MINE)
    started = time.monotonic()
    r = env.run("new", "m", "--harness", "mine", "--cwd", str(env.root))
    assert r.returncode == 3
    assert r.stderr == (
        "spex: no login shell could be resolved (/bin/bash -il ran past login_timeout = 1 s;"
        " check its rc files) (login_shell = false in config.toml, or --no-check)\n"
    )
    assert time.monotonic() - started < 8


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_an_rc_file_that_reaches_for_the_terminal_does_not_stop_the_turn(
    env: Env, shell: str
) -> None:
    # A shell started in the pane under a process group of its own (timeout's)
    # that touches the terminal is stopped by SIGTTIN/SIGTTOU for good, and an
    # interactive zsh opens /dev/tty by itself; the lookup runs with no
    # terminal at all (setsid, stdin /dev/null). (Only without a terminal on
    # stdin: the pane's own shells read these files too.)
    path = shutil.which(shell)
    if path is None:
        pytest.fail(f"{shell} is not installed (make test installs it: contrib/system-packages.sh)")
    env.vars["SHELL"] = path
    rc = ".profile" if shell == "bash" else ".zprofile"
    (user_home(env) / rc).write_text(
        f"PATH='{env.vars['PATH']}'\nexport PATH\n"
        "if [ ! -t 0 ]; then\n"
        "    stty sane </dev/tty; read -r line </dev/tty; stty size; read -r line\n"
        "    export NO_TTY=yes\n    set -m\n"
        "fi\n"
    )
    agent = dumping_cli(env.root / "bin", "a")
    env.run("new", "t", "--cwd", str(env.root), "--", str(agent))
    code, v = wake_json(env, "t", "x", "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v
    assert harness_env(env)["NO_TTY"] == "yes"
    assert stopped(env) == []


def test_a_cached_wake_never_runs_the_login_shell(env: Env) -> None:
    count = env.root / "logins"
    bashrc = user_home(env) / ".bashrc"
    ubuntu_profile(env, env.vars["PATH"])
    # Counted only without a terminal: the pane's own shells read .bashrc too.
    once = GUARD + "[ -t 0 ] || echo {} >> " + str(count) + "\n"
    bashrc.write_text(once.format("x"))
    env.run("new", "t", "--cwd", str(env.root), "--", "echo")
    for _ in range(2):
        code, v = wake_json(env, "t", "x", "--window", "8")
        assert code == 0, v
    assert count.read_text().split() == ["x"]
    bashrc.write_text(once.format("y"))
    code, v = wake_json(env, "t", "x", "--window", "8")
    assert code == 0, v
    assert count.read_text().split() == ["x", "y"]
    cache = env.home / "login-env"
    assert cache.stat().st_mode & 0o777 == 0o600


def counting_bashrc(env: Env, count: Path, mark: str, at: Path | None = None) -> None:
    """A ~/.bashrc (or the file `at` it links to) that counts each login
    shell run without a terminal as `mark` and exports it as LOGIN_MARK."""
    text = GUARD + f"[ -t 0 ] || echo {mark} >> {count}\nexport LOGIN_MARK={mark}\n"
    (at or user_home(env) / ".bashrc").write_text(text)


def turn_dir(env: Env, name: str, verdict: dict[str, str]) -> Path:
    return env.home / "turns" / name / verdict["turn"]


def test_the_launch_and_the_wrapper_key_the_login_cache_alike(env: Env) -> None:
    """The launch takes the rc files' stats for the wrapper (`login-stats`);
    the wrapper stats them itself when it has none (`turn.sh --login`, as
    `spex new` and `spex doctor` ask it): the two keys must be one, or each
    would find the other's cache stale. Every rc file of the list is there
    (one a symlink, one a directory), so a file missing from either list,
    or a stat read differently, runs the login shell again."""
    home, count = user_home(env), env.root / "logins"
    ubuntu_profile(env, env.vars["PATH"])
    counting_bashrc(env, count, "x")
    (home / ".bash_profile").write_text('. "$HOME/.profile"\n')  # bash reads it first
    for name in (".bash_login", ".zprofile", ".zshenv", ".zlogin"):
        (home / name).write_text("# nothing\n")
    (home / "dotfiles").mkdir()
    (home / "dotfiles" / "zshrc").write_text("# linked\n")
    (home / ".zshrc").symlink_to(home / "dotfiles" / "zshrc")
    (home / ".bash_aliases").mkdir()
    (home / ".config" / "fish").mkdir(parents=True)
    (home / ".config" / "fish" / "config.fish").write_text("# fish\n")
    login = ["bash", str(HERE.parent / "shell" / "turn.sh"), "--login", "10"]
    wrapper_env = {**env.vars, "SPEXSUP_HOME": str(env.home)}
    r = subprocess.run(login, env=wrapper_env, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and "source shell" in r.stdout, r.stdout + r.stderr
    env.run("new", "t", "--cwd", str(env.root), "--", "echo")
    code, v = wake_json(env, "t", "x", "--window", "8")
    assert code == 0 and v["verdict"] == "completed", v
    stats = (turn_dir(env, "t", v) / "login-stats").read_text()
    assert stats.startswith(f"{home}\t") and f" {home}/.zshrc:" in stats, stats
    assert count.read_text().split() == ["x"]  # the wrapper's key, found by the launch's
    code, v = wake_json(env, "t", "x", "--window", "8")
    assert code == 0, v
    assert count.read_text().split() == ["x"]
    r = subprocess.run(login, env=wrapper_env, capture_output=True, text=True, check=False)
    assert "source cache" in r.stdout, r.stdout  # and the launch's, found by the wrapper's


def test_an_rc_file_edited_through_its_symlink_is_a_new_login_environment(env: Env) -> None:
    """A dotfiles manager links ~/.bashrc to its own copy: editing the copy
    leaves the link as it was, and the next turn still sees the edit."""
    home, count = user_home(env), env.root / "logins"
    ubuntu_profile(env, env.vars["PATH"])
    (home / "dotfiles").mkdir()
    kept = home / "dotfiles" / "bashrc"
    counting_bashrc(env, count, "x", at=kept)
    (home / ".bashrc").symlink_to(kept)
    env.run("new", "t", "--cwd", str(env.root), "--", "sh", "-c", 'echo "mark=$LOGIN_MARK"')
    code, v = wake_json(env, "t", "x", "--window", "8")
    assert code == 0 and v["verdict"] == "completed", v
    counting_bashrc(env, count, "y", at=kept)
    code, v = wake_json(env, "t", "x", "--window", "8")
    assert code == 0 and v["verdict"] == "completed", v
    assert count.read_text().split() == ["x", "y"]
    assert "mark=y" in (turn_dir(env, "t", v) / "output.log").read_text()


def test_a_launch_from_another_home_leaves_the_wrapper_its_own_stats(env: Env) -> None:
    """The pane's HOME is the tmux server's; a wake run with another HOME
    takes the stats of that one's rc files, which the wrapper must not key
    the pane's login environment on: an edit of the pane's ~/.bashrc is
    still seen."""
    home, count = user_home(env), env.root / "logins"
    ubuntu_profile(env, env.vars["PATH"])
    counting_bashrc(env, count, "x")
    env.run("new", "t", "--cwd", str(env.root), "--", "sh", "-c", 'echo "mark=$LOGIN_MARK"')
    other = env.root / "other-home"
    other.mkdir()
    (other / ".bashrc").write_text("# never edited\n")
    for mark in ("x", "y"):
        counting_bashrc(env, count, mark)
        code, v = wake_json(env, "t", "x", "--window", "8", extra={"HOME": str(other)})
        assert code == 0 and v["verdict"] == "completed", v
        assert (turn_dir(env, "t", v) / "login-stats").read_text().startswith(f"{other}\t")
        assert f"mark={mark}" in (turn_dir(env, "t", v) / "output.log").read_text()
    assert count.read_text().split() == ["x", "y"]
    assert str(home) != str(other)


def lookups(env: Env) -> dict[str, str]:
    """Per turn of this home, what its wrapper's login lookup is doing now:
    `flock` (waiting for another turn's lookup) or `shell` (running one)."""
    found = {}
    for proc in psutil.process_iter():
        try:
            turn = proc.environ().get("SPEXSUP_TURN")
            if turn is None or proc.environ().get("SPEXSUP_HOME") != str(env.home):
                continue
            if proc.name() == "flock":
                found[turn] = "flock"
            elif "-ilc" in proc.cmdline():
                found[turn] = "shell"
        except psutil.Error:
            continue
    return found


def test_the_legs_of_a_wave_on_a_stale_cache_run_the_login_shell_once(env: Env) -> None:
    """Legs that all find the login cache stale wait for the first one's
    lookup (a lock per home) instead of each running the login shell."""
    legs = 5
    count, go = env.root / "logins", env.root / "go"
    ubuntu_profile(env, env.vars["PATH"])
    # Without a terminal (the lookup): counted, then held until the test lets go.
    (user_home(env) / ".bashrc").write_text(
        GUARD
        + f"if [ ! -t 0 ]; then echo x >> {count}; while [ ! -e {go} ]; do sleep 0.05; done; fi\n"
    )
    names = [f"w{n}" for n in range(legs)]
    for name in names:
        assert env.run("new", name, "--cwd", str(env.root), "--", "echo").returncode == 0
    fanout = subprocess.Popen(
        [SPEX, "fanout", *names, "-m", "x", "--window", "30", "--json"],
        env=env.vars,
        stdout=subprocess.PIPE,
    )
    try:
        # Every leg is in its lookup (running the shell, or waiting for one).
        assert retry_until(lambda: len(lookups(env)) == legs, 60), lookups(env)
        go.touch()
        out, _ = fanout.communicate(timeout=120)
    finally:
        go.touch()
        if fanout.poll() is None:
            fanout.kill()
    assert [leg["verdict"] for leg in json.loads(out)["legs"]] == ["completed"] * legs, out
    assert count.read_text().split() == ["x"]


def test_a_binary_only_on_the_callers_path_is_pinned(env: Env) -> None:
    mine = agent(env.root / "my-bin", "myagent", "pinned")
    harness_file(env, MINE)
    caller = {"PATH": f"{mine.parent}:{env.vars['PATH']}"}
    r = env.run("new", "m", "--harness", "mine", "--cwd", str(env.root), extra=caller)
    assert r.returncode == 0, r.stderr
    assert r.stderr == (
        f"spex: note: myagent is not on your login PATH; turns will run {mine}"
        " (add its directory to PATH in ~/.profile to use the login PATH instead)\n"
    )
    assert show(env, "m")["pinned_binary"] == str(mine)
    code, v = wake_json(env, "m", "hi", "--window", "8")
    assert code == 0 and v["verdict"] == "completed", v
    assert "pinned: hi" in env.run("log", "m").stdout
    assert show(env, "m")["binary"] == str(mine)
    # Gone since: the turn names the path it was to run.
    mine.unlink()
    code, v = wake_json(env, "m", "hi", "--window", "8")
    assert code == 1 and v["rc"] == 127, v
    assert v["error"] == f"{mine} not found"


def test_new_checks_the_binary_on_the_sessions_env_path(env: Env) -> None:
    harness_file(env, MINE)
    only_env = agent(env.root / "env-bin", "myagent", "env")
    path = f"{only_env.parent}:/usr/bin:/bin"
    r = env.run("new", "a", "--harness", "mine", "--cwd", str(env.root), "--env", f"PATH={path}")
    assert (r.returncode, r.stderr) == (0, "")
    code, v = wake_json(env, "a", "hi", "--window", "8")
    assert code == 0 and v["verdict"] == "completed", v
    # On the login PATH but not on the --env PATH, which wins: refused.
    agent(env.root / "login-bin", "myagent", "login")
    env.login_path(f"{env.root / 'login-bin'}:{env.vars['PATH']}")
    r = env.run("new", "b", "--harness", "mine", "--cwd", str(env.root), "--env", "PATH=/usr/bin")
    assert r.returncode == 3
    assert r.stderr == (
        "spex: myagent is not installed or not on the session's --env PATH"
        " (spex doctor; or --no-check)\n"
    )


def test_a_command_path_that_does_not_exist_is_refused_at_new(env: Env) -> None:
    (env.root / "not-exec.sh").write_text("echo\n")
    (env.root / "sub").mkdir()
    for command, why in (
        ("./missing.sh", f"./missing.sh (in {env.root}) does not exist"),
        (str(env.root / "gone"), f"{env.root / 'gone'} does not exist"),
        ("./not-exec.sh", f"./not-exec.sh (in {env.root}) is not executable"),
        ("sub", None),  # a bare name: looked up on the turn's PATH at wake
        ("./sub", f"./sub (in {env.root}) is a directory"),
    ):
        r = env.run("new", "x", "--cwd", str(env.root), "--", command)
        if why is None:
            assert r.returncode == 0, r.stderr
            assert env.run("rm", "x").returncode == 0
            continue
        assert r.returncode == 3, (command, r.stderr)
        hint = (
            "chmod +x it, or --no-check"
            if "exist" not in why
            else "the command's path, or --no-check"
        )
        assert r.stderr == f"spex: {why} ({hint})\n"
        assert json.loads(env.run("ls", "--json").stdout) == []
        assert env.tmux("has-session", "-t", "=x").returncode != 0
    r = env.run("new", "x", "--cwd", str(env.root), "--no-check", "--", "./missing.sh")
    assert r.returncode == 0, r.stderr
    code, v = wake_json(env, "x", "hi", "--window", "8")
    assert code == 1 and v["rc"] == 127, v
    assert v["error"] == "./missing.sh not found"


def test_a_command_given_as_a_path_gets_the_login_environment_too(env: Env) -> None:
    ubuntu_profile(env, env.vars["PATH"])
    (user_home(env) / ".bashrc").write_text(GUARD + "export MY_API_KEY=for-scripts\n")
    dumping_cli(env.root / "bin", "agent.sh")
    env.run("new", "t", "--cwd", str(env.root / "bin"), "--", "./agent.sh")
    code, v = wake_json(env, "t", "x", "--window", "8")
    assert code == 0 and v["verdict"] == "completed", v
    assert harness_env(env)["MY_API_KEY"] == "for-scripts"
    assert show(env, "t")["binary"] == "./agent.sh"


def test_doctor_prints_the_login_environment(env: Env) -> None:
    r = env.run("doctor")
    lines = r.stdout.splitlines()
    login = next(line for line in lines if " login: " in line)
    assert login.startswith("ok    login: /bin/bash -il: took "), login
    assert login.endswith(" ms, now cached")
    assert f"ok    login PATH: {env.vars['PATH']}" in lines
    again = next(line for line in env.run("doctor").stdout.splitlines() if " login: " in line)
    assert again.startswith("ok    login: /bin/bash -il: cached (the shell took "), again
    doc = json.loads(env.run("doctor", "--json").stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["login PATH"]["detail"] == env.vars["PATH"]
    # A login shell that fails: named, and the doctor fails.
    (user_home(env) / ".profile").write_text("exit 3\n")
    r = env.run("doctor")
    assert r.returncode == 1
    assert (
        "FAIL  login: no login shell could be resolved (check $SHELL and its rc files)"
        " (login_shell = false in config.toml, or --no-check)"
    ) in r.stdout.splitlines()
