"""User defaults from `config.toml` (DESIGN §8 "Config").

Read in order: `~/.config/spexsup/config.toml` (or `$XDG_CONFIG_HOME`), then
`$SPEXSUP_HOME/config.toml`, whose keys win. A missing file is no error; a
file that does not parse, or a key with a wrong type or value, is `Failed`
(exit 1) naming the file, the line and the field. Tables owned by other
features (`[[hook]]`, `[host.NAME]`) are kept raw for them to validate.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spexsup.errors import Failed

NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
# tmux key names: C-a, M-x, C-Space, F12, ` …
PREFIX_RE = re.compile(r"(?:[CMS]-)*(?:[!-~]|[A-Za-z][A-Za-z0-9]{1,15})")
RAW_TABLES = ("hook", "host")


def _number(lo: float, hi: float) -> Callable[[object], float | None]:
    def check(value: object) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value) if lo <= value <= hi else None

    check.__doc__ = f"a number of seconds between {lo:g} and {hi:g}"
    return check


def _count(value: object) -> int | None:
    """an integer between 1 and 1024"""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= 1024 else None


def _flag(value: object) -> bool | None:
    """true or false"""
    return value if isinstance(value, bool) else None


def _harness_name(value: object) -> str | None:
    """a harness name (letters, digits, _ and -)"""
    return value if isinstance(value, str) and NAME_RE.fullmatch(value) else None


def _prefix(value: object) -> str | None:
    """a tmux key such as "C-a" """
    return value if isinstance(value, str) and PREFIX_RE.fullmatch(value) else None


KEYS: dict[str, Callable[[object], Any]] = {
    "default_harness": _harness_name,
    "window": _number(0.05, 3600),
    "grace": _number(0, 3600),
    "max_concurrent": _count,
    "strict": _flag,
    "tmux_prefix": _prefix,
}


@dataclass(frozen=True)
class Config:
    """The merged defaults, and which files they came from (in reading order)."""

    default_harness: str | None = None
    window: float | None = None
    grace: float | None = None
    max_concurrent: int | None = None
    strict: bool = False
    tmux_prefix: str | None = None
    files: tuple[Path, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict)


def config_files(home: Path) -> list[Path]:
    """The candidate files, later ones winning."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    user = Path(xdg) if xdg else Path.home() / ".config"
    return [user / "spexsup" / "config.toml", home / "config.toml"]


def _line_of(text: str, key: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line):
            return number
    return 1


def load(home: Path) -> Config:
    """Read and merge the config files; raise `Failed` on the first broken one."""
    values: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    read: list[Path] = []
    for path in config_files(home):
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as e:
            raise Failed(f"{path}: cannot read config: {e}") from None
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            # tomllib's message ends with "(at line N, column M)".
            raise Failed(f"{path}: {e}", hint="fix or remove the file") from None
        for key, value in data.items():
            if key in RAW_TABLES:
                raw[key] = value
                continue
            check = KEYS.get(key)
            where = f"{path}:{_line_of(text, key)}"
            if check is None:
                known = ", ".join(KEYS)
                raise Failed(f"{where}: unknown field {key!r}", hint=f"known: {known}")
            checked = check(value)
            if checked is None:
                raise Failed(f"{where}: field {key!r} must be {(check.__doc__ or '').strip()}")
            values[key] = checked
        read.append(path)
    return Config(**values, files=tuple(read), raw=raw)
