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

ROWS, COLS = 24, 120


class Term:
    """`spex top` (or a shell line around it) on a pty of ROWS x COLS."""

    def __init__(self, env: Env, command: str, extra: dict[str, str] | None = None) -> None:
        vars_ = {**env.vars, "TERM": "xterm-256color", **(extra or {})}
        vars_.pop("NO_COLOR", None)
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
    assert head.split() == ["NAME", "STATE", "TURN", "AGE", "FLAGS", "LAST", "OUTPUT"]
    assert re.fullmatch(r"a +idle +complete rc=0 +\d+s ago +- +answer: done with 'hello'.*", a)
    assert re.fullmatch(r"b +running +running +\d+s +- +working on: task", b)
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
    t.row_shows("a", r"^a +idle +- +- +-$")
    t.row_shows("b", r"^b +running +running +\d+s +- +working on: task")

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
    t.see(r"b: stopped \(turn \S+ aborted\)")

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
    from spexsup.top import Board, Row, last_line

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
    assert board.next_tick(1000.0) == 5.0  # "10s ago": redrawn with the others, every 5 s
    board.rows[0].turn = {**ended, "ended_at": 1000.0 - 3600}
    assert board.next_tick(1000.0) == 30.0  # "60m ago" turns "61m ago" in 30 s
    board.rows[1].turn = {**ended, "state": "running", "ended_at": None}
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
