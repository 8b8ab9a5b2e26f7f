"""Homes and panes: one tmux server per state home, panes that come back, reboots,
input typed during a turn, a pane in use, attaching (plain and nested)."""

from __future__ import annotations

import configparser
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pexpect
import pytest
from conftest import HERE, SPEX, Env, harness, retry_until
from test_turns import show, turn_processes_alive, wake_json
from test_wrapper import turn_dir

from spexsup.adapters.home import default_socket
from spexsup.paths import wrapper_path
from spexsup.state.store import MIGRATIONS


def capture(env: Env, name: str, socket: str | None = None) -> str:
    sock = socket or env.socket
    return subprocess.run(
        ["tmux", "-L", sock, "capture-pane", "-p", "-J", "-S", "-", "-t", f"={name}:0.0"],
        capture_output=True,
        text=True,
        env=env.vars,
        check=False,
    ).stdout


# --- 1. one server per state home -------------------------------------------


def test_two_homes_on_one_socket_never_touch_each_other(env: Env) -> None:
    other = {"SPEXSUP_HOME": str(env.root / "other")}
    (env.root / "other").mkdir()
    env.run("new", "api", "--", harness("sleeper.sh"))
    _, v = wake_json(env, "api", "x", "--window", "0.5")
    assert v["verdict"] == "confirmed"
    # The other home shares the socket (SPEXSUP_TMUX): it must not adopt `api`.
    r = env.run("new", "api", "--", harness("exit0.sh"), extra=other)
    assert r.returncode == 3
    assert "api" in r.stderr and "another spex home" in r.stderr, r.stderr
    assert env.run("new", "tool", "--", harness("exit0.sh"), extra=other).returncode == 0
    assert env.run("rm", "tool", extra=other).returncode == 0
    assert env.run("wake", "api", "y", extra=other).returncode == 3  # not its session
    # The first home's turn ran on, untouched.
    assert show(env, "api")["turn"]["state"] == "running"
    assert env.pane_pid("api") == v["pid"]
    env.run("stop", "api", "--grace", "1")


def test_each_home_gets_its_own_server_by_default(env: Env) -> None:
    unset = {"SPEXSUP_TMUX": ""}
    homes = [env.root / "one", env.root / "two"]
    for home in homes:
        home.mkdir()
        extra = {**unset, "SPEXSUP_HOME": str(home)}
        assert env.run("new", "api", "--", harness("exit0.sh"), extra=extra).returncode == 0
        doctor = env.run("doctor", extra=extra).stdout
        assert f"-L {default_socket(home)}" in doctor, doctor
    assert default_socket(homes[0]) != default_socket(homes[1])
    for home in homes:
        r = subprocess.run(
            ["tmux", "-L", default_socket(home), "has-session", "-t", "=api"],
            env=env.vars,
            check=False,
        )
        assert r.returncode == 0


def test_a_home_from_an_older_spex_keeps_its_shared_socket(env: Env) -> None:
    """A state home made before per-home servers keeps `-L spexsup`, and adopts
    its untagged panes only when the pane proves they are its own."""
    home = env.root / "old"
    home.mkdir(mode=0o700)
    db = sqlite3.connect(home / "state.db", isolation_level=None)
    for number in range(3):
        db.executescript(MIGRATIONS[number])
    db.execute("PRAGMA user_version = 3")
    cwd = str(env.root)
    for name in ("mine", "stranger"):
        db.execute(
            "INSERT INTO sessions (name, harness, command, cwd, created_at)"
            " VALUES (?, 'command', ?, ?, 0)",
            (name, json.dumps([harness("exit0.sh")]), cwd),
        )
    db.close()
    legacy = ["tmux", "-L", "spexsup"]
    # `mine` ran a turn under this home (its shell carries SPEXSUP_HOME), the
    # stranger's session merely has the same name.
    subprocess.run(
        [*legacy, "new-session", "-d", "-s", "mine", "-e", f"SPEXSUP_HOME={home}"],
        env=env.vars,
        check=True,
    )
    subprocess.run([*legacy, "new-session", "-d", "-s", "stranger"], env=env.vars, check=True)
    extra = {"SPEXSUP_TMUX": "", "SPEXSUP_HOME": str(home)}
    assert "-L spexsup " in env.run("doctor", extra=extra).stdout
    _code, v = 0, json.loads(env.run("wake", "mine", "x", "--json", extra=extra).stdout)
    assert v["verdict"] == "completed", v
    r = env.run("wake", "stranger", "x", extra=extra)
    assert r.returncode == 3 and "not tagged by spex" in r.stderr, r.stderr
    subprocess.run([*legacy, "kill-server"], env=env.vars, check=False)


# --- 2. panes come back -----------------------------------------------------


def test_missing_panes_are_seen_and_brought_up(env: Env) -> None:
    cwd = env.root / "work"
    cwd.mkdir()
    env.run("new", "a", "--cwd", str(cwd), "--", harness("exit0.sh"))
    env.run("new", "b", "--", harness("exit0.sh"))
    env.tmux("kill-session", "-t", "=a")
    rows = {r["name"]: r for r in json.loads(env.run("ls", "--json").stdout)}
    assert (rows["a"]["pane"], rows["b"]["pane"]) == ("missing", "ok")
    assert "missing (spex up)" in env.run("ls").stdout
    r = env.run("up", "--all")
    assert r.returncode == 0, r.stderr
    assert "a: recreated" in r.stdout and "b: ok" in r.stdout
    assert env.tmux(
        "display-message", "-p", "-t", "=a:0.0", "#{pane_current_path}"
    ).stdout.strip() == str(cwd)
    assert show(env, "a")["turn"] is None  # up never starts a turn
    # A killed server: every pane is missing, and comes back.
    env.tmux("kill-server")
    assert {r["pane"] for r in json.loads(env.run("ls", "--json").stdout)} == {"missing"}
    r = env.run("up", "--all", "--json")
    assert {(h["name"], h["status"]) for h in json.loads(r.stdout)} == {
        ("a", "recreated"),
        ("b", "recreated"),
    }
    # A pane whose cwd is gone is reported, not recreated elsewhere.
    env.tmux("kill-session", "-t", "=a")
    cwd.rmdir()
    r = env.run("up", "a")
    assert r.returncode == 1 and "a: cwd missing" in r.stdout
    assert env.tmux("has-session", "-t", "=a").returncode != 0


def test_attach_and_wake_recreate_a_missing_pane(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    env.tmux("kill-session", "-t", "=a")
    child = pexpect.spawn(SPEX, ["attach", "a"], env=env.vars, dimensions=(30, 100), timeout=15)
    try:
        # Recreated and attached: a detach sent before the client is there
        # would be lost on a loaded machine.
        assert retry_until(lambda: env.tmux("list-clients", "-t", "=a").stdout.strip() != "")
        env.tmux("detach-client", "-s", "=a")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    env.tmux("kill-server")
    assert wake_json(env, "a", "x", "--window", "5")[1]["verdict"] == "completed"


# --- 3. reboots -------------------------------------------------------------


def test_a_reboot_interrupts_and_up_revive_resumes(env: Env) -> None:
    boot = env.root / "boot_id"
    boot.write_text("boot-one\n")
    extra = {"SPEXSUP_BOOT_ID_FILE": str(boot)}
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        f"""
[harness.conv]
fresh = ["{harness("conversing.sh")}", "{{prompt}}"]
resume = ["{harness("conversing.sh")}", "--resume", "{{session_id}}", "{{prompt}}"]
id_pattern = 'conversation: (demo-[0-9a-f]+)'
"""
    )
    env.run("new", "a", "--harness", "conv", extra=extra)
    env.run("new", "b", "--harness", "conv", extra=extra)
    _, v = wake_json(env, "a", "first", "--window", "0.5", extra=extra)
    assert v["verdict"] == "confirmed"
    conversation = show(env, "a")["harness_session_id"]
    assert conversation
    # The machine "reboots": another boot id. (The old processes are killed
    # by hand, as a reboot would have.)
    env.tmux("kill-server")
    boot.write_text("boot-two\n")
    s = json.loads(env.run("show", "a", "--json", extra=extra).stdout)
    assert s["turn"]["state"] == "interrupted"
    assert s["turn"]["error"] == "machine rebooted"
    assert s["harness_session_id"] == conversation
    r = env.run("up", "--revive", "--json", extra=extra)
    assert r.returncode == 0, r.stdout + r.stderr
    wave = json.loads(r.stdout)
    assert [leg["session"] for leg in wave["legs"]] == ["a"]  # b was never interrupted
    assert wave["legs"][0]["verdict"] == "confirmed"
    s = json.loads(env.run("show", "a", "--json", extra=extra).stdout)
    assert s["turn"]["resumed"] == conversation
    log = env.run("log", "a", extra=extra).stdout
    assert f"conversation: {conversation}" in log and "interrupted" in log
    env.run("stop", "a", "--grace", "1", extra=extra)
    assert turn_processes_alive(s["turn"]["id"]) == []


def test_up_revive_json_says_which_pane_made_it_exit_1(env: Env) -> None:
    # A revive whose wave went well still exits 1 when a pane could not be
    # brought back; its JSON says which, as `up --json` does without --revive.
    boot = env.root / "boot_id"
    boot.write_text("boot-one\n")
    extra = {"SPEXSUP_BOOT_ID_FILE": str(boot)}
    gone = env.root / "gone"
    gone.mkdir()
    env.run("new", "a", "--", harness("sleeper.sh"), extra=extra)
    env.run("new", "c", "--cwd", str(gone), "--", harness("sleeper.sh"), extra=extra)
    assert wake_json(env, "a", "first", "--window", "0.3", extra=extra)[1]["verdict"] == (
        "confirmed"
    )
    env.tmux("kill-server")
    boot.write_text("boot-two\n")
    gone.rmdir()
    r = env.run("up", "--revive", "--all", "--json", extra=extra)
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert [(leg["session"], leg["verdict"]) for leg in doc["legs"]] == [("a", "confirmed")]
    panes = {p["name"]: p["status"] for p in doc["panes"]}
    assert panes == {"a": "recreated", "c": "cwd missing"}, doc["panes"]
    env.run("stop", "a", "--grace", "1", extra=extra)


def test_concurrent_up_revives_wake_each_session_once(env: Env) -> None:
    boot = env.root / "boot_id"
    boot.write_text("boot-one\n")
    extra = {"SPEXSUP_BOOT_ID_FILE": str(boot)}
    names = [f"s{i}" for i in range(6)]
    for name in names:
        env.run("new", name, "--", harness("sleeper.sh"), extra=extra)
        assert wake_json(env, name, "first", "--window", "0.3", extra=extra)[1]["verdict"] == (
            "confirmed"
        )
    env.tmux("kill-server")
    boot.write_text("boot-two\n")
    assert env.run("ls", extra=extra).returncode == 0  # records the interruptions
    # Three revives at once, as three login units or a person and a timer.
    ups = [
        subprocess.Popen(
            [SPEX, "up", "--revive", "--all", "--json"],
            env={**env.vars, **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [(p.communicate(timeout=120), p.returncode) for p in ups]
    woken: list[str] = []
    for (out, err), code in results:
        doc = json.loads(out)
        legs = [
            (leg["session"], leg["verdict"], leg["error"], leg.get("turn_state"), leg.get("rc"))
            for leg in doc.get("legs", [])
        ]
        assert code == 0, (legs, doc.get("panes"), doc.get("state"), doc.get("counts"), err)
        woken += [leg["session"] for leg in doc.get("legs", [])]
        assert all(leg["verdict"] == "confirmed" for leg in doc.get("legs", [])), doc
    assert sorted(woken) == names  # each once, by one of them
    events = [
        json.loads(line) for line in env.run("events", "--json", extra=extra).stdout.splitlines()
    ]
    for name in names:
        recreated = [e for e in events if e["kind"] == "pane-recreated" and e["session"] == name]
        assert len(recreated) == 1, (name, recreated)
        launched = [e for e in events if e["kind"] == "launched" and e["session"] == name]
        assert len(launched) == 2, (name, launched)  # the first turn and one revival
    for name in names:
        env.run("stop", name, "--grace", "1", extra=extra)


def test_systemd_unit_runs_spex_up(env: Env) -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(HERE.parent / "contrib" / "systemd" / "spexsup-up.service")
    assert unit["Install"]["WantedBy"] == "default.target"
    assert unit["Service"]["Type"] == "oneshot"
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[1:] == ["up", "--all"]
    env.run("new", "a", "--", harness("exit0.sh"))
    env.tmux("kill-server")
    r = subprocess.run([SPEX, *argv[1:]], env=env.vars, capture_output=True, text=True, check=False)
    assert r.returncode == 0 and "a: recreated" in r.stdout


# --- 4, 5. the pane belongs to a person too --------------------------------


def test_keys_typed_during_a_turn_never_run(env: Env) -> None:
    env.run("new", "a", "--", "bash", "-c", "sleep 2")
    _, v = wake_json(env, "a", "x", "--window", "0.5")
    assert v["verdict"] == "confirmed"
    planted = env.root / "planted"
    env.tmux("send-keys", "-t", "=a:0.0", f"echo oops > {planted}", "Enter")
    assert env.run("wait", "a", "--timeout", "30").returncode == 0
    assert retry_until(lambda: "input typed during the turn was discarded" in capture(env, "a"))
    # Dropped by the turn's exit reporter, handed the pane's terminal, not by
    # a Python start of the wrapper's own: it counted them.
    typed = env.home / "turns" / "a" / v["turn"] / "typed"
    assert int(typed.read_text()) == len(f"echo oops > {planted}\n")
    env.tmux("send-keys", "-t", "=a:0.0", "echo after-the-turn", "Enter")
    assert retry_until(lambda: "after-the-turn" in capture(env, "a").split("discarded")[-1])
    assert not planted.exists()


def test_a_pane_in_use_is_not_replaced_without_force(env: Env) -> None:
    env.run("new", "a", "--", "bash", "-c", "echo first-turn-output")
    assert wake_json(env, "a", "x", "--window", "5")[1]["verdict"] == "completed"
    # The wrapper is done (it drops what was typed while the turn ran, so a
    # command typed before its end line would be lost on a loaded machine).
    assert retry_until(lambda: "ended rc=0" in capture(env, "a"), 60), capture(env, "a")
    # A person attaches, starts something in the pane's shell, and detaches.
    child = pexpect.spawn(SPEX, ["attach", "a"], env=env.vars, dimensions=(30, 100), timeout=15)
    try:
        child.expect(r"\[spex a\]")
        child.send("exec 2>/dev/null; sleep 300\r")
        child.send("\x01d")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert retry_until(
        lambda: (
            "sleep"
            in env.tmux("display-message", "-p", "-t", "=a:0.0", "#{pane_current_command}").stdout
        ),
        60,
    ), capture(env, "a")
    r = env.run("wake", "a", "y")
    assert r.returncode == 3
    assert "the pane is running sleep (pid" in r.stderr and "--force" in r.stderr, r.stderr
    assert len(show(env, "a")["turns"]) == 1
    _code, v = wake_json(env, "a", "--force", "y", "--window", "5")
    assert v["verdict"] == "completed", v
    # Scrollback keeps the earlier turn.
    assert capture(env, "a").count("first-turn-output") == 2


# --- 6. attaching -----------------------------------------------------------


def test_a_command_sent_to_the_pane_without_a_client_is_not_replaced(env: Env) -> None:
    """Nobody ever attached, but a script started something in the pane's
    shell (`tmux send-keys … vim notes Enter`): the pane is in use."""
    env.run("new", "a", "--", "bash", "-c", "echo ran")
    assert retry_until(lambda: "$" in capture(env, "a") or "#" in capture(env, "a"))
    env.tmux("send-keys", "-t", "=a:0.0", "exec 2>/dev/null; sleep 300", "Enter")
    assert retry_until(
        lambda: (
            "sleep"
            in env.tmux("display-message", "-p", "-t", "=a:0.0", "#{pane_current_command}").stdout
        )
    )
    r = env.run("wake", "a", "x")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "the pane is running sleep (pid" in r.stderr, r.stderr
    assert (
        "sleep"
        in env.tmux("display-message", "-p", "-t", "=a:0.0", "#{pane_current_command}").stdout
    )


@pytest.mark.parametrize("after", ["new", "a turn"])
@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_a_shell_still_reading_its_rc_files_is_not_in_use(env: Env, shell: str, after: str) -> None:
    """A wake right after spex new, or right after a turn whose wrapper
    handed the pane back to a shell, while that shell runs a slow rc file:
    the shell is starting up, not a person at work (bash runs rc commands
    in its own process group, zsh as jobs of their own)."""
    path = shutil.which(shell)
    if path is None:
        pytest.fail(f"{shell} is not installed (make test installs it: contrib/system-packages.sh)")
    home = Path(env.vars["HOME"])
    rc = home / (".zshrc" if shell == "zsh" else ".profile")
    flag = env.root / "rc-ran"
    slow = f"[ -n \"$TMUX\" ] && {{ sleep 2; : >'{flag}'; }}\n"
    rc.write_text((rc.read_text() if rc.exists() else "") + slow)
    env.vars["SHELL"] = path
    env.run("new", "a", "--", "bash", "-c", "echo ran")
    assert (
        env.tmux("display-message", "-p", "-t", "=a:0.0", "#{pane_current_command}").returncode == 0
    )
    if after == "a turn":
        # The shell the wrapper hands the pane to is interactive, not a
        # login shell: zsh reads .zshrc, bash .bashrc.
        bashrc = home / ".bashrc"
        bashrc.write_text((bashrc.read_text() if bashrc.exists() else "") + slow)
        assert retry_until(flag.exists, 30)  # the first shell's rc files are done
        flag.unlink()
        # A session made long ago: only the turn's end may date its shell.
        env.tmux("set-option", "-p", "-t", "=a:0.0", "@spex_shell_at", "1")
        _, v = wake_json(env, "a", "x", "--window", "10")
        assert v["verdict"] == "completed", v
        assert retry_until(lambda: " ended rc=0" in capture(env, "a"), 30), capture(env, "a")
    _, v = wake_json(env, "a", "x", "--window", "10")
    assert v["verdict"] == "completed", v
    if shell == "zsh":
        assert flag.exists()  # its rc job was waited for, not killed


def test_attach_read_only(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    child = pexpect.spawn(
        SPEX, ["attach", "--read-only", "a"], env=env.vars, dimensions=(30, 100), timeout=15
    )
    try:
        child.expect(r"\[spex a\]")
        child.send("echo typed-while-looking\r")
        time.sleep(0.5)
        assert "typed-while-looking" not in capture(env, "a")
        child.send("\x01d")  # our prefix, C-a, then d
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def test_attach_inside_another_tmux_opens_a_popup(env: Env) -> None:
    env.run("new", "a", "--", harness("exit0.sh"))
    env.tmux("send-keys", "-t", "=a:0.0", "echo INNER-PANE", "Enter")
    outer = f"outer-{os.getpid()}"
    outer_tmux = ["tmux", "-L", outer, "-f", "/dev/null"]
    subprocess.run(
        [*outer_tmux, "new-session", "-d", "-s", "o", "-x", "120", "-y", "40"],
        env=env.vars,
        check=True,
    )
    child = pexpect.spawn(
        outer_tmux[0],
        [*outer_tmux[1:], "attach", "-t", "=o"],
        env=env.vars,
        dimensions=(40, 120),
        timeout=20,
    )
    try:
        child.expect(r"\$ |# ")
        child.send(f"{SPEX} attach a; echo BACK-IN-OUTER-$?\r")
        child.expect("INNER-PANE")  # the popup shows the pane
        child.send("\x01d")  # detach the inner client with spex's prefix
        child.expect("BACK-IN-OUTER-0")
        # The outer client is still attached and usable.
        assert child.isalive()
        outer_pane = subprocess.run(
            [*outer_tmux, "capture-pane", "-p", "-t", "=o:0.0"],
            env=env.vars,
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        assert "BACK-IN-OUTER-0" in outer_pane
    finally:
        child.close(force=True)
        subprocess.run([*outer_tmux, "kill-server"], env=env.vars, check=False)


def test_user_tmux_conf_is_loaded_after_ours(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "tmux.conf").write_text("set -g prefix C-g\nset -g @mine yes\n")
    env.run("new", "a", "--", harness("exit0.sh"))
    shown = env.tmux("show-options", "-gv", "prefix").stdout.strip()
    assert shown == "C-g"
    assert env.tmux("show-options", "-gv", "@mine").stdout.strip() == "yes"


def test_status_line_shows_the_turn(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    _, v = wake_json(env, "a", "x", "--window", "0.5")

    def state() -> str:
        return env.tmux("display-message", "-p", "-t", "=a:0.0", "#{@spex_state}").stdout

    assert retry_until(lambda: f"turn {v['turn']} running" in state())
    status = env.tmux("display-message", "-p", "-t", "=a:0.0", "#{T:status-right}").stdout
    assert "running" in status
    env.run("stop", "a", "--grace", "1")
    assert retry_until(lambda: "ended" in state())


def test_a_wrapper_that_cannot_write_its_first_marker_says_so_on_the_status_line(
    env: Env, tmp_path: Path
) -> None:
    """The launch's tmux call sets the status line to `running` as it
    respawns the pane; a wrapper that cannot write its first marker (exit
    125, its harness never run) takes that back."""
    d = turn_dir(tmp_path, [b"true"])
    (d / "outcome").mkdir()  # printf writes over neither a directory
    (d / "outcome.tmp").mkdir()
    env.tmux("new-session", "-d", "-s", "w", "-x", "80", "-y", "10", "sleep 300")
    env.tmux("set-option", "-w", "-t", "=w:", "remain-on-exit", "on")
    env.tmux("set-option", "-p", "-t", "=w:0.0", "@spex_state", f"turn {d.name} running")
    # The wrapper's exit status, as the shell that ran it saw it (tmux's
    # pane_dead_status can stay unset when the server reaps late under load).
    rc = tmp_path / "rc"
    run = 'bash "$0" "$1"; echo $? > "$2"'
    env.tmux(
        "respawn-pane",
        "-k",
        "-t",
        "=w:0.0",
        "bash",
        "-c",
        run,
        str(wrapper_path()),
        str(d),
        str(rc),
    )

    def state() -> str:
        return env.tmux("display-message", "-p", "-t", "=w:0.0", "#{@spex_state}").stdout.strip()

    assert retry_until(lambda: state() == f"turn {d.name} failed to start", 30), state()
    assert retry_until(lambda: rc.exists() and rc.read_text().strip() != "", 30)
    assert rc.read_text().strip() == "125"


# --- a tmux server that does not answer ----------------------------------------


def _tmux_server_pid(env: Env) -> int:
    return int(env.tmux("display-message", "-p", "#{pid}").stdout.strip())


def test_a_signal_between_tmux_calls_hurries_the_clean_up_too(env: Env) -> None:
    """SIGTERM after admission, when no tmux call is in flight: the abort's
    clean-up meets the frozen server with the short bound, not the full one."""
    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    server = _tmux_server_pid(env)
    proc = subprocess.Popen(
        [SPEX, "wake", "a", "y", "--window", "1"],
        env={**env.vars, "SPEXSUP_FAULT": "pause-before-launch", "SPEXSUP_TMUX_TIMEOUT": "8"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Admitted and paused before its launch: the turn is recorded starting.
        assert retry_until(
            lambda: json.loads(env.run("ls", "--json").stdout)[0]["state"] == "running", 20
        )
        os.kill(server, signal.SIGSTOP)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        took = time.monotonic() - sent
    finally:
        os.kill(server, signal.SIGCONT)
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 143, err
    assert took < 4, f"SIGTERM took {took:.1f} s: {err}"
    assert "aborted" in err, err
    turn = json.loads(env.run("show", "a", "--json").stdout)["turn"]
    assert turn["state"] == "aborted", turn


def test_a_frozen_tmux_server_is_a_named_failure_never_a_hang(env: Env) -> None:
    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    server = _tmux_server_pid(env)
    os.kill(server, signal.SIGSTOP)
    try:
        quick = {"SPEXSUP_TMUX_TIMEOUT": "1"}
        started = time.monotonic()
        r = env.run("wake", "a", "x", "--window", "1", extra=quick, timeout=60)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "did not answer in 1 s" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert time.monotonic() - started < 30
        # Readers still answer from the store.
        r = env.run("ls", "--json", extra=quick, timeout=60)
        assert r.returncode == 0 and json.loads(r.stdout)[0]["name"] == "a", r.stderr
        # A signal ends a command blocked on the frozen server within 2 s,
        # whatever the bound.
        proc = subprocess.Popen(
            [SPEX, "wake", "a", "y", "--window", "1"],
            env=env.vars,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)  # let it reach its first tmux call (bounded at 5 s)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
        assert time.monotonic() - sent < 2, "SIGTERM took too long"
        assert proc.returncode == 143, proc.stderr.read() if proc.stderr else ""
    finally:
        os.kill(server, signal.SIGCONT)
    # Once the server answers again, the session works.
    assert env.run("resume", "a", "--force").returncode in (0, 3)
    r = env.run("wake", "a", "z", "--window", "1")
    assert r.returncode == 0, r.stderr


# --- a session's --env never on a command line ---------------------------------


def _argv_holding(needle: bytes) -> list[str]:
    """Every process whose argv (/proc/PID/cmdline, what any local user reads
    with ps) holds `needle`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            found.append(f"{proc.name}: {cmdline!r}")
    return found


def _environ(path: Path) -> dict[bytes, bytes]:
    pairs = [kv.partition(b"=") for kv in path.read_bytes().split(b"\0") if kv]
    return {k: v for k, _, v in pairs}


def test_env_values_never_reach_any_argv(env: Env) -> None:
    secret = os.urandom(12).hex()
    # Spaces, quotes, a newline, `=`, `$`, a tab: given back byte for byte.
    value = f'{secret} it\'s "quoted" $HOME `x`\nline two=still\t'
    dump, go = env.root / "dump", env.root / "go"
    r = env.run(
        "new", "a", "--env", f"SECRET={value}", "--env", "EMPTY=", "--env", f"DUMP={dump}",
        "--env", f"GO={go}", "--", harness("env_until_go.sh"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # The client that started the tmux server became the server.
    assert _argv_holding(secret.encode()) == []
    # The pane's shell has the session's env, as it always had.
    pane = env.pane_pid("a")
    assert retry_until(lambda: b"SECRET" in _environ(Path(f"/proc/{pane}/environ")))
    assert _environ(Path(f"/proc/{pane}/environ"))[b"SECRET"] == value.encode()

    for wake in ("first", "after the pane was recreated"):
        dump.unlink(missing_ok=True)
        go.unlink(missing_ok=True)
        _, v = wake_json(env, "a", "x", "--window", "1")
        assert v["verdict"] == "confirmed", (wake, v)
        assert retry_until(dump.exists), wake
        seen = _environ(dump)
        assert seen[b"SECRET"] == value.encode(), wake
        assert seen[b"EMPTY"] == b"", wake
        assert _argv_holding(secret.encode()) == [], wake
        go.touch()
        assert env.run("wait", "a", "--timeout", "20").returncode == 0, wake
        env.tmux("kill-session", "-t", "=a")


def test_a_home_from_before_the_rename_reads_failed_and_keeps_the_old_word_readable(
    env: Env,
) -> None:
    """A home whose failed ends were `error`, and whose events kept the message
    in `cause` (the category in the payload's `reason`), migrates: `failed`
    everywhere, `cause` the category and `error` the message; `--state error`
    and `legacy_state` still read the old word (for one release)."""
    home = env.root / "before"
    home.mkdir(mode=0o700)
    db = sqlite3.connect(home / "state.db", isolation_level=None)
    for number in range(12):
        db.executescript(MIGRATIONS[number])
    db.execute("PRAGMA user_version = 12")
    db.execute(
        "INSERT INTO sessions (name, harness, command, cwd, state, current_turn, created_at)"
        " VALUES ('api', 'command', ?, ?, 'error', 'T1', 1)",
        (json.dumps([harness("exit0.sh")]), str(env.root)),
    )
    db.execute(
        "INSERT INTO turns (id, session, state, verdict, rc, error, cause, started_at, ended_at)"
        " VALUES ('T1', 'api', 'error', 'confirmed', 1, 'API Error: 529', 'overloaded', 1, 2)"
    )
    db.execute(
        "INSERT INTO events (at, kind, session, turn, rc, cause, payload) VALUES"
        " (2, 'failed', 'api', 'T1', 1, 'API Error: 529', '{\"reason\": \"overloaded\"}'),"
        " (3, 'wave-ended', NULL, NULL, NULL, 'complete', '{\"wave\": \"W1\"}')"
    )
    db.close()
    extra = {"SPEXSUP_HOME": str(home)}
    (row,) = json.loads(env.run("ls", "--json", extra=extra).stdout)
    assert (row["state"], row["legacy_state"]) == ("failed", "error"), row
    assert (row["turn"]["state"], row["turn"]["legacy_state"]) == ("failed", "error")
    assert row["turn"]["cause"] == "overloaded" and row["turn"]["error"] == "API Error: 529"
    assert env.run("ls", "-q", "--state", "error", extra=extra).stdout.split() == ["api"]
    assert env.run("ls", "-q", "--state", "failed", extra=extra).stdout.split() == ["api"]
    lines = env.run("events", "--json", extra=extra).stdout.splitlines()
    failed, wave = (json.loads(line) for line in lines)
    assert (failed["cause"], failed["error"]) == ("overloaded", "API Error: 529"), failed
    assert wave["error"] is None and wave["payload"] == {"wave": "W1", "state": "complete"}
    text = env.run("events", extra=extra).stdout
    assert "failed api turn T1 rc=1 (overloaded): API Error: 529" in text, text
    assert "wave W1 complete" in text, text


# --- launches made together --------------------------------------------------


def test_launches_made_together_each_get_their_own_answer(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wave's legs launching at once share one tmux call (`launchbatch.run_together`):
    each if-shell still tests and launches its own pane alone, and each leg
    reads its own answer, refusals included, in whatever order they came;
    calls too long for one client (tmux's 16 KiB) go in several."""
    from spexsup.adapters.home import TmuxHome, launch_call, launch_result
    from spexsup.adapters.launchbatch import run_together

    for name in ("a", "b", "c", "d"):
        assert env.run("new", name, "--", harness("sleeper.sh")).returncode == 0
    monkeypatch.setenv("TMUX_TMPDIR", env.vars["TMUX_TMPDIR"])

    def tag(name: str) -> str:
        return env.tmux(
            "display-message", "-p", "-t", f"={name}:0.0", "#{@spex_owner}"
        ).stdout.strip()

    owners = {name: tag(name) for name in ("a", "b", "c", "d")}
    env.tmux("set-option", "-p", "-t", "=b:0.0", "@spex_owner", "0123456789ab-other")
    env.tmux("set-option", "-p", "-t", "=d:0.0", "@spex_fence", "9" * 12)  # a stop fenced it
    tmux = TmuxHome(socket_name=env.socket)
    argv = ["bash", "-c", "exec sleep 300"]
    names = ["a", "b", "zz", "d", "c"]
    pad = {"PAD": "x" * 5000}  # 25 KB in all
    calls = [
        launch_call(n, owners.get(n, owners["a"]), 1000, f"turn-{n}", str(env.root), pad, argv)
        for n in names
    ]
    results = run_together(tmux._run, calls)
    got = {
        n: launch_result(n, owners.get(n, owners["a"]), r)
        for n, r in zip(names, results, strict=True)
    }
    assert got["a"].outcome == "launched" and got["a"].pane_pid == env.pane_pid("a")
    assert got["c"].outcome == "launched" and got["c"].pane_pid == env.pane_pid("c")
    assert got["b"].outcome == "foreign" and got["b"].holder == "0123456789ab-other"
    assert got["zz"].outcome == "missing"
    assert got["d"].outcome == "fenced"
    for name in ("a", "c"):
        turn = env.tmux("display-message", "-p", "-t", f"={name}:0.0", "#{@spex_turn}").stdout
        assert turn.strip() == f"turn-{name}"
    for name in ("b", "d"):
        turn = env.tmux("display-message", "-p", "-t", f"={name}:0.0", "#{@spex_turn}").stdout
        assert turn.strip() != f"turn-{name}"


@pytest.mark.parametrize("scroll_on_clear", ["on", "off"])
def test_the_screen_a_launch_clears_is_kept_whatever_the_users_scroll_on_clear(
    env: Env, scroll_on_clear: str
) -> None:
    """respawn-pane clears the pane's visible screen: the launch scrolls it
    into the history first (a terminal reset, with scroll-on-clear on for
    that moment only when it is off), so the earlier turn is still there
    above the new one, though the user's tmux.conf turns scroll-on-clear
    off for their own clears, which stays theirs; with tmux's default (on)
    the launch sets no option for it."""
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "tmux.conf").write_text(f"set -g scroll-on-clear {scroll_on_clear}\n")
    env.run("new", "a", "--", "bash", "-c", 'echo "output-of-turn-$SPEXSUP_TURN"')
    turns = [wake_json(env, "a", "x", "--window", "5")[1] for _ in range(2)]
    assert [v["verdict"] for v in turns] == ["completed", "completed"], turns
    assert retry_until(lambda: capture(env, "a").count(" ended rc=0") == 2, 60), capture(env, "a")
    screen = capture(env, "a")
    first, second = (screen.index(f"output-of-turn-{v['turn']}") for v in turns)
    assert first < second, screen
    assert env.tmux("show-options", "-gwv", "scroll-on-clear").stdout.strip() == scroll_on_clear
    assert env.tmux("show-options", "-p", "-t", "=a:0.0", "scroll-on-clear").stdout.strip() == ""


def test_a_wake_right_behind_a_turn_leaves_its_end_line_in_the_pane(env: Env) -> None:
    """A wake returns at `reporting:`; the next one waits for that turn's
    `exit:` before its respawn-pane -k. The wrapper prints the turn's end
    line before `exit:`, so however slow its last steps (here its tmux
    client, held back a second by a shim), the line is not cut (CI once saw
    it cut, when the line came after `exit:`)."""
    shim = env.root / "slow-tmux"
    shim.mkdir()
    real = shutil.which("tmux", path=env.vars["PATH"])
    assert real
    (shim / "tmux").write_text(
        "#!/bin/bash\n"
        "# Only the wrapper's own status call, at its turn's end.\n"
        'if [ -n "${SPEXSUP_TURN:-}" ] && [[ " $* " == *" @spex_shell_at "* ]]; then sleep 1; fi\n'
        f'exec {shlex.quote(real)} "$@"\n'
    )
    (shim / "tmux").chmod(0o755)
    env.login_path(f"{shim}:{env.vars['PATH']}")  # the wrapper's tmux is on the login PATH
    env.run("new", "a", "--", "bash", "-c", 'echo "output-of-turn-$SPEXSUP_TURN"')
    turns = [wake_json(env, "a", "x", "--window", "5")[1] for _ in range(2)]
    assert [v["verdict"] for v in turns] == ["completed", "completed"], turns
    assert retry_until(lambda: capture(env, "a").count(" ended rc=0") == 2, 60), capture(env, "a")
    screen = capture(env, "a")
    for v in turns:
        assert f"[spex] turn {v['turn']} ended rc=0" in screen, screen
