"""The CLI as a user meets it: help, version, --home, output formats, JSON, ids, many names."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
from conftest import SPEX, Env, retry_until

LIFECYCLE = (
    "new wake wait queue schedule log verify attach stop resume up ls show edit top rm fanout"
    " wave cost maint prune du doctor"
)
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_each_command_is_registered_by_the_module_the_table_names() -> None:
    """`spex CMD` imports only COMMAND_MODULES[CMD]: the table must name every
    command (and group) and the module that really registers it."""
    from spexsup.cli.app import COMMAND_MODULES, app, register

    register()
    registered = {
        str(c.name or c.callback.__name__).replace("_", "-"): c.callback.__module__
        for c in app.registered_commands
        if c.callback is not None
    }
    for group in app.registered_groups:
        typer_instance = group.typer_instance
        assert typer_instance is not None
        callback = typer_instance.registered_commands[0].callback
        assert callback is not None
        registered[str(group.name)] = callback.__module__
    assert {k: f"spexsup.cli.{v}" for k, v in COMMAND_MODULES.items()} == registered


def test_the_exit_reporter_path_imports_no_dataclasses() -> None:
    """Every turn's end waits on the reporter: `dataclasses` (and `inspect`
    behind it), typer, psutil and watchdog stay off its path."""
    code = (
        "from spexsup.cli import internal;"
        "from spexsup.pane import report, turndir;"
        "from spexsup import paths; from spexsup.adapters import outcome;"
        "from spexsup.state import store, events;"
    )
    assert loaded_after(code, "dataclasses", "inspect", "typer", "psutil", "watchdog") == ""


def test_waiting_on_a_turn_imports_no_watchdog(tmp_path: Path) -> None:
    """Every wake waits on its turn's marker: inotify is read directly, so
    watchdog (logging, dataclasses, inspect, ctypes.util behind it) stays off
    its path, and a rename into place still wakes the waiter."""
    code = (
        "import os; from pathlib import Path;"
        "from spexsup.adapters.watch import DirWatch;"
        f"d = Path({str(tmp_path)!r}); w = DirWatch([d]).__enter__();"
        "(d / 'tmp').write_text('x'); os.rename(d / 'tmp', d / 'outcome');"
        "print(w.wait(30), end=' ');"
    )
    assert loaded_after(code, "dataclasses", "inspect", "logging", "watchdog") == "True"


def loaded_after(code: str, *modules: str) -> str:
    """What a fresh interpreter prints running `code`, then which of
    `modules` it has imported by then (space-separated)."""
    found = f"' '.join(m for m in {modules!r} if m in sys.modules)"
    probe = f"import sys; {code.rstrip(';')}; print({found})"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_command_modules_keep_their_annotations_evaluated() -> None:
    """See COMMAND_MODULES: string annotations triple typer's command building."""
    from spexsup.cli.app import COMMAND_MODULES

    cli = Path(__file__).parent.parent / "spexsup" / "cli"
    for module in {*COMMAND_MODULES.values(), "params", "app"}:
        source = (cli / f"{module}.py").read_text()
        assert "from __future__ import annotations" not in source, module


def test_a_command_imports_only_its_own_module() -> None:
    """`spex ls` must not pay for fanout's, maint's or worktree's imports."""
    code = (
        "import sys; from spexsup.cli.app import register; register('ls');"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('spexsup.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert "spexsup.cli.sessions" in loaded
    others = {"spexsup.cli.fanout", "spexsup.cli.maint", "spexsup.conductors.waves"}
    assert not loaded & others, loaded


def doc(env: Env, *args: str) -> Any:
    r = env.run(*args, "--json")
    assert r.returncode == 0, (args, r.stderr)
    return json.loads(r.stdout)


def test_version_and_doctor_versions(env: Env) -> None:
    from spexsup import __version__

    r = env.run("--version")
    assert (r.returncode, r.stdout) == (0, f"spex {__version__}\n")
    d = env.run("doctor")
    first = d.stdout.splitlines()[0]
    assert first.startswith(f"spex {__version__}, Python {sys.version.split()[0]}, tmux ")
    versions = doc(env, "doctor")["versions"]
    assert versions["spex"] == __version__ and versions["tmux"].startswith("tmux ")


PANELS = ["Turns", "Sessions", "Waves and queue", "Cost and checks", "Housekeeping", "Other doors"]


def panels_of(page: str) -> dict[str, list[str]]:
    """The commands `spex --help` lists under each panel's heading, in order."""
    found: dict[str, list[str]] = {}
    for block in page.split("\n\n"):
        heading, _, body = block.partition(":\n")
        if heading in PANELS or heading == "Other commands":
            found[heading] = re.findall(r"^  ([a-z-]+) {2,}\S", body, re.M)
    return found


def test_help_groups_the_commands_under_three_examples(env: Env) -> None:
    """`spex --help` as gh's and kubectl's: three examples at the top, then the
    commands in panels (turns, sessions, waves and queue, cost and checks,
    housekeeping, other doors), each command once, every line within 80
    columns (a summary wraps at a word), then the options and exit codes."""
    page = env.run("--help", extra={"COLUMNS": "80"}).stdout
    assert max(len(line) for line in page.splitlines()) <= 80
    top, _, rest = page.partition("\nExamples:\n")
    assert top.startswith("Usage: spex ") and rest, page
    examples = rest.split("\n\n")[0].splitlines()
    assert len(examples) == 3 and all(e.startswith("  spex ") for e in examples), examples
    panels = panels_of(page)
    assert list(panels) == PANELS, panels  # in that order, and no "Other commands"
    assert rest.index("Turns:") < rest.index("Options:") < rest.index("Exit codes:")
    listed = [c for names in panels.values() for c in names]
    visible = [words[0] for words in every_command() if len(words) == 1]
    assert sorted(listed) == sorted(visible), listed
    assert panels["Turns"][:2] == ["wake", "wait"] and "fanout" in panels["Waves and queue"]
    assert "cost" in panels["Cost and checks"] and "prune" in panels["Housekeeping"]
    assert "mcp" in panels["Other doors"] and "ls" in panels["Sessions"]
    for line in page.split("Turns:")[1].split("Options:")[0].splitlines():
        assert not line.endswith(("...", "…", "-")), line  # whole summaries, cut at words


def test_bare_spex_is_the_overview_on_one_screen(env: Env) -> None:
    """A bare `spex` on an 80x24 terminal: the help's top (usage, summary,
    the three examples) and each panel's commands on one line, nothing
    scrolled off; exit 2 as before."""
    child = pexpect.spawn(SPEX, [], env=env.vars, dimensions=(24, 80), encoding="utf-8")
    child.expect(pexpect.EOF, timeout=30)
    child.close()
    lines = child.before.replace("\r", "").rstrip("\n").splitlines()
    assert child.exitstatus == 2
    assert len(lines) <= 23 and max(len(line) for line in lines) <= 80, lines
    page = "\n".join(lines)
    help_page = env.run("--help", extra={"COLUMNS": "80"}).stdout
    assert page.split("\n\nCommands:")[0] == help_page.split("\n\nTurns:")[0]
    rows = dict(re.findall(r"^  (\S.*?) {2,}(\S.*)$", page.split("Commands:\n")[1], re.M))
    assert list(rows) == PANELS, rows
    assert rows == {k: " ".join(v) for k, v in panels_of(help_page).items()}
    assert "spex help COMMAND" in page and not env.run().stderr


def test_help_pages_are_whole_and_end_with_exit_codes(env: Env) -> None:
    r = env.run("--help", extra={"COLUMNS": "80"})
    assert r.returncode == 0
    assert "maint-op" not in r.stdout and "internal" not in r.stdout
    assert r.stdout.rstrip().splitlines()[-5].strip().startswith("Exit codes: 0 ok")
    for command in [*LIFECYCLE.split(), "completion"]:
        page = env.run(command, "--help", extra={"COLUMNS": "80"}).stdout
        assert "..." not in page and "<" not in page.split("Options:")[1], (command, page)
        assert max(len(line) for line in page.splitlines()) <= 80, command
        assert "Examples:" in page or command == "completion", command
    assert "--window DURATION" in env.run("wake", "--help").stdout
    stop = " ".join(env.run("stop", "--help").stdout.split())
    assert "[default: config.toml's grace, else 5]" in stop
    assert "NAME…" in env.run("stop", "--help").stdout
    # The hidden commands still work and still have help.
    assert env.run("maint-op", "--help").returncode == 0


def every_command() -> list[list[str]]:
    """Every visible command and group, as the words that name it."""
    from typer.main import get_command

    from spexsup.cli.app import app, register

    register()
    found: list[list[str]] = []

    def walk(command: Any, path: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            if not sub.hidden:
                found.append([*path, name])
                walk(sub, [*path, name])

    walk(get_command(app), [])
    return found


def test_every_help_page_speaks_one_style(env: Env) -> None:
    """Each command and group: a one-line summary, every argument and option
    described, Examples, a usage line without typer's `{NAME}` or `...`, and
    no type placeholders like `<str>`. A new command is held to it too."""
    commands = every_command()
    assert ["worktree", "ls"] in commands and ["help"] in commands
    for words in commands:
        page = env.run(*words, "--help", extra={"COLUMNS": "100"})
        assert page.returncode == 0, words
        text = page.stdout
        usage, _, rest = text.partition("\n\n")
        summary = rest.strip().splitlines()[0]
        assert usage.startswith(f"Usage: spex {' '.join(words)} "), (words, usage)
        assert "{" not in usage and "..." not in usage, (words, usage)
        assert summary and summary[0].isupper(), (words, summary)
        assert "Examples:" in text, words
        assert not re.search(r"<(str|int|float|path)>|\b(INTEGER|FLOAT)\b", text), (
            words,
            text,
        )
        for section in ("Arguments:", "Options:"):
            if section in text:
                body = text.split(section, 1)[1].split("\n\n", 1)[0]
                for line in body.splitlines():
                    if re.match(r"  \S", line):  # a name: its description on the same line
                        assert re.match(r"  \S.*\S {2,}\S", line), (words, line)


def test_help_command(env: Env) -> None:
    """`spex help [COMMAND…]` is `spex [COMMAND…] --help`."""
    assert env.run("help").stdout == env.run("--help").stdout
    assert env.run("help", "wake").stdout == env.run("wake", "--help").stdout
    page = env.run("help", "worktree", "ls")
    assert page.returncode == 0 and page.stdout == env.run("worktree", "ls", "--help").stdout
    r = env.run("help", "wak")
    assert r.returncode == 2 and "Did you mean 'wake'?" in r.stderr, r.stderr


def test_home_is_accepted_anywhere(env: Env) -> None:
    other = env.root / "other"
    r = env.run("new", "a", "--harness", "demo", "--home", str(other), "--create")
    assert r.returncode == 0, r.stderr
    assert [r["name"] for r in doc(env, "ls", "--home", str(other))] == ["a"]
    assert [r["name"] for r in doc(env, f"--home={other}", "ls")] == ["a"]
    assert doc(env, "ls") == []  # SPEXSUP_HOME itself was never touched


def test_a_home_given_that_does_not_exist_needs_create(env: Env) -> None:
    missing = env.root / "nonexistent" / "x"
    for args in (["--home", str(missing), "ls"], ["ls", f"--home={missing}"]):
        r = env.run(*args)
        assert (r.returncode, r.stdout) == (2, ""), r
        assert r.stderr == (f"spex: no state home at {missing} (give --create to make a new one)\n")
    assert not missing.parent.exists()
    new = env.root / "new"
    r = env.run("--home", str(new), "--create", "ls")
    assert r.returncode == 0, r.stderr
    assert new.is_dir() and new.stat().st_mode & 0o777 == 0o700
    # Once it exists, --create is not needed (and harmless anywhere on the line).
    assert env.run("--home", str(new), "ls").returncode == 0
    assert env.run("ls", "--create", "--home", str(new)).returncode == 0


def test_a_spexsup_home_that_does_not_exist_is_refused_like_home(env: Env) -> None:
    """Issue 38, item 3: `SPEXSUP_HOME=/tmp/typo spex ls` made a new empty home
    and said `no sessions`, while the same typo in --home was refused."""
    typo = env.root / "typo"
    for args in (["ls"], ["new", "a", "--harness", "demo"], ["wake", "a", "x"]):
        r = env.run(*args, extra={"SPEXSUP_HOME": str(typo)})
        assert (r.returncode, r.stdout) == (2, ""), (args, r)
        assert r.stderr == (
            f"spex: no state home at {typo} (SPEXSUP_HOME) (give --create to make a new one)\n"
        )
    assert not typo.exists()
    r = env.run("--create", "ls", extra={"SPEXSUP_HOME": str(typo)})
    assert r.returncode == 0 and typo.is_dir(), r.stderr
    assert env.run("ls", extra={"SPEXSUP_HOME": str(typo)}).returncode == 0
    # The default home (nobody typed it) is still made on first use, also
    # when SPEXSUP_HOME names it.
    xdg = env.root / "xdg"
    default = {"SPEXSUP_HOME": "", "XDG_STATE_HOME": str(xdg)}
    assert env.run("ls", extra=default).returncode == 0 and (xdg / "spexsup").is_dir()
    again = env.root / "xdg2"
    named = {"SPEXSUP_HOME": str(again / "spexsup"), "XDG_STATE_HOME": str(again)}
    assert env.run("ls", extra=named).returncode == 0 and (again / "spexsup").is_dir()


def test_ls_on_a_pipe_is_one_line_per_session(env: Env) -> None:
    deep = env.root / ("very-long-directory-name-" * 6)
    deep.mkdir()
    for name in ("a", "b"):
        assert env.run("new", name, "--harness", "demo", "--cwd", str(deep)).returncode == 0
    assert env.run("wake", "a", "hi", "--window", "0.3").returncode == 0
    assert env.run("wait", "a").returncode == 0
    lines = env.run("ls").stdout.splitlines()
    assert len(lines) == 3 and lines[0].split() == [
        *["NAME", "HARNESS", "STATE", "TURN", "WHEN", "PANE", "CWD"]
    ]
    for line in lines:
        assert line == line.rstrip() and "\t" not in line
        assert len(re.split(r"  +", line)) == 7, line
    assert lines[1].endswith(str(deep)) and lines[2].endswith(str(deep))
    turn = doc(env, "show", "a")["turns"][0]["id"]
    assert re.search(rf"  {turn.rpartition('-')[2]} complete rc=0  .*s ago, ran \d+s  ", lines[1])
    assert turn in env.run("ls", "--wide").stdout


def test_ls_on_a_terminal_never_wraps(env: Env) -> None:
    deep = Path(env.vars["HOME"]) / ("long-directory-" * 8)
    deep.mkdir()
    assert env.run("new", "a", "--harness", "demo", "--cwd", str(deep)).returncode == 0
    child = pexpect.spawn(
        SPEX, ["ls"], env=env.vars, dimensions=(24, 60), encoding="utf-8", timeout=30
    )
    child.expect(pexpect.EOF)
    lines = [ln for ln in child.before.replace("\r", "").splitlines() if ln]
    assert len(lines) == 2, lines
    assert all(len(ln) <= 60 for ln in lines), lines
    assert re.search(r"  ~/long-\S*…\S*directory-$", lines[1]), lines


def test_json_documents_share_one_shape(env: Env) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    created = doc(env, "new", "b", "--harness", "demo")
    assert created["schema_version"] == 1 and created["name"] == "b"
    woke = doc(env, "wake", "a", "hello", "--window", "0.3")
    assert woke["schema_version"] == 1 and woke["ok"] is True
    assert woke["verdict"] in ("confirmed", "completed")
    waited = doc(env, "wait", "a")
    assert waited[0]["schema_version"] == 1 and waited[0]["state"] == "complete"
    listed = doc(env, "ls")
    shown = doc(env, "show", "a")
    logged = doc(env, "log", "a")
    for session in (listed[0], shown):
        assert session["schema_version"] == 1 and ISO.fullmatch(session["created_at_iso"])
    turns = [listed[0]["turn"], shown["turns"][0], logged]
    assert all(set(t) == set(logged) for t in turns)
    assert set(waited[0]) == {*logged, "turn"} and waited[0]["turn"] == logged["id"]
    for t in turns:
        assert t["schema_version"] == 1 and t["id"] == woke["turn"] and t["session"] == "a"
        assert ISO.fullmatch(t["started_at_iso"]) and ISO.fullmatch(t["ended_at_iso"])
    assert "Z-" in t["id"]
    stopped = doc(env, "stop", "b")
    assert stopped == {
        "schema_version": 1,
        "ok": True,
        "session": "b",
        "state": "stopped",
        "aborted": None,
        "grace": 5.0,
    }
    assert doc(env, "resume", "b")["resumed"] is True
    assert doc(env, "rm", "b")["removed"] is True


def test_failures_print_a_json_document_too(env: Env) -> None:
    for args, code in (
        (["show", "nosuch"], 3),
        (["new", "-bad", "--harness", "demo"], 2),
        (["ls", "--bogus"], 2),
    ):
        r = env.run(*args, "--json")
        assert r.returncode == code, (args, r.stderr)
        failure = json.loads(r.stdout)
        assert failure == {
            "schema_version": 1,
            "ok": False,
            "error": r.stderr.strip().removeprefix("spex: "),
            "exit_code": code,
        }
        assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr


def test_ids_by_prefix_and_last(env: Env) -> None:
    assert env.run("new", "a", "--", "bash", "-c", "echo said $0").returncode == 0
    for word in ("one", "two"):
        # A window long enough to see it complete even on a loaded machine.
        assert env.run("wake", "a", word, "--window", "30").returncode == 0
    first, second = (t["id"] for t in reversed(doc(env, "show", "a")["turns"]))
    assert env.run("log", "a", "--turn", "last").stdout == "said two\n"
    assert env.run("log", "a", "--turn", "last~1").stdout == "said one\n"
    prefix = first.rpartition("-")[2][:4]
    if not second.rpartition("-")[2].startswith(prefix):
        assert env.run("log", "a", "--turn", prefix).stdout == "said one\n"
    assert doc(env, "log", "a", "--turn", first)["id"] == first
    r = env.run("log", "a", "--turn", "last~5")
    assert r.returncode == 3 and "no turn" in r.stderr
    assert env.run("log", "a", "--turn", "zzzz").returncode == 3
    assert env.run("fanout", "a", "-m", "three", "--window", "0.3").returncode == 0
    wave = doc(env, "wave", "last")
    assert wave["schema_version"] == 1 and wave["id"].startswith("w") and "Z-" in wave["id"]
    assert doc(env, "wave", wave["id"].rpartition("-")[2])["id"] == wave["id"]


def test_many_names_all_and_match(env: Env) -> None:
    for name in ("api-1", "api-2", "web"):
        assert env.run("new", name, "--", "bash", "-c", "sleep 30").returncode == 0
    assert env.run("wake", "api-1", "x", "--window", "0.3").returncode == 0
    r = env.run("stop", "--match", "api-*", "--grace", "1")
    assert r.returncode == 0 and r.stdout.count(": stopped") == 2
    states = {s["name"]: s["state"] for s in doc(env, "ls")}
    assert states == {"api-1": "stopped", "api-2": "stopped", "web": "idle"}
    r = env.run("resume", "--all")
    assert r.returncode == 0 and "web: not stopped (nothing to do)" in r.stdout
    assert {s["state"] for s in doc(env, "ls")} == {"idle"}
    assert env.run("stop", "--all", "--match", "x").returncode == 2
    assert env.run("stop", "--match", "nothing-*").returncode == 3
    assert env.run("wake", "api-2", "y", "--window", "0.3").returncode == 0
    assert env.run("wait", "--match", "api-2", "--timeout", "0.2").returncode == 124
    r = env.run("stop", "api-2", "--grace", "0")
    assert r.returncode == 0
    r = env.run("resume", "api-2", "--window", "0.3", "--", "fix", "the", "thing")
    assert r.returncode == 0 and "api-2: resumed" in r.stdout and "confirmed" in r.stdout
    argv = doc(env, "show", "api-2")["turns"][0]
    assert argv["state"] == "running"
    assert env.run("rm", "api-1", "web").returncode == 0
    assert env.run("rm", "--all", "--force").returncode == 0
    assert doc(env, "ls") == []


def test_resume_takes_many_names_and_a_prompt_only_after_dashdash(env: Env) -> None:
    """`spex resume s1 s2 s3` once woke s1 with the prompt "s2 s3": words that
    name sessions are sessions; a line that reads two ways changes nothing."""
    for name in ("s1", "s2", "s3"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    assert env.run("stop", "s1", "s2", "s3").returncode == 0
    r = env.run("resume", "s1", "s2", "s3")
    assert r.returncode == 0, r.stderr
    assert [ln.split(":")[0] for ln in r.stdout.splitlines()] == ["s1", "s2", "s3"]
    states = {s["name"]: s["state"] for s in doc(env, "ls")}
    assert states == dict.fromkeys(("s1", "s2", "s3"), "idle")
    assert doc(env, "show", "s1")["turns"] == []  # nobody was woken
    assert env.run("stop", "s1", "s2").returncode == 0
    r = env.run("resume", "s1", "s2", "fix", "it")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        "spex: 'resume s1 s2 fix it' reads two ways: the sessions s1, s2, fix, it (there is"
        " no session 'fix'), or s1 woken with the prompt 's2 fix it' (to wake it: spex resume"
        " s1 -- s2 fix it)\n"
    )
    assert {s["name"]: s["state"] for s in doc(env, "ls")}["s2"] == "stopped"
    r = env.run("resume", "s1", "--window", "5", "--", "s2", "fix", "it")
    assert r.returncode == 0 and "s1: resumed" in r.stdout, r.stderr
    turn = doc(env, "show", "s1")["turns"][0]["id"]
    assert (env.home / "turns" / "s1" / turn / "prompt").read_bytes() == b"s2 fix it"
    assert doc(env, "ls", "s2")[0]["state"] == "stopped"
    r = env.run("resume", "s2", "s3", "-m", "go")
    assert r.returncode == 2 and "a prompt resumes and wakes one session" in r.stderr
    assert env.run("resume", "s2", "--").returncode == 2
    many = doc(env, "resume", "s2", "s3")
    assert [d["session"] for d in many] == ["s2", "s3"] and many[0]["resumed"] is True


def test_new_needs_a_harness_or_a_configured_default(env: Env) -> None:
    r = env.run("new", "a")
    assert r.returncode == 2 and "default_harness" in r.stderr and "demo" in r.stderr
    r = env.run("new", "a", "--")
    assert r.returncode == 2 and "nothing after --" in r.stderr
    assert doc(env, "ls") == []
    (env.home / "config.toml").write_text('default_harness = "demo"\n')
    link = env.root / "link"
    link.symlink_to(env.root)
    assert subprocess_in(env, link, "new", "a", "--cwd", ".") == 0
    session = doc(env, "show", "a")
    assert session["harness"] == "demo" and session["cwd"] == str(env.root.resolve())


def subprocess_in(env: Env, cwd: Path, *args: str) -> int:
    import subprocess

    return subprocess.run([SPEX, *args], cwd=cwd, env=env.vars, check=False).returncode


def test_a_failure_names_its_cause_on_the_verdict_line(env: Env) -> None:
    script = "echo starting; echo 'API Error: 529 overloaded' >&2; exit 1"
    assert env.run("new", "f", "--", "bash", "-c", script).returncode == 0
    r = env.run("wake", "f", "go", "--window", "2")
    assert r.returncode == 1
    verdict = r.stdout.strip()
    assert verdict.startswith("f: failed turn ") and verdict.endswith("API Error: 529 overloaded")
    # Mid-turn: confirmed first, then the harness fails; show and wait name the cause.
    slow = "sleep 0.8; echo 'API Error: 529 overloaded'; exit 1"
    assert env.run("new", "m", "--", "bash", "-c", slow).returncode == 0
    assert env.run("wake", "m", "go", "--window", "0.2").returncode == 0
    w = env.run("wait", "m")
    assert "failed rc=1: API Error: 529 overloaded" in w.stdout
    assert retry_until(lambda: "API Error: 529" in env.run("show", "m").stdout)


def test_a_failure_is_said_once(env: Env) -> None:
    """Issue 38 item 13: a failed wake or wait prints its verdict, with its
    cause, on stdout; stderr does not say it again (a script's log got both
    lines), and the exit code says it failed. --json is unchanged."""
    script = "echo 'API Error: 529 overloaded' >&2; exit 1"
    assert env.run("new", "f", "--", "bash", "-c", script).returncode == 0
    woke = env.run("wake", "f", "go", "--window", "2")
    assert woke.returncode == 1 and woke.stderr == "", woke.stderr
    assert woke.stdout.count("API Error: 529 overloaded") == 1, woke.stdout
    waited = env.run("wait", "f")
    assert waited.returncode == 1 and waited.stderr == "", waited.stderr
    assert waited.stdout.count("API Error: 529 overloaded") == 1, waited.stdout
    assert env.run("stop", "f").returncode == 0
    resumed = env.run("resume", "f", "-m", "go", "--window", "2")
    assert resumed.returncode == 1 and resumed.stderr == "", resumed.stderr
    assert resumed.stdout.count("API Error: 529 overloaded") == 1, resumed.stdout
    as_json = env.run("wake", "f", "go", "--window", "2", "--json")
    assert as_json.returncode == 1 and as_json.stderr == ""
    doc = json.loads(as_json.stdout)
    assert (doc["verdict"], doc["ok"]) == ("failed", False)
    assert "API Error: 529 overloaded" in doc["error"]


def test_ok_paths_leave_no_stray_output(env: Env) -> None:
    r = env.run("ls")
    assert (r.returncode, r.stderr) == (0, "")
    assert "spex new NAME --harness HARNESS" in r.stdout
    assert os.environ.get("SPEXSUP_HOME") == str(env.home)


def test_a_closed_or_full_stdout_is_one_line_never_a_traceback(env: Env) -> None:
    """`spex ls --json >/dev/full` printed two tracebacks: the write failed,
    then the failure's own JSON document failed to write again."""
    for i in range(40):
        assert env.run("new", f"s{i}", "--", "true").returncode == 0
    for args in (["ls"], ["ls", "--json"], ["show", "s1", "--json"], ["events"]):
        with Path("/dev/full").open("w") as full:
            r = subprocess.run(
                [SPEX, *args], stdout=full, stderr=subprocess.PIPE, text=True,
                env=env.vars, timeout=60, check=False,
            )  # fmt: skip
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr == "spex: cannot write to stdout: No space left on device\n", args
        read, write = os.pipe()
        os.close(read)
        try:
            r = subprocess.run(
                [SPEX, *args], stdout=write, stderr=subprocess.PIPE, text=True,
                env=env.vars, timeout=60, check=False,
            )  # fmt: skip
        finally:
            os.close(write)
        assert r.returncode == 1 and r.stderr == "", (args, r.stderr)


def test_a_stdout_only_the_command_holds_is_never_reused_for_the_store(env: Env) -> None:
    """`run` in a process whose sys.stdout is a file nothing else holds (a
    caller that redirected it): replacing it must not close its descriptor,
    which the store's database would then open as its own, and the listing
    be written over state.db ("file is not a database" on the next read)."""
    assert env.run("new", "a", "--", "true").returncode == 0
    out = env.root / "out.json"
    probe = (
        "import sys\n"
        "from spexsup.cli import run\n"
        f"sys.stdout = open({str(out)!r}, 'w')\n"
        "code = run(['ls', '--json'])\n"
        "sys.stdout.flush()\n"
        "sys.exit(code)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe], env=env.vars, capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stderr
    assert [s["name"] for s in json.loads(out.read_text())] == ["a"]
    with (env.home / "state.db").open("rb") as db:
        assert db.read(16) == b"SQLite format 3\x00"
    assert env.run("ls", "--json").returncode == 0


# --- escapes from agents never reach the terminal ------------------------------


def _unsafe(data: bytes, *, colours: bool = False) -> list[str]:
    """The controls in `data` a terminal would act on: C0 but newline and tab,
    DEL, C1 (encoded, or a raw byte). With `colours`, SGR sequences are fine."""
    text = data.decode("utf-8", "surrogateescape")
    if colours:
        text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return [
        repr(c)
        for c in text
        if (ord(c) < 0x20 and c not in "\n\t")
        or 0x7F <= ord(c) <= 0x9F
        or 0xDC80 <= ord(c) <= 0xDC9F
    ]


def test_escapes_in_agent_output_reach_no_command_output(env: Env) -> None:
    """OSC 52 clipboard writes, titles, screen clears and the 8-bit CSI from
    an agent (tests/harnesses/escapes.sh), and in a working directory's
    name, came through the wake failure line, show, wait, events, ls, top and
    log. Every text view is printable; JSON escapes them (ensure_ascii)."""
    from conftest import harness

    cwd = env.root / "work\x1b]0;cwd-title\x07\u009bdir"
    cwd.mkdir()
    r = env.run("new", "x", "--cwd", str(cwd), "--", harness("escapes.sh"))
    assert r.returncode == 0, r.stderr

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [SPEX, *args], capture_output=True, env=env.vars, timeout=60, check=False
        )

    woke = run("wake", "x", "go", "--window", "10")
    assert woke.returncode == 1, woke
    assert b"boom" in woke.stdout and woke.stderr == b"", woke
    # An agent whose failure message (parsed from its JSON events) holds them.
    (env.home / "harnesses.toml").write_text(
        f'[harness.hostile]\nfresh = ["{harness("escapes_json.sh")}", "{{prompt}}"]\n'
        'outcome = "claude"\n'
    )
    assert env.run("new", "j", "--harness", "hostile").returncode == 0
    woke_j = run("wake", "j", "go", "--window", "10")
    assert woke_j.returncode == 1 and b"json-done" in woke_j.stdout and woke_j.stderr == b"", woke_j
    views = {
        "wake j": woke_j.stdout + woke_j.stderr,
        "show j": run("show", "j").stdout,
        "wait j": run("wait", "j").stdout,
        "wake": woke.stdout + woke.stderr,
        "show": run("show", "x").stdout,
        "wait": run("wait", "x").stdout,
        "events": run("events").stdout,
        "ls": run("ls").stdout,
        "ls --wide": run("ls", "--wide").stdout,
        "top": run("top").stdout,
        "log --pretty": run("log", "x", "--pretty").stdout,
        "harness": run("harness", "ls").stdout,
    }
    for args in (["wake", "x", "go", "--json"], ["show", "x", "--json"], ["wait", "x", "--json"],
                 ["events", "--json"], ["ls", "--json"], ["top", "--json"]):  # fmt: skip
        out = run(*args)
        views[" ".join(args)] = out.stdout + out.stderr
        doc = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
        assert doc, args
    for name, seen in views.items():
        assert _unsafe(seen) == [], (name, seen)
    assert b"boom" in views["show"] and b"boom" in views["events"] and b"boom" in views["wait"]
    assert b"json-done" in views["show j"] and b"json-done" in views["wait j"]
    assert b"json-done" in views["events"] and b"json-done" in views["top"]
    assert str(env.root / "workdir").encode() in views["ls"]
    # JSON keeps the agent's text, escaped: a reader gets the bytes back.
    shown = json.loads(run("show", "x", "--json").stdout)
    assert "\x1b" in shown["cwd"] and "\u009b" in shown["cwd"]
    # On a terminal, `spex log` keeps colours and drops every other escape;
    # to a pipe it is the agent's bytes as written (output.log's).
    turn = shown["turns"][0]["id"]
    logged = (env.home / "turns" / "x" / turn / "output.log").read_bytes()
    assert run("log", "x").stdout == logged and b"\x1b]52;" in logged
    child = pexpect.spawn(SPEX, ["log", "x"], env=env.vars, timeout=30)
    on_tty = child.read()
    child.close()
    assert b"boom" in on_tty and b"\x1b[31mred" in on_tty
    assert _unsafe(on_tty.replace(b"\r\n", b"\n"), colours=True) == [], on_tty
    # `spex top` on a terminal: curses draws with escapes of its own, but none
    # of the agent's (no OSC, no title, no C1).
    from test_top import Term

    t = Term(env, f"{SPEX} top")
    t.row_shows("x", "boom")
    t.row_shows("j", "API Error")
    t.send("q")
    t.finish()
    screen = t.raw
    assert b"\x1b]" not in screen and b"pwned-title" not in screen
    assert not re.search(rb"\xc2[\x80-\x9f]|\x9b", screen)


def test_a_failed_wake_says_why_once_on_a_terminal_and_to_a_script(env: Env) -> None:
    """The verdict line names the cause, on a terminal and to a script that
    splits the streams alike; stderr does not repeat it (issue 38, item 13)."""
    assert env.run("new", "f", "--", "bash", "-c", "echo said-once; exit 3").returncode == 0
    child = pexpect.spawn(SPEX, ["wake", "f", "go", "--window", "5"], env=env.vars, timeout=30)
    shown = child.read().decode()
    child.close()
    assert child.exitstatus == 1, shown
    assert shown.count("said-once") == 1, shown
    assert "f: failed turn" in shown
    piped = env.run("wake", "f", "go", "--window", "5")
    assert piped.returncode == 1
    assert piped.stdout.count("said-once") == 1 and piped.stderr == "", piped


def test_every_collection_is_listed_by_ls_and_its_old_spelling(env: Env) -> None:
    """`spex X ls` lists every collection; the bare word, the plural and the
    old flag list the same (issue 38 item 14); `spex wave` and `spex waves`
    are one command."""
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    assert env.run("fanout", "a", "-m", "hi", "--wait").returncode == 0
    spellings = {
        "queue": [["queue"]],
        "schedule": [["schedule"]],
        "harness": [["harness"]],
        "worktree": [["worktree"], ["worktree", "status"]],
        "hooks": [["hooks"]],
        "notify": [["notify"]],
        "trust": [["trust"], ["trust", "--list"]],
        "wave": [["wave"], ["waves"], ["waves", "ls"]],
        "hosts": [["hosts"]],
        "maint": [["maint", "--status"]],
    }
    for collection, others in spellings.items():
        listed = env.run(collection, "ls")
        assert listed.returncode == 0 and listed.stdout and not listed.stderr, (collection, listed)
        for words in others:
            assert env.run(*words).stdout == listed.stdout, words
        as_json = env.run(collection, "ls", "--json")
        assert as_json.returncode == 0, (collection, as_json)
        json.loads(as_json.stdout)
    wave_id = json.loads(env.run("wave", "ls", "--json").stdout)[0]["id"]
    shown = env.run("wave", "show", wave_id[-6:])
    assert shown.returncode == 0 and wave_id in shown.stdout, shown
    for words in (["wave", wave_id], ["waves", "show", wave_id], ["wave", "last"]):
        assert env.run(*words).stdout == shown.stdout, words


def test_ls_at_80_columns_gives_up_the_widest_columns_not_the_rows(env: Env) -> None:
    """An 80x24 terminal: every row keeps its NAME, STATE, turn and age whole
    (the path, the run time, the harness give way first); no row is cut."""
    deep = Path(env.vars["HOME"]) / "src" / "payments-service-backend"
    deep.mkdir(parents=True)
    for name in ("api", "review-payments-2", "web"):
        assert env.run("new", name, "--harness", "demo", "--cwd", str(deep)).returncode == 0
    assert env.run("wake", "api", "fix the flaky test", "--window", "10").returncode == 0
    assert env.run("wake", "review-payments-2", "please fail now", "--window", "10").returncode == 1
    assert env.run("stop", "review-payments-2").returncode == 0
    env.tmux("kill-session", "-t", "=web")
    child = pexpect.spawn(
        SPEX, ["ls"], env=env.vars, dimensions=(24, 80), encoding="utf-8", timeout=30
    )
    child.expect(pexpect.EOF)
    lines = [ln for ln in child.before.replace("\r", "").splitlines() if ln]
    plain = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in lines]
    assert len(plain) == 4 and all(len(ln) <= 80 for ln in plain), plain
    assert not any(ln.endswith("…") for ln in plain), plain
    assert plain[0].split()[:4] == ["NAME", "HARNESS", "STATE", "TURN"], plain
    assert re.match(r"api +demo +idle +\w+ complete rc=0 +\d+s ago +ok$", plain[1]), plain
    assert re.match(r"review-payments-2 .* stopped +\w+ failed rc=1 +\d+s ago", plain[2]), plain
    assert re.match(r"web .* - +\d*s? *.*missing$", plain[3]) or plain[3].endswith("missing")


def test_show_prints_no_python_repr_and_no_unknown_a_harness_never_reports(env: Env) -> None:
    """Issue 38 item 15: a command harness's argv is shown as a shell would
    need it, never as a Python list; a harness that never reports usage
    (command, demo) shows no `? · tokens unknown` lines."""
    assert env.run("new", "c", "--", "bash", "-c", "echo hi; exit 0").returncode == 0
    assert env.run("new", "d", "--harness", "demo").returncode == 0
    assert env.run("wake", "c", "go", "--window", "0.5").returncode == 0
    assert env.run("wake", "d", "go").returncode == 0
    assert env.run("wait", "c", "d").returncode == 0
    shown = env.run("show", "c").stdout
    assert "harness      command bash -c 'echo hi; exit 0'\n" in shown, shown
    for name in ("c", "d"):
        text = env.run("show", name).stdout
        assert "['" not in text and "unknown" not in text, text
        assert "last turn" not in text and "spent" not in text, text
        doc = json.loads(env.run("show", name, "--json").stdout)
        assert doc["reports_usage"] is False and doc["cost"]["source"] == "unknown"


def test_exit_codes_walk_the_readme_table(env: Env) -> None:
    """The README's table (issue 38 item 12): 0 ok, 1 failed, 2 invalid input
    (a bad option value, a missing `-- CMD`), 3 refused (unknown session, host
    or a --match that matches nothing; busy, stopped, exists), 124 timed out."""
    assert env.run("new", "ok", "--harness", "demo").returncode == 0
    assert env.run("new", "slow", "--", "bash", "-c", "sleep 30").returncode == 0
    assert env.run("new", "bad", "--", "bash", "-c", "exit 7").returncode == 0
    assert env.run("new", "off", "--harness", "demo").returncode == 0
    assert env.run("stop", "off").returncode == 0
    assert env.run("wake", "slow", "x", "--window", "0.2").returncode == 0
    table: list[tuple[int, list[str]]] = [
        (0, ["wake", "ok", "hi"]),
        (1, ["wake", "bad", "hi", "--window", "5"]),
        (2, ["wake", "ok", "hi", "--window", "abc"]),
        (2, ["ls", "--state", "bogus"]),
        (2, ["maint", "--all"]),
        (2, ["new", "x", "--"]),
        (3, ["show", "nosuch"]),
        (3, ["wake", "nosuch", "hi"]),
        (3, ["-H", "nohost", "ls"]),
        (3, ["show", "nohost:api"]),
        (3, ["stop", "--match", "zzz*"]),
        (3, ["wait", "--match", "zzz*"]),
        (3, ["fanout", "--match", "zzz*", "-m", "hi"]),
        (3, ["wake", "slow", "hi"]),
        (3, ["wake", "off", "hi"]),
        (3, ["new", "ok", "--harness", "demo"]),
        (124, ["wait", "slow", "--timeout", "0.2"]),
    ]
    for code, words in table:
        r = env.run(*words)
        assert r.returncode == code, (words, r.returncode, r.stderr)
        if code >= 2:
            assert r.stderr.startswith("spex: ") and r.stderr.count("\n") == 1, (words, r.stderr)
    assert env.run("stop", "slow").returncode == 0


def test_every_id_is_accepted_in_every_form_spex_prints(env: Env) -> None:
    """A turn, wave, queued prompt and schedule id is taken as printed: the
    full id with or without its letter, the random part with or without the
    letter, and a unique prefix of each (issue 38 item 10)."""
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    assert env.run("new", "slow", "--", "bash", "-c", "sleep 30").returncode == 0
    assert env.run("fanout", "a", "-m", "hi", "--wait").returncode == 0
    wave = json.loads(env.run("wave", "ls", "--json").stdout)[0]["id"]
    turn = json.loads(env.run("show", "a", "--json").stdout)["turn"]["id"]

    def forms(full: str) -> list[str]:
        tail = full.rpartition("-")[2]
        if full[0].isdigit():
            return [full, tail, tail[:4], full[:-3]]
        return [full, full[1:], tail, full[0] + tail, tail[:4], full[0] + tail[:4], full[1:-3]]

    for ref in forms(wave):
        r = env.run("wave", "show", ref, "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["id"] == wave, (ref, r.stderr)
    for ref in forms(turn):
        r = env.run("log", "a", "--turn", ref)
        assert r.returncode == 0, (ref, r.stderr)
    r = env.run("schedule", "add", "a", "--every", "1h", "-m", "tick", "--json")
    assert r.returncode == 0, r.stderr
    schedule = json.loads(env.run("schedule", "ls", "--json").stdout)[0]["id"]
    for ref in forms(schedule):
        r = env.run("schedule", "run", ref, "--json")
        assert r.returncode in (0, 1), (ref, r.stderr)  # found: it fired
    assert env.run("wake", "slow", "x", "--window", "0.2").returncode == 0
    for ref in ("full", "bare", "tail", "lettered"):
        r = env.run("wake", "slow", "queued", "--queue", "--json")
        assert r.returncode == 0, r.stderr
        entry = json.loads(env.run("queue", "ls", "--json").stdout)[0]["id"]
        typed = {
            "full": entry,
            "bare": entry[1:],
            "tail": entry.rpartition("-")[2],
            "lettered": "q" + entry.rpartition("-")[2][:4],
        }[ref]
        r = env.run("queue", "rm", typed)
        assert r.returncode == 0, (ref, typed, r.stderr)
    assert env.run("stop", "slow").returncode == 0
