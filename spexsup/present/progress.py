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

from spexsup import states
from spexsup.pane import turndir
from spexsup.present.spend import LegCost, running_cost, spend_text
from spexsup.present.turnerror import beyond_exit

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

# A leg whose output log grew within this many seconds is "producing output".
OUTPUT_FRESH = 10.0
SUCCESS = states.SUCCESS
ACTIVE = (None, *states.ACTIVE)


def stage(leg: dict[str, Any], home: Path, now: float) -> str:
    """`pending`, `queued`, `launching`, `confirmed`, `producing output`,
    `ending` (its harness exited, its end not recorded yet), `ended …`, or
    why the leg never ran (`failed: …`, `refused: …`, `aborted`)."""
    if leg["status"] == states.LegStatus.PENDING:
        return "pending"
    if leg["status"] == states.LegStatus.LAUNCHING:
        return "launching"
    if leg["status"] == states.LegStatus.ABORTED or leg["verdict"] == states.Verdict.ABORTED:
        return "aborted"
    if leg["verdict"] == states.Verdict.QUEUED and leg["turn"] is None:
        return "queued"
    directory = turndir.path(home, leg["session"], leg["turn"]) if leg["turn"] else None
    checked = _check_stage(directory, now) if directory is not None else ""
    from spexsup.core.wavedoc import launched

    state = leg.get("turn_state")
    ran = launched(leg) and state not in ACTIVE  # a turn that failed in its window ran
    if (
        leg["verdict"] not in (*SUCCESS, states.Verdict.UNCONFIRMED, states.Verdict.QUEUED)
        and not ran
    ):
        verdict = f"{leg['verdict']}, {checked}" if checked else str(leg["verdict"])
        return f"{verdict}: {leg['error']}" if leg["error"] else verdict
    if state in ACTIVE:
        if directory is not None and _exited(directory):
            # Its harness is gone; the reporter has yet to record the end.
            return f"ending, {checked}" if checked else "ending"
        if checked:
            return checked
        if directory is not None and _fresh(directory, now):
            return "producing output"
        return "confirmed"
    rc = "" if leg["rc"] is None else f" rc={leg['rc']}"
    line = f"ended {state}{rc}" + (f", {checked}" if checked else "")
    error = leg.get("turn_error") or leg["error"]
    # A failed check says its own words (`verify failed (rc 1)`), not its error again.
    why = (
        beyond_exit(error, leg["rc"])
        if state != states.TurnState.COMPLETE and not checked
        else None
    )
    return f"{line}: {why}" if why else line


def _check_stage(turn_dir: Path, now: float) -> str:
    """`verifying 0m12s`, `verified`, `verify failed (rc 1)`, `verify timed out`,
    or "" for a turn with no check (yet), from its turn dir's files."""
    try:
        started = (turn_dir / turndir.VERIFY_STARTED).stat().st_mtime
    except OSError:
        return ""
    try:
        rc = (turn_dir / turndir.VERIFY_RC).read_text().strip()
    except OSError:
        took = int(max(0.0, now - started))
        return f"verifying {took // 60}m{took % 60:02d}s"
    return check_words({"state": None, "rc": int(rc) if rc.isdigit() else None}, turn_dir)


def check_words(check: dict[str, Any], turn_dir: Path | None = None) -> str:
    """A leg's check as the fan-out lines say it (see `_check_stage`)."""
    timed_out = check.get("state") == states.Check.VERIFY_TIMED_OUT or (
        turn_dir is not None and (turn_dir / turndir.VERIFY_TIMED_OUT).exists()
    )
    if timed_out:
        return "verify timed out"
    if check.get("state") == states.Check.VERIFYING:
        return "verifying"
    if check.get("rc") == 0:
        return "verified"
    return (
        f"verify failed (rc {check.get('rc')})" if check.get("rc") is not None else "verify failed"
    )


def _exited(turn_dir: Path) -> bool:
    """Has the turn's harness exited (its wrapper's marker says `reporting`
    or `exit`), whatever the store still says?"""
    from spexsup.pane import marker

    return marker.read(turn_dir).stage in (marker.Stage.REPORTING, marker.Stage.EXIT)


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
    return not text.startswith(
        ("pending", "queued", "launching", "confirmed", "producing", "ending")
    )


class LegsView:
    """The live table: SESSION, STAGE, ELAPSED (and the turn), redrawn in
    place, over a footer that counts the legs by outcome (`count_line`).

    `update` may be called from any thread (the launch threads call it);
    rich's `Live` renders from its own thread. NO_COLOR is honoured by rich.
    """

    def __init__(
        self,
        home: Path,
        doc: dict[str, Any],
        console: Console | None = None,
        costs: LegCost | None = None,
    ) -> None:
        from rich.console import Console
        from rich.live import Live

        self.home = home
        self.doc = doc
        self.costs = costs
        self.spent: dict[str, str] = {}  # an ended leg's cost, read once
        self.running: LegCost | None = None  # a running leg's, read each time
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
        columns = ("SESSION", "STAGE", "ELAPSED", "TURN") + (("COST",) if self.costs else ())
        for column in columns:
            table.add_column(column, no_wrap=column != "STAGE")
        legs = [(leg, stage(leg, self.home, now)) for leg in doc["legs"]]
        # At most the terminal's height: the header and the footer (the legs
        # by outcome) never scroll off. The legs still running first; the
        # rest counted on a `+N more` line.
        room = max(1, self.console.size.height - 4)
        hidden = 0
        if len(legs) > room:
            legs.sort(key=lambda pair: ended(pair[1]))  # stable: running ones first
            room -= 1
            hidden, legs = len(legs) - room, legs[:room]
        for leg, text in legs:
            style = None
            if text.startswith("ended complete"):
                style = "green"
            elif ended(text):
                style = "red"
            elif text == "producing output":
                style = "cyan"
            cells = [leg["session"], text, elapsed(doc, leg, now), leg["turn"] or ""]
            if self.costs is not None:
                cells.append(self._cost(doc, leg, text))
            table.add_row(*cells, style=style)
        if hidden:
            table.add_row(f"+{hidden} more", "", "", "")
        from rich.console import Group
        from rich.text import Text

        from spexsup.core.wavedoc import count_line

        return Group(table, Text(count_line(doc), no_wrap=True, overflow="ellipsis"))

    def _cost(self, doc: dict[str, Any], leg: dict[str, Any], text: str) -> str:
        if self.costs is not None and not ended(text) and leg["turn"]:
            if self.running is None:
                self.running = running_cost(self.home)
            return self.running(leg["session"], leg["turn"])  # `$0.42 so far`
        if not text.startswith("ended") or self.costs is None:
            return ""
        if leg["session"] not in self.spent:
            self.spent[leg["session"]] = self.costs(doc["id"], leg["session"])
        return self.spent[leg["session"]]


class PlainLegs:
    """Off a terminal: `  a: ended complete rc=0 · 0m03s`, one line when a
    leg ends (or fails to launch), flushed at once; `shown` says which did."""

    def __init__(self, home: Path, prefix: str = "  ", costs: LegCost | None = None) -> None:
        self.home = home
        self.prefix = prefix
        self.costs = costs
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
                spent = self.costs(doc["id"], leg["session"]) if self.costs else ""
                # A cost nobody knows (`?`: a harness that prints no usage) is not said here.
                known = spent not in ("", "?") and text.startswith("ended")
                line += f" · {spent}" if known else ""
                sys.stdout.write(line + "\n")
            sys.stdout.flush()


# --- the lines a fan-out prints (and spex wave) ---


def leg_line(leg: dict[str, Any]) -> str:
    """`bad: failed turn T rc=1`, `d: confirmed turn T ended failed rc=3 (cause)`:
    the verdict, the turn, its end (unless the verdict said it: `failed …
    ended failed`), and the cause only where it says more than that."""
    verdict = leg["verdict"] or leg["status"]
    parts = [f"{leg['session']}: {verdict}"]
    if leg["verdict"] == states.Verdict.QUEUED and leg["turn"] is None:
        waits = f"; waits for {leg['waits']}" if leg.get("waits") else ""
        parts.append(f"{leg.get('queued')} (position {leg.get('position')}{waits})")
    if leg["turn"]:
        parts.append(f"turn {leg['turn']}")
    state = leg.get("turn_state")
    if state == states.TurnState.RUNNING:
        parts.append("running")
    elif state and SAID_BY.get(verdict) != state:
        parts.append(f"ended {state}")
    if leg["rc"] is not None:
        parts.append(f"rc={leg['rc']}")
    if leg.get("verify"):
        parts.append(check_words(leg["verify"]))
    if leg.get("model"):
        parts.append(f"on {leg['model']}")
    for attempt in leg.get("fallbacks") or ():
        was = attempt.get("model") or "the default"
        parts.append(f"(fell back from {was}: {attempt.get('cause')})")
    if leg.get("repeat"):
        parts.append("(repeat of its key: no second turn)")
    if leg.get("cost") and leg["cost"].get("amount") is not None:
        from spexsup import usage

        parts.append(
            "· " + usage.from_json({"usage": leg["usage"], "cost": leg["cost"]}).cost_text()
        )
    elif leg.get("so_far"):
        from spexsup.present.render import so_far_text

        parts.append("· " + so_far_text(leg["so_far"]))
    error = beyond_exit(leg.get("turn_error") or leg["error"], leg["rc"])
    if error:
        parts.append(f"({error})")
    elif [f for f in leg.get("flags") or () if f != states.Flag.VERIFIED or not leg.get("verify")]:
        from spexsup.adapters.outcome import describe

        parts.append(f"({describe(leg['flags'])})")
    from spexsup.pane.pretty import one_line

    return one_line(" ".join(parts))


# A verdict that already says its turn's end: `failed turn T`, not `… ended failed`.
SAID_BY = {"failed": "failed", "completed": "complete", "skipped": "skipped", "aborted": "aborted"}


def counts_line(doc: dict[str, Any]) -> str:
    """A local wave's legs by outcome (`wavedoc.count_line`); a fleet wave's
    with its hosts."""
    from spexsup.core.wavedoc import count_line

    if doc.get("kind") == "fleet":
        return count_line(doc, hosts=len(doc.get("hosts") or []))
    return count_line(doc)


def summary(doc: dict[str, Any]) -> str:
    """`wave W: partial · 3 legs: 1 complete · 1 failed · 0 skipped · 1 running · $0.09`."""
    detached = (
        " (detached)" if doc.get("detached_at") and doc["state"] == states.WaveState.RUNNING else ""
    )
    spent = spend_text(doc)
    if doc.get("so_far"):  # a leg runs and its pane counted (DESIGN §31)
        from spexsup.present.render import so_far_text

        spent = "cost " + so_far_text(doc["so_far"])
    line = f"wave {doc['id']}: {doc['state']}{detached} · {counts_line(doc)}" + (
        f" · {spent}" if spent else ""
    )
    budget = (doc.get("pacing") or {}).get("budget")
    if budget is not None:
        from spexsup.usage import money

        exact = (doc.get("cost") or {}).get("exact")
        line += f" · budget {money(budget)}" + ("" if exact else " (of the costs known)")
    return line


def story_lines(doc: dict[str, Any]) -> list[str]:
    """A retried wave's combined view: what its legs' last attempts add up
    to, and each retried leg's last attempt, with the wave it ran in."""
    from spexsup.core.wavedoc import count_line

    combined = doc["combined"]
    retries = len(combined["waves"]) - 1
    head = f"after {retries} retr{'ies' if retries > 1 else 'y'}: {combined['state']}"
    lines = [f"{head} · {count_line(combined)}"]
    lines += [
        f"  {leg_line(leg)} (attempt {leg['attempts']}, wave {leg['wave']})"
        for leg in combined["legs"]
        if leg["attempts"] > 1
    ]
    return lines


class WaitProgress:
    """`spex wait`'s output: one plain line per turn end as it happens and, when
    `live` (a terminal, several sessions), a counter line redrawn in place:
    `2/5 ended · 1 failed · 3m12s`. No colour, so NO_COLOR has nothing to undo."""

    def __init__(self, total: int, *, live: bool) -> None:
        self.total = total
        self.live = live
        self.count = 0
        self.failed = 0
        self.started = time.monotonic()
        self.shown = False

    def ended(self, e: Any) -> None:
        self.count += 1
        self.failed += int(e.state != states.TurnState.COMPLETE)
        self._clear()
        from spexsup.present.render import ended_line

        sys.stdout.write(ended_line(e.as_json()) + "\n")
        self.tick()

    def tick(self) -> None:
        if self.live and self.count < self.total:
            took = int(time.monotonic() - self.started)
            line = f"{self.count}/{self.total} ended · {self.failed} failed"
            line += f" · {took // 60}m{took % 60:02d}s"
            sys.stdout.write(f"\r\x1b[K{line}")
            self.shown = True
        sys.stdout.flush()

    def _clear(self) -> None:
        if self.shown:
            sys.stdout.write("\r\x1b[K")
            self.shown = False

    def close(self) -> None:
        self._clear()
        sys.stdout.flush()
