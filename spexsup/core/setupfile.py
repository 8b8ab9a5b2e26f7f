"""Where the `.spexsup.toml` that governs a session is: found by a stat or
two, apart from `worktree` and `trust` (git, dataclasses), since every wake
asks and most repositories have none."""

from __future__ import annotations

from pathlib import Path

SETUP_FILE = ".spexsup.toml"


def governing_file(cwd: Path, repo: str | None = None) -> Path | None:
    """The `.spexsup.toml` that governs a session, as its repository holds
    it (not resolved: it may be a symlink): its worktree's repository's
    (`repo`), else the one of the git work tree holding `cwd`."""

    if repo is None:
        top = next((d for d in (cwd, *cwd.parents) if (d / ".git").exists()), None)
        if top is None:
            return None
        repo = str(top)
    return Path(repo) / SETUP_FILE
