"""The typer app and its global options; one module per command group registers on it."""

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from spexsup import __version__
from spexsup.cli import decl
from spexsup.cli.decl import open_spex, settings
from spexsup.cli.table import COMMAND_MODULES, COMMANDS, WRITERS

_HELP_ORDER = {c.name: i for i, c in enumerate(COMMANDS)}

EXIT_CODES = """\b
Exit codes: 0 ok, 1 attempted and failed, 2 invalid input, 3 refused
(unknown session or host, no match, busy, stopped, maintenance, exists),
124 wait timed out, 130/143 interrupted.
Errors are one line on stderr: spex: <what> (<hint>).
--home DIR (and --create) may be given anywhere on the command line."""

# The panels `spex --help` and a bare `spex` list the commands in, as gh and
# kubectl group theirs; within a panel, the table's order. Names only: a
# command that moves, or joins or leaves the table, changes one word here.
# One that no panel names is listed under "Other commands" (tests/test_cli.py
# holds every visible command to a panel).
PANELS = (
    ("Turns", ("wake", "wait", "log", "stop", "resume")),
    ("Sessions", ("new", "ls", "show", "edit", "attach", "up", "rm")),
    ("Waves and queue", ("fanout", "waves", "wave", "keep", "queue", "schedule")),
    ("Cost and checks", ("cost", "verify", "diff", "doctor", "notify")),
    ("Housekeeping", ("prune", "du", "maint", "worktree", "trust", "harness", "hosts")),
    (
        "Other doors",
        (
            "top",
            "serve",
            "mcp",
            "events",
            "hooks",
            "status-line",
            "completion",
            "help",
        ),
    ),
)

# The three lines at the top of `spex --help`: a session, a turn, a wave.
EXAMPLES = (
    "spex new api --harness claude --cwd ~/src/api   # an agent in a tmux pane",
    "spex wake api fix the flaky test                # a turn: its verdict",
    'spex fanout --all -m "update deps" --wait       # one prompt, every session',
)

# How a bare `spex` ends: where the rest is.
MORE = (
    "spex --help says what each command does, with spex's own options and exit"
    " codes; spex help COMMAND (or spex COMMAND --help) shows a command's."
)


class SpexCommand(TyperCommand):
    """A command whose usage line reads as its help does: `spex show NAME`,
    not typer's `{NAME}` for a required argument."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]


class SpexGroup(TyperGroup):
    """Commands in the table's order, each summary whole (never cut with "...");
    the root's in PANELS, under three EXAMPLES."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [p.replace("...", "…") for p in super().collect_usage_pieces(ctx)]

    def list_commands(self, ctx: Any) -> list[str]:
        # Stable: a command the table does not name follows, as registered.
        return sorted(self.commands, key=lambda n: _HELP_ORDER.get(n, len(_HELP_ORDER)))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        if ctx.parent is not None:
            super().format_help(ctx, formatter)
            return
        self.format_top(ctx, formatter)
        self.format_commands(ctx, formatter)
        # then the options and the exit codes (TyperGroup's format_options
        # would list the commands a second time)
        options = [p.get_help_record(ctx) for p in self.get_params(ctx)]
        with formatter.section("Options"):
            formatter.write_dl([o for o in options if o is not None])
        self.format_epilog(ctx, formatter)

    def format_top(self, ctx: Any, formatter: Any) -> None:
        """Usage, summary and EXAMPLES: how `spex --help` and a bare `spex` begin."""
        self.format_usage(ctx, formatter)
        self.format_help_text(ctx, formatter)
        with formatter.section("Examples"):
            for line in EXAMPLES:
                formatter.write(f"{'':>{formatter.current_indent}}{line}\n")

    def overview(self, ctx: Any) -> str:
        """A bare `spex`: the top of the help and one line per panel, its
        commands' names; one screen (80x24)."""
        formatter = ctx.make_formatter()
        self.format_top(ctx, formatter)
        with formatter.section("Commands"):
            formatter.write_dl([(t, " ".join(n for n, _ in rows)) for t, rows in self.panels(ctx)])
        formatter.write_paragraph()
        formatter.write_text(MORE)
        return str(formatter.getvalue()).rstrip("\n")

    def panels(self, ctx: Any) -> list[tuple[str, list[tuple[str, str]]]]:
        """(title, [(command, summary)…]) for each panel with a visible command."""
        summaries = {}
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                summaries[name] = cmd.get_short_help_str(limit=200)
        named = {name for _, names in PANELS for name in names}
        other = ("Other commands", tuple(n for n in summaries if n not in named))
        found = []
        for title, names in [*PANELS, other]:
            rows = [(n, summaries[n]) for n in names if n in summaries]
            if rows:
                found.append((title, rows))
        return found

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        if ctx.parent is not None:
            rows = []
            for name in self.list_commands(ctx):
                cmd = self.get_command(ctx, name)
                if cmd is not None and not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str(limit=200)))
            if rows:
                with formatter.section("Commands"):
                    formatter.write_dl(rows)
            return
        panels = self.panels(ctx)
        # One column for every panel: names padded to the longest.
        width = max((len(n) for _, rows in panels for n, _ in rows), default=0)
        for title, rows in panels:
            with formatter.section(title):
                formatter.write_dl([(n.ljust(width), summary) for n, summary in rows])


class ListingGroup(SpexGroup):
    """A collection's group: `spex X` and `spex X ls` list it. With `default`
    set, a first word that names none of the group's commands goes to that
    command: `spex wave W` is `spex wave show W`."""

    default: str | None = None

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        for i, word in enumerate(args):
            if word == "--" or word in ("-h", "--help"):
                break
            if word.startswith("-"):
                continue
            if self.default and word not in self.commands:
                args = [*args[:i], self.default, *args[i:]]
            break
        rest: list[str] = super().parse_args(ctx, args)
        return rest


app = typer.Typer(
    name="spex",
    cls=SpexGroup,
    help="Supervise coding-agent sessions that live in tmux panes.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"spex {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    ctx: typer.Context,
    home: Annotated[
        Path | None,
        typer.Option(
            "--home",
            metavar="DIR",
            help="State directory. [default: $SPEXSUP_HOME, else ~/.local/state/spexsup]",
            show_default=False,
        ),
    ] = None,
    create: Annotated[
        bool,
        typer.Option(
            "--create",
            help="Make the state home (--home DIR or $SPEXSUP_HOME) that does not exist yet"
            " (without it, one that names no state home is refused: a typo must not start"
            " an empty one).",
        ),
    ] = False,
    host: Annotated[
        str | None,
        typer.Option(
            "-H",
            "--host",
            metavar="HOST",
            help="Run the command on HOST ([host.HOST] in config.toml); HOST:NAME also"
            " addresses a session there.",
            show_default=False,
        ),
    ] = None,
    no_hooks: Annotated[
        bool,
        typer.Option(
            "--no-hooks",
            help="Run no hooks for what this command records (or SPEXSUP_NO_HOOKS=1).",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print spex's version and exit.", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    # `run` hands over the command line as obj; commands that must tell
    # `new NAME --` from `new NAME` read it from meta.
    ctx.meta["spex.argv"] = ctx.obj if isinstance(ctx.obj, list) else []
    if not create:
        from spexsup.paths import existing_home

        existing_home(home)
    ctx.obj = home


def keep_only(name: str) -> None:
    """Build only the command being run: typer turns every registered function
    into a click command on each start (signatures, type hints), and one is
    enough to run. No-op for a name that is not a command, so that typer's own
    error and suggestions still see them all."""
    commands = [c for c in app.registered_commands if _command_name(c) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if commands or groups:
        app.registered_commands = commands
        app.registered_groups = groups


def _command_name(info: Any) -> str:
    if info.name:
        return str(info.name)
    return str(info.callback.__name__).lower().replace("_", "-")


def register(name: str | None = None) -> None:
    """Register the command `name` on `app`; every command for None or a word
    that names none (typer's help, error and suggestions then see them all)."""
    import importlib

    module = COMMAND_MODULES.get(name or "")
    for each in [module] if module else sorted(set(COMMAND_MODULES.values())):
        importlib.import_module(f"spexsup.cli.{each}")
    named = {_command_name(info) for info in app.registered_commands}
    for declared in decl.DECLARED.values():
        if declared.name not in named:
            app.command(declared.name, **declared.settings)(declared.function)
    # Every command, a group's and a group's own callback too, reads its
    # parameters as typer's and renders its usage as SpexCommand does.
    for info in app.registered_commands:
        info.callback = for_typer(info.callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            callback = group.typer_instance.registered_callback
            if callback is not None:
                callback.callback = for_typer(callback.callback)
            for info in group.typer_instance.registered_commands:
                info.callback = for_typer(info.callback)
    # Every command, a group's too, renders its usage as SpexCommand does.
    for info in app.registered_commands:
        info.cls = SpexCommand if info.cls in (None, TyperCommand) else info.cls
    for group in app.registered_groups:
        if group.typer_instance is not None:
            for info in group.typer_instance.registered_commands:
                info.cls = SpexCommand if info.cls in (None, TyperCommand) else info.cls


def for_typer(function: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """`function` with its declarations (spexsup.cli.decl) as typer's own:
    the same function, its signature told in typer's words."""
    if function is None or getattr(function, "__signature__", None) is not None:
        return function
    signature = inspect.signature(function)
    changed = [
        p.replace(annotation=_typer_annotation(p.annotation)) for p in signature.parameters.values()
    ]
    if all(
        a.annotation is b.annotation
        for a, b in zip(changed, signature.parameters.values(), strict=True)
    ):
        return function

    @functools.wraps(function)
    def told(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    told.__signature__ = signature.replace(parameters=changed)  # type: ignore[attr-defined]
    told.__annotations__ = {p.name: p.annotation for p in changed}
    return told


def _typer_annotation(annotation: Any) -> Any:
    if annotation is decl.Context:
        return typer.Context
    meta: tuple[Any, ...] = getattr(annotation, "__metadata__", ())
    if len(meta) != 1:
        return annotation
    info = meta[0]
    if isinstance(info, decl.Option):
        return Annotated[annotation.__origin__, typer.Option(*info.param_decls, **info.options)]
    if isinstance(info, decl.Argument):
        return Annotated[annotation.__origin__, typer.Argument(**info.options)]
    return annotation


__all__ = [
    "COMMANDS",
    "COMMAND_MODULES",
    "WRITERS",
    "ListingGroup",
    "app",
    "open_spex",
    "register",
    "settings",
]
