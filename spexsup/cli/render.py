"""Rendering: JSON for machines, plain aligned columns for people.

Tables are never wrapped: a pipe gets one line per row, columns two spaces
apart with no trailing blanks; a terminal gets the same, with the columns
named `squeeze` shortened (home as `~`, an ellipsis in the middle) and any
line still too wide cut at the terminal's edge.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spexsup.ids import SCHEMA_VERSION, iso


def print_json(data: Any) -> None:
    """Indented for a person at a terminal; one compact line for a pipe, which
    json's C encoder writes many times faster (`ls --json` of 1 000 sessions)."""
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(data, indent=indent) + "\n")


__all__ = ["iso"]


def document(data: dict[str, Any]) -> dict[str, Any]:
    """A top-level JSON document: `schema_version` first."""
    return {"schema_version": SCHEMA_VERSION, **data}


def span(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def age(seconds: float) -> str:
    return f"{span(max(0.0, seconds))} ago"


def short_id(turn_id: str) -> str:
    """The random part of an id, what `--turn` and `spex wave` accept as a prefix."""
    return turn_id.rpartition("-")[2]


def turn_cells(turn: dict[str, Any] | None, *, wide: bool = False) -> tuple[str, str]:
    """(`<id> <state> rc=N`, `3m ago, ran 9s`) for a session's current or last turn."""
    if turn is None:
        return "-", "-"
    rc = "" if turn["rc"] is None else f" rc={turn['rc']}"
    ident = turn["id"] if wide else short_id(turn["id"])
    when = age(time.time() - turn["started_at"])
    if turn["ended_at"] is not None:
        when += f", ran {span(turn['ended_at'] - turn['started_at'])}"
    state = turn["state"]
    if state in ("starting", "running") and turn.get("waiting_until"):
        clock = time.strftime("%H:%M", time.localtime(turn["waiting_until"]))
        state = f"waiting for usage reset {clock}"
    return f"{ident} {state}{rc}", when


def shorten_path(path: str, width: int) -> str:
    home = str(Path.home())
    if home != "/" and (path == home or path.startswith(home + "/")):
        path = "~" + path[len(home) :]
    if len(path) <= width or width < 5:
        return path
    keep = width - 1
    return path[: keep // 2] + "…" + path[len(path) - (keep - keep // 2) :]


def _columns() -> int:
    """The terminal's own width (its ioctl, not a stale $COLUMNS)."""
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except OSError:
        return shutil.get_terminal_size().columns


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    squeeze: str | None = None,
    tty: bool | None = None,
) -> None:
    """Print aligned columns (see the module doc); `squeeze` names the column a
    terminal shortens to fit (a path)."""
    tty = sys.stdout.isatty() if tty is None else tty
    width = _columns() if tty else 0
    grid = [list(headers), *[list(r) for r in rows]]
    if tty and squeeze is not None and squeeze in headers:
        col = list(headers).index(squeeze)
        others = sum(max(len(r[i]) for r in grid) + 2 for i in range(len(headers)) if i != col)
        room = max(len(squeeze), width - others)
        for r in grid[1:]:
            r[col] = shorten_path(r[col], room)
    widths = [max(len(r[i]) for r in grid) for i in range(len(headers))]
    out = []
    for r in grid:
        line = "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        if tty and len(line) > width:
            line = line[: width - 1] + "…"
        out.append(line)
    sys.stdout.write("\n".join(out) + "\n")
