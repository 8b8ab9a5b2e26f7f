"""The harness registry: the built-ins overlaid with the user's `harnesses.toml`.

Read per use (no daemon): `~/.config/spexsup/harnesses.toml` (or
`$XDG_CONFIG_HOME`), then `$SPEXSUP_HOME/harnesses.toml`, a later
`[harness.NAME]` table overriding or extending an earlier one field by
field. An unknown key is a warning (`errors.unknown_key`), the rest of the
file applies. A bad entry is kept as its error, so a mistake in one harness never
breaks commands that use another. `describe` is the public view of a
harness that `spex harness ls/show` prints. The adapter record itself and
the built-ins are `spexsup.adapters.harness`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spexsup import durations
from spexsup.adapters.harness import (
    ARGS,
    BUILTIN,
    PROMPT,
    RESET_KINDS,
    SESSION_ID,
    Fatal,
    Harness,
    Limit,
    command_harness,
    shown,
    verify_argv,
)
from spexsup.errors import Invalid, clip, unknown_key
from spexsup.ids import SCHEMA_VERSION
from spexsup.record import Record

FIELDS = {
    "fresh": list,
    "resume": list,
    "prompt_via": str,
    "stdin_fallback": bool,
    "window": object,
    "id_pattern": str,
    "retryable": list,
    "fatal": list,
    "binary": str,
    "version_args": list,
    "notes": str,
    "outcome": str,
    "strict": bool,
    "timeout": object,
    "limited": list,
    "assign_id": str,
    "gone": list,
    "model_flag": str,
    "model": str,
    "fallback": list,
    "verify": object,
    "verify_timeout": object,
    "sandbox": bool,
    "sandbox_write": list,
    "model_hosts": list,
}


def config_files(home: Path) -> list[Path]:
    """Harness files, later ones overriding earlier: user config, then the state home."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    config = Path(xdg) if xdg else Path.home() / ".config"
    return [config / "spexsup" / "harnesses.toml", home / "harnesses.toml"]


BUILT_IN = "built in"


class Registry(Record):
    """Built-ins plus user harnesses; a bad entry is kept as its error, so a
    mistake in one harness never breaks commands that use another. `sources`
    says where each harness (or error) comes from: BUILT_IN, or the path of
    the harnesses.toml that last defined it."""

    harnesses: dict[str, Harness]
    errors: dict[str, Invalid]
    sources: dict[str, str]

    def names(self) -> list[str]:
        return sorted({*self.harnesses, *self.errors, "command"} - {"*"})

    def get(self, name: str) -> Harness:
        if name in self.errors:
            raise self.errors[name]
        if name not in self.harnesses:
            if "*" in self.errors:
                raise self.errors["*"]
            raise Invalid(f"unknown harness {name!r}", hint=f"one of: {', '.join(self.names())}")
        return self.harnesses[name]


def _bad(path: Path, name: str, field_: str, why: str) -> Invalid:
    return Invalid(f"{path}: harness {clip(repr(name))}, field {clip(repr(field_))}: {why}")


def _parse_entry(path: Path, name: str, table: object, base: Harness | None) -> Harness:
    """One `[harness.NAME]` table, checked field by field, merged over `base`
    (the built-in or an earlier file's entry of that name), then checked whole."""
    if not isinstance(table, dict):
        raise _bad(path, name, "-", "must be a table ([harness.NAME])")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) or name == "command":
        raise _bad(path, name, "-", "invalid harness name")
    values = _fields(path, name, table)
    _check_lists(path, name, values)
    fatal, limited = _rules(path, name, values)
    _check_words(path, name, values, fatal, limited)
    if base is None and "fresh" not in values:
        raise _bad(path, name, "fresh", "required for a new harness")
    merged = base or Harness(name=name, fresh=())
    changes: dict[str, object] = {
        k: tuple(v) if isinstance(v, list) else v
        for k, v in values.items()
        if k not in ("fatal", "limited")
    }
    if "fatal" in values:
        changes["fatal"] = tuple(fatal)
    if "limited" in values:
        changes["limited"] = tuple(limited)
    for key in ("outcome", "assign_id"):
        if changes.get(key) == "":
            changes[key] = None
    harness = merged._replace(name=name, **changes)  # type: ignore[arg-type]
    return _check_argv(path, name, values, base, harness)


def _fields(path: Path, name: str, table: dict[str, Any]) -> dict[str, object]:
    """Each known field, of its kind (durations read as seconds)."""
    values: dict[str, object] = {}
    for key, value in table.items():
        kind = FIELDS.get(key)
        if kind is None:
            unknown_key(str(path), key, list(FIELDS), f"[harness.{clip(name, 40)}]")
            continue
        if key == "verify":
            try:
                value = verify_argv(value, f"{path}: harness {clip(repr(name))}")
            except Invalid as e:
                raise _bad(
                    path, name, key, "must be a string (run by sh -c) or an argv list"
                ) from e
        elif key in ("timeout", "verify_timeout"):
            try:
                value = durations.parse(value, key, maximum=durations.WEEK)
            except Invalid:
                raise _bad(path, name, key, f"must be {durations.GRAMMAR}, at most 7d") from None
        elif key == "window":
            try:
                value = durations.parse(value, key, minimum=0.05, maximum=3600)
            except Invalid:
                raise _bad(
                    path, name, key, "must be seconds or a duration from 0.05s to 1h"
                ) from None
        elif not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise _bad(path, name, key, f"must be a {kind.__name__}")
        values[key] = value
    return values


def _check_lists(path: Path, name: str, values: dict[str, object]) -> None:
    """Lists of non-empty strings; no NUL in an argv word."""
    for key in (
        "fresh",
        "resume",
        "retryable",
        "version_args",
        "gone",
        "fallback",
        "sandbox_write",
        "model_hosts",
    ):
        items = values.get(key)
        if items is not None and not all(isinstance(x, str) and x for x in items):  # type: ignore[attr-defined]
            raise _bad(path, name, key, "must be a list of non-empty strings")
        # An argv word cannot hold a NUL (the turn's argv file is
        # NUL-separated: it would split the word in two).
        if (
            items is not None
            and key in ("fresh", "resume", "version_args")
            and any("\0" in x for x in items)  # type: ignore[attr-defined]
        ):
            raise _bad(path, name, key, "an argv word must not contain a NUL (\\u0000)")


def _rules(path: Path, name: str, values: dict[str, object]) -> tuple[list[Fatal], list[Limit]]:
    """The `fatal` and `limited` tables, each entry checked."""
    fatal: list[Fatal] = []
    for item in values.get("fatal", []):  # type: ignore[attr-defined]
        if (
            not isinstance(item, dict)
            or set(item) != {"pattern", "cause"}
            or not all(isinstance(v, str) for v in item.values())
        ):
            raise _bad(path, name, "fatal", "each entry needs a string pattern and cause")
        fatal.append(Fatal(item["pattern"], item["cause"]))
    limited: list[Limit] = []
    for item in values.get("limited", []):  # type: ignore[attr-defined]
        if (
            not isinstance(item, dict)
            or "pattern" not in item
            or not set(item) <= {"pattern", "reset"}
            or not all(isinstance(v, str) for v in item.values())
            or item.get("reset", "") not in RESET_KINDS
        ):
            raise _bad(
                path,
                name,
                "limited",
                'each entry needs a string pattern and reset one of "", "epoch", "clock", "in"',
            )
        limited.append(Limit(item["pattern"], item.get("reset", "")))
    return fatal, limited


def _check_words(
    path: Path, name: str, values: dict[str, object], fatal: list[Fatal], limited: list[Limit]
) -> None:
    """The fields that take one of a few words, and every regular expression."""
    if "assign_id" in values and values["assign_id"] not in ("", "uuid"):
        raise _bad(path, name, "assign_id", 'must be "uuid" or ""')
    if "outcome" in values and values["outcome"] not in ("", "claude", "codex", "opencode", "pi"):
        raise _bad(path, name, "outcome", 'one of "claude", "codex", "opencode", "pi", ""')
    for key, patterns in (
        ("id_pattern", [values["id_pattern"]] if "id_pattern" in values else []),
        ("retryable", values.get("retryable", [])),
        ("fatal", [f.pattern for f in fatal]),
        ("limited", [lim.pattern for lim in limited]),
        ("gone", values.get("gone", [])),
    ):
        for pattern in patterns:  # type: ignore[attr-defined]
            try:
                compiled = re.compile(pattern)
            except re.error as e:
                raise _bad(path, name, key, f"bad regular expression {pattern!r}: {e}") from None
            if key == "id_pattern" and compiled.groups != 1:
                raise _bad(path, name, key, "needs exactly one (group) around the id")
    if "prompt_via" in values and values["prompt_via"] not in ("arg", "stdin"):
        raise _bad(path, name, "prompt_via", 'must be "arg" or "stdin"')


def _check_argv(
    path: Path, name: str, values: dict[str, object], base: Harness | None, harness: Harness
) -> Harness:
    """The merged harness's argv templates: the prompt, the session id and
    the harness arguments where they must be."""
    if not harness.fresh:
        raise _bad(path, name, "fresh", "must not be empty")
    if (
        "prompt_via" not in values
        and base is not None
        and base.prompt_via == "stdin"
        and any(PROMPT in values.get(k, ()) for k in ("fresh", "resume"))  # type: ignore[operator]
    ):
        # An override written for a built-in that once took the prompt as an
        # argument (`… -- {prompt}`) keeps meaning that.
        harness = harness._replace(prompt_via="arg", stdin_fallback=True)
    for key, template in (("fresh", harness.fresh), ("resume", harness.resume)):
        given = key in values
        if (
            given
            and template is not None
            and harness.prompt_via == "arg"
            and PROMPT not in template
        ):
            raise _bad(path, name, key, f'needs a "{PROMPT}" element (or prompt_via = "stdin")')
        if template is not None and template.count(ARGS) > 1:
            raise _bad(path, name, key, f'"{ARGS}" may appear once')
        if template is not None and any(ARGS in p and p != ARGS for p in template):
            raise _bad(path, name, key, f'"{ARGS}" must be an element of its own')
    if harness.resume is not None and SESSION_ID not in harness.resume:
        raise _bad(path, name, "resume", f'needs a "{SESSION_ID}" element')
    if harness.assign_id and SESSION_ID not in harness.fresh:
        if "assign_id" in values:
            raise _bad(path, name, "fresh", f'needs a "{SESSION_ID}" element with assign_id')
        harness = harness._replace(assign_id=None)  # an override that dropped --session-id
    if not harness.assign_id and SESSION_ID in harness.fresh:
        # An override of claude's fresh argv without --session-id: no id to assign.
        raise _bad(path, name, "fresh", f'"{SESSION_ID}" needs assign_id = "uuid"')
    return harness


def _harness_file(path: Path) -> dict[str, Any] | Invalid | None:
    """One harness file's tables; None when it does not exist, Invalid when
    it cannot be read or parsed."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        return Invalid(f"{path}: cannot read harness file: {e}")
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        return Invalid(f"{path}: cannot read harness file: {e}")
    except RecursionError:
        return Invalid(f"{path}: cannot read harness file: nested too deeply")


def load_registry(home: Path) -> Registry:
    """Built-ins overlaid with the user's harness files (tomllib, imported only
    when one exists: most homes have none; no daemon, read per use)."""
    harnesses = dict(BUILTIN)
    errors: dict[str, Invalid] = {}
    sources = dict.fromkeys([*BUILTIN, "command"], BUILT_IN)
    for path in config_files(home):
        data = _harness_file(path)
        if data is None:
            continue
        if isinstance(data, Invalid):
            errors["*"] = data
            sources["*"] = str(path)
            continue
        tables = data.get("harness", {})
        if not isinstance(tables, dict):
            errors["*"] = Invalid(f"{path}: 'harness' must be tables: [harness.NAME]")
            sources["*"] = str(path)
            continue
        for key in sorted(set(data) - {"harness"}):
            unknown_key(str(path), key, ["harness"])
        for name, table in tables.items():
            sources[name] = str(path)
            try:
                harnesses[name] = _parse_entry(path, name, table, harnesses.get(name))
                errors.pop(name, None)
            except Invalid as e:
                errors[name] = e
    return Registry(harnesses, errors, sources)


def resolve(
    name: str, command: Sequence[str] | None, home: Path, args: Sequence[str] = ()
) -> Harness:
    """The adapter a session uses for its next turn, with the session's own `args`."""
    if name == "command":
        if not command:
            raise Invalid("the command harness needs a command", hint="spex new NAME -- CMD ARGS…")
        return command_harness(command)
    return load_registry(home).get(name)._replace(args=tuple(args))


COMMAND_NOTES = "the command after -- (spex new NAME -- CMD ARGS…), the prompt appended"


def describe(registry: Registry, name: str) -> dict[str, Any]:
    """The public view of one harness (`spex harness show --json`): its
    effective argv forms (after harnesses.toml), with `{args}` where a
    session's own arguments go, and where it comes from.

    Raises the harness's own Invalid when its entry is broken or unknown.
    """

    source = registry.sources.get(name, BUILT_IN)
    view: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "source": source,
        "builtin": name in BUILTIN or name == "command",
        "overrides_builtin": name in BUILTIN and source != BUILT_IN,
        "error": None,
    }
    if name == "command":
        return view | {
            "fresh": None,
            "resume": None,
            "prompt_via": "append",
            "stdin_fallback": False,
            "binary": None,
            "window": None,
            "id_pattern": None,
            "assign_id": None,
            "outcome": None,
            "strict": False,
            "timeout": None,
            "verify": None,
            "verify_timeout": None,
            "notes": COMMAND_NOTES,
        }
    h = registry.get(name)
    return view | {
        "fresh": shown(h.fresh),
        "resume": shown(h.resume) if h.resume is not None else None,
        "prompt_via": h.prompt_via,
        "stdin_fallback": h.stdin_fallback,
        "binary": h.binary,
        "window": h.window,
        "id_pattern": h.id_pattern,
        "assign_id": h.assign_id,
        "outcome": h.outcome,
        "strict": h.strict,
        "timeout": h.timeout,
        "verify": list(h.verify) or None,
        "verify_timeout": h.verify_timeout,
        "notes": h.notes,
    }


def describe_all(registry: Registry) -> list[dict[str, Any]]:
    """Every harness's view, by name; a broken entry as `{name, source, error}`,
    and a harness file that could not be read at all as one with name null."""

    out: list[dict[str, Any]] = []
    for name in registry.names():
        try:
            out.append(describe(registry, name))
        except Invalid as e:
            out.append(
                {
                    "schema_version": SCHEMA_VERSION,
                    "name": name,
                    "source": registry.sources.get(name, BUILT_IN),
                    "error": e.line(),
                }
            )
    if "*" in registry.errors:
        out.append(
            {
                "schema_version": SCHEMA_VERSION,
                "name": None,
                "source": registry.sources["*"],
                "error": registry.errors["*"].line(),
            }
        )
    return out
