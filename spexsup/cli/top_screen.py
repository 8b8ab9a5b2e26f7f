"""The curses screen of `spex top`; only `spex top` imports it.

The screen blocks in one `select` on the keyboard and the watcher's pipe
(see `spexsup.conductors.top`), with a timeout only for what is due: the ages' clock
(`Board.next_tick`, which also reads running turns' new output), a
deferred refresh, and two slow guards — a full
re-read every second while a turn is `starting` (its confirmation commits
no file) and every 30 s while one runs (a wrapper killed with no marker is
found by the reconciliation that re-read does). Idle with no turn running,
nothing is due and the process sleeps.

Everything that changes a session runs as a `spex` command in a child
process (`attach`, `stop`, `resume`, `wake -f -`), so the board itself only
reads; the child's one-line answer is shown on the status line. A filter
(`/`) and the order (`o`) change only what is shown of the board read.

Colours are the terminal's own: its default foreground and background
(`use_default_colors`, pair colours -1) and, unless NO_COLOR or `--color
never`, a state's colour (`render.STATE_COLORS`) for its name alone; with
colours off, curses is never asked to start them, so it sends no colour
escape at all.
"""

from __future__ import annotations

import contextlib
import curses
import os
import select
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spexsup import states
from spexsup.adapters.home import outer_argv
from spexsup.conductors.top import Board, Changes, Row, Watcher
from spexsup.errors import SpexError
from spexsup.pane import turndir
from spexsup.paths import own_python
from spexsup.present.board import TOP_HEADERS, age_anchor, age_text, top_cells
from spexsup.present.render import STATE_COLORS

# Re-reads closer together than these are merged: a transition burst (a
# turn's admission, launch and marker) costs one read of SQLite and tmux.
STATE_GAP = 0.1
WAL_GAP = 1.0
STARTING_POLL = 1.0
RUNNING_GUARD = 30.0
# Widest a column may grow; LAST OUTPUT takes what is left.
CAPS = (24, 9, 16, 9, 16, 24)
KEYS = "↑↓ select  ⏎/a attach  l log  s stop  r resume  w wake  / filter  o order  ? help  q quit"
# The help overlay (`?`): every key, and what it does.
HELP = (
    ("↑ ↓  j k", "select a session"),
    ("PgUp PgDn", "ten sessions up or down"),
    ("Home End  g G", "the first or the last session"),
    ("⏎  a", "attach to its pane (a popup inside tmux)"),
    ("l", "its turn's output in a pager ($PAGER, else less)"),
    ("s", "stop its turn (y to confirm)"),
    ("r", "resume it after a stop"),
    ("w", "wake it with a prompt (⏎ sends, Esc cancels)"),
    ("/", "filter by name: a glob, or text the name contains (⏎ applies, Esc clears)"),
    ("Esc", "clear the filter"),
    ("o", "order by name, or by state (failed first, then running, stopped, idle)"),
    ("Ctrl-L", "read everything again and repaint"),
    ("?", "this help"),
    ("q", "quit"),
)


@dataclass
class Job:
    label: str
    rc: int
    out: str
    err: str
    quiet: bool = False  # nothing to say when it went well (attach, the pager)

    def line(self) -> str:
        if self.quiet and self.rc == 0:
            return ""
        text = (self.err.strip() if self.rc else self.out.strip()) or self.out.strip()
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if not lines:
            return f"{self.label}: done" if self.rc == 0 else f"{self.label}: exit {self.rc}"
        return lines[-1] if self.rc else lines[0]


def spex_argv(home: Path, *args: str) -> list[str]:
    return [*own_python("spexsup"), "--home", str(home), *args]


def pager(path: Path) -> list[str]:
    argv = shlex.split(os.environ.get("PAGER") or "less") or ["less"]
    if Path(argv[0]).name == "less":
        argv += ["-R", "+G"]  # at the end; F follows a turn still writing
    return [*argv, str(path)]


class Screen:
    def __init__(
        self, stdscr: Any, board: Board, watcher: Watcher, signals: int, *, color: bool
    ) -> None:
        self.scr = stdscr
        self.board = board
        self.watcher = watcher
        self.home = board.spex.home
        self.selected: str | None = board.shown[0].name if board.shown else None
        self.offset = 0
        self.status = ""
        # "stop" (confirming), "wake" (typing a prompt), "filter" (typing
        # a pattern) or "help" (the keys shown until the next one).
        self.mode: str | None = None
        self.target = ""
        self.text = ""
        self.done = False
        self.resized = False
        self.jobs: list[Job] = []
        self.lock = threading.Lock()
        self.full_due: float | None = None
        self.full_at = time.monotonic()
        self.colors = _colors() if color else {}
        self.layout: Layout | None = None
        # What the last whole draw showed besides the ages (see `draw`).
        self.drawn: tuple[object, ...] | None = None
        self.drawn_status = ""
        # The read end of the signals' wakeup fd (`signal.set_wakeup_fd`,
        # set by `run`): readable once any signal arrived, in any thread.
        self.signals = signals

    # --- what is due ----------------------------------------------------

    def timeout(self) -> float | None:
        now = time.monotonic()
        due = [t for t in (self.full_due, self._guard()) if t is not None]
        tick = self.board.next_tick(time.time())
        if tick is not None:
            due.append(now + tick)
        if not due:
            return None
        return max(0.0, min(due) - now)

    def absorb(self, changes: Changes) -> None:
        now = time.monotonic()
        with self.lock:
            jobs, self.jobs = self.jobs, []
        for job in jobs:
            self.status = job.line()
        if jobs:
            self.full_due = now
        if changes.state:
            self._want_full(now, STATE_GAP)
        if changes.wal:
            self._want_full(now, WAL_GAP)

    def _want_full(self, now: float, gap: float) -> None:
        due = max(now, self.full_at + gap)
        self.full_due = due if self.full_due is None else min(self.full_due, due)

    def _guard(self) -> float | None:
        """When the slow guard re-reads everything, if a turn is under way."""
        if self.board.starting():
            return self.full_at + STARTING_POLL
        if self.board.running:  # shown or not: its end is found
            return self.full_at + RUNNING_GUARD
        return None

    def run_due(self) -> None:
        now = time.monotonic()
        if any(t is not None and now >= t for t in (self.full_due, self._guard())):
            self.refresh()
        changed = self.board.reread_output()
        if self.layout is not None and self.layout.generation == self.board.generation:
            for row in changed:
                self.layout.redo(row)
        if changed:
            self.drawn = None  # a new last line: not just the ages

    def refresh(self) -> None:
        """Re-read the board, then watch its turn directories; a directory
        newly watched is read once more, so a marker written between the
        read and the watch is not missed."""
        for _ in range(3):
            try:
                self.board.refresh()
            except (SpexError, OSError, sqlite3.Error) as e:
                # Keep the last board; the next event or Ctrl-L tries again.
                self.status = f"spex: cannot read the sessions: {e}"
                break
            if not self.watcher.arm(self.board.watched_dirs()):
                break
        self.full_at = time.monotonic()
        self.full_due = None
        self._keep_selection()

    def _keep_selection(self) -> None:
        """The selected session stays selected while it is shown; else the first shown."""
        names = [r.name for r in self.board.shown]
        if self.selected not in names:
            self.selected = names[0] if names else None

    # --- drawing --------------------------------------------------------

    def draw(self) -> None:
        scr = self.scr
        height, width = scr.getmaxyx()
        shown = self.board.shown
        if self.layout is None or self.layout.generation != self.board.generation:
            self.layout = Layout(shown, self.board.generation)
        visible = max(0, height - 4)
        at = self.layout.index.get(self.selected or "", 0)
        if at < self.offset:
            self.offset = at
        elif visible and at >= self.offset + visible:
            self.offset = at - visible + 1
        self.offset = max(0, min(self.offset, max(0, len(shown) - visible)))
        lines = range(self.offset, min(len(shown), self.offset + visible))
        ages = self.layout.ages(lines, time.time())
        # All that a draw shows but the ages, as it was last drawn: a tick.
        seen = (self.layout.generation, height, width, self.selected, self.offset, self.mode)
        if seen == self.drawn and self.status == self.drawn_status and self.mode is None:
            self._draw_ages(lines, ages, width)
            return
        self.drawn, self.drawn_status = seen, self.status
        scr.erase()
        self._put(0, 0, self.title(), width, curses.A_BOLD)
        widths = self.layout.widths
        self._put(1, 0, _line(list(TOP_HEADERS), widths, width), width, curses.A_UNDERLINE)
        for y, i in enumerate(lines):
            row = shown[i]
            text = self.layout.cells[i][:]
            text[AGE] = ages[y]
            chosen = curses.A_REVERSE if row.name == self.selected else curses.A_NORMAL
            self._put(2 + y, 0, _line(text, widths, width), width, chosen)
            color = self._state_color(row)
            if color:
                x = widths[0] + 2
                self._put(2 + y, x, text[1][: widths[1]], width - x, color | chosen)
        if not self.board.rows:
            self._put(2, 0, "no sessions (create one with: spex new NAME --harness HARNESS)", width)
        elif not shown:
            self._put(
                2, 0, f"no sessions match {self.board.pattern!r} (Esc clears the filter)", width
            )
        self._put(height - 2, 0, self.status, width)
        typing = self.mode in ("wake", "filter")
        if self.mode == "stop":
            self._put(height - 1, 0, f"stop {self.target}? y/n", width, curses.A_BOLD)
        elif typing:
            prompt = f"wake {self.target}: " if self.mode == "wake" else "filter: "
            line = (prompt + self.text)[-(width - 1) :] if width > 1 else ""
            self._put(height - 1, 0, line, width, curses.A_BOLD)
        elif self.mode == "help":
            self._put(height - 1, 0, "any key closes this help", width, curses.A_DIM)
            self._help(height, width)
        else:
            self._put(height - 1, 0, KEYS, width, curses.A_DIM)
        with contextlib.suppress(curses.error):
            curses.curs_set(1 if typing else 0)
        if typing:
            with contextlib.suppress(curses.error):
                scr.move(height - 1, min(width - 1, len(prompt) + len(self.text)))
        scr.refresh()

    def _draw_ages(self, lines: range, ages: list[str], width: int) -> None:
        """Only the ages of the rows on screen, in their column (a tick):
        redrawing the whole screen made curses compare every cell of it."""
        assert self.layout is not None  # `draw` made it before it asked for ages only
        widths = self.layout.widths
        x = sum(widths[:AGE]) + 2 * AGE
        for y, (i, age) in enumerate(zip(lines, ages, strict=True)):
            row = self.board.shown[i]
            chosen = curses.A_REVERSE if row.name == self.selected else curses.A_NORMAL
            self._put(2 + y, x, _fit(age, widths[AGE]).ljust(widths[AGE]), width, chosen)
        self.scr.refresh()

    def title(self) -> str:
        """`spex top · 2 of 5 sessions match 'api' · 1 running · … · by state`."""
        c = self.board.counts()
        if self.board.pattern:
            what = f"{c.shown} of {c.total} sessions match {self.board.pattern!r}"
        else:
            what = f"{c.total} sessions"
        return (
            f"spex top · {what} · {c.running} {states.RUNNING} · {c.failed} {states.FAILED}"
            f" · {c.stopped} {states.STOPPED} · by {self.board.order}"
        )

    def _help(self, height: int, width: int) -> None:
        """The keys, in a box over the board (as much of it as fits)."""
        keys = max(len(k) for k, _ in HELP)
        lines = [f"{k.ljust(keys)}  {what}" for k, what in HELP]
        box_w = min(width, max(len(line) for line in lines) + 4)
        box_h = min(height - 1, len(lines) + 2)
        if box_w < 10 or box_h < 3:
            return
        with contextlib.suppress(curses.error):
            box = self.scr.derwin(box_h, box_w, max(0, (height - 1 - box_h) // 2), 0)
            box.erase()
            box.box()
            box.addnstr(0, 2, " keys ", box_w - 4, curses.A_BOLD)
            for y, line in enumerate(lines[: box_h - 2], start=1):
                box.addnstr(y, 2, line, box_w - 4)

    def _state_color(self, row: Row) -> int:
        return self.colors.get(row.state, 0)

    def _put(self, y: int, x: int, text: str, width: int, attr: int = 0) -> None:
        from spexsup.pane.pretty import one_line

        with contextlib.suppress(curses.error):  # the last cell of the screen
            self.scr.addnstr(y, x, one_line(text), max(0, width - x), attr)

    # --- keys -----------------------------------------------------------

    def keys(self) -> None:
        while True:
            try:
                key = self.scr.get_wch()
            except curses.error:
                return
            if key == curses.KEY_RESIZE:
                self.resized = True
            elif self.mode == "help":
                self.mode = None  # any key closes it, and does nothing else
            elif self.mode == "stop":
                self._confirm_stop(key)
            elif self.mode in ("wake", "filter"):
                self._edit(key)
            else:
                self._command(key)
            if self.done:
                return

    def _command(self, key: str | int) -> None:
        names = [r.name for r in self.board.shown]
        at = names.index(self.selected) if self.selected in names else 0
        moves = {
            curses.KEY_UP: -1,
            "k": -1,
            curses.KEY_DOWN: 1,
            "j": 1,
            curses.KEY_PPAGE: -10,
            curses.KEY_NPAGE: 10,
            curses.KEY_HOME: -(10**6),
            "g": -(10**6),
            curses.KEY_END: 10**6,
            "G": 10**6,
        }
        if key in moves and names:
            self.selected = names[max(0, min(len(names) - 1, at + moves[key]))]
        elif key in ("q", "Q"):
            self.done = True
        elif key == "\x0c":  # Ctrl-L: read everything again, repaint
            self.scr.clear()
            self.drawn = None  # a cleared screen is drawn whole
            self.full_due = time.monotonic()
        elif key == "?":
            self.mode = "help"
        elif key == "/":
            self.mode, self.text = "filter", self.board.pattern
        elif key == "\x1b" and self.board.pattern:
            self._filter("")
        elif key == "o":
            self.board.next_order()
        elif self.selected is None:
            if key in ("a", "\n", curses.KEY_ENTER, "l", "s", "r", "w"):
                self.status = "no session selected"
        elif key in ("a", "\n", "\r", curses.KEY_ENTER):
            self.attach(self.selected)
        elif key == "l":
            self.log(self.selected)
        elif key == "s":
            self.mode, self.target = "stop", self.selected
        elif key == "r":
            self.start(f"resume {self.selected}", ["resume", self.selected])
        elif key == "w":
            self.mode, self.target, self.text = "wake", self.selected, ""

    def _confirm_stop(self, key: str | int) -> None:
        self.mode = None
        if key in ("y", "Y"):
            self.start(f"stop {self.target}", ["stop", self.target])
        else:
            self.status = f"stop {self.target}: cancelled"

    def _filter(self, pattern: str) -> None:
        """Show only the sessions `pattern` matches ("": every session)."""
        self.board.pattern = pattern
        self.board.arrange()
        self.offset = 0
        self._keep_selection()

    def _edit(self, key: str | int) -> None:
        """A key typed into the prompt of a wake or the pattern of a filter."""
        if key in ("\n", "\r", curses.KEY_ENTER):
            mode, self.mode = self.mode, None
            if mode == "filter":
                self._filter(self.text.strip())
            elif self.text.strip():
                data = self.text.encode("utf-8", "surrogateescape")
                self.start(f"wake {self.target}", ["wake", self.target, "-f", "-"], data)
            else:
                self.status = f"wake {self.target}: no prompt, nothing sent"
        elif key == "\x1b":
            mode, self.mode = self.mode, None
            if mode == "filter":
                self._filter("")
            else:
                self.status = f"wake {self.target}: cancelled"
        elif key in (curses.KEY_BACKSPACE, "\x7f", "\b"):
            self.text = self.text[:-1]
        elif key == "\x15":  # Ctrl-U
            self.text = ""
        elif isinstance(key, str) and key.isprintable():
            self.text += key

    # --- actions: spex commands in child processes ------------------------

    def start(
        self, label: str, args: list[str], data: bytes | None = None, quiet: bool = False
    ) -> None:
        """Run `spex ARGS` in the background; its answer lands on the status line."""
        self.status = "" if quiet else f"{label}…"

        def work() -> Job:
            r = subprocess.run(
                spex_argv(self.home, *args),
                input=data,
                stdin=None if data is not None else subprocess.DEVNULL,
                capture_output=True,
                check=False,
            )
            return Job(label, r.returncode, _text(r.stdout), _text(r.stderr), quiet)

        self._in_background(label, work)

    def attach(self, name: str) -> None:
        """`spex attach NAME`: inside tmux it opens a popup and the board stays;
        outside, the board steps aside until the user detaches."""
        if os.environ.get("TMUX"):
            self.start(f"attach {name}", ["attach", name], quiet=True)
            return
        self.suspend(f"attach {name}", spex_argv(self.home, "attach", name))

    def log(self, name: str) -> None:
        row = next((r for r in self.board.shown if r.name == name), None)
        path = row.turn_dir / turndir.OUTPUT if row and row.turn_dir else None
        if path is None or not path.is_file():
            self.status = f"log {name}: no output yet"
            return
        argv = pager(path)
        if shutil.which(argv[0]) is None:
            self.status = f"log {name}: no pager {argv[0]!r} (set PAGER)"
            return
        if os.environ.get("TMUX"):
            self._background(f"log {name}", outer_argv(argv))
            return
        self.suspend(f"log {name}", argv)

    def _background(self, label: str, argv: list[str]) -> None:
        def work() -> Job:
            r = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, check=False)
            return Job(label, r.returncode, "", _text(r.stderr), quiet=True)

        self._in_background(label, work)

    def _in_background(self, label: str, work: Callable[[], Job]) -> None:
        """Run `work` in a thread; its Job (or the OSError) lands on the status line."""

        def run() -> None:
            try:
                job = work()
            except OSError as e:
                job = Job(label, 1, "", str(e))
            with self.lock:
                self.jobs.append(job)
            self.watcher.poke()

        threading.Thread(target=run, daemon=True).start()

    def suspend(self, label: str, argv: list[str]) -> None:
        """Hand the terminal to `argv` (attach, a pager) and take it back."""
        curses.def_prog_mode()
        curses.endwin()
        # Ctrl-C belongs to the pager meanwhile; it must not end the board.
        # (A Python handler, not SIG_IGN: the child gets the default back.)
        interrupt = signal.signal(signal.SIGINT, lambda *_: None)
        try:
            r = subprocess.run(argv, stderr=subprocess.PIPE, check=False)
            err = _text(r.stderr)
            self.status = Job(label, r.returncode, "", err).line() if r.returncode else ""
        except OSError as e:
            self.status = f"{label}: {e}"
        finally:
            signal.signal(signal.SIGINT, interrupt)
            curses.reset_prog_mode()
            self.scr.clear()
            self.drawn = None  # a cleared screen is drawn whole
            self.resized = True  # the size may have changed meanwhile
        self.full_due = time.monotonic()

    def resize(self) -> None:
        self.resized = False
        with contextlib.suppress(OSError, curses.error):
            size = os.get_terminal_size(sys.stdout.fileno())
            curses.resizeterm(size.lines, size.columns)
        self.scr.clear()
        self.drawn = None  # a cleared screen is drawn whole

    # --- the loop -------------------------------------------------------

    def wait(self, fds: list[int]) -> list[int]:
        """select() on `fds` until one is ready, something is due or the window
        was resized. A signal the kernel gave a helper thread (the watcher's,
        a job's) runs its handler once this thread runs: the signals' wakeup
        fd (`signals`) wakes it for that, where it polled four times a
        second (an idle board's whole CPU)."""
        timeout = self.timeout()
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if end is None else max(0.0, end - time.monotonic())
            ready, _, _ = select.select([*fds, self.signals], [], [], left)
            if self.signals in ready:
                with contextlib.suppress(BlockingIOError):
                    while os.read(self.signals, 512):
                        pass
                ready.remove(self.signals)
            if ready or self.resized or (end is not None and time.monotonic() >= end):
                return ready

    def loop(self) -> None:
        keyboard = sys.stdin.fileno()
        while not self.done:
            if self.resized:
                self.resize()
            self.draw()
            ready = self.wait([keyboard, self.watcher.fd])
            if self.watcher.fd in ready:
                self.absorb(self.watcher.take())
            if keyboard in ready:
                self.keys()
            self.run_due()


AGE = TOP_HEADERS.index("AGE")


class Layout:
    """The board's rows as cells and their columns' widths, made once per
    arrangement (`Board.generation`): a tick, which only changes ages, then
    draws from these and the ages' anchors, touching no row. After a few
    idle seconds a walk over a thousand rows' records cost 20-30 ms of CPU
    (twice a tick), where warm it costs well under a millisecond."""

    def __init__(self, rows: list[Row], generation: int) -> None:
        self.generation = generation
        self.rows = rows
        self.index = {r.name: i for i, r in enumerate(rows)}
        self.cells = [top_cells(r, 0.0) for r in rows]  # AGE filled in per draw
        self.anchors = [age_anchor(r.turn) for r in rows]
        # The ages' column at its widest (`9m ago`, `23h ago`, `12s`): it
        # keeps its place as ages grow, and no draw measures every age.
        self.widths = [len(h) for h in TOP_HEADERS[:-1]]
        self.widths[AGE] = CAPS[AGE]
        for texts in self.cells:
            for i, cap in enumerate(CAPS):
                if i != AGE:
                    self.widths[i] = min(cap, max(self.widths[i], len(texts[i])))

    def redo(self, row: Row) -> None:
        """A running turn's last output line changed (a column of no width)."""
        i = self.index.get(row.name)
        if i is not None and self.rows[i] is row:
            self.cells[i] = top_cells(row, 0.0)

    def ages(self, lines: range, now: float) -> list[str]:
        """The ages of the rows at `lines` (indexes into the rows), now."""
        return [age_text(self.anchors[i], now) for i in lines]


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


def _line(cells_: list[str], widths: list[int], width: int) -> str:
    parts = [_fit(c, w).ljust(w) for c, w in zip(cells_, widths, strict=False)]
    return ("  ".join([*parts, cells_[-1]]))[:width]


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _colors() -> dict[str, int]:
    """A curses attribute per session state that has a colour; {} when the
    terminal has none, or cannot keep its own background behind them."""
    try:
        curses.start_color()
        curses.use_default_colors()
    except curses.error:
        return {}
    if not curses.has_colors():
        return {}
    out = {}
    for pair, (state, color) in enumerate(STATE_COLORS.items(), start=1):
        try:
            curses.init_pair(pair, color, -1)
        except curses.error:
            return {}
        out[state] = curses.color_pair(pair)
    return out


@contextlib.contextmanager
def _terminal() -> Iterator[Any]:
    """curses.wrapper's set-up and restore, without its start_color(): with
    colours off, curses must not even assume white on black."""
    stdscr = curses.initscr()
    try:
        curses.noecho()
        curses.cbreak()
        stdscr.keypad(True)
        yield stdscr
    finally:
        stdscr.keypad(False)
        curses.echo()
        curses.nocbreak()
        curses.endwin()


def run(board: Board, *, color: bool) -> None:
    """Show the board until `q` (exit 0) or a signal (130/143); the terminal
    is restored either way. `color`: the states in colour (else no colour
    escape at all)."""
    from spexsup.errors import Invalid

    os.environ.setdefault("ESCDELAY", "25")  # Esc cancels a prompt at once
    try:
        curses.setupterm()
    except curses.error:
        term = os.environ.get("TERM") or "unset"
        raise Invalid(
            f"top: this terminal (TERM={term}) is unknown to curses",
            hint="set TERM, e.g. TERM=xterm-256color, or pipe it: spex top | cat",
        ) from None
    watcher = Watcher(board.spex.home)
    watcher.start()

    def main(stdscr: Any) -> None:
        signals, wakeup = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        screen = Screen(stdscr, board, watcher, signals, color=color)
        stdscr.nodelay(True)
        stdscr.keypad(True)
        previous = signal.signal(signal.SIGWINCH, lambda *_: _resized(screen))
        woke = signal.set_wakeup_fd(wakeup, warn_on_full_buffer=False)
        # curses takes an exported $COLUMNS/$LINES over the terminal's own
        # size; `resize` asks the terminal (its ioctl), as `spex ls` does.
        screen.resized = True
        try:
            screen.refresh()
            screen.loop()
        finally:
            signal.set_wakeup_fd(woke)
            signal.signal(signal.SIGWINCH, previous)
            os.close(signals)
            os.close(wakeup)

    def _resized(screen: Screen) -> None:
        screen.resized = True
        watcher.poke()

    try:
        with _terminal() as stdscr:
            main(stdscr)
    finally:
        watcher.close()
