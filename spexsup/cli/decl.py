"""How a command is declared, without importing typer.

A command module declares its commands with `command`, its parameters with
`Option` and `Argument` (the same arguments typer's take) and prints with
`echo`. Nothing here imports typer or click, so a well-formed command line
is parsed and run by `spexsup.cli.lean` from these declarations alone (typer
and its command table cost more than 40 ms of every start); `spexsup.cli.app`
hands the same declarations to typer, as typer's own, for help, completion
and every mistake. One declaration, two readers: tests/test_lean.py holds
them to the same result.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spexsup import lazyre

if TYPE_CHECKING:
    from spexsup.config import Config
    from spexsup.core.spex import Spex


class Option:
    """`typer.Option`'s arguments, kept as given."""

    def __init__(self, *param_decls: str, **options: Any) -> None:
        self.param_decls = param_decls
        self.options = options


class Argument:
    """`typer.Argument`'s arguments, kept as given."""

    def __init__(self, **options: Any) -> None:
        self.options = options


class Context:
    """What a command reads of its context: the state home (`find_root().obj`,
    a Path or None), the shared `meta` (the command line as `spex.argv`,
    config.toml once read), its own `params`. Under typer the command is
    handed click's Context, which has all of these; the lean path hands one
    of these."""

    invoked_subcommand: str | None = None

    def __init__(
        self, obj: Any, meta: dict[str, Any], params: dict[str, Any], parent: Context | None = None
    ) -> None:
        self.obj = obj
        self.meta = meta
        self.params = params
        self.parent = parent

    def find_root(self) -> Context:
        node = self
        while node.parent is not None:
            node = node.parent
        return node


class Exit(Exception):
    """End the command with this exit code (what it had to say is said)."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.exit_code = code


class Declared:
    """One command as its module declared it: its name, the function, and
    what else typer's `command()` was given (context settings and the like)."""

    def __init__(self, name: str, function: Callable[..., Any], settings: dict[str, Any]) -> None:
        self.name = name
        self.function = function
        self.settings = settings


# Every command declared so far, by name, in declaration order.
DECLARED: dict[str, Declared] = {}


def command(
    name: str | None = None, **settings: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a top-level command (`@command("ls")`; without a name, the
    function's, dashed), as `app.command` would."""

    def declare(function: Callable[..., Any]) -> Callable[..., Any]:
        called = name or function.__name__.lower().replace("_", "-")
        DECLARED[called] = Declared(called, function, settings)
        return function

    return declare


# click.echo's own pattern for what it strips when not on a terminal.
_ANSI = lazyre.compile(r"\033\[[;?0-9]*[a-zA-Z]")


def echo(
    message: Any = None, nl: bool = True, err: bool = False, color: bool | None = None
) -> None:
    """click.echo as spex uses it: a line to stdout (stderr with err), its
    colour codes dropped unless on a terminal (or color says), flushed."""
    stream = sys.stderr if err else sys.stdout
    out = "" if message is None else str(message)
    if nl:
        out += "\n"
    if out:
        strip = (not stream.isatty()) if color is None else not color
        stream.write(_ANSI.sub("", out) if strip else out)
    stream.flush()


def say_each(doc: dict[str, Any], lines: Callable[[dict[str, Any]], list[str]]) -> None:
    """One session's part of a command of several as text: its `lines`, or
    when it failed, its `spex: NAME: why` on stderr."""
    from spexsup.present.render import each_said

    out, err = each_said(doc, lines)
    for line in out:
        echo(line)
    for line in err:
        echo(line, err=True)


def confirm(question: str) -> bool:
    """Ask on stderr, yes or no (default no); EOF or Ctrl-C at the prompt is
    no. A person is waiting here, so click's own prompt is worth its import."""
    import typer

    try:
        answer: bool = typer.confirm(question, err=True)
    except typer.Abort:
        echo("", err=True)  # the line the prompt left open
        return False
    return answer


def open_spex(ctx: Context) -> Spex:
    """The state home named by --home (or the environment); config.toml is read
    here so that a broken one fails every command the same way."""
    from spexsup.core.spex import Spex

    spex = Spex.open(ctx.find_root().obj)
    settings(ctx, spex)
    return spex


def settings(ctx: Context, spex: Spex) -> Config:
    """config.toml's defaults, read once per command."""
    from spexsup import config

    meta = ctx.find_root().meta
    if "spex.config" not in meta:
        meta["spex.config"] = config.load(spex.home)
    loaded: Config = meta["spex.config"]
    return loaded
