"""config.toml: defaults, which file wins, and broken files named precisely."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Env


def user_config(env: Env) -> Path:
    path = Path(env.vars["HOME"]) / ".config" / "spexsup" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_the_state_home_config_wins_and_doctor_lists_both(env: Env) -> None:
    user_config(env).write_text('default_harness = "claude"\nwindow = 0.1\n')
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text('default_harness = "demo"\n')
    assert env.run("new", "a").returncode == 0
    session = json.loads(env.run("show", "a", "--json").stdout)
    assert session["harness"] == "demo"
    # window comes from the user file (the state home's does not set it).
    woke = json.loads(env.run("wake", "a", "hi", "--json").stdout)
    assert woke["verdict"] == "confirmed" and woke["elapsed_ms"] < 1000
    lines = env.run("doctor").stdout.splitlines()
    assert lines[1] == f"config 1: {user_config(env)} (read)"
    assert lines[2] == f"config 2: {env.home / 'config.toml'} (read)"


def test_config_grace_and_max_concurrent_are_defaults(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text("grace = 0\nmax_concurrent = 1\nstrict = false\n")
    # A harness that ignores SIGTERM: with grace 0 the stop is immediate.
    trap = "trap '' TERM; sleep 30"
    assert env.run("new", "t", "--", "bash", "-c", trap).returncode == 0
    assert env.run("wake", "t", "x", "--window", "0.3").returncode == 0
    stopped = json.loads(env.run("stop", "t", "--json").stdout)
    assert stopped["grace"] == 0 and stopped["aborted"] is not None
    shown = json.loads(env.run("show", "t", "--json").stdout)
    assert shown["turn"]["state"] == "aborted" and shown["turn"]["survivors"] == []


def test_a_broken_file_names_file_line_and_field(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    path = env.home / "config.toml"
    for text, expected in (
        ('default_harness = "demo"\nwindow = "soon"\n', f"{path}:2: field 'window' must be"),
        ("\n\ngrace = = 3\n", "line 3"),
        ("max_concurrent = 0\n", "field 'max_concurrent' must be an integer between 1 and 1024"),
    ):
        path.write_text(text)
        r = env.run("ls")
        assert r.returncode == 1, text
        assert expected in r.stderr and str(path) in r.stderr, r.stderr
        assert len(r.stderr.splitlines()) == 1
        r = env.run("new", "a", "--harness", "demo")
        assert r.returncode == 1
        d = env.run("doctor")
        assert d.returncode == 1 and "FAIL  config:" in d.stdout
    path.unlink()
    assert json.loads(env.run("ls", "--json").stdout) == []


def test_an_unknown_key_is_one_warning_and_the_rest_of_the_file_applies(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    path = env.home / "config.toml"
    path.write_text('default_harness = "demo"\nwindw = 0.1\n')
    r = env.run("new", "a")
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        f"spex: warning: {path}:2: unknown key 'windw' at the top level, ignored"
        " (did you mean 'window'?)"
    ]
    assert json.loads(env.run("show", "a", "--json").stdout)["harness"] == "demo"
    # In a table, and far from any known key: the table named, the known keys listed.
    path.write_text("[retention]\nkeep_turns = 7\ncolour = 1\n")
    r = env.run("ls")
    assert r.returncode == 0
    assert r.stderr.splitlines() == [
        f"spex: warning: {path}:3: unknown key 'colour' in [retention], ignored"
        " (known: keep_turns, keep_days, keep_waves, keep_events, auto)"
    ]


def test_doctor_names_every_problem_of_every_config_file_and_fails(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    user = user_config(env)
    user.write_text('windw = 1\nwindow = "soon"\n')
    state = env.home / "config.toml"
    state.write_text("max_concurrent = 0\ngrace = 1\n")
    r = env.run("doctor")
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert f"FAIL  config: {user}:2: field 'window' must be" in "\n".join(lines)
    assert any(ln.startswith(f"FAIL  config: {state}:1: field 'max_concurrent'") for ln in lines)
    assert (
        f"warn  config: {user}:1: unknown key 'windw' at the top level, ignored"
        " (did you mean 'window'?)"
    ) in lines
    # Said once, as a check, not again as a warning on stderr.
    assert "windw" not in r.stderr
    d = env.run("doctor", "--json")
    assert d.returncode == 1
    doc = json.loads(d.stdout)
    assert doc["schema_version"] == 1 and doc["ok"] is False
    problems = doc["config"]["problems"]
    assert [p["severity"] for p in problems] == ["error", "error", "warning"], problems
    assert "windw" in problems[2]["detail"] and "max_concurrent" in problems[1]["detail"]
    checks = [c for c in doc["checks"] if c["name"] == "config"]
    assert [c["detail"] for c in checks] == [p["detail"] for p in problems]
    # Clean again: one check that says so, and the doctor passes it.
    user.unlink()
    state.write_text("grace = 1\n")
    r = env.run("doctor")
    assert r.returncode == 0, r.stdout
    assert "ok    config: 1 file(s) read, no problems" in r.stdout.splitlines()
    doc = json.loads(env.run("doctor", "--json").stdout)
    assert doc["config"]["problems"] == [] and doc["config"]["error"] is None


def test_tables_of_other_features_pass_through(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text(
        'default_harness = "demo"\n[[hook]]\nevent = "turn.end"\n[host.box]\nssh = "box"\n'
    )
    assert env.run("new", "a").returncode == 0


def test_attach_sets_the_configured_tmux_prefix(env: Env) -> None:
    import pexpect
    from conftest import SPEX, retry_until

    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text('tmux_prefix = "C-a"\n')
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    child = pexpect.spawn(SPEX, ["attach", "a"], env=env.vars, dimensions=(24, 80), timeout=30)
    try:
        assert retry_until(lambda: env.tmux("list-clients").stdout.strip() != "")
        assert env.tmux("show-options", "-gv", "prefix").stdout.strip() == "C-a"
        child.send("\x01d")  # C-a d: detach with the configured prefix
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_hostile_config_files_are_one_short_line(env: Env) -> None:
    """A deeply nested config.toml was `internal error: RecursionError`; a
    5 MB key was echoed whole in the error."""
    env.home.mkdir(parents=True, exist_ok=True)
    path = env.home / "config.toml"
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    r = env.run("ls")
    assert (r.returncode, r.stderr) == (
        1,
        f"spex: {path}: nested too deeply (fix or remove the file)\n",
    )
    path.write_text("k" * 5_000_000 + " = 1\n")
    r = env.run("ls")
    assert r.returncode == 0
    assert r.stderr.startswith(f"spex: warning: {path}:1: unknown key 'kkkk")
    assert "(5000002 chars)" in r.stderr and len(r.stderr) < 1000 and r.stderr.count("\n") == 1
    path.write_text("[host.box]\n" + "k" * 5_000_000 + " = 1\n")
    r = env.run("hosts")
    assert r.returncode == 1 and len(r.stderr) < 1100 and r.stderr.count("\n") == 1, len(r.stderr)
    path.unlink()
    harnesses = env.home / "harnesses.toml"
    harnesses.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    r = env.run("new", "x", "--harness", "mine")
    assert r.returncode == 2
    assert r.stderr == f"spex: {harnesses}: cannot read harness file: nested too deeply\n"
    harnesses.write_text(f"[harness.{'h' * 5_000_000}]\nfresh = ['a']\n")
    r = env.run("harness", "ls")
    assert len(r.stdout) < 5000, len(r.stdout)
    r = env.run("new", "x", "--harness", "nosuch")
    assert r.returncode == 2 and len(r.stderr) < 1100, len(r.stderr)
