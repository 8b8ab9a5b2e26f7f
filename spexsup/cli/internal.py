"""`spex internal turn-exit SESSION TURN RC`: the wrapper's exit reporter.

Parsed by hand, before typer is imported: it runs on every turn end, so its
start-up time is part of every verdict. Exit code (the marker's `cas`):
0 recorded, 3 stale or duplicate (no-op), 4 deferred to the live `spex wake` still
confirming the turn (it may retry a lock-class failure), 2 bad arguments, 1 not
recorded. The wrapper hands over its `reporting:` marker (its run time, the
output it could not keep) in `SPEXSUP_MARKER`.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spexsup.state.store import Store


def fast_path(argv: list[str]) -> int | None:
    """Handle `[--home DIR] internal turn-exit S T RC`; None for any other command."""
    home = None
    rest = argv
    if len(rest) >= 2 and rest[0] == "--home":
        home, rest = rest[1], rest[2:]
    if rest[:2] != ["internal", "turn-exit"]:
        return None
    args = rest[2:]
    if (
        len(args) != 3
        or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", args[0])
        or not re.fullmatch(r"[0-9A-Za-z_-]{1,64}", args[1])
        or not re.fullmatch(r"[0-9]{1,3}", args[2])
        or int(args[2]) > 255
    ):
        print("spex: usage: spex internal turn-exit SESSION TURN RC", file=sys.stderr)
        return 2
    from spexsup.core.spex import open_store
    from spexsup.errors import SpexError
    from spexsup.pane import marker, turndir
    from spexsup.pane.report import record_reported_exit, write_ended
    from spexsup.paths import resolve_home

    session, turn, rc = args[0], args[1], int(args[2])
    # The marker the wrapper wrote before it started us (its run time, the
    # output it could not keep), handed over whether or not the disk took it.
    final = marker.parse(os.environ.pop("SPEXSUP_MARKER", "").encode())
    try:
        path = resolve_home(home)
        store = open_store(path)
        directory = turndir.path(path, session, turn)
        mine = final.stage is marker.Stage.REPORTING and final.rc == rc
        cas = record_reported_exit(store, session, turn, rc, directory, final if mine else None)
        if cas == 0:
            _settle_wave(store, path, turn)

        # Best effort: only the pane's end line would go without its detail.
        with contextlib.suppress(Exception):
            write_ended(store, turn, directory, rc)
        with contextlib.suppress(Exception):
            _drop_typed(directory)
        return cas
    except SpexError as e:
        print(f"spex: turn-exit: {e.line()}", file=sys.stderr)
        return 1
    except Exception as e:  # the end must be reported as not recorded, never crash silently
        print(f"spex: turn-exit: could not record the end of {turn}: {e}", file=sys.stderr)
        return 1


def _drop_typed(directory: Path) -> None:
    """Keys typed into the pane while the turn ran wait in its terminal, which
    the wrapper hands us as fd SPEXSUP_TTY_FD; left there, the shell that
    follows would run them as commands. Dropped, and counted in `typed` for
    the pane's end line (here rather than in a Python start of the wrapper's
    own, on every turn's end)."""
    fd = os.environ.pop("SPEXSUP_TTY_FD", "")
    if not fd.isdigit() or not os.isatty(int(fd)):
        return
    import fcntl
    import struct
    import termios

    from spexsup.pane import turndir

    waiting = struct.unpack("i", fcntl.ioctl(int(fd), termios.FIONREAD, b"\0" * 4))[0]
    termios.tcflush(int(fd), termios.TCIFLUSH)
    turndir.write_typed(directory, waiting)


def dequeue(home: str | None, name: str) -> int:
    """`spex [--home DIR] internal dequeue NAME` without typer (see
    `cli.maint.dequeue`, typer's reading of the same line): the home must
    exist and its config.toml read, as every command's."""
    from spexsup import config
    from spexsup.core.spex import Spex
    from spexsup.paths import existing_home
    from spexsup.turn.queue import dequeue as launch_next

    root = Path(home) if home is not None else None
    existing_home(root)
    spex = Spex.open(root)
    config.load(spex.home)
    launch_next(spex, name, keep=True)
    return 0


def _settle_wave(store: Store, home: Path, turn: str) -> None:
    """A turn that is a wave leg moves its wave on (and may run its on-complete
    command): the process that records a transition fires what follows it."""
    if store.db.execute("SELECT 1 FROM wave_turns WHERE turn = ?", (turn,)).fetchone() is None:
        return
    from spexsup.core.spex import Spex
    from spexsup.core.wavedoc import settle_turn_end

    try:
        settle_turn_end(Spex(home, store), turn)
    except Exception as e:  # the end itself is recorded; say what was not
        print(f"spex: turn-exit: could not update the wave of {turn}: {e}", file=sys.stderr)
