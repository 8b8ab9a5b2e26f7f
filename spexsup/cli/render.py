"""Rendering: JSON for machines, a rich table for people (imported lazily)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def turn_cell(turn: dict[str, Any] | None) -> str:
    if turn is None:
        return "-"
    rc = "" if turn["rc"] is None else f" rc={turn['rc']}"
    return f"{turn['id']} {turn['state']}{rc} {age(time.time() - turn['started_at'])}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold")
    for h in headers:
        t.add_column(h, overflow="fold")
    for row in rows:
        t.add_row(*row)
    Console(soft_wrap=True).print(t)
