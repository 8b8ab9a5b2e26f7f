"""A throwaway state home for the bench scripts, on a private tmux server,
and a fast way to fill it with sessions (rows written straight into SQLite,
bare tmux sessions made 100 per tmux call): for what only reads sessions
(ls, show, top, serve). What wakes them needs sessions `spex new` made."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEX = str(Path(sys.executable).parent / "spex")


class Home:
    """A throwaway SPEXSUP_HOME on a private tmux server."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spexboot"))
        (self.root / "state").mkdir()  # a SPEXSUP_HOME not made yet is refused
        self.env = {
            **os.environ,
            "SPEXSUP_HOME": str(self.root / "state"),
            "SPEXSUP_TMUX": f"spexboot-{os.getpid()}-{self.root.name}",
            "TMUX_TMPDIR": str(self.root),
            # Pane shells start bare: hundreds of panes must not each run the
            # machine's rc files (pyenv init and the like).
            "HOME": str(self.root),
            "SHELL": "/bin/sh",
        }
        self.env.pop("TMUX", None)

    def spex(self, *args: str, check: bool = True, **extra: str) -> str:
        # Run from the throwaway root: sessions made here must not land in a
        # git work tree (a turn there first records the tree's state for spex diff).
        r = subprocess.run(
            [SPEX, *args],
            env={**self.env, **extra},
            cwd=self.root,
            capture_output=True,
            text=True,
            check=False,
        )
        if check and r.returncode != 0:
            raise SystemExit(f"spex {' '.join(args)}: {r.returncode} {r.stderr}")
        return r.stdout

    def tmux(self, *args: str) -> None:
        subprocess.run(
            ["tmux", "-L", self.env["SPEXSUP_TMUX"], *args],
            env=self.env,
            capture_output=True,
            check=False,
        )

    def populate(self, sessions: int, turns_each: int) -> None:
        """`sessions` sessions with tmux panes and `turns_each` ended turns each,
        written straight into SQLite (the shape spex itself writes)."""
        self.spex("ls")  # creates the schema
        db = sqlite3.connect(self.env["SPEXSUP_HOME"] + "/state.db")
        now = time.time()
        names = [f"s{i:05d}" for i in range(sessions)]
        with db:
            db.executemany(
                "INSERT INTO sessions (name, harness, cwd, env, created_at, state, current_turn)"
                " VALUES (?, 'demo', ?, '{}', ?, 'idle', ?)",
                [(n, str(self.root), now, f"20261130T000000Z-{n}-0") for n in names],
            )
            db.executemany(
                "INSERT INTO turns (id, session, state, verdict, rc, started_at, ended_at)"
                " VALUES (?, ?, 'complete', 'completed', 0, ?, ?)",
                (
                    (f"20261130T000000Z-{n}-{t}", n, now - t, now - t + 1)
                    for n in names
                    for t in range(turns_each)
                ),
            )
        db.close()
        # One tmux call per 100 panes.
        for i in range(0, sessions, 100):
            args: list[str] = []
            for n in names[i : i + 100]:
                args += ["new-session", "-d", "-s", n, "-c", str(self.root), ";"]
            self.tmux(*args[:-1])

    def close(self) -> None:
        self.tmux("kill-server")
        shutil.rmtree(self.root, ignore_errors=True)
