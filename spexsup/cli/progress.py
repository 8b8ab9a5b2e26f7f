"""Live progress of a fan-out: each leg's stage and elapsed time.

On a terminal `LegsView` keeps a rich `Live` table redrawn in place (twice
a second, for the clocks and for "producing output", which is a matter of
time); elsewhere `PlainLegs` prints one plain line per leg as it ends (a
log, not a screen: 30 legs are 30 lines), no escape codes. Render only:
the stages come from the wave's document and a `stat` of each running
leg's output log.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup.pane import turndir

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

# A leg whose output log grew within this many seconds is "producing output".
OUTPUT_FRESH = 10.0
SUCCESS = ("confirmed", "completed")
ACTIVE = (None, "starting", "running")


def stage(leg: dict[str, Any], home: Path, now: float) -> str:
    """`pending`, `queued`, `launching`, `confirmed`, `producing output`, `ended …`, or why
    the leg never ran (`failed: …`, `refused: …`, `aborted`)."""
    if leg["status"] == "pending":
        return "pending"
    if leg["status"] == "launching":
        return "launching"
    if leg["status"] == "aborted" or leg["verdict"] == "aborted":
        return "aborted"
    if leg["verdict"] == "queued" and leg["turn"] is None:
        return "queued"
    if leg["verdict"] not in (*SUCCESS, "unconfirmed", "queued"):
        return f"{leg['verdict']}: {leg['error']}" if leg["error"] else str(leg["verdict"])
    state = leg.get("turn_state")
    if state in ACTIVE:
        if leg["turn"] and _fresh(turndir.path(home, leg["session"], leg["turn"]), now):
            return "producing output"
        return "confirmed"
    rc = "" if leg["rc"] is None else f" rc={leg['rc']}"
    return f"ended {state}{rc}"


def _fresh(turn_dir: Path, now: float) -> bool:
    """Did the output log grow lately? (Appends move its mtime; the wrapper
    creates it empty, which is no output.)"""
    try:
        st = (turn_dir / turndir.OUTPUT).stat()
    except OSError:
        return False
    return st.st_size > 0 and now - st.st_mtime < OUTPUT_FRESH


def elapsed(doc: dict[str, Any], leg: dict[str, Any], now: float) -> str:
    took = int((leg.get("ended_at") or now) - doc["created_at"])
    return f"{took // 60}m{took % 60:02d}s"


def ended(text: str) -> bool:
    return not text.startswith(("pending", "queued", "launching", "confirmed", "producing"))


class LegsView:
    """The live table: SESSION, STAGE, ELAPSED (and the turn), redrawn in place.

    `update` may be called from any thread (the launch threads call it);
    rich's `Live` renders from its own thread. NO_COLOR is honoured by rich.
    """

    def __init__(self, home: Path, doc: dict[str, Any], console: Console | None = None) -> None:
        from rich.console import Console
        from rich.live import Live

        self.home = home
        self.doc = doc
        self.lock = threading.Lock()
        self.console = console or Console()
        self.live: Live = Live(
            get_renderable=self.render,
            console=self.console,
            refresh_per_second=2,
            transient=False,
        )

    def __enter__(self) -> LegsView:
        self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.stop()

    def update(self, doc: dict[str, Any]) -> None:
        with self.lock:
            self.doc = doc
        self.live.refresh()

    def print(self, line: str) -> None:
        """A line above the table (the table stays at the bottom)."""
        self.live.console.print(line, highlight=False, markup=False)

    def render(self) -> RenderableType:
        from rich.table import Table

        with self.lock:
            doc = self.doc
        now = time.time()
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for column in ("SESSION", "STAGE", "ELAPSED", "TURN"):
            table.add_column(column, no_wrap=column != "STAGE")
        for leg in doc["legs"]:
            text = stage(leg, self.home, now)
            style = None
            if text.startswith("ended complete"):
                style = "green"
            elif ended(text):
                style = "red"
            elif text == "producing output":
                style = "cyan"
            table.add_row(
                leg["session"], text, elapsed(doc, leg, now), leg["turn"] or "", style=style
            )
        return table


class PlainLegs:
    """Off a terminal: `  a: ended complete rc=0 · 0m03s`, one line when a
    leg ends (or fails to launch), flushed at once; `shown` says which did."""

    def __init__(self, home: Path, prefix: str = "  ") -> None:
        self.home = home
        self.prefix = prefix
        self.shown: dict[str, str] = {}
        self.lock = threading.Lock()

    def update(self, doc: dict[str, Any]) -> None:
        now = time.time()
        with self.lock:
            for leg in doc["legs"]:
                text = stage(leg, self.home, now)
                if leg["session"] in self.shown or not ended(text):
                    continue
                self.shown[leg["session"]] = text
                line = f"{self.prefix}{leg['session']}: {text} · {elapsed(doc, leg, now)}"
                sys.stdout.write(line + "\n")
            sys.stdout.flush()
