"""A well-formed command line, parsed and run without typer.

`run` reads the command's declaration (`spexsup.cli.decl`) and parses the
words the way click does for the kinds of parameters spex declares: long
and short options, `--opt=value`, flags and their `--no-` forms, repeated
options, positional arguments with one variadic among them, `--`. Whatever
it is not sure of (help, a mistake, completion, a group's command, a kind of
parameter it does not know) it leaves to typer by returning None, before
running anything, so typer's messages stay the only ones. tests/test_lean.py
checks, command by command, that both read the same declaration alike.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from spexsup import ids
from spexsup.cli import decl
from spexsup.cli.table import COMMAND_MODULES

# What a parameter's words become: str as is, int and float as click reads
# them, a Path (typer's own conversion of a path type).
_CONVERT: dict[Any, Callable[[str], Any]] = {str: str, int: int, float: float, Path: Path}
# What an Option or Argument may say beyond how it parses: help and
# completion, which only typer's reading of the line uses.
_SHOWN = frozenset(
    {"help", "metavar", "show_default", "autocompletion", "hidden", "rich_help_panel"}
)


class Param:
    """One parameter of a command, as click would see it."""

    def __init__(self, name: str, kind: str, default: Any) -> None:
        self.name = name
        self.kind = kind  # "option", "flag", "argument" or "context"
        self.default = default
        self.opts: list[str] = []
        self.secondary: list[str] = []  # a flag's --no- forms
        self.multiple = False  # an option given many times, or a variadic argument
        self.required = False
        self.convert: Callable[[str], Any] = str
        self.bounds: tuple[float | None, float | None] = (None, None)


def _base(annotation: Any) -> tuple[Any, bool] | None:
    """(the type, whether a list of it) of `T`, `T | None` or `list[T] | None`."""
    if get_origin(annotation) in (Union, UnionType):
        kept = [a for a in get_args(annotation) if a is not NoneType]
        if len(kept) != 1:
            return None
        annotation = kept[0]
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        return (item, True) if item in _CONVERT else None
    return (annotation, False) if annotation in _CONVERT or annotation is bool else None


def _param(name: str, annotation: Any, default: Any) -> Param | None:
    """How click reads `name`, or None for a kind this module does not know."""
    if annotation is decl.Context:
        return Param(name, "context", None)
    meta: tuple[Any, ...] = getattr(annotation, "__metadata__", ())
    info = meta[0] if len(meta) == 1 else None
    if not isinstance(info, (decl.Option, decl.Argument)):
        return None
    based = _base(annotation.__origin__)
    options = dict(info.options)
    bounds = (options.pop("min", None), options.pop("max", None))
    if based is None or set(options) - _SHOWN:
        return None
    kind, many = based
    if isinstance(info, decl.Argument):
        param = Param(name, "argument", default)
        param.required = default is MISSING and not many
    elif kind is bool:
        if many:
            return None
        param = Param(name, "flag", False if default is MISSING else default)
        decls = info.param_decls or (f"--{name.replace('_', '-')}/--no-{name.replace('_', '-')}",)
        for word in decls:
            first, _, second = word.partition("/")
            param.opts.append(first)
            if second:
                param.secondary.append(second)
    else:
        if default is MISSING:
            return None  # a required option: typer says so when it is missing
        param = Param(name, "option", default)
        param.opts = list(info.param_decls or (f"--{name.replace('_', '-')}",))
    param.multiple = many
    if kind is not bool:
        param.convert = _CONVERT[kind]
    param.bounds = bounds
    return param


# The default of a parameter that has none (a required one); the MCP door reads it too.
MISSING = object()


def params_of(function: Callable[..., Any]) -> list[Param] | None:
    """The function's parameters in order, or None if one is of a kind click
    would read in a way this module does not."""
    code = function.__code__
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    defaults = function.__defaults__ or ()
    firsts = [MISSING] * (code.co_argcount - len(defaults)) + list(defaults)
    keywords = function.__kwdefaults__ or {}
    found = []
    for i, name in enumerate(names):
        default = firsts[i] if i < code.co_argcount else keywords.get(name, MISSING)
        param = _param(name, function.__annotations__.get(name), default)
        if param is None:
            return None
        found.append(param)
    return found


class _Unsure(Exception):
    """The line is one for typer to read (and, most likely, to refuse)."""


def parse(params: list[Param], words: list[str], interspersed: bool = True) -> dict[str, Any]:
    """The values click would hand the command, or _Unsure."""
    by_opt = {o: p for p in params for o in p.opts}
    negated = {o: p for p in params for o in p.secondary}
    given: dict[str, Any] = {}
    positional: list[str] = []
    rest = list(words)
    while rest:
        word = rest.pop(0)
        if word == "--":
            positional += rest
            break
        if word[:1] != "-" or word == "-":
            positional.append(word)
            if not interspersed:
                positional += rest
                break
            continue
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if name in negated and not eq:
                given[negated[name].name] = False
                continue
            param = by_opt.get(name)
            if param is None:
                raise _Unsure
            if param.kind == "flag":
                if eq:
                    raise _Unsure
                given[param.name] = True
                continue
            if not eq:
                if not rest:
                    raise _Unsure
                value = rest.pop(0)
            _give(given, param, value)
            continue
        _short(word, by_opt, rest, given)
    values: dict[str, Any] = {}
    arguments = [p for p in params if p.kind == "argument"]
    for param, taken in zip(arguments, _unpack(arguments, positional), strict=True):
        values[param.name] = taken
    for param in params:
        if param.kind in ("option", "flag"):
            values[param.name] = given.get(param.name, param.default)
    return values


def _short(word: str, by_opt: dict[str, Param], rest: list[str], given: dict[str, Any]) -> None:
    """`-q`, `-qv` (flags), `-m VALUE`, `-mVALUE`, as click reads them."""
    for i, letter in enumerate(word[1:], start=1):
        param = by_opt.get(f"-{letter}")
        if param is None:
            raise _Unsure
        if param.kind == "flag":
            given[param.name] = True
            continue
        value = word[i + 1 :]
        if not value:
            if not rest:
                raise _Unsure
            value = rest.pop(0)
        _give(given, param, value)
        return


def _give(given: dict[str, Any], param: Param, word: str) -> None:
    value = _converted(param, word)
    if param.multiple:
        given.setdefault(param.name, []).append(value)
    else:
        given[param.name] = value


def _converted(param: Param, word: str) -> Any:
    try:
        value = param.convert(word)
    except ValueError:
        raise _Unsure from None
    low, high = param.bounds
    if (low is not None and value < low) or (high is not None and value > high):
        raise _Unsure
    return value


def _unpack(arguments: list[Param], words: list[str]) -> list[Any]:
    """Words to arguments as click deals them: single ones from the front and
    the back, the one variadic argument the middle."""
    many = [i for i, p in enumerate(arguments) if p.multiple]
    if len(many) > 1:
        raise _Unsure
    cut = many[0] if many else len(arguments)
    front, back = arguments[:cut], arguments[cut + 1 :]
    if len(words) > len(arguments) and not many:
        raise _Unsure  # an extra argument: typer's error
    dealt = [_one(param, words.pop(0) if words else None) for param in front]
    tail = [_one(p, words.pop() if words else None) for p in reversed(back)]
    if many:
        param = arguments[cut]
        dealt.append([_converted(param, w) for w in words] if words else param.default)
    return dealt + tail[::-1]


def _one(param: Param, word: str | None) -> Any:
    if word is None:
        if param.required:
            raise _Unsure
        return param.default
    return _converted(param, word)


def _census_ahead(home: str | None, command: str, words: list[str]) -> None:
    """`ls` (of this machine) and `show NAME`: their census's tmux client,
    started before their imports (see prefetch.census_ahead). A guess from
    the words alone: one the command does not take up costs a client."""
    if command == "ls" and not any(w.startswith(("--all-hosts", "--hosts")) for w in words):
        only = None
    elif command == "show" and words and ids.NAME_RE.fullmatch(words[0]):
        only = words[0]
    else:
        return
    from spexsup.adapters.prefetch import census_ahead

    census_ahead(home, only)


def run(argv: list[str], home: str | None, create: bool, rest: list[str]) -> int | None:
    """Run `spex [--home DIR] [--create] COMMAND WORDS…` if it is a line this
    module reads with certainty (None: typer's). Exceptions are the caller's,
    as they would be from typer."""
    if not rest or rest[0] not in COMMAND_MODULES:
        return None
    end = rest.index("--") if "--" in rest else len(rest)
    if "--help" in rest[:end] or "-h" in rest[:end]:
        return None
    _census_ahead(home, rest[0], rest[1:end])
    importlib.import_module(f"spexsup.cli.{COMMAND_MODULES[rest[0]]}")
    declared = decl.DECLARED.get(rest[0])
    if declared is None or set(declared.settings) - {"context_settings"}:
        return None
    context = dict(declared.settings.get("context_settings", {}))
    interspersed = context.pop("allow_interspersed_args", True)
    params = params_of(declared.function)
    if params is None or context:
        return None
    try:
        values = parse(params, rest[1:], interspersed)
    except _Unsure:
        return None
    # What the root callback does (spexsup.cli.app.root) before any command.
    root_home = Path(home) if home is not None else None
    if not create:
        from spexsup.paths import existing_home

        existing_home(root_home)
    meta: dict[str, Any] = {"spex.argv": argv}
    root = decl.Context(root_home, meta, {"home": root_home, "create": create})
    ctx = decl.Context(root_home, meta, values, parent=root)
    for param in params:
        if param.kind == "context":
            values[param.name] = ctx
    code = declared.function(**values)
    return code if isinstance(code, int) else 0
