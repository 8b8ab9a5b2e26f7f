"""The MCP tools that are one CLI command each, their parameters read from
the command's own declaration.

`spex wake` has 20 options, `spex fanout` 40, `spex new` 27. Declaring them
again for the door would be a second copy to keep in step with the CLI (and
a function of 20 parameters). Instead each tool here names its command, and
`parameters` reads that command's declaration (`spexsup.cli.decl` Option
and Argument, through `spexsup.cli.lean.params_of`, as the CLI's own lean
parser reads it): every option becomes a typed parameter of the same name,
described by the option's own help. `signature` makes them an
`inspect.Signature`, which the SDK reads (`inspect.signature` honours
`__signature__`) to build the tool's input schema and to validate each call;
`words` turns a call's arguments back into the words a person would type.
An option the CLI gains is a tool parameter without an edit here.

What a tool never offers: the command's context, `--json` (always given),
and the prompt's CLI forms (TEXT, `-m`, `-f`): a tool that takes a prompt
has a `prompt` parameter, sent on stdin as `-f -`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Annotated, Any

from pydantic import Field

from spexsup.cli import decl, lean
from spexsup.cli.table import COMMAND_MODULES

# The CLI's parameters no tool offers (see the module's docstring).
NEVER = frozenset({"as_json", "text", "message", "file"})
# Metavars whose value may be a number too: seconds, dollars.
NUMBERS = frozenset({"DURATION", "USD"})
# The tool's name for the words after `--` (a harness's own arguments).
REST = "args"
PROMPT = "prompt"
PROMPT_HELP = "The prompt, delivered byte for byte (UTF-8), at most 1 MiB."
# What a hidden option (one `spex --help` does not show) is, said for a tool.
HIDDEN_HELP = {
    "sandbox_optional": "As sandbox, and a wake with no_sandbox may run one turn outside"
    " (the CLI's --sandbox=optional).",
}

Duration = str | float


@dataclass(frozen=True)
class Mirror:
    """One tool that is one command: `spex WORDS… NAMES… OPTIONS… --json`."""

    name: str
    words: tuple[str, ...]
    description: str
    # A required `prompt` parameter, sent on stdin (`-f -`).
    prompt: bool = False
    # The command's parameters this tool does not offer.
    leave: frozenset[str] = frozenset()
    # A parameter's name in the tool, where the CLI's would mislead.
    rename: Mapping[str, str] = field(default_factory=dict)
    # The tool's own description of a parameter, where the CLI's help speaks of another form.
    describe: Mapping[str, str] = field(default_factory=dict)
    # A default other than the command's (then always passed).
    defaults: Mapping[str, Any] = field(default_factory=dict)
    # The variadic argument that goes after `--` (offered as REST).
    rest: str | None = None


@dataclass(frozen=True)
class Given:
    """One parameter of a tool: its name there and the CLI parameter it is."""

    name: str
    cli: lean.Param
    help: str
    metavar: str
    default: Any


def declared(words: Sequence[str]) -> Callable[..., Any]:
    """The function that declares `spex WORDS…`: a top-level command's as
    registered, a group's subcommand as `GROUP_SUB` in the group's module."""
    module = importlib.import_module(f"spexsup.cli.{COMMAND_MODULES[words[0]]}")
    if len(words) == 1:
        return decl.DECLARED[words[0]].function
    function: Callable[..., Any] = getattr(module, "_".join(words))
    return function


def parameters(mirror: Mirror) -> list[Given]:
    """The tool's parameters, in the command's order (the prompt aside)."""
    function = declared(mirror.words)
    found = lean.params_of(function)
    if found is None:  # a kind of parameter the lean parser does not read
        raise TypeError(f"spex {' '.join(mirror.words)}: a parameter no tool can offer")
    given = []
    for param in found:
        if param.kind == "context" or param.name in NEVER | mirror.leave:
            continue
        info = function.__annotations__[param.name].__metadata__[0].options
        name = REST if param.name == mirror.rest else mirror.rename.get(param.name, param.name)
        about = mirror.describe.get(param.name) or info.get("help")
        about = about or HIDDEN_HELP.get(param.name, "")  # none: tests/test_mcp.py says so
        default = mirror.defaults.get(param.name, param.default)
        given.append(Given(name, param, about, info.get("metavar", ""), default))
    return given


def _annotation(given: Given) -> Any:
    param = given.cli
    if param.kind == "flag":
        return bool | None if param.secondary else bool
    one: Any = Duration if given.metavar in NUMBERS else param.convert
    if one not in (int, float, Duration):
        one = str  # a Path is a string on the wire
    many: Any = list[one] if param.multiple else one
    return many | None if given.default is None else many


def _parameter(given: Given) -> inspect.Parameter:
    required = given.default is lean.MISSING
    low, high = given.cli.bounds
    about: dict[str, Any] = {"description": given.help, "ge": low, "le": high}
    if required and given.cli.multiple:
        about["min_length"] = 1
    return inspect.Parameter(
        given.name,
        inspect.Parameter.KEYWORD_ONLY,
        annotation=Annotated[_annotation(given), Field(**about)],
        default=inspect.Parameter.empty if required else given.default,
    )


def signature(mirror: Mirror, given: Sequence[Given], returns: Any) -> inspect.Signature:
    """The tool function's signature: the names (the arguments before
    `--`), the prompt, the options, then REST."""
    arguments = [g for g in given if g.cli.kind == "argument" and g.name != REST]
    options = [g for g in given if g.cli.kind != "argument"]
    rest = [g for g in given if g.name == REST]
    params = [_parameter(g) for g in arguments]
    if mirror.prompt:
        prompt = Annotated[str, Field(description=PROMPT_HELP)]
        params.append(inspect.Parameter(PROMPT, inspect.Parameter.KEYWORD_ONLY, annotation=prompt))
    params += [_parameter(g) for g in (*options, *rest)]
    return inspect.Signature(params, return_annotation=returns)


def duration(value: Duration) -> str:
    """A number of seconds written as the CLI's grammar reads it: every digit,
    never an exponent (`:g` made 1e-05 and 1.23457e+06 of 0.00001 and 1234567)."""
    if isinstance(value, str):
        return value
    return format(Decimal(repr(float(value))).normalize(), "f")


@dataclass(frozen=True)
class Words:
    """A call's arguments as the command line takes them."""

    names: list[str]
    options: list[str]
    rest: list[str]


def words(given: Sequence[Given], arguments: Mapping[str, Any]) -> Words:
    """The names, the options (`--opt=VALUE`, so a value that starts with `-`
    stays a value) and REST of a call. A value equal to the command's own
    default is not given (the command's default is the default)."""
    out = Words([], [], [])
    for g in given:
        value, param = arguments.get(g.name), g.cli
        if value is None or (value == param.default and value == g.default):
            continue
        if g.name == REST:
            out.rest.extend(value)
        elif param.kind == "argument":
            out.names.extend(value if param.multiple else [value])
        elif param.kind == "flag":
            out.options.append(_long(param.opts) if value else _long(param.secondary))
        else:
            flag = _long(param.opts)
            items = value if param.multiple else [value]
            out.options.extend(f"{flag}={_text(item)}" for item in items)
    return out


def _long(opts: Sequence[str]) -> str:
    return next(o for o in opts if o.startswith("--"))


def _text(value: Any) -> str:
    return duration(value) if isinstance(value, float) else str(value)


# --- the tools ------------------------------------------------------------------

# Everything of a fan-out that a retry of one's failed legs does not take.
NOT_IN_A_RETRY = frozenset(
    {
        "all_",
        "match",
        "hosts",
        "worktrees",
        "repo",
        "base",
        "prefix",
        "harness",
        "worktree_dir",
        "keep_best",
        "pick",
        "sandbox",
        "sandbox_optional",
        "allow_write",
        "deny_read",
        "network",
        "allow_host",
    }
)
EVERY_OPTION = (
    " Every option of the command is a parameter of the same name (its long form,"
    " with _ for -); a null or absent one is the command's default."
)

MIRRORS = (
    Mirror(
        "wake",
        ("wake",),
        "Start a turn and return its verdict (confirmed, completed, failed, queued):"
        " `spex wake NAME -f - --json`, the prompt on stdin. `after` queues it behind"
        " another session's turn; `model` and `fallback` pick the models; `budget` stops"
        " it at a spend; `verify` checks its work; `queue` keeps it while the session is"
        " busy; `key` makes it idempotent." + EVERY_OPTION,
        prompt=True,
        describe={"name": "The session's name (HOST:NAME for a session on another host)."},
    ),
    Mirror(
        "fanout",
        ("fanout",),
        "Wake many sessions with one prompt, a wave with a verdict per leg:"
        " `spex fanout NAMES… -f - --json`. With `worktrees` N it first makes N new"
        " worktree sessions (a best-of-N wave: see keep); with `wait` it returns once"
        " every leg has ended." + EVERY_OPTION,
        prompt=True,
        leave=frozenset({"retry_failed"}),
        rename={"all_": "all_sessions"},
    ),
    Mirror(
        "retry_failed",
        ("fanout",),
        "Relaunch the legs of a wave that did not succeed, as a new wave:"
        " `spex fanout --retry-failed WAVE --json`. Without `names`, every such leg;"
        " the wave's own options apply where not given." + EVERY_OPTION,
        leave=NOT_IN_A_RETRY,
        rename={"retry_failed": "wave"},
        describe={
            "names": "Only these legs (their sessions).",
            "retry_failed": "The wave: an id, a prefix of one, or last.",
        },
        defaults={"retry_failed": "last"},
    ),
    Mirror(
        "new_session",
        ("new",),
        "Create a session and its tmux pane (with `worktree`: in a new git worktree"
        " and branch): `spex new NAME --json`. `args` are what follows `--`: the"
        " command to run with no harness, else the harness's own arguments." + EVERY_OPTION,
        rest="command",
    ),
    Mirror(
        "edit_session",
        ("edit",),
        "Change a session's settings; its next turn runs with them: `spex edit NAME"
        " --json`. Refused while a turn runs. A no_X parameter clears X back to its"
        " default; `args` replace the harness's own arguments." + EVERY_OPTION,
        rest="after",
    ),
    Mirror(
        "remove_sessions",
        ("rm",),
        "Delete sessions, their panes and worktrees: `spex rm NAMES… --json`. Refused"
        " (exit code 3, nothing removed) while a turn runs unless `force`, and for a"
        " worktree with unsaved work unless `salvage`; every session is checked before"
        " any goes." + EVERY_OPTION,
        leave=frozenset({"yes"}),
        rename={"all_": "all_sessions"},
    ),
    Mirror(
        "list_queue",
        ("queue", "ls"),
        "The prompts waiting for their session (wake with `queue`), oldest first:"
        " `spex queue ls [NAMES…] --json`, a JSON array.",
    ),
    Mirror(
        "drop_queued",
        ("queue", "rm"),
        "Remove queued prompts, which then never launch: `spex queue rm IDS… --json`.",
        rename={"entries": "ids"},
    ),
    Mirror(
        "list_schedules",
        ("schedule", "ls"),
        "The schedules, each with its next and last firing and last verdict:"
        " `spex schedule ls [NAMES…] --json`, a JSON array.",
    ),
    Mirror(
        "add_schedule",
        ("schedule", "add"),
        "Wake a session on a clock (`every` or `cron`), each firing a keyed wake:"
        " `spex schedule add NAME -f - --json`, the prompt on stdin.",
        prompt=True,
    ),
    Mirror(
        "remove_schedules",
        ("schedule", "rm"),
        "Remove schedules: their timer or crontab line, prompt and log:"
        " `spex schedule rm IDS… --json`.",
        rename={"schedules": "ids"},
    ),
    Mirror(
        "cost",
        ("cost",),
        "What the turns spent, tokens and cost, summed by session, harness, model, day"
        " or wave: `spex cost --json`. A cost nobody knows is null, never 0.",
    ),
    Mirror(
        "diff",
        ("diff",),
        "What a turn changed in its git working tree, from its start to its end (now for"
        " the latest): `spex diff NAME --json`, the files and the patch.",
        leave=frozenset({"no_pager"}),
    ),
    Mirror(
        "keep",
        ("keep",),
        "Keep one leg of a best-of-N wave (fanout with `worktrees`) and remove the"
        " others, salvaging their unsaved work to branches: `spex keep WAVE LEG --json`."
        " Refused, nothing changed, while another leg's turn runs unless `force`.",
    ),
)
