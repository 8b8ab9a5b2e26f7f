"""Sessions through the installed `spex` command: create, list, show, rm, attach."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest
from conftest import SPEX, Env, harness, retry_until

from spexsup import states


def test_round_trip(env: Env) -> None:
    r = env.run("new", "alpha", "--harness", "demo", "--cwd", str(env.root), "--env", "FOO=bar baz")
    assert r.returncode == 0, r.stderr
    assert "created alpha" in r.stdout
    rows = json.loads(env.run("ls", "--json").stdout)
    assert len(rows) == 1
    row = rows[0]
    assert {"name", "harness", "state", "cwd", "harness_session_id", "turn"} <= row.keys()
    assert row["name"] == "alpha"
    assert row["harness"] == "demo"
    assert row["state"] == "idle"
    assert row["cwd"] == str(env.root)
    assert row["turn"] is None
    assert row["pane"] == "ok"
    # One tmux session, one window, one pane, in the cwd, with the env.
    panes = env.tmux("list-panes", "-s", "-t", "=alpha", "-F", "#{pane_current_path}")
    assert panes.stdout.split() == [str(env.root)]
    shown = json.loads(env.run("show", "alpha", "--json").stdout)
    assert shown["name"] == "alpha"
    assert shown["turns"] == []
    assert "session      alpha" in env.run("show", "alpha").stdout
    assert env.run("rm", "alpha").returncode == 0
    assert json.loads(env.run("ls", "--json").stdout) == []
    assert env.tmux("has-session", "-t", "=alpha").returncode != 0


@pytest.mark.parametrize("bad", [".", "a.b", "a:b", "a b", "", "x" * 65, "-lead", "ü"])
def test_invalid_names_are_refused_before_tmux(env: Env, bad: str) -> None:
    r = env.run("new", bad, "--harness", "demo")
    # `a:b` names host a, which is unknown: refused as an unknown session is (3).
    assert r.returncode == (3 if bad == "a:b" else 2), r
    assert r.stderr.startswith("spex: ")
    assert len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr
    assert json.loads(env.run("ls", "--json").stdout) == []
    # Nothing touched tmux: our private server was never even started.
    assert env.tmux("list-sessions").returncode != 0
    for cmd in ("show", "rm", "wake", "stop", "resume", "attach"):
        r = env.run(cmd, bad, "hi") if cmd == "wake" else env.run(cmd, bad)
        assert r.returncode == (3 if bad == "a:b" else 2), (cmd, r.stderr)


def test_64_chars_is_fine(env: Env) -> None:
    assert env.run("new", "x" * 64, "--harness", "demo").returncode == 0


def test_duplicate_and_unknown(env: Env) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    r = env.run("new", "a", "--harness", "demo")
    assert r.returncode == 3
    assert "already exists" in r.stderr
    for args in (["show", "nope"], ["rm", "nope"], ["wake", "nope", "hi"], ["stop", "nope"]):
        r = env.run(*args)
        assert r.returncode == 3, args
        assert r.stderr == "spex: no session named 'nope' (see spex ls)\n"


def test_a_mistyped_session_name_gets_a_suggestion(env: Env) -> None:
    """Issue 38 item 16: as for a mistyped command or option, the refusal
    names the session meant, in every command that takes a name."""
    for name in ("api", "review"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    cases = [
        ["show", "ap"],
        ["wake", "ap", "hi"],
        ["stop", "ap"],
        ["wait", "ap"],
        ["rm", "ap"],
        ["edit", "ap", "--window", "3"],
        ["wake", "review", "--after", "ap", "hi"],
        ["schedule", "add", "ap", "--every", "1h", "-m", "hi"],
    ]
    for args in cases:
        r = env.run(*args)
        assert r.returncode == 3, (args, r.stderr)
        assert r.stderr == "spex: no session named 'ap' (did you mean 'api'?)\n", (args, r.stderr)
    r = env.run("show", "revew", "--json")
    assert json.loads(r.stdout)["error"] == "no session named 'revew' (did you mean 'review'?)"
    # Nothing close: the hint stays where to look.
    assert env.run("show", "zzz").stderr == "spex: no session named 'zzz' (see spex ls)\n"


def test_bad_input_is_one_line_and_changes_nothing(env: Env) -> None:
    cases = [
        ["new", "a", "--harness", "gpt"],
        ["new", "a", "--env", "NOEQUALS", "--harness", "demo"],
        ["new", "a", "--env", "1X=2", "--harness", "demo"],
        ["new", "a", "--window", "-1", "--harness", "demo"],
        ["new", "a", "--window", "abc", "--harness", "demo"],
        ["new", "a", "--cwd", str(env.root / "missing"), "--harness", "demo"],
        ["new", "a", "--harness", "command"],
        # After `--`, a named harness's own arguments (test_harness.py); for an
        # unknown one they are refused with it.
        ["new", "a", "--harness", "gpt", "--", "--model", "x"],
        ["new", "a", "--harness", "claude", "--"],
        ["new"],
        ["ls", "--bogus"],
        ["nosuchcommand"],
    ]
    for args in cases:
        r = env.run(*args)
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("spex: "), (args, r.stderr)
    assert json.loads(env.run("ls", "--json").stdout) == []


def test_command_harness(env: Env) -> None:
    assert env.run("new", "c", "--", "echo", "-n", "said:").returncode == 0
    row = json.loads(env.run("show", "c", "--json").stdout)
    assert row["harness"] == "command"
    assert row["command"] == ["echo", "-n", "said:"]


def test_state_dir_and_file_modes(env: Env) -> None:
    assert env.run("new", "a", "--", "bash", "-c", "umask").returncode == 0
    assert env.run("wake", "a", "hello", "--window", "10").returncode == 0
    assert stat.S_IMODE(env.home.stat().st_mode) == 0o700
    assert stat.S_IMODE((env.home / "state.db").stat().st_mode) == 0o600
    turn_dirs = list((env.home / "turns" / "a").iterdir())
    assert turn_dirs
    for d in turn_dirs:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
        for f in ("prompt", "argv", "env", "reporter", "meta.json", "outcome", "output.log"):
            assert stat.S_IMODE((d / f).stat().st_mode) == 0o600, f
    # The harness itself runs with the user's umask, not ours.
    assert env.run("log", "a").stdout.strip() == f"{_umask():04o}"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_sessions_tmux_side_is_its_pane_and_home_stays_an_alias(env: Env) -> None:
    """Home is the state directory only; the tmux session spex keeps for a
    session is its pane in every word a user reads (DESIGN §24), and the old
    JSON names still carry the same values for one release."""
    for name in ("a", "b"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    env.tmux("kill-session", "-t", "=a")
    lines = env.run("ls").stdout.splitlines()
    assert lines[0].split() == ["NAME", "HARNESS", "STATE", "TURN", "WHEN", "PANE", "CWD"]
    assert "missing (spex up)" in lines[1]
    rows = {r["name"]: r for r in json.loads(env.run("ls", "--json").stdout)}
    assert (rows["a"]["pane"], rows["b"]["pane"]) == ("missing", "ok")
    assert [r["home"] for r in rows.values()] == [r["pane"] for r in rows.values()]
    shown = env.run("show", "a").stdout.splitlines()
    assert "pane         missing" in shown
    assert not [line for line in shown if line.startswith("home")], shown
    one = json.loads(env.run("show", "a", "--json").stdout)
    assert one["pane"] == one["home"] == "missing"
    assert "pane missing" in env.run("top").stdout  # its flags, on a pipe
    assert "pane(s)" in env.run("doctor").stdout
    assert "Recreate missing panes" in env.run("up", "--help").stdout
    assert "tmux pane" in env.run("rm", "--help").stdout
    # Nothing to revive: the panes brought up, under both names.
    r = env.run("up", "--revive", "--json")
    assert r.returncode == 0, r.stderr
    up = json.loads(r.stdout)
    assert up["revived"] == [] and up["homes"] == up["panes"]
    assert {(p["name"], p["status"]) for p in up["panes"]} == {("a", "recreated"), ("b", "ok")}


def test_home_killed_behind_our_back(env: Env) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    assert env.run("new", "b", "--harness", "demo").returncode == 0
    env.tmux("kill-session", "-t", "=a")
    rows = {r["name"]: r for r in json.loads(env.run("ls", "--json").stdout)}
    assert rows["a"]["pane"] == "missing"
    assert rows["b"]["pane"] == "ok"
    assert "missing" in env.run("ls").stdout
    # The next operation that needs the home recreates it.
    r = env.run("wake", "a", "hi", "--window", "0.3")
    assert r.returncode == 0, r.stderr
    assert json.loads(env.run("show", "a", "--json").stdout)["pane"] == "ok"
    env.tmux("kill-server")
    rows = {r["name"]: r for r in json.loads(env.run("ls", "--json").stdout)}
    assert rows["a"]["pane"] == rows["b"]["pane"] == "missing"
    r = env.run("wake", "b", "hi", "--window", "0.3")
    assert r.returncode == 0, r.stderr
    assert env.tmux("has-session", "-t", "=b").returncode == 0


def test_rm_when_home_already_gone(env: Env) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    env.tmux("kill-server")
    r = env.run("rm", "a")
    assert r.returncode == 0, r.stderr
    assert json.loads(env.run("ls", "--json").stdout) == []
    # The name is free again.
    assert env.run("new", "a", "--harness", "demo").returncode == 0


def test_racing_creates_exactly_one_wins(env: Env) -> None:
    for i in range(4):
        name = f"race{i}"
        procs = [
            subprocess.Popen(
                [SPEX, "new", name, "--harness", "demo"],
                env=env.vars,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for _ in range(3)
        ]
        codes = sorted(p.wait(timeout=30) for p in procs)
        assert codes == [0, 3, 3], name
    rows = json.loads(env.run("ls", "--json").stdout)
    assert sorted(r["name"] for r in rows) == [f"race{i}" for i in range(4)]
    listed = env.tmux("list-sessions", "-F", "#{session_name}").stdout.split()
    assert sorted(listed) == [f"race{i}" for i in range(4)]


def test_attach_shows_the_pane_and_detach_returns(env: Env) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    env.tmux("send-keys", "-t", "=a:0.0", "echo HELLO-FROM-PANE", "Enter")
    assert retry_until(
        lambda: "HELLO-FROM-PANE" in env.tmux("capture-pane", "-p", "-t", "=a:0.0").stdout
    )
    child = pexpect.spawn(
        SPEX, ["attach", "a"], env=env.vars, dimensions=(40, 120), timeout=15, encoding="utf-8"
    )
    try:
        child.expect("HELLO-FROM-PANE")
        env.tmux("detach-client", "-s", "=a")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert env.tmux("has-session", "-t", "=a").returncode == 0


def test_attach_unknown_is_refused(env: Env) -> None:
    r = env.run("attach", "ghost")
    assert r.returncode == 3


def test_doctor(env: Env) -> None:
    env.run("new", "a", "--harness", "demo")
    r = env.run("doctor")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok    tmux: tmux 3." in r.stdout or "ok    tmux:" in r.stdout
    assert "state:" in r.stdout and "mode 700" in r.stdout
    assert "harness claude" in r.stdout


def test_ls_on_empty_home_and_help(env: Env) -> None:
    r = env.run("ls")
    assert r.returncode == 0
    assert "no sessions" in r.stdout
    assert env.run("--help").returncode == 0
    assert env.run("wake", "-h").returncode == 0


def test_default_home_follows_xdg(env: Env) -> None:
    vars_ = {k: v for k, v in env.vars.items() if k != "SPEXSUP_HOME"}
    vars_["XDG_STATE_HOME"] = str(env.root / "xdg")
    r = subprocess.run(
        [SPEX, "new", "x", "--harness", "demo"],
        env=vars_,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert (env.root / "xdg" / "spexsup" / "state.db").exists()


def test_ls_is_one_tmux_call(env: Env) -> None:
    """`ls` reads tmux with one `list-panes -a`, however many sessions there are."""
    for i in range(5):
        assert env.run("new", f"s{i}", "--harness", "demo").returncode == 0
    shim_dir = env.root / "shim"
    shim_dir.mkdir()
    log = env.root / "tmux-calls"
    real = shutil.which("tmux")
    shim = shim_dir / "tmux"
    shim.write_text(f'#!/bin/sh\necho "$*" >>{log}\nexec {real} "$@"\n')
    shim.chmod(0o755)
    r = env.run("ls", "--json", extra={"PATH": f"{shim_dir}:{env.vars['PATH']}"})
    assert r.returncode == 0
    assert len(json.loads(r.stdout)) == 5
    calls = log.read_text().splitlines()
    assert len(calls) == 1
    assert "list-panes -a" in calls[0]


def _ls(env: Env) -> list[dict[str, object]]:
    return json.loads(env.run("ls", "--json").stdout)  # type: ignore[no-any-return]


def _with_a_running_b(env: Env) -> None:
    """Sessions a, b and c; b's turn runs (sleeper outlives its window)."""
    for n in ("a", "c"):
        assert env.run("new", n, "--harness", "demo").returncode == 0
    assert env.run("new", "b", "--window", "1", "--", harness("sleeper.sh")).returncode == 0
    r = env.run("wake", "b", "work", "--window", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads(env.run("show", "b", "--json").stdout)["state"] == "running"


def test_rm_of_several_removes_none_when_one_has_a_running_turn(env: Env) -> None:
    _with_a_running_b(env)
    before = _ls(env)
    r = env.run("rm", "a", "b", "c")
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines[0].startswith("spex: b: session 'b' has a running turn "), lines
    assert lines[-1] == "spex: 1 of 3 sessions refused; removed nothing", lines
    assert "Traceback" not in r.stderr
    assert _ls(env) == before
    for n in ("a", "b", "c"):
        assert env.tmux("has-session", "-t", f"={n}").returncode == 0, n
    # --force stops the turn first: then all three go.
    r = env.run("rm", "a", "b", "c", "--force")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["removed a", "removed b", "removed c"]
    assert _ls(env) == []


def test_rm_dry_run_lists_and_changes_nothing(env: Env) -> None:
    _with_a_running_b(env)
    before = _ls(env)
    r = env.run("rm", "--all", "--dry-run")
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stdout.splitlines() == ["would remove a", "would remove c"]
    assert r.stderr.splitlines()[0].startswith("spex: b: session 'b' has a running turn ")
    assert r.stderr.splitlines()[-1] == "spex: 1 of 3 sessions would be refused"
    assert _ls(env) == before
    # All would go with --force (and --dry-run still removes nothing); one name too.
    for args in (["--all", "--force"], ["--match", "[ab]", "--force"], ["a"]):
        r = env.run("rm", "--dry-run", *args)
        assert r.returncode == 0, (args, r.stderr)
        assert r.stderr == "", args
        assert r.stdout.startswith("would remove a\n"), (args, r.stdout)
        assert _ls(env) == before, args
    assert env.tmux("has-session", "-t", "=b").returncode == 0


def test_rm_refusal_and_dry_run_json_documents(env: Env) -> None:
    _with_a_running_b(env)
    before = _ls(env)
    r = env.run("rm", "a", "b", "--json")
    assert r.returncode == 3, r.stderr
    d = json.loads(r.stdout)
    assert d["schema_version"] == 1
    assert d["ok"] is False
    assert d["exit_code"] == 3
    assert d["error"] == "1 of 2 sessions refused; removed nothing"
    assert d["dry_run"] is False
    a, b = d["sessions"]
    assert a == {"session": "a", "ok": True, "error": None, "exit_code": None}
    assert (b["session"], b["ok"], b["exit_code"]) == ("b", False, 3)
    assert "has a running turn" in b["error"]
    assert _ls(env) == before
    r = env.run("rm", "--all", "--dry-run", "--force", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["schema_version"], d["ok"], d["dry_run"]) == (1, True, True)
    assert "error" not in d
    assert [(s["session"], s["ok"]) for s in d["sessions"]] == [
        ("a", True),
        ("b", True),
        ("c", True),
    ]
    assert _ls(env) == before


def test_rm_unknown_among_names_or_bad_flags_remove_nothing(env: Env) -> None:
    for n in ("a", "c"):
        assert env.run("new", n, "--harness", "demo").returncode == 0
    before = _ls(env)
    # An unknown host among the names is refused (3) before anything is removed.
    r = env.run("rm", "a", "bad:name", "--dry-run")
    assert r.returncode == 3 and r.stderr.startswith("spex: no host named 'bad'"), r
    assert _ls(env) == before
    r = env.run("rm", "a", "nope", "c")
    assert r.returncode == 3, r.stderr
    assert r.stderr.splitlines() == [
        "spex: nope: no session named 'nope' (see spex ls)",
        "spex: 1 of 3 sessions refused; removed nothing",
    ]
    assert _ls(env) == before
    for args in (
        ["--all", "--salvage", "--keep-worktree"],
        ["--all", "--dry-run", "--salvage", "--keep-worktree"],
        ["a", "--all"],
        [],
    ):
        r = env.run("rm", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("spex: "), (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert "Traceback" not in r.stderr
        assert _ls(env) == before, args


def test_rm_all_on_a_terminal_asks_first(env: Env) -> None:
    def rm_all(*args: str) -> pexpect.spawn:
        return pexpect.spawn(SPEX, ["rm", "--all", *args], env=env.vars, timeout=30)

    for n in ("a", "b", "c"):
        assert env.run("new", n, "--harness", "demo").returncode == 0
    before = _ls(env)
    for answer in ("n", ""):
        child = rm_all()
        try:
            child.expect_exact("remove 3 sessions (a, b, c)? [y/N]: ")
            child.sendline(answer)
            child.expect_exact("spex: removed nothing (not confirmed) (--yes skips the question)")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        assert child.exitstatus == 3, answer
        assert _ls(env) == before, answer
    child = rm_all()
    try:
        child.expect_exact("? [y/N]: ")
        child.sendline("y")
        child.expect_exact("removed a")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert _ls(env) == []
    # --yes asks nothing; off a terminal (a script) nothing is asked either.
    for n in ("a", "b"):
        assert env.run("new", n, "--harness", "demo").returncode == 0
    child = rm_all("--yes")
    try:
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert b"[y/N]" not in (child.before or b"")
    assert _ls(env) == []
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    r = env.run("rm", "--all")
    assert (r.returncode, r.stdout, r.stderr) == (0, "removed a\n", "")


def test_ls_takes_patterns_a_state_and_quiet_in_natural_order(env: Env) -> None:
    """`spex ls [PATTERN…] [--match GLOB] [--state S] [-q]`, try-2 before try-10."""
    for name in ("try-10", "try-2", "try-1", "web"):
        assert env.run("new", name, "--harness", "demo").returncode == 0, name
    assert env.run("stop", "web").returncode == 0

    def names(*args: str) -> list[str]:
        r = env.run("ls", "-q", *args)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    assert names() == ["try-1", "try-2", "try-10", "web"]
    assert names("try-*") == ["try-1", "try-2", "try-10"]
    assert names("try-1*", "web") == ["try-1", "try-10", "web"]
    assert names("--match", "*-2") == ["try-2"]
    assert names("--state", "stopped") == ["web"]
    assert names("try-*", "--state", "stopped") == []
    doc = json.loads(env.run("ls", "--json", "--state", "idle").stdout)
    assert [r["name"] for r in doc] == ["try-1", "try-2", "try-10"]
    assert env.run("ls", "nothing-*").stdout == "no sessions match\n"
    table = env.run("ls").stdout.splitlines()
    assert [line.split()[0] for line in table[1:]] == ["try-1", "try-2", "try-10", "web"]
    bad = env.run("ls", "--state", "sleeping")
    assert bad.returncode == 2 and bad.stderr.startswith("spex: invalid --state 'sleeping'")
    assert bad.stderr.count("\n") == 1


# --- colour: the state column on a terminal ------------------------------------

SGR = re.compile(r"\x1b\[[0-9;]*m")


def _states(env: Env) -> None:
    """bad failed (its harness exits 1), run running, held stopped, calm idle."""
    assert env.run("new", "bad", "--", "sh", "-c", "echo broke; exit 1").returncode == 0
    assert env.run("wake", "bad", "go").returncode == 1
    assert env.run("new", "run", "--", harness("sleeper.sh")).returncode == 0
    assert env.run("wake", "run", "task").returncode == 0
    assert env.run("new", "held", "--harness", "demo").returncode == 0
    assert env.run("stop", "held").returncode == 0
    assert env.run("new", "calm", "--harness", "demo").returncode == 0


def _on_a_terminal(env: Env, *args: str, **extra: str) -> list[str]:
    vars_ = {k: v for k, v in env.vars.items() if k != "NO_COLOR"}
    vars_.update(TERM="xterm-256color", **extra)
    child = pexpect.spawn(SPEX, list(args), env=vars_, dimensions=(24, 200), timeout=30)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return [ln for ln in child.before.decode().replace("\r", "").splitlines() if ln]


def _starts(line: str) -> list[int]:
    """Where each cell of a table line begins (cells are two spaces apart)."""
    return [m.start() for m in re.finditer(r"(?:^|(?<=  ))(?=\S)", line)]


def test_ls_colours_the_state_on_a_terminal_only(env: Env) -> None:
    _states(env)
    lines = _on_a_terminal(env, "ls")
    by_name = {SGR.sub("", ln).split()[0]: ln for ln in lines[1:]}
    assert f"  \x1b[31m{states.FAILED}\x1b[0m  " in by_name["bad"]
    assert f"  \x1b[32m{states.BUSY}\x1b[0m  " in by_name["run"]
    assert f"  \x1b[33m{states.STOPPED}\x1b[0m  " in by_name["held"]
    assert "\x1b" not in by_name["calm"] and "\x1b" not in lines[0]
    # The columns line up on what is seen, escapes or not.
    plain = [SGR.sub("", ln) for ln in lines]
    assert all(_starts(ln) == _starts(plain[0]) for ln in plain[1:]), plain
    # A pipe never gets an escape; --color always gives them to it.
    assert "\x1b" not in env.run("ls").stdout
    piped = env.run("ls", "--color", "always").stdout
    assert f"\x1b[31m{states.FAILED}\x1b[0m" in piped
    # (Within one listing: an age may grow a digit between two of them.)
    seen = [SGR.sub("", ln) for ln in piped.splitlines()]
    assert all(_starts(ln) == _starts(seen[0]) for ln in seen[1:]), seen
    # NO_COLOR (any non-empty value) and --color never: no escape at all;
    # an empty NO_COLOR is not set; --color always wins over NO_COLOR.
    assert not any("\x1b" in ln for ln in _on_a_terminal(env, "ls", NO_COLOR="1"))
    assert not any("\x1b" in ln for ln in _on_a_terminal(env, "ls", "--color", "never"))
    assert any("\x1b[31m" in ln for ln in _on_a_terminal(env, "ls", NO_COLOR=""))
    assert any("\x1b[31m" in ln for ln in _on_a_terminal(env, "ls", "--color=always", NO_COLOR="1"))
    # `spex show` colours its state the same way.
    shown = _on_a_terminal(env, "show", "bad")
    assert f"state        \x1b[31m{states.FAILED}\x1b[0m" in shown
    assert "\x1b" not in env.run("show", "bad").stdout
    assert not any("\x1b" in ln for ln in _on_a_terminal(env, "show", "bad", NO_COLOR="x"))


def test_a_bad_color_is_refused_in_one_line(env: Env) -> None:
    for args in (
        ["ls", "--color", "sometimes"],
        ["show", "x", "--color=yes"],
        ["top", "--color", ""],
    ):
        r = env.run(*args)
        assert (r.returncode, r.stdout) == (2, ""), r
        assert r.stderr.startswith("spex: invalid --color ") and r.stderr.count("\n") == 1
        assert r.stderr.endswith("(one of: auto, always, never)\n"), r.stderr
    r = env.run("ls", "--color", "sometimes", "--json")
    assert json.loads(r.stdout)["exit_code"] == 2


def test_ls_shows_a_turns_outcome_flags(env: Env) -> None:
    args = ["new", "c", "--harness", "claude", "--cwd", str(env.root)]
    assert env.run(*args, "--env", "FAKE_CLAUDE_LOGGED_IN=1").returncode == 0
    r = env.run("wake", "c", "write a.txt [deny]", "--window", "10")
    assert r.returncode == 0, r.stderr
    assert env.run("wait", "c").returncode == 0
    (row,) = env.run("ls").stdout.splitlines()[1:]
    cells = re.split(r"  +", row)
    assert len(cells) == 7, cells
    assert re.fullmatch(r"\S+ complete rc=0 \(denied:Write,denied:Bash\)", cells[3]), cells


def test_show_prints_no_python_reprs_and_no_usage_noise_for_a_harness_without_usage(
    env: Env,
) -> None:
    """Issue 38, item 15: `harness command ['sh', '-c', …]` and `? · tokens
    unknown` for a harness that never reports usage (command, demo)."""
    assert env.run("new", "c", "--", "sh", "-c", "echo 'hi there'").returncode == 0
    assert env.run("wake", "c", "go").returncode == 0
    assert env.run("wait", "c").returncode == 0
    assert env.run("new", "d", "--harness", "demo").returncode == 0
    assert env.run("wake", "d", "go").returncode == 0
    assert env.run("wait", "d").returncode == 0
    shown = env.run("show", "c").stdout
    assert re.search(r"^harness +command sh -c 'echo '\"'\"'hi there'\"'\"''$", shown, re.M) or (
        re.search(r"^harness +command sh -c ", shown, re.M) and "[" not in shown.split("\n")[1]
    ), shown
    for name in ("c", "d"):
        text = env.run("show", name).stdout
        assert "tokens unknown" not in text and "?" not in text.split("cost")[-1], text
        assert json.loads(env.run("show", name, "--json").stdout)["turns"][0]["cost"] is None


def test_a_sessions_state_agrees_with_its_last_turn(env: Env) -> None:
    """Issue 38 item 7 (DESIGN §20): a session whose only turn was skipped by
    `--after` is idle, not failed; a failed turn's session stays failed
    through a stop and a resume; a turn that ran and failed inside its window
    is not said to have never started. ls, show, top and JSON agree."""
    for name in ("api", "review-2"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    assert env.run("wake", "api", "please fail").returncode == 1
    assert env.run("wake", "review-2", "--after", "api", "review it").returncode == 1
    assert env.run("stop", "api").returncode == 0
    assert env.run("resume", "api").returncode == 0

    def states_in(*args: str) -> dict[str, str]:
        return {d["name"]: d["state"] for d in json.loads(env.run(*args, "--json").stdout)}

    want = {"api": "failed", "review-2": "idle"}
    assert states_in("ls") == want
    assert states_in("top") == want
    for name, state in want.items():
        assert json.loads(env.run("show", name, "--json").stdout)["state"] == state
        shown = env.run("show", name).stdout
        assert f"state        {state}\n" in shown, shown
        assert "never confirmed" not in shown, shown
    listed = {line.split()[0]: line.split()[2] for line in env.run("ls").stdout.splitlines()[1:]}
    assert listed == want


def test_readers_find_unfinished_turns_by_their_index(env: Env) -> None:
    """Every reader's reconcile reads the unfinished turns from their partial
    index, never each session's current turn in turn (a scan of sessions)."""
    from spexsup.turn.reconcile import UNFINISHED

    assert env.run("ls").returncode == 0  # the store, made
    spex = env.spex()
    plan = " ".join(row[-1] for row in spex.store.db.execute(f"EXPLAIN QUERY PLAN {UNFINISHED}"))
    assert "turns_active" in plan, plan
    assert "SCAN" not in plan, plan


def test_readers_find_the_waves_to_take_over_by_their_index(env: Env) -> None:
    """Every reader's reconcile asks whether an ended wave's on-complete
    command waits to be taken over, and `wavedoc.resume` which: both from
    their partial index, never parsing each ended wave's document (13 ms of
    every `spex ls` in a home with 500 waves of 100 legs)."""
    from spexsup.core.wavedoc import UNSTARTED_HOOKS
    from spexsup.turn.reconcile import reconcile

    assert env.run("ls").returncode == 0  # the store, made
    spex = env.spex()
    asked: list[str] = []
    spex.store.db.set_trace_callback(asked.append)
    reconcile(spex)
    spex.store.db.set_trace_callback(None)
    of_waves = [s for s in asked if "FROM waves" in s] + [UNSTARTED_HOOKS]
    assert len(of_waves) > 1, asked
    for statement in of_waves:
        plan = " ".join(row[-1] for row in spex.store.db.execute(f"EXPLAIN QUERY PLAN {statement}"))
        assert "waves_hook_unstarted" in plan, (statement, plan)


def test_a_census_of_one_session_lists_its_panes_alone(env: Env) -> None:
    from spexsup.adapters.procs import Liveness

    for name in ("one", "two"):
        assert env.run("new", name, "--harness", "demo", "--cwd", str(env.root)).returncode == 0
    tmux = env.spex().tmux
    assert set(tmux.census().panes) == {"one", "two"}
    one = tmux.census("one")
    assert one.liveness is Liveness.ALIVE
    assert set(one.panes) == {"one"}
    assert one.panes["one"] == tmux.census().panes["one"]
    env.tmux("kill-session", "-t", "=two")
    gone = tmux.census("two")
    assert (gone.liveness, gone.panes) == (Liveness.ALIVE, {})
    shown = json.loads(env.run("show", "two", "--json").stdout)
    assert shown["pane"] == "missing"
    assert json.loads(env.run("show", "one", "--json").stdout)["pane"] == "ok"


def counting_tmux(env: Env) -> tuple[dict[str, str], Path]:
    """A PATH whose `tmux` writes each of its command lines to a log, then
    runs the real one: how many clients a spex command started."""
    bindir, log = env.root / "counting-bin", env.root / "tmux-calls"
    bindir.mkdir(exist_ok=True)
    tmux = bindir / "tmux"
    tmux.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {shutil.which("tmux")} "$@"\n')
    tmux.chmod(0o755)
    return {"PATH": f"{bindir}:{env.vars['PATH']}"}, log


def subcommands(log: Path) -> list[str]:
    """The tmux command of each logged client (after `-L NAME -f CONF`)."""
    return [line.split()[4] for line in log.read_text().splitlines()]


def test_ls_and_show_ask_tmux_once_before_they_read(env: Env) -> None:
    """`ls` and `show` start their census before importing and reading the
    store (adapters.prefetch), and use it: one tmux client each."""
    for name in ("one", "two"):
        assert env.run("new", name, "--harness", "demo", "--cwd", str(env.root)).returncode == 0
    counting, log = counting_tmux(env)
    shown = json.loads(env.run("ls", "--json", extra=counting).stdout)
    assert [(s["name"], s["pane"]) for s in shown] == [("one", "ok"), ("two", "ok")]
    assert subcommands(log) == ["list-panes"]
    log.unlink()
    env.tmux("kill-session", "-t", "=two")
    assert json.loads(env.run("show", "two", "--json", extra=counting).stdout)["pane"] == "missing"
    assert json.loads(env.run("show", "one", "--json", extra=counting).stdout)["pane"] == "ok"
    assert subcommands(log) == ["list-panes"] * 2


# Run a command in process and say, on stderr, which spexsup modules were
# loaded when each tmux client started, and which at the end.
PROBE = """
import json, subprocess, sys
from spexsup.cli import run
clients = []
popen = subprocess.Popen.__init__
def spy(self, args, *rest, **kw):
    if args and args[0] == "tmux":
        clients.append(sorted(m for m in sys.modules if m.startswith("spexsup")))
    popen(self, args, *rest, **kw)
subprocess.Popen.__init__ = spy
code = run(sys.argv[1:])
sys.stdout.flush()
loaded = sorted(m for m in sys.modules if m.startswith("spexsup") or m == "shlex")
print(json.dumps({"code": code, "clients": clients, "loaded": loaded}), file=sys.stderr)
"""


def probed(env: Env, *words: str) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-c", PROBE, *words],
        env=env.vars,
        capture_output=True,
        text=True,
        check=False,
    )
    found: dict[str, Any] = json.loads(r.stderr.strip().splitlines()[-1])
    assert found["code"] == 0, r.stderr
    return found


def test_ls_and_show_start_their_census_before_their_imports(env: Env) -> None:
    """The census's tmux client is started from the command line alone,
    before `ls` and `show` import their command module and what reads the
    store (issue 40: `show` at 1 000 panes waited 12 ms on tmux after them),
    and it is the one census they take."""
    for name in ("one", "two"):
        assert env.run("new", name, "--harness", "demo", "--cwd", str(env.root)).returncode == 0
    for words in (["ls", "--json"], ["ls"], ["show", "one"], ["show", "one", "--json"]):
        found = probed(env, *words)
        (before,) = found["clients"]
        assert "spexsup.cli.sessions" not in before and "spexsup.turn.read" not in before, words


def test_a_census_taken_ahead_on_the_wrong_server_is_taken_again(env: Env) -> None:
    """`census_ahead` guesses the server from the environment and the home
    alone; a home an older spex made names a shared socket in its store
    (`tmux_socket`), which the guess cannot see. The panes shown are then
    the store's server's, asked again, and the guess started no server."""
    for name in ("one", "two"):
        assert env.run("new", name, "--harness", "demo", "--cwd", str(env.root)).returncode == 0
    db = sqlite3.connect(env.home / "state.db")
    with db:
        db.execute("INSERT OR REPLACE INTO settings VALUES ('tmux_socket', ?)", (env.socket,))
    db.close()
    counting, log = counting_tmux(env)
    older = {**counting, "SPEXSUP_TMUX": ""}  # the server named by the store alone
    shown = json.loads(env.run("ls", "--json", extra=older).stdout)
    assert [(s["name"], s["pane"]) for s in shown] == [("one", "ok"), ("two", "ok")]
    calls = [line.split()[:5] for line in log.read_text().splitlines()]
    guessed = calls[0][1]
    assert [c[4] for c in calls] == ["list-panes", "list-panes"], calls
    assert guessed != env.socket and calls[1][1] == env.socket, calls
    alive = subprocess.run(
        ["tmux", "-L", guessed, "has-session"], env=env.vars, capture_output=True, check=False
    )
    assert alive.returncode != 0  # the guess's list-panes started no server
    shown = json.loads(env.run("show", "one", "--json", extra=older).stdout)
    assert shown["pane"] == "ok"


def test_reading_sessions_loads_no_launch_ledger_or_watcher(env: Env) -> None:
    """`ls` and `show` of settled sessions read the store: the confirmer (and
    the launcher, the exit reporter behind it), the ledger, the watcher, and
    for `ls --json` the sandbox module and shlex, stay unloaded (issue 40)."""
    for name in ("one", "two"):
        assert env.run("new", name, "--harness", "demo", "--cwd", str(env.root)).returncode == 0
    assert env.run("wake", "one", "hi").returncode == 0
    assert env.run("wait", "one", "--timeout", "60").returncode == 0
    never = {
        "spexsup.turn.confirm",
        "spexsup.turn.launch",
        "spexsup.pane.report",
        "spexsup.state.ledger",
        "spexsup.adapters.watch",
        "spexsup.cli.internal",
    }
    for words in (["ls", "--json"], ["ls"], ["show", "one"]):
        loaded = set(probed(env, *words)["loaded"])
        assert "spexsup.turn.read" in loaded, words  # (the probe saw the reading)
        assert not loaded & never, (words, loaded & never)
    loaded = set(probed(env, "ls", "--json")["loaded"])
    assert not loaded & {"spexsup.adapters.sandbox", "shlex"}, loaded


def test_an_early_census_stands_only_while_no_other_tmux_client_ran(env: Env) -> None:
    """What the early census read is the panes' latest only while this
    process asked tmux nothing else: a reconcile that fenced a pane and took
    a census of its own meanwhile makes `ls` take the one it shows after."""
    from spexsup.adapters.prefetch import EarlyCensus

    for name in ("one", "two"):
        assert env.run("new", name, "--harness", "demo", "--cwd", str(env.root)).returncode == 0
    tmux = env.spex().tmux
    early = EarlyCensus(tmux)
    assert set(early.collect().panes) == {"one", "two"}
    assert early.current(None) and not early.current("one")
    tmux.census("one")  # another client of this process
    assert not early.current(None)
    # A launcher killed after admitting its turn: `ls` reconciles it (a fence
    # and a census of the reconcile's own), then takes the census it shows.
    paused = subprocess.Popen(
        [SPEX, "wake", "one", "x", "--window", "1"],
        env={**env.vars, "SPEXSUP_FAULT": "pause-before-launch"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert retry_until(
            lambda: json.loads(env.run("ls", "--json").stdout)[0]["state"] == "running", 20
        )
    finally:
        paused.kill()
        paused.wait()
    counting, log = counting_tmux(env)
    shown = json.loads(env.run("ls", "--json", extra=counting).stdout)
    assert shown[0]["turn"]["state"] != "starting", shown[0]
    calls = subcommands(log)
    assert calls.count("list-panes") == 3 and calls[-1] == "list-panes", calls
