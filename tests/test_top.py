"""`spex top` in a real terminal: pexpect gives it a pty, pyte keeps the screen.

Every wait reads the pty until the screen shows what is expected or a
generous deadline passes: the screen changes only when spex top draws.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pexpect
import pyte
import pytest
from conftest import SPEX, Env, harness, signal_a_helper_thread

from spexsup import states

ROWS, COLS = 24, 120


class Term:
    """`spex top` (or a shell line around it) on a pty of ROWS x COLS."""

    def __init__(self, env: Env, command: str, extra: dict[str, str] | None = None) -> None:
        vars_ = {k: v for k, v in env.vars.items() if k != "NO_COLOR"}
        vars_.update({"TERM": "xterm-256color", **(extra or {})})
        # A bare command runs as it is (its own exit status); else in sh.
        argv = command.split() if command == f"{SPEX} top" else ["/bin/sh", "-c", command]
        self.child = pexpect.spawn(
            argv[0], argv[1:], env=vars_, dimensions=(ROWS, COLS), timeout=60
        )
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(self.lines())

    def row(self, name: str) -> str:
        return next((ln for ln in self.lines() if ln.split()[:1] == [name]), "")

    def pump(self, seconds: float) -> bool:
        """Feed what the pty prints for up to `seconds`; False at its end."""
        try:
            data = self.child.read_nonblocking(65536, timeout=seconds)
        except pexpect.TIMEOUT:
            return True
        except pexpect.EOF:
            return False
        self.raw += data
        self.stream.feed(data)
        return True

    def until(self, check: Callable[[], bool], what: str, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while not check():
            left = deadline - time.monotonic()
            if left <= 0 or not self.pump(min(left, 1.0)):
                if check():
                    return
                raise AssertionError(f"never saw {what}; the screen:\n{self.text()}")

    def see(self, pattern: str, seconds: float = 30) -> None:
        self.until(lambda: re.search(pattern, self.text()) is not None, pattern, seconds)

    def row_shows(self, name: str, pattern: str, seconds: float = 30) -> None:
        self.until(
            lambda: re.search(pattern, self.row(name)) is not None, f"{name}: {pattern}", seconds
        )

    def shows(self, names: list[str]) -> None:
        """The board lists these sessions, top to bottom (the header is drawn
        first: the rows of the same frame may still be on their way)."""
        self.until(lambda: names_shown(self) == names, f"the sessions {names}")

    def send(self, keys: str) -> None:
        self.child.send(keys)

    def finish(self) -> str:
        """Everything printed until the end (after the screen has gone)."""
        while self.pump(30):
            pass
        self.child.close()
        return self.raw.decode("utf-8", "replace")


@pytest.fixture
def terms() -> Iterator[list[Term]]:
    made: list[Term] = []
    yield made
    for t in made:
        if t.child.isalive():
            t.child.terminate(force=True)


def top(env: Env, terms: list[Term], after: str = "", **extra: str) -> Term:
    t = Term(env, f"{SPEX} top; echo EXIT=$?; {after}", extra)
    terms.append(t)
    t.see(r"spex top · \d+ sessions")
    return t


def until_go(env: Env, name: str, go: Path) -> None:
    r = env.run("new", name, "--env", f"GO={go}", "--", harness("until_go.sh"))
    assert r.returncode == 0, r.stderr


def test_off_a_terminal_it_prints_the_table_once(env: Env) -> None:
    r = env.run("top")
    assert (r.returncode, r.stdout) == (
        0,
        "no sessions (create one with: spex new NAME --harness HARNESS)\n",
    )
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    assert env.run("new", "b", "--", harness("sleeper.sh")).returncode == 0
    assert env.run("wake", "a", "hello", "--window", "0.3").returncode == 0
    assert env.run("wait", "a").returncode == 0
    assert env.run("wake", "b", "task").returncode == 0
    r = env.run("top")
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout
    head, a, b = r.stdout.splitlines()
    assert head.split() == ["NAME", "STATE", "TURN", "AGE", "COST", "FLAGS", "LAST", "OUTPUT"]
    # demo reports no usage: its cost is no unknown, nothing was expected.
    assert re.fullmatch(r"a +idle +complete rc=0 +\d+s ago +- +- +answer: done with 'hello'.*", a)
    assert re.fullmatch(r"b +running +running +\d+s +- +- +working on: task", b)
    r = env.run("top", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(d["name"], d["flags"], d["last_output"]) for d in rows] == [
        ("a", [], "answer: done with 'hello' (1 prompts so far)"),
        ("b", [], "working on: task"),
    ]
    assert rows[0]["schema_version"] == 1 and rows[1]["turn"]["state"] == "running"


def test_a_turn_ends_on_screen_a_key_stops_one_and_q_restores_the_terminal(
    env: Env, terms: list[Term], tmp_path: Path
) -> None:
    go = tmp_path / "go"
    until_go(env, "a", go)
    assert env.run("new", "b", "--", harness("sleeper.sh")).returncode == 0
    assert env.run("wake", "b", "task").returncode == 0
    t = top(env, terms, after="stty -a")
    t.row_shows("a", r"^a +idle +- +- +- +-$")
    t.row_shows("b", r"^b +running +running +\d+s +- +- +working on: task")

    # A wake from another process, then its turn's end, both seen as they happen.
    assert env.run("wake", "a", "go").returncode == 0
    t.row_shows("a", r"^a +running +running ")
    go.touch()
    t.row_shows("a", r"^a +idle +complete rc=0 +\d+s ago")
    assert re.search(r"spex top · 2 sessions · 1 running", t.text())

    # The stop key asks first; y stops b's turn through `spex stop`.
    t.send("j")
    t.send("s")
    t.see(r"stop b\? y/n")
    t.send("y")
    t.row_shows("b", r"^b +stopped +aborted +\d+s ago")
    t.see(r"b: stopped \(turn \S+ aborted; no new turns")

    t.send("q")
    out = t.finish()
    assert "EXIT=0" in out
    # Back in the shell's own mode: canonical input and echo again.
    settings = out.split("EXIT=0", 1)[1]
    assert re.search(r"(?<!-)\bicanon\b", settings) and re.search(r"(?<!-)\becho\b", settings)
    assert "\x1b[?1049l" in out  # left the alternate screen


def test_wake_with_a_prompt_resume_and_the_log_key(
    env: Env, terms: list[Term], tmp_path: Path
) -> None:
    assert env.run("new", "a", "--", harness("exit0.sh")).returncode == 0
    assert env.run("stop", "a").returncode == 0
    seen = tmp_path / "paged"
    pager = f"sh -c 'printf %s \"$0\" > {seen}'"
    t = top(env, terms, PAGER=pager)
    t.row_shows("a", r"^a +stopped ")
    t.send("w")
    t.see("wake a:")
    prompt = '-dash "quotes" $(no) `tick` ünï'
    t.send(prompt + "\r")
    # A stopped session refuses a wake (exit 3): its answer, not the row's state.
    t.see(r"session 'a' is stopped")
    t.send("r")
    t.row_shows("a", r"^a +idle ")
    t.see(r"a: resumed")  # its answer is in before the next key
    t.send("w")
    t.send("oops")
    t.send("\x1b")
    t.see("wake a: cancelled")
    t.send("w" + prompt + "\r")
    t.row_shows("a", r"complete rc=0")
    (turn,) = [p for p in (env.home / "turns" / "a").iterdir() if (p / "prompt").exists()]
    assert (turn / "prompt").read_bytes() == prompt.encode()
    t.send("l")
    deadline = time.monotonic() + 30
    while not seen.exists() and time.monotonic() < deadline:
        t.pump(0.5)
    assert seen.read_text() == str(turn / "output.log")
    t.see(r"spex top · 1 sessions")  # the board is back after the pager
    t.send("q")
    assert "EXIT=0" in t.finish()


def test_attach_outside_tmux_hands_over_the_terminal_and_comes_back(
    env: Env, terms: list[Term]
) -> None:
    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    t = top(env, terms)
    t.send("a")
    t.see(r"\[spex a\]")  # the home's status line: tmux owns the terminal
    t.send("\x01d")  # the private server's prefix (C-a), then detach
    t.see(r"spex top · 1 sessions")
    # A smaller terminal: the board is drawn again to its size.
    t.child.setwinsize(12, 70)
    t.screen.resize(12, 70)
    t.until(lambda: t.lines()[11].startswith("↑↓ select"), "the keys on the last row")
    t.send("q")
    assert "EXIT=0" in t.finish()


def test_events_tick_and_the_database_wake_it_for_changes_with_no_turn_file(
    env: Env, terms: list[Term]
) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    t = top(env, terms)
    t.row_shows("a", r"^a +idle ")
    # Without events/ (a home from before the event log), the database's
    # write-ahead log stands in for the tick; with the event log, every
    # writer touches events/tick.
    assert env.run("stop", "a").returncode == 0
    t.row_shows("a", r"^a +stopped ")
    events = env.home / "events"
    events.mkdir(mode=0o700, exist_ok=True)
    (events / "tick").touch()
    t.pump(1)
    # With events/ there, its tick is what wakes the board.
    assert env.run("resume", "a").returncode == 0
    (events / "tick").touch()
    t.row_shows("a", r"^a +idle ")
    t.send("q")
    assert "EXIT=0" in t.finish()


def test_an_unknown_terminal_is_refused_in_one_line(env: Env) -> None:
    child = pexpect.spawn(
        SPEX,
        ["top"],
        env={**env.vars, "TERM": "no-such-terminal"},
        dimensions=(ROWS, COLS),
        encoding="utf-8",
        timeout=30,
    )
    child.expect(pexpect.EOF)
    child.close()
    lines = [ln for ln in child.before.replace("\r", "").splitlines() if ln]
    assert child.exitstatus == 2, lines
    assert len(lines) == 1 and lines[0].startswith("spex: top: this terminal"), lines
    assert os.environ.get("TERM") != "no-such-terminal"


def test_the_last_line_drops_escapes_and_the_clock_ticks_only_for_what_shows(
    env: Env, tmp_path: Path
) -> None:
    from spexsup.conductors.top import Board, Row, last_line

    turn = tmp_path / "turn"
    turn.mkdir()
    assert last_line(turn) == "" and last_line(None) == ""
    (turn / "output.log").write_bytes(
        b"first\n\x1b[1;31mred\x1b[0m \x1b]0;title\x07done\r\nspinner 1\rspinner 2\r\n\n  \n"
    )
    assert last_line(turn) == "spinner 2"
    (turn / "output.log").write_bytes(b"\x1b[1;31mred\x1b[0m \x1b]0;title\x07done\n\x1b[K\n")
    assert last_line(turn) == "red done"

    board = Board(env.spex())
    assert board.next_tick(1000.0) is None  # no sessions: nothing ever changes
    ended = {"state": "complete", "started_at": 900.0, "ended_at": 990.0, "rc": 0}
    board.rows = [
        Row("a", "demo", "idle", ended, [], None),
        Row("b", "demo", "idle", None, [], None),
    ]
    board.arrange()
    assert board.next_tick(1000.0) == 5.0  # "10s ago": redrawn with the others, every 5 s
    # A tick reads what the board's last arrangement saw (a refresh arranges).
    board.rows[0].turn = {**ended, "ended_at": 1000.0 - 3600}
    board.arrange()
    assert board.next_tick(1000.0) == 30.0  # "60m ago" turns "61m ago" in 30 s
    board.rows[1].turn = {**ended, "state": "running", "ended_at": None}
    board.arrange()
    assert board.next_tick(1000.0) == 1.0  # a running turn's age counts seconds


def test_ctrl_c_in_the_pager_ends_the_pager_not_the_board(
    env: Env, terms: list[Term], tmp_path: Path
) -> None:
    assert env.run("new", "a", "--", harness("exit0.sh")).returncode == 0
    assert env.run("wake", "a", "x").returncode == 0
    ready, got = tmp_path / "ready", tmp_path / "got-int"
    pager = f"sh -c 'trap \"touch {got}; exit 0\" INT; touch {ready}; while :; do sleep 0.1; done'"
    # No shell around it: a non-interactive sh would die of the Ctrl-C itself.
    t = Term(env, f"{SPEX} top", {"PAGER": pager})
    terms.append(t)
    t.row_shows("a", r"complete rc=0")
    t.send("l")
    t.until(ready.exists, "the pager started")
    t.send("\x03")
    t.until(got.exists, "the pager got SIGINT")
    t.see(r"spex top · 1 sessions")
    t.send("q")
    t.finish()
    assert t.child.exitstatus == 0


def test_a_running_turns_new_output_line_shows(env: Env, terms: list[Term], tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = f"echo step one; while [ ! -e {go} ]; do sleep 0.05; done; echo step two; sleep 300"
    assert env.run("new", "a", "--", "sh", "-c", script).returncode == 0
    assert env.run("wake", "a", "x").returncode == 0
    t = top(env, terms)
    t.row_shows("a", r"^a +running +running .* step one$")
    go.touch()
    t.row_shows("a", r"^a +running +running .* step two$")
    t.send("q")
    assert "EXIT=0" in t.finish()


def test_a_signal_on_a_helper_thread_ends_an_idle_board(env: Env, terms: list[Term]) -> None:
    # Idle, the board waits on the keyboard and its watcher with no timeout
    # of its own; a SIGTERM the kernel gave the watcher's thread still ends it.
    import signal

    import psutil

    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    t = top(env, terms)
    (board,) = psutil.Process(t.child.pid).children()
    signal_a_helper_thread(board.pid, signal.SIGTERM)
    assert "EXIT=143" in t.finish()


def names_shown(t: Term) -> list[str]:
    """The sessions on the board, top to bottom (between the header and the status)."""
    return [ln.split()[0] for ln in t.lines()[2:-2] if ln.strip()]


def failed(env: Env, name: str) -> None:
    """A session whose turn failed for real: its harness exits 1."""
    assert env.run("new", name, "--", "sh", "-c", "echo broke; exit 1").returncode == 0
    assert env.run("wake", name, "go").returncode == 1


def test_question_mark_shows_every_key_and_any_key_closes_it(env: Env, terms: list[Term]) -> None:
    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    assert env.run("wake", "a", "task").returncode == 0
    t = top(env, terms)
    t.until(lambda: "? help" in t.lines()[-1], "? in the footer")
    t.send("?")
    t.see("any key closes this help")
    for key, what in (
        (r"j k", "select a session"),
        (r"a", "attach to its pane"),
        (r"l", "its turn's output in a pager"),
        (r"s", "stop its turn"),
        (r"r", "resume it"),
        (r"w", "wake it with a prompt"),
        (r"/", "filter by name"),
        (r"Esc", "clear the filter"),
        (r"o", "order by name, or by state"),
        (r"Ctrl-L", "read everything again"),
        (r"\?", "this help"),
        (r"q", "quit"),
    ):
        t.see(rf"{key} +{what}")
    # q closes the help and does nothing else: the board is still there.
    t.send("q")
    t.until(lambda: t.lines()[-1].startswith("↑↓ select"), "the help gone")
    assert "any key closes" not in t.text() and t.child.isalive()
    t.row_shows("a", r"^a +running ")
    t.send("q")
    assert "EXIT=0" in t.finish()


def test_slash_filters_by_glob_or_text_enter_applies_esc_clears(
    env: Env, terms: list[Term]
) -> None:
    for name in ("try-10", "try-2", "web", "try-1"):
        assert env.run("new", name, "--harness", "demo").returncode == 0, name
    t = top(env, terms)
    t.see(r"spex top · 4 sessions ")
    t.shows(["try-1", "try-2", "try-10", "web"])  # as `spex ls` sorts

    # Text with no glob character: the names that contain it, once Enter is pressed.
    t.send("/try-1")
    t.see(r"filter: try-1")  # drawn below the rows of its frame: they are in
    assert names_shown(t) == ["try-1", "try-2", "try-10", "web"]
    t.send("\r")
    t.see(r"spex top · 2 of 4 sessions match 'try-1' ")
    t.shows(["try-1", "try-10"])

    # A glob matches the whole name, as `spex ls PATTERN` does.
    t.send("/")
    t.see(r"filter: try-1")  # the filter in force, to edit
    t.send("\x15*-2\r")  # Ctrl-U, then the glob
    t.see(r"1 of 4 sessions match '\*-2' ")
    t.shows(["try-2"])
    t.send("/\x15nothing\r")
    t.see(r"0 of 4 sessions match 'nothing'")
    t.see(r"no sessions match 'nothing' \(Esc clears the filter\)")

    # Esc while typing cancels and clears; Esc on the board clears too.
    t.send("/\x15web")
    t.see("filter: web")
    t.send("\x1b")
    t.see(r"spex top · 4 sessions ")
    t.shows(["try-1", "try-2", "try-10", "web"])
    t.send("/w\r")
    t.see(r"1 of 4 sessions match 'w'")
    t.send("\x1b")
    t.see(r"spex top · 4 sessions ")

    # A filtered board still follows changes: a new session that matches shows.
    t.send("/try\r")
    t.see(r"3 of 4 sessions match 'try'")
    assert env.run("new", "try-3", "--harness", "demo").returncode == 0
    t.see(r"4 of 5 sessions match 'try'")
    t.shows(["try-1", "try-2", "try-3", "try-10"])
    t.send("q")
    assert "EXIT=0" in t.finish()


def test_o_orders_by_state_failed_first_then_by_name_again(env: Env, terms: list[Term]) -> None:
    assert env.run("new", "s-1", "--harness", "demo").returncode == 0
    assert env.run("new", "s-2", "--", harness("sleeper.sh")).returncode == 0
    assert env.run("wake", "s-2", "task").returncode == 0
    assert env.run("new", "s-3", "--harness", "demo").returncode == 0
    assert env.run("stop", "s-3").returncode == 0
    failed(env, "s-10")
    t = top(env, terms)
    t.see(r"spex top · 4 sessions · 1 running · 1 \S+ · 1 stopped · by name")
    t.shows(["s-1", "s-2", "s-3", "s-10"])
    t.row_shows("s-10", rf"^s-10 +{states.FAILED} ")
    t.send("o")
    t.see(r"(?m)· by state$")
    t.shows(["s-10", "s-2", "s-3", "s-1"])
    # The order holds across changes: another failure joins the first.
    failed(env, "s-0")
    t.until(lambda: names_shown(t) == ["s-0", "s-10", "s-2", "s-3", "s-1"], "s-0 failed, first")
    t.send("o")
    t.see(r"(?m)· by name$")
    t.shows(["s-0", "s-1", "s-2", "s-3", "s-10"])
    t.send("q")
    assert "EXIT=0" in t.finish()


COLORS = {*range(30, 50), *range(90, 98), *range(100, 108)}  # fore and back, default too
BACKGROUNDS = {*range(40, 49), *range(100, 108)}  # a background other than the default (49)


def color_escapes(raw: bytes, which: set[int] = COLORS) -> list[bytes]:
    """Every SGR escape in `raw` with a parameter in `which`."""
    return [
        m.group(0)
        for m in re.finditer(rb"\x1b\[([0-9;:]*)m", raw)
        if {int(p) for p in re.split(rb"[;:]", m.group(1)) if p} & which
    ]


def test_no_color_uses_the_terminals_own_colours(env: Env, terms: list[Term]) -> None:
    failed(env, "bad")
    assert env.run("new", "run", "--", harness("sleeper.sh")).returncode == 0
    assert env.run("wake", "run", "task").returncode == 0
    for extra in ({"NO_COLOR": "1"}, {"NO_COLOR": "anything"}, {}):
        t = top(env, terms, **extra)
        t.row_shows("bad", rf"^bad +{states.FAILED} ")
        t.row_shows("run", r"^run +running ")
        t.send("?")  # the help's box, too
        t.see("any key closes this help")
        t.send("x")
        t.see("(?m)^↑↓ select")  # the help gone
        t.send("q")
        assert "EXIT=0" in t.finish()
        cells = [c for line in t.screen.buffer.values() for c in line.values()]
        # Never a background of its own: the terminal's, whatever the colours.
        assert {c.bg for c in cells} == {"default"}, extra
        assert color_escapes(t.raw, BACKGROUNDS) == []
        if extra:
            assert color_escapes(t.raw) == [], (extra, color_escapes(t.raw))
            assert {c.fg for c in cells} == {"default"}
        else:
            bad = next(y for y, line in enumerate(t.lines()) if line.startswith("bad "))
            at = t.lines()[bad].index(states.FAILED, 4)
            assert t.screen.buffer[bad][at].fg == "red"
            run = next(y for y, line in enumerate(t.lines()) if line.startswith("run "))
            assert t.screen.buffer[run][t.lines()[run].index("running")].fg == "green"
            assert b"\x1b[31m" in t.raw
    # --color never is NO_COLOR for one run; --color always wins over NO_COLOR.
    t = Term(env, f"{SPEX} top --color never")
    terms.append(t)
    t.row_shows("bad", rf"^bad +{states.FAILED} ")
    t.send("q")
    t.finish()
    assert color_escapes(t.raw) == []
    t = Term(env, f"{SPEX} top --color always", {"NO_COLOR": "1"})
    terms.append(t)
    t.row_shows("bad", rf"^bad +{states.FAILED} ")
    t.send("q")
    t.finish()
    assert b"\x1b[31m" in t.raw


def test_a_tick_redraws_the_ages_in_their_column_and_nothing_else(
    env: Env, terms: list[Term]
) -> None:
    """An ended turn's age changes its text every few seconds: the board
    writes only the ages of the rows on screen, in their column, and leaves
    the rest of each row as the whole draw made it."""
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    assert env.run("wake", "a", "hello", "--window", "0.3").returncode == 0
    assert env.run("wait", "a").returncode == 0
    t = top(env, terms)
    row = r"a +idle +complete rc=0 +\d+s ago +- +- +answer: done with 'hello'.*"
    t.row_shows("a", row)
    column = t.lines()[1].index("AGE")

    def age() -> str:  # the age column of a's row, exactly
        return t.row("a")[column : column + 9]

    first = age()
    plain = r"(0|[1-9]\d*)s ago *"  # no digit left of the column's own
    assert re.fullmatch(plain, first), t.text()
    t.until(lambda: age() != first, "the age of a's turn changing")
    later = age()
    # Written over the old age, not beside it (`05s ago` of `0s` and `5s`).
    assert re.fullmatch(plain, later) and re.fullmatch(row, t.row("a")), t.text()
    assert int(later.split("s")[0]) > int(first.split("s")[0]), (first, later)
    assert t.lines()[0].startswith("spex top · 1 sessions")
    t.send("q")
    assert "EXIT=0" in t.finish()
