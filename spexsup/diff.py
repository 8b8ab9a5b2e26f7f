"""`spex diff`: what a turn changed in its work tree.

Every turn records the git state of its cwd at its start in `git-start`
(HEAD and a snapshot commit of the working tree, untracked files included,
see `spexsup.pane.snapshot`); a diff compares that with the turn's end (the
next turn's start, or the work tree now).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import ids, sessions
from spexsup.errors import Refused
from spexsup.git import git, snapshot
from spexsup.pane import turndir

if TYPE_CHECKING:
    from spexsup.spex import Spex


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


def show_diff(r: DiffRange, *, stat: bool = False) -> int:
    """Run `git diff` for the range with our stdout (git colours a terminal)."""
    argv = ["git", "-C", r.toplevel, "--no-pager", "diff", *(["--stat"] if stat else [])]
    return subprocess.run([*argv, r.start, r.end], check=False).returncode
