"""What `spex top` shows and what wakes it: a board of sessions and its watcher.

`Board` holds one row per session: the session's state, its current or last
turn (state, rc, age), its flags and the last line its turn printed. It is
read-only: a refresh reads what `spex ls` reads (and reconciles as `ls`
does); anything that changes a session is left to the `spex` commands.
What the screen shows of it (`Board.shown`) is those a filter lets through
(`spex ls PATTERN`'s globs, or text a name contains), by name in `ls`'s
natural order or by state, failed first.

`Watcher` arms inotify (watchdog) where every transition shows on disk, and
reports each change through a pipe the screen selects on, so the screen
sleeps until something happens:

- `turns/` and every `turns/<session>/`: a session's first turn, a new turn
  (its directory is made at admission);
- every session's current turn directory: the outcome marker renamed into
  place (`running`, `reporting`, `exit`; the end is committed to SQLite
  before `exit` is written). Renames only: the kernel is not even asked
  about `output.log`, which a chatty harness appends to hundreds of times
  a second (an event each would cost the board a third of a core);
- `$SPEXSUP_HOME/events/`, where the writers of the event log touch `tick`
  and rewrite `status` on every committed transition (stops, resumes, new
  and removed sessions, which leave no turn file);
- the home itself, non-recursively, so that `events/` or `turns/` made after
  the watcher started are seen; in a home with no `events/` yet, a write to
  `state.db-wal` stands in for the tick.

The only timer left is the clock of the ages on screen (see `next_tick`),
which ticks only while a turn runs or an age's text is due to change; at
each tick the running turns' last output lines are read again, each only
when its `output.log` changed size (`Board.reread_output`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import states
from spexsup.core.spex import Spex
from spexsup.pane import turndir
from spexsup.record import Record
from spexsup.states import ACTIVE, VERIFYING
from spexsup.turn.read import listing, name_matches

if TYPE_CHECKING:
    from watchdog.events import FileSystemEvent
    from watchdog.observers.api import BaseObserver, ObservedWatch

logging.getLogger("watchdog").addHandler(logging.NullHandler())


def last_line(directory: Path | None, size: int = 16384) -> str:
    """The last line of a turn's output as a person reads it (JSON events
    rendered for the turn's CLI, no escapes); "" if none."""
    if directory is None:
        return ""
    from spexsup.pane.lines import shorter

    lines = turndir.output_lines(directory, size)
    return shorter(lines[-1], 500) if lines else ""


@dataclass
class Row:
    name: str
    harness: str
    state: str
    turn: dict[str, Any] | None
    flags: list[str]
    turn_dir: Path | None
    last: str = ""
    read_size: int = -1  # output.log's size when `last` was read
    cost: str = "-"  # what the session's turns spent (`usage.Spend.cost_text`)
    # The session as `spex ls --json` shows it (`spex top --json` adds to it).
    entry: dict[str, Any] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.turn is not None and self.turn["state"] in ACTIVE


def _flags(entry: dict[str, Any]) -> list[str]:
    flags = []
    if entry.get("lease"):
        flags.append("leased")
    if entry.get("queued"):
        flags.append(f"{entry['queued']} queued")
    if entry["pane"] in ("missing", "dead", "foreign"):
        flags.append(f"pane {entry['pane']}")
    wt = entry.get("worktree")
    if wt and wt.get("state") == "missing":
        flags.append("worktree missing")
    turn = entry["turn"] or {}
    # Turn flags (denied:<tool>, max-turns, verified, …) where the store records them.
    flags.extend(str(f) for f in turn.get("flags") or [])
    check = turn.get("verify") or {}
    if turn.get("state") in ACTIVE and check.get("state") == VERIFYING:
        flags.append(VERIFYING)  # the agent is done; its check runs
    return flags


# The orders the board cycles through: by name (natural, as `spex ls`), by state.
ORDERS = ("name", "state")
# By state: failed sessions first, then running, stopped, idle, then the rest
# (being made or removed); by name within each.
STATE_RANK: dict[str, int] = {
    s: i for i, s in enumerate((states.FAILED, states.BUSY, states.STOPPED, states.IDLE))
}
GLOB_CHARS = frozenset("*?[")


def filter_globs(text: str) -> list[str]:
    """The globs a filter typed on the board stands for: itself when it is a
    glob (as `spex ls PATTERN` reads one), else any name containing it."""
    return [text if GLOB_CHARS & set(text) else f"*{text}*"]


class Counts(Record):
    """The header's numbers: of the sessions shown (of `total`), how many
    have a turn under way, are failed, are stopped."""

    total: int
    shown: int
    running: int
    failed: int
    stopped: int


def _granule(seconds: float) -> float:
    """How often `render.span` of an age this old changes its text."""
    if seconds < 90:
        return 1.0
    if seconds < 5400:
        return 60.0
    if seconds < 172800:
        return 3600.0
    return 86400.0


@dataclass
class Board:
    spex: Spex
    rows: list[Row] = field(default_factory=list)  # every session, by name
    pattern: str = ""  # the filter; "" lets every session through
    order: str = ORDERS[0]
    shown: list[Row] = field(default_factory=list)  # what the screen shows
    # Each session's spend (issue 26), summed again only when a usage row
    # was added since (`spent_at`: the newest row id then).
    spent: dict[str, Any] = field(default_factory=dict)
    spent_at: int | None = -1
    # What a tick asks, kept from the last refresh and arrangement, so that
    # a tick touches no row: after a few idle seconds, walking a thousand
    # rows cost this board 20-30 ms of CPU where warm it costs 0.2 ms.
    generation: int = 0  # counts arrangements: a screen's layout of `shown` is of one
    running: list[Row] = field(default_factory=list)  # turns under way, shown or not
    any_starting: bool = False
    shown_running: list[Row] = field(default_factory=list)
    shown_ended: list[float] = field(default_factory=list)  # the ended turns' ends
    tally: Counts | None = None

    def refresh(self) -> None:
        """Read every session and its current or last turn (reconciling, as `ls` does)."""

        described = listing(self.spex)
        self._spending()
        rows = []
        for entry in described:
            turn = entry["turn"]
            directory = turndir.path(self.spex.home, entry["name"], turn["id"]) if turn else None
            name, harness, state = entry["name"], entry["harness"], entry["state"]
            row = Row(name, harness, state, turn, _flags(entry), directory, entry=entry)
            row.last = last_line(directory)
            spent = self.spent.get(name)
            if spent is not None:
                row.cost = spent.cost_text()
                entry = {**entry, "usage": spent.usage_json(), "cost": spent.cost_json()}
                row.entry = entry
            if turn and turn.get("so_far"):
                # A running turn: the session's spend with what it spent so
                # far, marked as such (DESIGN §31).
                from spexsup import usage

                now = usage.grand([spent or usage.Spend(), usage.from_json(turn["so_far"])])
                row.cost = f"{now.cost_text()} so far"
            rows.append(row)
        self.rows = rows
        self.running = [r for r in rows if r.active]
        self.any_starting = any(
            r.turn is not None and r.turn["state"] == states.STARTING for r in self.running
        )
        self.arrange()

    def _spending(self) -> None:
        """Every session's total, by one GROUP BY over the rows of its own
        incarnation (not an older session of its name)."""
        db = self.spex.store.db
        (newest,) = db.execute("SELECT max(id) FROM usage").fetchone()
        if newest == self.spent_at:
            return
        from spexsup import config, usage

        self.spent = usage.totals(
            db,
            "session",
            config.load(self.spex.home).pricing,
            where="at >= (SELECT created_at FROM sessions WHERE name = usage.session)",
        )
        self.spent_at = newest

    def arrange(self) -> None:
        """Choose and order `shown` from `rows` by `pattern` and `order`
        (after a refresh, and whenever either changes)."""
        rows = self.rows
        if self.pattern:
            globs = filter_globs(self.pattern)
            rows = [r for r in rows if name_matches(r.name, globs)]
        if self.order == "state":  # a stable sort: by name within a state
            rows = sorted(rows, key=lambda r: STATE_RANK.get(r.state, len(STATE_RANK)))
        self.shown = rows
        self.shown_running = [r for r in rows if r.active]
        ends = (r.turn["ended_at"] for r in rows if r.turn is not None)
        self.shown_ended = [end for end in ends if end is not None]
        self.tally = Counts(
            total=len(self.rows),
            shown=len(rows),
            running=len(self.shown_running),
            failed=sum(r.state == states.FAILED for r in rows),
            stopped=sum(r.state == states.STOPPED for r in rows),
        )
        self.generation += 1

    def next_order(self) -> None:
        self.order = ORDERS[(ORDERS.index(self.order) + 1) % len(ORDERS)]
        self.arrange()

    def reread_output(self) -> list[Row]:
        """The last output line of each running turn shown whose `output.log`
        changed size since it was last read (a stat each; a read only when it
        grew); the rows whose line was read again."""
        changed = []
        for row in self.shown_running:
            if row.turn_dir is None:
                continue
            try:
                size = (row.turn_dir / turndir.OUTPUT).stat().st_size
            except OSError:
                continue
            if size != row.read_size:
                row.read_size = size
                row.last = last_line(row.turn_dir)
                changed.append(row)
        return changed

    def counts(self) -> Counts:
        if self.tally is None:
            self.arrange()
        assert self.tally is not None
        return self.tally

    def starting(self) -> bool:
        return self.any_starting

    def next_tick(self, now: float) -> float | None:
        """Seconds until an age on screen changes its text; None when none will.

        A running turn's age counts seconds, so the board ticks once a second
        while a turn shown runs; ended turns' ages change at most every few
        seconds (they are redrawn together, never more often than every 5 s).
        """
        if self.shown_running:
            return 1.0
        waits: list[float] = []
        for ended in self.shown_ended:
            age = max(0.0, now - ended)
            g = _granule(age)
            # span() rounds: its text changes at the half granule.
            waits.append(g - ((age + g / 2) % g))
        if not waits:
            return None
        return max(5.0, min(waits))

    def watched_dirs(self) -> list[Path]:
        """The turn directories to watch: each session's, and its current turn's."""
        base = turndir.root(self.spex.home)
        out = []
        for row in self.rows:
            out.append(base / row.name)
            if row.turn_dir is not None:
                out.append(row.turn_dir)
        return out


@dataclass
class Changes:
    """What the watcher saw since it was last asked."""

    state: bool = False  # a transition: read every session again
    wal: bool = False  # state.db-wal written (stands in for the event tick)


class Watcher:
    """inotify on the state home for `spex top` (see the module doc).

    Events arrive on watchdog's threads; the first change after a `take()`
    writes one byte to `fd`, so a burst of writes (a chatty harness) costs
    the screen one wake-up, and the screen reads everything with `take()`.
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self.fd, self._poke = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._poke, False)
        self._lock = threading.Lock()
        self._changes = Changes()
        self._armed = False
        self._observer: BaseObserver | None = None
        self._watches: dict[Path, ObservedWatch] = {}

    def _note(self, apply: Any) -> None:
        with self._lock:
            apply(self._changes)
            if self._armed:
                return
            self._armed = True
        with contextlib.suppress(BlockingIOError):
            os.write(self._poke, b".")

    def poke(self) -> None:
        """Wake the screen from another thread (a finished action, a resize)."""
        with contextlib.suppress(BlockingIOError):
            os.write(self._poke, b"!")

    def take(self) -> Changes:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 4096):
                pass
        with self._lock:
            changes, self._changes = self._changes, Changes()
            self._armed = False
        return changes

    def start(self) -> None:
        from watchdog.observers import Observer

        # Never stopped mid-run; a long dispatch timeout spares its thread a
        # wake-up every second.
        self._observer = Observer(timeout=3600)
        self._observer.daemon = True
        self._observer.start()
        self._schedule(self.home, self._home_event)
        for directory in (turndir.root(self.home), self.home / "events"):
            self._schedule(directory, self._dir_event)

    def arm(self, directories: list[Path]) -> bool:
        """Watch exactly these turn directories (plus the fixed ones): new
        ones are added, ones no longer current are dropped. True when a
        directory was added: what changed in it before now was not seen."""
        fixed = {self.home, turndir.root(self.home), self.home / "events"}
        wanted = set(directories)
        for directory in list(self._watches):
            if directory not in wanted and directory not in fixed:
                self._unschedule(directory)
        before = set(self._watches)
        for directory in wanted - before:
            turn_level = directory.parent.parent == turndir.root(self.home)
            self._schedule(directory, self._turn_event if turn_level else self._dir_event)
        # events/ and turns/ may have been made since start(): try again.
        for directory in fixed - before:
            self._schedule(directory, self._dir_event)
        return not set(self._watches) <= before

    def _schedule(self, directory: Path, on_event: Any) -> None:
        from watchdog.events import (
            DirCreatedEvent,
            DirDeletedEvent,
            FileAttribEvent,
            FileClosedEvent,
            FileCreatedEvent,
            FileDeletedEvent,
            FileModifiedEvent,
            FileMovedEvent,
            FileSystemEventHandler,
        )

        assert self._observer is not None
        if not directory.is_dir():
            return

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                on_event(directory, event)

        kinds: list[type[FileSystemEvent]] = [FileMovedEvent]  # a turn's marker
        if on_event != self._turn_event:
            kinds += [
                DirCreatedEvent,
                DirDeletedEvent,
                FileCreatedEvent,
                FileDeletedEvent,
                FileModifiedEvent,
            ]
        if directory == self.home / "events":
            kinds += [FileAttribEvent, FileClosedEvent]  # `touch tick`
        # Gone already: the next refresh no longer asks for it.
        with contextlib.suppress(OSError):
            self._watches[directory] = self._observer.schedule(
                Handler(), str(directory), event_filter=kinds
            )

    def _unschedule(self, directory: Path) -> None:
        watch = self._watches.pop(directory)
        assert self._observer is not None
        with contextlib.suppress(KeyError, OSError):
            self._observer.unschedule(watch)

    def _home_event(self, directory: Path, event: FileSystemEvent) -> None:
        name = _basename(event.src_path)
        if event.is_directory and name in ("events", "turns"):
            self._note(lambda c: setattr(c, "state", True))
        elif name == "state.db-wal" and not (self.home / "events").is_dir():
            self._note(lambda c: setattr(c, "wal", True))

    def _dir_event(self, directory: Path, event: FileSystemEvent) -> None:
        names = {_basename(event.src_path), _basename(event.dest_path)} - {""}
        if all(n.startswith(".") for n in names):
            return  # an atomic write's temp file; its rename follows
        self._note(lambda c: setattr(c, "state", True))

    def _turn_event(self, directory: Path, event: FileSystemEvent) -> None:
        if _basename(event.dest_path) == "outcome" or _basename(event.src_path) == "outcome":
            self._note(lambda c: setattr(c, "state", True))

    def close(self) -> None:
        if self._observer is not None:
            self._observer.stop()
        for fd in (self.fd, self._poke):
            with contextlib.suppress(OSError):
                os.close(fd)


def _basename(path: str | bytes) -> str:
    name = path.decode(errors="replace") if isinstance(path, bytes) else path
    return name.rsplit("/", 1)[-1]
