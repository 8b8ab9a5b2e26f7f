"""`spex diff`: what a turn changed in its work tree.

Every turn records the git state of its cwd at its start in `git-start`
(HEAD and a snapshot commit of the working tree, untracked files included,
see `spexsup.pane.snapshot`); a diff compares that with the turn's end (the
next turn's start, or the work tree now).
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import ids
from spexsup.adapters.git import git, snapshot
from spexsup.core import sessions
from spexsup.errors import Refused
from spexsup.pane import turndir

if TYPE_CHECKING:
    from spexsup.core.spex import Spex


@dataclass(frozen=True)
class DiffRange:
    """What `spex diff` compares: a turn's start snapshot and its end, which is
    the next turn's start snapshot, or for the latest turn the state now."""

    session: str
    turn: str
    toplevel: str
    start: str
    end: str
    end_is_now: bool

    def public(self) -> dict[str, Any]:
        return asdict(self)


def _git_start(spex: Spex, session: str, turn: str) -> dict[str, Any] | None:
    path = turndir.path(spex.home, session, turn) / turndir.GIT_START
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def turn_range(spex: Spex, name: str, turn: str | None = None) -> DiffRange:
    """The range `spex diff NAME [--turn ID]` shows (default: the latest turn).

    Refused when the session has no such turn, or the turn recorded no git
    state (its cwd was not a git work tree when it started).
    """
    sessions.get(spex, name)
    if turn is not None:
        turn = ids.resolve_turn(spex.store.db, name, turn)
    rows = spex.store.db.execute(
        "SELECT id FROM turns WHERE session = ? ORDER BY started_at, id", (name,)
    ).fetchall()
    order = [r["id"] for r in rows]
    if not order:
        raise Refused(f"session {name!r} has no turns yet", hint=f"spex wake {name} TEXT")
    if turn is None:
        turn = order[-1]
    if turn not in order:
        raise Refused(f"session {name!r} has no turn {turn!r}", hint=f"see spex show {name}")
    start = _git_start(spex, name, turn)
    if start is None or not start.get("snapshot"):
        why = start.get("error") if start else None
        raise Refused(
            f"turn {turn} of {name!r} recorded no git state at its start"
            + (f" ({why})" if why else " (its cwd was not a git work tree)"),
        )
    top = str(start["toplevel"])
    for later in order[order.index(turn) + 1 :]:
        nxt = _git_start(spex, name, later)
        if nxt and nxt.get("snapshot") and nxt.get("toplevel") == top:
            return DiffRange(name, turn, top, str(start["snapshot"]), str(nxt["snapshot"]), False)
    if not Path(top).is_dir():
        raise Refused(f"{top}, where turn {turn} of {name!r} ran, is gone")
    _, now = snapshot(top, f"spex: state of {name} after turn {turn}")
    return DiffRange(name, turn, top, str(start["snapshot"]), now, True)


def diff_files(r: DiffRange) -> list[dict[str, Any]]:
    """Per file: path, lines added and deleted (None for binary files)."""
    out = git(r.toplevel, "diff", "--numstat", "-z", "--no-renames", r.start, r.end)
    files = []
    for entry in out.split("\0"):
        if not entry:
            continue
        added, deleted, path = entry.split("\t", 2)
        files.append(
            {
                "path": path,
                "added": None if added == "-" else int(added),
                "deleted": None if deleted == "-" else int(deleted),
            }
        )
    return files


def changed(r: DiffRange) -> bool:
    """Did the turn change anything (a file's content or mode)?"""
    return bool(git(r.toplevel, "diff", "--name-only", "-z", "--no-renames", r.start, r.end))


@dataclass(frozen=True)
class Pager:
    """The pager `spex diff` pipes git through on a terminal: a shell command
    line, as git runs `$PAGER`, and the environment it gets."""

    command: str
    env: dict[str, str]


def pager(environ: Mapping[str, str]) -> Pager | None:
    """Git's choice, spex's name first: `$SPEXSUP_PAGER`, else `$PAGER`, else
    `less -FRX` (`LESS=FRX` when LESS is unset, as git sets it). None when it
    is empty or `cat` (no pager, as for git) or its program is not installed,
    so the diff is printed as it is."""
    command = environ.get("SPEXSUP_PAGER", environ.get("PAGER", "less -FRX")).strip()
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or command == "cat" or shutil.which(words[0], path=environ.get("PATH")) is None:
        return None
    env = dict(environ)
    env.setdefault("LESS", "FRX")
    env.setdefault("LV", "-c")
    return Pager(command, env)


def show_diff(
    r: DiffRange, *, stat: bool = False, color: bool = False, through: Pager | None = None
) -> int:
    """Run `git diff` for the range: to our stdout, or into the pager `through`
    (whose exit ends it: a pager quit early is no failure). `color` forces
    git's colours (its stdout may be the pager's pipe), else none.

    Ctrl-C belongs to the pager while it runs: it must not end spex and leave
    the pager holding the terminal. Returns git's exit code: 0 when the
    pager was quit before git was done, 130 when a Ctrl-C ended git."""
    argv = ["git", "-C", r.toplevel, "--no-pager", "diff"]
    argv += ["--color=always" if color else "--no-color", *(["--stat"] if stat else [])]
    argv += [r.start, r.end]
    if through is None:
        return subprocess.run(argv, check=False).returncode
    # A handler, not SIG_IGN: the children get the default back at exec.
    interrupt = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        shown = subprocess.Popen(
            ["/bin/sh", "-c", through.command], stdin=subprocess.PIPE, env=through.env
        )
        assert shown.stdin is not None
        try:
            rc = subprocess.run(argv, stdout=shown.stdin, check=False).returncode
        finally:
            shown.stdin.close()
            shown.wait()
    finally:
        signal.signal(signal.SIGINT, interrupt)
    if rc == -signal.SIGINT:
        return 128 + signal.SIGINT
    return 0 if rc in (-signal.SIGPIPE, 128 + signal.SIGPIPE) else rc
