"""Who launches a queued prompt when its session is free (see
`spexsup.turn.queue`): a detached `spex internal dequeue NAME`, started by the
process that records a turn's end and by any reader that finds a free
session with prompts queued. Cheap and import-light: the exit reporter and
every reconciling reader call it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from spexsup.errors import SpexError
from spexsup.paths import own_python

if TYPE_CHECKING:
    import subprocess

# Session states a queued prompt may launch in (not running, stopped, being
# created or removed).
FREE = ("idle", "failed")


def waiting(
    db: sqlite3.Connection, names: tuple[str, ...] | None = None, home: Path | None = None
) -> list[str]:
    """Free sessions (of `names`, if given) whose next queued prompt may go:
    it waits for no turn (`--after`) that is still active, nor for a running
    limit. Oldest prompt first, and, where a limit applies, only as many as
    it has room for: a turn's end starts one launcher per free slot, not one
    per queued prompt (its home's `max_running` is read from `home`'s config)."""
    rows = db.execute(
        "SELECT q.session, q.options FROM queue q JOIN sessions s ON s.name = q.session"
        " WHERE s.state IN (?, ?)"
        " AND q.seq = (SELECT min(seq) FROM queue h WHERE h.session = q.session)"
        " AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.id = q.after_turn"
        " AND t.state IN ('starting', 'running')) ORDER BY q.seq",
        FREE,
    ).fetchall()
    if not rows:
        return []
    room = _home_room(db, home)
    wave_room: dict[str, int] = {}
    out = []
    for row in rows:
        if names is not None and row["session"] not in names:
            continue
        options = json.loads(row["options"])
        wave, most = options.get("wave"), options.get("wave_max")
        if wave is not None and most is not None:
            if wave not in wave_room:
                (running,) = db.execute(
                    "SELECT count(*) FROM wave_turns w JOIN turns t ON t.id = w.turn"
                    " WHERE w.wave = ? AND t.state IN ('starting', 'running')",
                    (wave,),
                ).fetchone()
                wave_room[wave] = most - running
            if wave_room[wave] <= 0:
                continue
            wave_room[wave] -= 1
        if room is not None:
            if room <= 0:
                break
            room -= 1
        out.append(row["session"])
    return out


def _home_room(db: sqlite3.Connection, home: Path | None) -> int | None:
    """How many more turns may start in the home (None: no limit)."""
    if home is None:
        return None
    from spexsup import config  # only when prompts are queued

    try:
        settings = config.load(home)
    except SpexError:
        return None  # the launcher's admission says what is wrong with the file
    if settings.budget_day is not None:
        from spexsup import usage

        day = usage.day_start(time.time())
        spent = usage.total(db, settings.pricing, where="at >= ?", params=(day,)).amount
        if spent is not None and spent >= settings.budget_day:
            return 0  # the day's budget is spent: nothing may start until tomorrow
    limit = settings.max_running
    if limit is None:
        return None
    (running,) = db.execute(
        "SELECT count(*) FROM turns WHERE state IN ('starting', 'running')"
    ).fetchone()
    return int(limit - running)


def start_waiting(
    db: sqlite3.Connection, home: Path, early: subprocess.Popen[bytes] | None = None
) -> None:
    """After a turn's end is recorded (or a session left the home): a
    launcher for each prompt that may go now, its own session's or one
    that waited for a running limit or for that turn (`--after`). `early`:
    the launcher `start_early` started for one of them, still waiting for
    that end: that session gets no second one."""
    skip = None
    if early is not None and early.poll() is None and isinstance(early.args, list):
        skip = early.args[-1]
    for name in waiting(db, home=home):
        if name == skip:
            continue
        if (str(home), name) in KEPT:
            KEPT[str(home), name] = True  # this process's launcher takes it next
            continue
        start(home, name)


# The variable that tells `spex internal dequeue` which turn's end to wait for.
AFTER_ENV = "SPEXSUP_DEQUEUE_AFTER"


def start_early(
    db: sqlite3.Connection, home: Path, name: str, turn: str
) -> subprocess.Popen[bytes] | None:
    """The exit reporter, before it records `turn`'s end: if `name` has a
    prompt queued, its launcher now, told to wait (woken by the store's
    commits) for that end, so that its start (a Python of its own, ~100 ms
    and more under load) overlaps the reporter's work instead of following
    it. Whoever records the end still starts launchers as before, except
    this one's session while it waits (`start_waiting`'s `early`)."""
    from spexsup import faults

    if faults.named(faults.Fault.REPORTER_DIES_BEFORE_DEQUEUE):
        return None  # a reporter that will die before it starts a launcher
    if db.execute("SELECT 1 FROM queue WHERE session = ? LIMIT 1", (name,)).fetchone() is None:
        return None
    return start(home, name, after=turn)


# (home, session) whose queue this process's own launcher keeps taking
# (`turn.queue.dequeue(keep=True)`): an end recorded in this process (its
# launch's confirmation saw the turn end) hands it the next prompt (True)
# instead of starting another Python for it.
KEPT: dict[tuple[str, str], bool] = {}

# (home, session) this process has started a dequeuer for, or dequeues itself.
STARTED: set[tuple[str, str]] = set()


def start_once(home: Path, name: str) -> None:
    """`start`, at most once per process and session."""
    if (str(home), name) not in STARTED:
        STARTED.add((str(home), name))
        start(home, name)


def start(home: Path, name: str, *, after: str | None = None) -> subprocess.Popen[bytes] | None:
    """`spex internal dequeue NAME`, detached (its own session, no stdio), with
    no turn's environment (`after`: the turn whose end it waits for first,
    see `start_early`); never raises (the next reader tries again)."""
    # Not the pane's TMUX/TMUX_PANE (it is no client of that pane), but the
    # user's TMUX_TMPDIR: without it `-L NAME` names a socket in the default
    # directory, and the launcher made a second server there.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SPEXSUP_TURN") and k not in ("TMUX", "TMUX_PANE")
    }
    env.pop("SPEXSUP_SESSION", None)
    env["SPEXSUP_HOME"] = str(home)
    inside = os.environ.get("TMUX", "").split(",")[0]
    if inside and not env.get("SPEXSUP_TMUX") and not env.get("SPEXSUP_TMUX_SOCKET"):
        # Started from a pane (the exit reporter): the server it runs on.
        env["SPEXSUP_TMUX_SOCKET"] = inside
    env.pop(AFTER_ENV, None)
    if after is not None:
        env[AFTER_ENV] = after
    import subprocess  # here: the exit reporter, which imports this module, rarely starts one

    with contextlib.suppress(OSError):
        return subprocess.Popen(
            [*own_python("spexsup"), "internal", "dequeue", name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    return None
