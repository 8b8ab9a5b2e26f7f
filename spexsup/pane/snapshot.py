"""`python -m spexsup.pane.snapshot TURN_DIR CWD`: the work tree a turn starts from.

Run by the turn wrapper before the harness starts (see shell/turn.sh): it
writes `git-start` (JSON: toplevel, head, snapshot) in the turn dir when the
cwd is in a git work tree, which is what `spex diff` compares against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spexsup.adapters.git import git, snapshot
from spexsup.errors import Failed
from spexsup.pane import turndir


def record_start(cwd: str, directory: Path) -> None:
    """Best effort, before a turn launches: write `git-start` in its turn dir
    (JSON: toplevel, head, snapshot) when `cwd` is in a git work tree. A
    failure is recorded in the file, never raised: the turn goes ahead."""
    try:
        top = git(cwd, "rev-parse", "--show-toplevel", check=False).strip()
    except Failed:
        return  # no git: nothing to record
    if not top:
        return
    doc: dict[str, Any] = {"toplevel": top, "head": None, "snapshot": None, "error": None}
    try:
        doc["head"], doc["snapshot"] = snapshot(top, f"spex: start of turn {directory.name}")
    except (Failed, OSError) as e:
        doc["error"] = str(e)
    turndir.write_git_start(directory, doc)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3:
        print("spex: usage: python -m spexsup.pane.snapshot TURN_DIR CWD", file=sys.stderr)
        sys.exit(2)
    record_start(sys.argv[2], Path(sys.argv[1]))
