"""Shell completion: the scripts, a real bash completing a session name, the fast path."""

from __future__ import annotations

import json
import shlex
import subprocess
from typing import Any

import pytest
from conftest import SPEX, Env

from spexsup.cli import complete


def bash_complete(env: Env, line: str) -> list[str]:
    """Source `spex completion bash` in a real bash and press TAB after `line`."""
    script = env.run("completion", "bash").stdout
    words = line.split(" ")
    quoted = " ".join(shlex.quote(w) for w in words)
    program = (
        f"{script}\n"
        f"COMP_WORDS=({quoted})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        '_spex_completion spex\nprintf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    r = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        env={**env.vars, "PATH": f"{SPEX.rsplit('/', 1)[0]}:{env.vars['PATH']}"},
        check=True,
    )
    return [w for w in r.stdout.splitlines() if w]


def test_bash_completes_commands_names_waves_and_harnesses(env: Env) -> None:
    for name in ("alpha", "alpine", "beta"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    assert bash_complete(env, "spex wake al") == ["alpha", "alpine"]
    assert bash_complete(env, "spex stop alpha b") == ["beta"]
    assert bash_complete(env, "spex --home " + str(env.home) + " show a") == ["alpha", "alpine"]
    assert "wake" in bash_complete(env, "spex wa")
    assert "--window" in bash_complete(env, "spex wake alpha --wi")
    assert bash_complete(env, "spex new x --harness de") == ["demo"]
    assert bash_complete(env, "spex harness show co") == ["codex", "command"]
    assert bash_complete(env, "spex harness sh") == ["show"]
    assert bash_complete(env, "spex wake alpha --window ") == []
    assert env.run("fanout", "alpha", "-m", "hi", "--window", "0.3").returncode == 0
    wave = json.loads(env.run("wave", "last", "--json").stdout)["id"]
    assert bash_complete(env, "spex wave ") == ["last", wave]
    assert bash_complete(env, "spex fanout --retry-failed w") == [wave]
    turn = json.loads(env.run("show", "alpha", "--json").stdout)["turns"][0]["id"]
    assert bash_complete(env, "spex log alpha --turn ") == ["last", turn]


def test_completion_offers_names_ids_hosts_and_words_wherever_a_command_takes_them(
    env: Env,
) -> None:
    for name in ("alpha", "beta"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    assert env.run("wake", "alpha", "hi", "--window", "3").returncode == 0
    env.run("wait", "alpha")
    turn = json.loads(env.run("show", "alpha", "--json").stdout)["turns"][0]["id"]
    (env.home / "config.toml").write_text(
        '[host.box1]\nssh = "u@box1"\n[host.box2]\nssh = "u@box2"\n[host.web]\nssh = "w"\n'
    )
    assert bash_complete(env, "spex diff al") == ["alpha"]
    assert bash_complete(env, "spex diff alpha --turn ") == ["last", turn]
    assert env.run("fanout", "alpha", "-m", "hi", "--window", "0.3").returncode == 0
    wave = json.loads(env.run("wave", "last", "--json").stdout)["id"]
    assert bash_complete(env, "spex keep ") == ["last", wave]
    assert bash_complete(env, f"spex keep {wave} b") == ["beta"]
    assert bash_complete(env, "spex -H bo") == ["box1", "box2"]
    assert bash_complete(env, "spex --host w") == ["web"]
    assert bash_complete(env, "spex -H box1 wake al") == ["alpha"]
    assert bash_complete(env, "spex events --kind fa") == ["failed"]
    assert bash_complete(env, "spex events --kind co") == [
        "confirmed",
        "completed",
        "conversation-gone",
    ]
    assert bash_complete(env, "spex ls --state fa") == ["failed"]
    assert bash_complete(env, "spex completion ") == ["bash", "zsh", "fish"]
    assert bash_complete(env, "spex help wo") == ["worktree"]
    assert bash_complete(env, "spex worktree status be") == ["beta"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_every_shell_gets_a_script_and_names(env: Env, shell: str) -> None:
    assert env.run("new", "alpha", "--harness", "demo").returncode == 0
    r = env.run("completion", shell)
    assert r.returncode == 0 and "_SPEX_COMPLETE" in r.stdout
    extra = {"_SPEX_COMPLETE": f"complete_{shell}", "_TYPER_COMPLETE_FISH_ACTION": "get-args"}
    if shell == "bash":
        extra |= {"COMP_WORDS": "spex show al", "COMP_CWORD": "2"}
    else:
        extra["_TYPER_COMPLETE_ARGS"] = "spex show al"
    out = env.run(extra=extra).stdout
    assert "alpha" in out
    assert env.run("completion", "tcsh").returncode == 2


def test_the_fast_table_agrees_with_the_commands() -> None:
    """complete.SPEC duplicates what the typer app knows; keep them equal."""
    from typer.main import get_command

    from spexsup.cli.app import app, register

    register()
    group: Any = get_command(app)
    for name, (positional, options) in complete.SPEC.items():
        command = group
        for word in name.split():  # a group's command is two words
            command = command.commands[word]
        if getattr(command, "default", None):  # `spex wave W` is `spex wave show W`
            command = command.commands[command.default]
        takes_value = {
            opt
            for p in command.params
            if p.param_type_name == "option" and not p.is_flag
            for opt in p.opts
        } - {"--home"}
        assert set(options) == takes_value, name
        arguments = [p for p in command.params if p.param_type_name == "argument"]
        if positional:
            assert arguments and arguments[0].name in (
                "name",
                "names",
                "wave",
                "shell",
                "command",
                "schedule",
                "schedules",
            ), name
            many = positional[-1] == "*"
            assert (arguments[0].nargs == -1) == many, name
