"""`python -m spexsup.pane.snapshot TURN_DIR CWD`: the work tree a turn starts from.

Run by the turn wrapper before the harness starts (see shell/turn.sh): it
writes `git-start` (JSON: toplevel, head, snapshot) in the turn dir when the
cwd is in a git work tree, which is what `spex diff` compares against.

A fan-out's legs share one (`SharedStarts`): the wave records each work tree
once, before any of its legs in that tree launches, instead of a hundred
wrappers each snapshotting the same tree at the same moment.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from spexsup.errors import Failed
from spexsup.pane import turndir


def record_start(cwd: str, directory: Path) -> None:
    """Best effort, before a turn launches: write `git-start` in its turn dir
    (JSON: toplevel, head, snapshot) when `cwd` is in a git work tree. A
    failure is recorded in the file, never raised: the turn goes ahead."""
    doc = start_doc(cwd, f"spex: start of turn {directory.name}")
    if doc is not None:
        turndir.write_git_start(directory, doc)


def start_doc(cwd: str | Path, message: str) -> dict[str, Any] | None:
    """`git-start`'s document for `cwd` now (its snapshot commit says
    `message`), or None when `cwd` is in no work tree (or git is missing)."""
    # Here: a fan-out imports this module, and most of its waves have no tree.
    from spexsup.adapters.git import git, snapshot

    try:
        top = git(cwd, "rev-parse", "--show-toplevel", check=False).strip()
    except Failed:
        return None  # no git: nothing to record
    if not top:
        return None
    doc: dict[str, Any] = {"toplevel": top, "head": None, "snapshot": None, "error": None}
    try:
        doc["head"], doc["snapshot"] = snapshot(top, message)
    except (Failed, OSError) as e:
        doc["error"] = str(e)
    return doc


def work_tree(cwd: Path) -> Path | None:
    """The nearest of `cwd` and its parents holding `.git` (a work tree's
    top, stat calls only; git itself decides later), or None."""
    return next((d for d in (cwd, *cwd.parents) if (d / ".git").exists()), None)


class SharedStarts:
    """A fan-out's record of each work tree at its legs' start, made once
    per tree by the first leg there (`doc`, from the leg's thread) while the
    others in that tree wait for it: no leg launches before its tree's
    record exists, so it is the state every one of them started from."""

    def __init__(self, wave: str) -> None:
        self.message = f"spex: start of wave {wave}"
        self._lock = threading.Lock()
        self._trees: dict[Path, tuple[threading.Lock, list[dict[str, Any] | None]]] = {}

    def doc(self, cwd: Path) -> dict[str, Any] | None:
        """`git-start`'s document for a leg in `cwd`: its tree's, taken now
        if no leg took it yet (None: no work tree there after all)."""
        top = work_tree(cwd)
        if top is None:
            return None
        with self._lock:
            lock, found = self._trees.setdefault(top, (threading.Lock(), []))
        with lock:
            if not found:
                found.append(start_doc(top, self.message))
            return found[0]


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3:
        print("spex: usage: python -m spexsup.pane.snapshot TURN_DIR CWD", file=sys.stderr)
        sys.exit(2)
    record_start(sys.argv[2], Path(sys.argv[1]))
