"""Help pages, kept once typer has written them.

`spex --help` is typer's: it imports every command module and builds every
command, more than 60 ms on each run, for a page that changes only when spex
does. The page typer printed is kept under the user's cache directory, keyed
by the command line, the width it was laid out for and the size and mtime of
every module of the package; the next identical request prints it as is. A
key that differs in anything is a new page; a cache that cannot be read or
written is no cache (typer answers).
"""

from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path


def _directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "spexsup" / "help"


def _columns() -> int:
    """The width click lays a page out for (its own rule: $COLUMNS, else
    the terminal's, else 80)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 80
    return columns


def key(argv: list[str]) -> str:
    """What the page depends on: the words, the width, and the package."""
    from spexsup import __version__

    package = Path(__file__).resolve().parent.parent
    stamps = []
    for path in sorted(package.rglob("*.py")):
        st = path.stat()
        stamps.append(f"{path.relative_to(package)}:{st.st_size}:{st.st_mtime_ns}")
    return "\0".join([__version__, str(_columns()), *argv, *stamps])


def _path(page_key: str) -> Path:
    return _directory() / f"{zlib.crc32(page_key.encode('utf-8', 'surrogateescape')):08x}"


def read(page_key: str) -> tuple[int, str] | None:
    """(exit code, page) kept for this key, or None."""
    try:
        text = _path(page_key).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return None
    kept_key, sep, rest = text.partition("\n\0\n")
    code, sep2, page = rest.partition("\n")
    if not sep or not sep2 or kept_key != page_key.replace("\n", " ") or not code.isdigit():
        return None
    return int(code), page


def keep(page_key: str, code: int, page: str) -> None:
    """Keep the page typer printed (best effort: a failure only costs speed)."""
    from spexsup.paths import write_atomic

    path = _path(page_key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        body = f"{page_key.replace(chr(10), ' ')}\n\0\n{code}\n{page}"
        write_atomic(path, body.encode("utf-8", "surrogateescape"))
    except OSError:
        pass
