"""The lean path (spexsup.cli.lean) reads a command line as typer does.

Every command's declaration is read twice: by typer (help, completion,
mistakes) and by the lean parser (every well-formed line, without importing
typer). These tests hold the two readers to one result, command by command,
over lines made from each command's own parameters, and hold the lean path
to the commands people run all day.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SPEX, Env
from test_turns import wake_json

# Commands only typer reads: groups, and `help`, which prints typer's help.
TYPER_ONLY = {
    "help",
    "queue",
    "schedule",
    "wave",
    "waves",
    "harness",
    "hosts",
    "hooks",
    "notify",
    "worktree",
    "maint-op",
    "internal",
}


def declared() -> dict[str, Any]:
    from spexsup.cli import decl
    from spexsup.cli.app import register

    register()
    return dict(decl.DECLARED)


def typer_reader(name: str, function: Any) -> tuple[Any, dict[str, Any]]:
    """A click command built by typer from `function`'s declaration whose
    callback records the values typer hands it."""
    import typer

    from spexsup.cli.app import for_typer

    told = for_typer(function)
    got: dict[str, Any] = {}

    def record(**values: Any) -> None:
        got.clear()
        got.update(values)

    record.__signature__ = told.__signature__  # type: ignore[attr-defined, union-attr]
    record.__annotations__ = dict(told.__annotations__)
    app = typer.Typer(add_completion=False)
    settings = dict(decl_settings(name))
    app.command(name, **settings)(record)

    @app.callback()
    def root() -> None:
        pass

    return typer.main.get_command(app), got


def decl_settings(name: str) -> dict[str, Any]:
    from spexsup.cli import decl

    return decl.DECLARED[name].settings


def typer_values(name: str, function: Any, words: list[str]) -> dict[str, Any] | None:
    """What typer hands the command for `words`, or None when it refuses them."""
    import typer

    command, got = typer_reader(name, function)
    try:
        command.main(args=[name, *words], prog_name="spex", standalone_mode=False)
    except (typer.Exit, typer.TyperException, SystemExit):
        return None
    return {k: v for k, v in got.items() if k != "ctx"}


def lean_values(function: Any, words: list[str], settings: dict[str, Any]) -> dict[str, Any] | None:
    from spexsup.cli import lean

    params = lean.params_of(function)
    assert params is not None
    interspersed = settings.get("context_settings", {}).get("allow_interspersed_args", True)
    try:
        values = lean.parse(params, words, interspersed)
    except lean._Unsure:
        return None
    return {k: v for k, v in values.items() if k != "ctx"}


def lines_for(function: Any) -> Iterator[list[str]]:
    """Well-formed lines (and a few mistakes) made from the parameters."""
    from spexsup.cli import lean

    params = lean.params_of(function)
    assert params is not None
    arguments = [p for p in params if p.kind == "argument"]
    value = {int: "3", float: "2.5", str: "v a l", "path": "some/dir"}
    needed = [sample(p, value) for p in arguments if p.required]
    yield needed
    yield [*needed, "--"]
    yield ["-x-unknown", *needed]  # a mistake: typer's
    yield [*needed, "extra", "words", "and", "more"]
    for p in params:
        if p.kind == "flag":
            for opt in p.opts:
                yield [*needed, opt]
                yield [opt, *needed]
                yield [*needed, f"{opt}=yes"]  # a mistake: flags take no value
            for opt in p.secondary:
                yield [*needed, opt]
                yield [*needed, p.opts[0], opt]
        elif p.kind == "option":
            v = sample(p, value)
            for opt in p.opts:
                yield [*needed, opt, v]
                yield [opt, v, *needed]
                yield [*needed, opt]  # a mistake: no value
                if opt.startswith("--"):
                    yield [*needed, f"{opt}={v}"]
                    yield [*needed, f"{opt}=-dashed"]
                else:
                    yield [*needed, f"{opt}{v}"]
                yield [*needed, opt, "-dashed value"]
                yield [*needed, opt, v, opt, "again"]
            if p.convert in (int, float):
                yield [*needed, p.opts[0], "not-a-number"]
                yield [*needed, p.opts[0], "-1"]
    shorts = [o for p in params if p.kind == "flag" for o in p.opts if len(o) == 2]
    if len(shorts) > 1:
        yield [*needed, "-" + "".join(o[1] for o in shorts)]
    flags = [p.opts[-1] for p in params if p.kind == "flag"]
    for pair in itertools.islice(itertools.combinations(flags, 2), 6):
        yield [*needed, *pair, "--", "-after", "--json"]


def sample(param: Any, value: dict[Any, str]) -> str:
    from pathlib import Path

    return value["path"] if param.convert is Path else value[param.convert]


def test_every_plain_command_is_read_by_the_lean_path() -> None:
    """A command that only typer can read pays typer's start on every run:
    every top-level command outside a group is one the lean path reads."""
    from spexsup.cli import lean
    from spexsup.cli.table import COMMANDS

    commands = declared()
    plain = {c.name for c in COMMANDS} - TYPER_ONLY
    assert set(commands) == plain | {"help"}
    unread = [n for n, d in commands.items() if lean.params_of(d.function) is None]
    assert unread == ["help"]


def test_both_readers_see_the_same_parameters() -> None:
    """Option names, --no- forms, flags, repeats, defaults, required
    arguments: the lean reading of each declaration is typer's."""
    from spexsup.cli import lean

    for name, d in declared().items():
        if name in TYPER_ONLY:
            continue
        command, _ = typer_reader(name, d.function)
        theirs = {p.name: p for p in command.commands[name].params}
        ours = {p.name: p for p in lean.params_of(d.function) or () if p.kind != "context"}
        assert set(ours) == set(theirs), name
        for key, p in ours.items():
            t = theirs[key]
            where = f"{name} {key}"
            if p.kind == "argument":
                assert t.param_type_name == "argument", where
                assert (t.nargs == -1) == p.multiple, where
                assert t.required == p.required, where
            else:
                assert t.param_type_name == "option", where
                assert sorted(t.opts) == sorted(p.opts), where
                assert sorted(t.secondary_opts) == sorted(p.secondary), where
                assert t.is_flag == (p.kind == "flag"), where
                assert t.multiple == p.multiple, where


@pytest.mark.parametrize("name", sorted(set(declared()) - {"help"}))
def test_both_readers_hand_the_command_the_same_values(name: str) -> None:
    """Line by line: what typer refuses the lean path leaves to typer (so
    typer's message is the one said); what typer reads, the lean path reads
    to the same values."""
    d = declared()[name]
    read = 0
    for words in lines_for(d.function):
        theirs = typer_values(name, d.function, words)
        ours = lean_values(d.function, words, d.settings)
        if theirs is None:
            assert ours is None, (name, words, ours)
            continue
        if ours is None:
            # Left to typer: allowed only for what the lean path does not read.
            assert any(w.startswith("-") and w[1:2] != "-" and len(w) > 2 for w in words), (
                name,
                words,
            )
            continue
        read += 1
        assert ours == theirs, (name, words)
    assert read > 0, name


def run_probe(env: Env, probe: str, *words: str) -> subprocess.CompletedProcess[str]:
    """`probe` (Python source) run with `words` as its arguments, in the test's home."""
    return subprocess.run(
        [sys.executable, "-c", probe, *words],
        env=env.vars,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_commands_people_run_all_day_never_import_typer(env: Env) -> None:
    """wake, ls, show, new, stop, resume, rm, wait, log: typer's import and
    command table cost more than the whole start-up budget (issue 40)."""
    assert env.run("new", "a", "--", "bash", "-c", "exec sleep 300").returncode == 0
    probe = (
        "import sys\n"
        "from spexsup.cli import run\n"
        "code = run(sys.argv[1:])\n"
        "print('typer' in sys.modules, 'click' in sys.modules, code, file=sys.stderr)\n"
    )
    lines = [
        ["ls", "--json"],
        ["show", "a"],
        ["wake", "a", "hello", "--window", "0.2"],
        ["wait", "a", "--timeout", "5s"],
        ["log", "a", "--tail", "3"],
        ["stop", "a"],
        ["resume", "a"],
        ["new", "b", "--", "bash", "-c", "exec sleep 300"],
        ["rm", "b", "--force"],
    ]
    for words in lines:
        r = run_probe(env, probe, *words)
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("False False "), (words, r.stderr)


def test_a_start_runs_no_collection_and_keeps_the_collector_on(env: Env) -> None:
    """spex's entry (`spex` and `python -m spexsup`, the exit reporter) sizes
    the collector's first generation so a command's start-up makes no pass
    over its thousands of module objects (27 passes, ~3 ms, in an `ls` of 200
    sessions), while the collector stays on for the long runners."""
    for name in ("a", "b"):
        assert env.run("new", name, "--", "bash", "-c", "exec sleep 300").returncode == 0
    _, v = wake_json(env, "a", "x", "--window", "0.2")
    assert v["verdict"] == "confirmed", v
    script = Path(SPEX).read_text()
    assert "from spexsup.__main__ import main" in script, script  # the real entry
    probe = (
        "import gc, os, sys\n"
        "passes = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and passes.append(1))\n"
        "exit_ = os._exit\n"
        "def said(code):\n"
        "    print(code, len(passes), gc.isenabled(), file=sys.stderr, flush=True)\n"
        "    exit_(code)\n"
        "os._exit = said\n"
        "from spexsup.__main__ import main\n"
        "main()\n"
    )
    for words in (["ls", "--json"], ["show", "a"], ["wake", "b", "hello", "--window", "0.2"]):
        r = run_probe(env, probe, *words)
        assert r.stderr.strip().splitlines()[-1] == "0 0 True", (words, r.stderr)


def test_a_plain_fan_out_imports_neither_typer_nor_the_worktree_code(env: Env) -> None:
    """Each costs a wave's start before its first leg launches (typer ~20 ms,
    best of N's worktree code and dataclasses ~15): only `--worktrees` and
    `--keep-best` need them."""
    for name in ("a", "b"):
        assert env.run("new", name, "--", "bash", "-c", "exec sleep 300").returncode == 0
    probe = (
        "import sys\n"
        "from spexsup.cli import run\n"
        "code = run(sys.argv[1:])\n"
        "heavy = ('typer', 'click', 'dataclasses', 'spexsup.core.worktree')\n"
        "print(code, [m for m in heavy if m in sys.modules], file=sys.stderr)\n"
    )
    r = run_probe(env, probe, "fanout", "a", "b", "-m", "hi", "--window", "0.2")
    assert r.stderr.strip().splitlines()[-1] == "0 []", (r.stdout, r.stderr)


def test_the_queue_launcher_never_imports_typer(env: Env) -> None:
    """`spex internal dequeue NAME` runs after every turn's end that has a
    prompt queued, on the way to the next launch: read without typer (a
    hidden group, which the lean path would leave to it), and it launches."""
    assert env.run("new", "a", "--", "bash", "-c", "exec sleep 300").returncode == 0
    assert env.run("wake", "a", "--queue", "hello").returncode == 0
    probe = (
        "import sys\n"
        "from spexsup.cli import run\n"
        "code = run(sys.argv[1:])\n"
        "print('typer' in sys.modules, 'click' in sys.modules, code, file=sys.stderr)\n"
    )
    r = run_probe(env, probe, "internal", "dequeue", "a")
    assert r.stderr.strip().splitlines()[-1] == "False False 0", r.stderr
    shown = json.loads(env.run("show", "a", "--json").stdout)
    assert shown["state"] == "running", shown
    assert env.run("stop", "a").returncode == 0


def test_a_mistake_is_still_typers_to_say(env: Env) -> None:
    """The lean path leaves a line it cannot read to typer: the one-line
    error and exit 2 are typer's, as before."""
    r = env.run("ls", "--jsn")
    assert r.returncode == 2
    assert r.stderr == "spex: no such option '--jsn' (did you mean --json? see spex ls --help)\n"
    r = env.run("wake")
    assert r.returncode == 2 and "NAME" in r.stderr and "Traceback" not in r.stderr


def probe(env: Env, words: list[str], extra: dict[str, str]) -> tuple[str, str]:
    """(stdout, whether typer was imported) of `spex WORDS…` run in-process."""
    code = (
        "import sys\n"
        "from spexsup.cli import run\n"
        "run(sys.argv[1:])\n"
        "sys.stdout.flush()\n"
        "print('typer' in sys.modules, file=sys.stderr)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, *words],
        env={**env.vars, **extra},
        capture_output=True,
        text=True,
        check=False,
    )
    return r.stdout, r.stderr.strip().splitlines()[-1]


def test_a_help_page_is_typers_once_then_kept(env: Env, tmp_path: Path) -> None:
    """`spex --help` builds every command with typer once; the same request
    again prints the kept page without importing typer. Another width, or a
    damaged page, is typer's again, and the page is the same as typer's."""
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "COLUMNS": "90"}
    first, typer_first = probe(env, ["--help"], cache)
    again, typer_again = probe(env, ["--help"], cache)
    assert (typer_first, typer_again) == ("True", "False")
    assert again == first and "Usage: spex [OPTIONS] COMMAND" in first
    wide, typer_wide = probe(env, ["--help"], {**cache, "COLUMNS": "140"})
    assert typer_wide == "True" and wide != first  # laid out for 100 columns, not 90
    pages = list((tmp_path / "cache" / "spexsup" / "help").iterdir())
    assert len(pages) == 2
    for page in pages:
        page.write_bytes(page.read_bytes()[:40])  # cut short: not a page
    damaged, typer_damaged = probe(env, ["--help"], cache)
    assert (damaged, typer_damaged) == (first, "True")


def test_only_a_pure_help_request_is_kept(env: Env, tmp_path: Path) -> None:
    """`-h` as an option's value (a prompt `-h`) is not a help request: the
    wake runs each time and nothing is kept."""
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert env.run("new", "a", "--", "bash", "-c", "exec sleep 300").returncode == 0
    for _ in range(2):
        r = env.run("wake", "a", "-m", "-h", "--window", "0.2", extra=cache)
        assert r.returncode == 0 and "confirmed turn" in r.stdout, r.stderr
        env.run("stop", "a")
        env.run("resume", "a")
    assert not (tmp_path / "cache" / "spexsup" / "help").exists()
