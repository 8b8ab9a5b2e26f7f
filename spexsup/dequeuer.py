"""Who launches a queued prompt when its session is free (see
`spexsup.turn.queue`): a detached `spex internal dequeue NAME`, started by the
process that records a turn's end and by any reader that finds a free
session with prompts queued. Cheap and import-light: the exit reporter and
every reconciling reader call it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from pathlib import Path

from spexsup.paths import own_python

# Session states a queued prompt may launch in (not running, stopped, being
# created or removed).
FREE = ("idle", "failed")


def waiting(db: sqlite3.Connection, names: tuple[str, ...] | None = None) -> list[str]:
    """Free sessions (of `names`, if given) whose next queued prompt may go:
    it waits for no turn (`--after`) that is still active."""
    rows = db.execute(
        "SELECT DISTINCT q.session FROM queue q JOIN sessions s ON s.name = q.session"
        " WHERE s.state IN (?, ?)"
        " AND q.seq = (SELECT min(seq) FROM queue h WHERE h.session = q.session)"
        " AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.id = q.after_turn"
        " AND t.state IN ('starting', 'running'))",
        FREE,
    ).fetchall()
    return [r[0] for r in rows if names is None or r[0] in names]


# (home, session) this process has started a dequeuer for, or dequeues itself.
STARTED: set[tuple[str, str]] = set()


def start_once(home: Path, name: str) -> None:
    """`start`, at most once per process and session."""
    if (str(home), name) not in STARTED:
        STARTED.add((str(home), name))
        start(home, name)


def start(home: Path, name: str) -> None:
    """`spex internal dequeue NAME`, detached (its own session, no stdio), with
    no turn's environment; never raises (the next reader tries again)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPEXSUP_TURN", "TMUX"))}
    env.pop("SPEXSUP_SESSION", None)
    env["SPEXSUP_HOME"] = str(home)
    inside = os.environ.get("TMUX", "").split(",")[0]
    if inside and not env.get("SPEXSUP_TMUX") and not env.get("SPEXSUP_TMUX_SOCKET"):
        # Started from a pane (the exit reporter): the server it runs on.
        env["SPEXSUP_TMUX_SOCKET"] = inside
    with contextlib.suppress(OSError):
        subprocess.Popen(
            [*own_python("spexsup"), "internal", "dequeue", name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
