"""The README's examples run as printed on the demo harness (issue 38, item 19).

Every prompt the README gives with `-m "…"` in a shell block (the schedule's
"run the checks and fix what fails" among them) is woken on a demo session:
each completes unless it asks to fail, as the README's one failing example
does. The schedule example itself is added and fired through the CLI (cron
engine, the fake crontab of tests/fakes). The tour's console block runs as
printed: the exit code it implies, a first line of the printed shape."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from conftest import Env

README = (Path(__file__).parent.parent / "README.md").read_text()
BLOCKS = re.findall(r"```(sh|console)\n(.*?)```", README, re.S)


def shell_lines() -> list[str]:
    return [ln for kind, body in BLOCKS if kind == "sh" for ln in body.splitlines()]


def readme_prompts() -> list[str]:
    found = []
    for line in shell_lines():
        command = line.split("  #")[0].strip()
        if not command.startswith("spex "):
            continue
        words = shlex.split(command)
        found += [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-m"]
    return found


def test_every_readme_prompt_does_on_demo_what_the_readme_says(env: Env) -> None:
    prompts = readme_prompts()
    assert "run the checks and fix what fails" in prompts and len(prompts) >= 10, prompts
    assert env.run("new", "api", "--harness", "demo").returncode == 0
    for prompt in dict.fromkeys(prompts):
        r = env.run("wake", "api", "-m", prompt, "--window", "30")
        assert (r.returncode, r.stdout.split(":")[1].split()[0]) == (0, "completed"), (prompt, r)


def test_the_schedule_example_runs_as_printed(env: Env) -> None:
    line = next(ln for ln in shell_lines() if ln.startswith("spex schedule add api --every"))
    assert env.run("new", "api", "--harness", "demo").returncode == 0
    added = env.run(*shlex.split(line)[1:])
    assert added.returncode == 0, added
    ident = json.loads(env.run("schedule", "ls", "--json").stdout)[0]["id"]
    fired = env.run("schedule", "run", ident)
    assert fired.returncode == 0, fired
    assert env.run("wait", "api", "--timeout", "60").returncode == 0


def test_the_tour_console_runs_as_printed(env: Env) -> None:
    console = next(body for kind, body in BLOCKS if kind == "console")
    commands = [ln[2:] for ln in console.splitlines() if ln.startswith("$ ")]
    shown = {c: console.split(f"$ {c}\n")[1].splitlines()[0] for c in commands}
    for name in ("api", "web"):
        assert env.run("new", name, "--harness", "demo", "--cwd", "/tmp").returncode == 0
    for command in commands:
        r = env.run(*shlex.split(command.removesuffix(" | cat"))[1:])
        first = (r.stdout.splitlines() or [""])[0]
        expected = 1 if "please fail" in command else 0
        assert r.returncode == expected, (command, r)
        # the printed shape: the same first word (`api:`, `NAME`, `session`, `wave`)
        assert first.split()[:1] == shown[command].split()[:1], (command, first)
