"""User defaults from `config.toml` (DESIGN §8 "Config").

Read in order: `~/.config/spexsup/config.toml` (or `$XDG_CONFIG_HOME`), then
`$SPEXSUP_HOME/config.toml`, whose keys win. A missing file is no error; a
file that does not parse, or a key with a wrong type or value, is `Failed`
(exit 1) naming the file, the line and the field; an unknown key is a
warning (with the known key it is closest to) and the rest of the file
applies. Tables owned by other features (`[[hook]]`, `[host.NAME]`) are kept
raw for them to validate. `[pricing."MODEL"]` tables (issue 26) price a
model's tokens for the cost estimates of `spexsup.usage`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from spexsup import durations, lazyre
from spexsup.errors import Failed, Invalid, clip, unknown_key
from spexsup.record import Record
from spexsup.usage import AMOUNT_RULE, KINDS, Price, amount

NAME_RE = lazyre.compile(r"[A-Za-z0-9_-]{1,64}")
# tmux key names: C-a, M-x, C-Space, F12, ` …
PREFIX_RE = lazyre.compile(r"(?:[CMS]-)*(?:[!-~]|[A-Za-z][A-Za-z0-9]{1,15})")
RAW_TABLES = ("hook", "host", "notify", "trigger")
# Sanity bounds for retention counts, so a typo cannot mean "keep nothing".
MAX_KEEP = 10**9
# `stagger` here and the --stagger options: from 0 (none) to this many seconds.
MAX_STAGGER = 600.0


def _seconds(lo: float, hi: float) -> Callable[[object], float | None]:
    """A time key: a number of seconds or a duration string ("90s", "1h30m")."""

    def check(value: object) -> float | None:
        if not isinstance(value, str | int | float):
            return None
        try:
            return durations.parse(value, "value", minimum=lo, allow_zero=lo == 0, maximum=hi)
        except Invalid:
            return None

    check.__doc__ = (
        f"a number of seconds or a duration (90s, 15m, 2h) from {durations.spell(lo)}"
        f" to {durations.spell(hi)}"
    )
    return check


def _count(value: object) -> int | None:
    """an integer between 1 and 1024"""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= 1024 else None


def _usd(value: object) -> float | None:
    return amount(value)


_usd.__doc__ = AMOUNT_RULE


def _flag(value: object) -> bool | None:
    """true or false"""
    return value if isinstance(value, bool) else None


def _harness_name(value: object) -> str | None:
    """a harness name (letters, digits, _ and -)"""
    return value if isinstance(value, str) and NAME_RE.fullmatch(value) else None


def _prefix(value: object) -> str | None:
    """a tmux key such as "C-a" """
    return value if isinstance(value, str) and PREFIX_RE.fullmatch(value) else None


def _keep(lo: int) -> Callable[[object], int | None]:
    def check(value: object) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return value if lo <= value <= MAX_KEEP else None

    check.__doc__ = f"an integer between {lo} and {MAX_KEEP}"
    return check


def _days(value: object) -> float | None:
    """a number of days between 0.001 and 36500, or a duration such as "12h" or "2w" """
    if isinstance(value, str):
        try:
            seconds = durations.parse(value, "keep_days", minimum=86.4, maximum=36500 * 86400)
        except Invalid:
            return None
        return seconds / 86400
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0.001 <= value <= 36500 else None


class Retention(Record):
    """`[retention]`: what pruning keeps (issue 17). Counts are per session for
    turns and per home for waves and events; `auto` lets writers prune at most
    once an hour."""

    keep_turns: int = 500
    keep_days: float = 90.0
    keep_waves: int = 1000
    keep_events: int = 100_000
    auto: bool = True


RETENTION_KEYS: dict[str, Callable[[object], Any]] = {
    "keep_turns": _keep(1),
    "keep_days": _days,
    "keep_waves": _keep(0),
    "keep_events": _keep(0),
    "auto": lambda v: v if isinstance(v, bool) else None,
}


def _sandbox(value: object) -> str | None:
    """true, false or "optional"."""
    if value is True:
        return "on"
    if value is False:
        return "off"
    return value if value == "optional" else None


KEYS: dict[str, Callable[[object], Any]] = {
    "default_harness": _harness_name,
    "window": _seconds(0.05, 3600),
    "grace": _seconds(0, 3600),
    "max_concurrent": _count,
    "strict": _flag,
    "tmux_prefix": _prefix,
    "login_shell": _flag,
    "login_timeout": _seconds(0.1, 600),
    "limit_margin": _seconds(0, 3600),
    "max_running": _count,
    "queue": _flag,
    "stagger": _seconds(0, MAX_STAGGER),
    "budget_day": _usd,
    "sandbox": _sandbox,
}


class Config(Record):
    """The merged defaults, and which files they came from (in reading order)."""

    default_harness: str | None = None
    window: float | None = None
    grace: float | None = None
    max_concurrent: int | None = None
    strict: bool = False
    tmux_prefix: str | None = None
    # Turns run in the environment of the user's interactive login shell
    # (`"$SHELL" -ilc`), which must answer within login_timeout seconds.
    login_shell: bool = True
    login_timeout: float = 10.0
    # After a usage limit's reset time, this long before resuming.
    limit_margin: float | None = None
    # USD: no turn starts once the home's known spend today has reached it.
    budget_day: float | None = None
    # At most this many turns run in the home at once (others queue or are refused).
    max_running: int | None = None
    # `spex wake` queues when the session is busy, as with --queue.
    queue: bool = False
    # Launches of one harness at least this far apart (spexsup.adapters.stagger); 0: none.
    stagger: float | None = None
    # Sessions that say nothing are sandboxed (DESIGN §19): "on", "optional",
    # "off", or None (the harness's default).
    sandbox: str | None = None
    retention: Retention = Retention()
    # `[serve] url`: the public address of `spex serve`, for notifications' links.
    serve_url: str | None = None
    # `[pricing."MODEL"]`: USD per million tokens, for cost estimates.
    pricing: Mapping[str, Price] = MappingProxyType({})
    files: tuple[Path, ...] = ()
    raw: Mapping[str, Any] = MappingProxyType({})


def config_files(home: Path) -> list[Path]:
    """The candidate files, later ones winning."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    user = Path(xdg) if xdg else Path.home() / ".config"
    return [user / "spexsup" / "config.toml", home / "config.toml"]


def _line_of(text: str, key: str, table: str | None = None) -> int:
    """The line of `key` (inside `[table]` when given), else of the table, else 1."""
    inside = table is None
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(r"\s*\[\s*([^\]]*?)\s*\]", line)
        if table is not None and header:
            if inside and header.group(1) != table:
                break
            inside = header.group(1) == table
            if inside and key == "":
                return number
            continue
        if inside and key and re.match(rf"\s*{re.escape(key)}\s*=", line):
            return number
    return _line_of(text, "", table) if table is not None and key else 1


def _retention(
    path: Path, text: str, value: object, base: Retention, bad: Callable[[Failed], None]
) -> Retention:
    if not isinstance(value, dict):
        where = f"{path}:{_line_of(text, 'retention')}"
        bad(Failed(f"{where}: field 'retention' must be a table ([retention])"))
        return base
    fields: dict[str, Any] = {}
    for key, item in value.items():
        where = f"{path}:{_line_of(text, key, 'retention')}"
        check = RETENTION_KEYS.get(key)
        if check is None:
            unknown_key(where, key, list(RETENTION_KEYS), "[retention]")
            continue
        checked = check(item)
        if checked is None:
            what = (check.__doc__ or "true or false").strip()
            bad(Failed(f"{where}: field 'retention.{key}' must be {what}"))
            continue
        fields[key] = checked
    return base._replace(**fields)


# A price above this per million tokens is a typo (no model costs $1M per million).
MAX_PRICE = 1_000_000.0
PRICE_WORDS = "a number of USD per million tokens, from 0 to 1000000"


def _pricing_line(text: str, model: str, key: str = "") -> int:
    """The line of `key` in `[pricing."MODEL"]` (however the name is quoted),
    else of that header, else of `[pricing]`/`pricing`, else 1."""
    name = rf"(?:\"{re.escape(model)}\"|'{re.escape(model)}'|{re.escape(model)})"
    header = re.compile(rf"\s*\[\s*pricing\s*\.\s*{name}\s*\]")
    inside, found = False, 0
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*\[", line):
            inside = bool(header.match(line))
            if inside and not found:
                found = number
            continue
        if inside and key and re.match(rf"\s*{re.escape(key)}\s*=", line):
            return number
    if found:
        return found
    if model:  # `[pricing]` with `MODEL = …` in it
        within = _line_of(text, model, "pricing")
        if within > 1:
            return within
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*(?:\[\s*pricing\b|pricing\s*=)", line):
            return number
    return 1


def _price(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value <= MAX_PRICE else None


def _pricing(
    path: Path, text: str, value: object, base: Mapping[str, Price], bad: Callable[[Failed], None]
) -> Mapping[str, Price]:
    """`[pricing."MODEL"]` tables: `input` and `output` (required), `cache_read`,
    `cache_write`, each USD per million tokens. A later file's model replaces
    an earlier file's whole table for that model."""
    if not isinstance(value, dict):
        where = f"{path}:{_pricing_line(text, '')}"
        bad(Failed(f"{where}: field 'pricing' must be tables ([pricing.\"MODEL\"])"))
        return base
    out = dict(base)
    for model, table in value.items():
        label = f'pricing."{clip(model)}"'
        if not isinstance(table, dict):
            where = f"{path}:{_pricing_line(text, model)}"
            bad(Failed(f"{where}: field {label!r} must be a table ([{label}] with input, output)"))
            continue
        fields: dict[str, float] = {}
        broken = False
        for key, item in table.items():
            where = f"{path}:{_pricing_line(text, model, key)}"
            if key not in KINDS:
                unknown_key(where, key, list(KINDS), f"[{label}]")
                continue
            price = _price(item)
            if price is None:
                bad(Failed(f"{where}: field '{label}.{key}' must be {PRICE_WORDS}"))
                broken = True
                continue
            fields[key] = price
        if broken:
            continue
        missing = [k for k in ("input", "output") if k not in fields]
        if missing:
            where = f"{path}:{_pricing_line(text, model)}"
            bad(Failed(f"{where}: [{label}] needs {' and '.join(missing)} ({PRICE_WORDS})"))
            continue
        out[model] = Price(**fields)
    return MappingProxyType(out)


def _serve(
    path: Path, text: str, value: object, values: dict[str, Any], bad: Callable[[Failed], None]
) -> None:
    """`[serve]`: `url`, the address `spex serve` is reached at from outside
    (behind a proxy, a tunnel): notifications link a session's page under it."""
    if not isinstance(value, dict):
        bad(Failed(f"{path}:{_line_of(text, 'serve')}: field 'serve' must be a table ([serve])"))
        return
    for key, item in value.items():
        where = f"{path}:{_line_of(text, key, 'serve')}"
        if key != "url":
            unknown_key(where, key, ["url"], "[serve]")
        elif not (isinstance(item, str) and re.fullmatch(r"https?://[^\s]+", item)):
            bad(Failed(f"{where}: field 'serve.url' must be an http:// or https:// URL"))
        else:
            values["serve_url"] = item


def _read(path: Path) -> tuple[str, dict[str, Any]] | None:
    """One file's text and table; None when it does not exist, Failed when it
    cannot be read or parsed."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise Failed(f"{path}: cannot read config: {e}") from None
    import tomllib

    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        # tomllib's message ends with "(at line N, column M)".
        raise Failed(f"{path}: {e}", hint="fix or remove the file") from None
    except RecursionError:
        raise Failed(f"{path}: nested too deeply", hint="fix or remove the file") from None


def _apply(
    path: Path,
    text: str,
    data: dict[str, Any],
    values: dict[str, Any],
    raw: dict[str, Any],
    bad: Callable[[Failed], None],
) -> None:
    """Check one file's keys into `values` (and its raw tables into `raw`). An
    unknown key is a warning and skipped; a bad value goes to `bad`, which
    raises it (`load`) or keeps it and goes on (`check_file`)."""
    for key, value in data.items():
        if key == "retention":
            values[key] = _retention(path, text, value, values.get(key, Retention()), bad)
            continue
        if key == "pricing":
            values[key] = _pricing(path, text, value, values.get(key, {}), bad)
            continue
        if key == "serve":
            _serve(path, text, value, values, bad)
            continue
        if key in RAW_TABLES:
            raw[key] = value
            continue
        check = KEYS.get(key)
        where = f"{path}:{_line_of(text, key)}"
        if check is None:
            unknown_key(where, key, [*KEYS, *RAW_TABLES, "retention", "pricing", "serve"])
            continue
        checked = check(value)
        if checked is None:
            bad(Failed(f"{where}: field {key!r} must be {(check.__doc__ or '').strip()}"))
            continue
        values[key] = checked


def _raise(error: Failed) -> None:
    raise error


def load(home: Path) -> Config:
    """Read and merge the config files; raise `Failed` on the first broken one.
    Unknown keys are warned of (`errors.warn`) and the rest of the file applies."""
    values: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    read: list[Path] = []
    for path in config_files(home):
        found = _read(path)
        if found is None:
            continue
        _apply(path, *found, values, raw, _raise)
        read.append(path)
    return Config(**values, files=tuple(read), raw=raw)


def check_file(path: Path) -> tuple[list[Failed], Mapping[str, Any]]:
    """`spex doctor`: every bad value of one file (not only the first), and its
    raw tables (`[[hook]]`, `[host.NAME]`) for their owners to check. Unknown
    keys are warned of, as by `load`."""
    problems: list[Failed] = []
    raw: dict[str, Any] = {}
    try:
        found = _read(path)
    except Failed as e:
        return [e], raw
    if found is not None:
        _apply(path, *found, {}, raw, problems.append)
    return problems, raw
