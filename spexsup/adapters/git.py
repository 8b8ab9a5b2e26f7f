"""Git as a subprocess: one runner, its error, and snapshots of a work tree.

Git runs with an argv list (user input never reaches a shell), in the C
locale, with no prompts and no optional locks: a `git status` of ours must
not fight the user's git over the index lock. Imports only the standard
library: the turn wrapper records a turn's start through it
(`spexsup.pane.snapshot`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from spexsup.errors import Failed

# The fallback identity for salvage commits when the user has none configured:
# salvage must never fail for want of a name.
SALVAGE_IDENT = {
    "GIT_AUTHOR_NAME": "spex",
    "GIT_AUTHOR_EMAIL": "spex@localhost",
    "GIT_COMMITTER_NAME": "spex",
    "GIT_COMMITTER_EMAIL": "spex@localhost",
}


# --- git --------------------------------------------------------------------


class GitError(Failed):
    def __init__(self, argv: Sequence[str], rc: int, stderr: str) -> None:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {rc}"
        super().__init__(f"git {' '.join(argv)}: {last}")
        self.rc = rc
        self.stderr = stderr


def git(
    cwd: str | Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> str:
    """Run `git -C cwd ARGS…` and return its stdout (surrogate-escaped).

    Messages in C locale, no prompts, no optional locks (a `git status` of
    ours must not fight the user's git over the index lock).
    """
    argv = ["git", "--no-optional-locks", "-C", str(cwd), *args]
    full_env = {
        **os.environ,
        "LC_ALL": "C",
        "GIT_TERMINAL_PROMPT": "0",
        **(env or {}),
    }
    try:
        res = subprocess.run(argv, capture_output=True, env=full_env, check=False)
    except FileNotFoundError:
        raise Failed("git is not installed", hint="install git") from None
    out = os.fsdecode(res.stdout)
    if check and res.returncode != 0:
        raise GitError(list(args), res.returncode, os.fsdecode(res.stderr))
    return out


def sha(cwd: str | Path, rev: str) -> str | None:
    out = git(cwd, "rev-parse", "--verify", "--quiet", "--end-of-options", rev, check=False)
    return out.strip() or None


@contextlib.contextmanager
def scratch_index(cwd: str | Path) -> Iterator[dict[str, str]]:
    """A private copy of `cwd`'s index (its stat cache saves rehashing every
    file), as the env for git commands that must not touch the real one."""
    real = Path(cwd) / git(cwd, "rev-parse", "--git-path", "index").strip()
    with tempfile.TemporaryDirectory(prefix="spex-index-") as tmp:
        scratch = Path(tmp) / "index"
        if real.exists():
            shutil.copyfile(real, scratch)
        yield {"GIT_INDEX_FILE": str(scratch)}


def identity(cwd: str | Path) -> dict[str, str]:
    ok = all(
        git(cwd, "var", var, check=False).strip()
        for var in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT")
    )
    return {} if ok else SALVAGE_IDENT


def snapshot_tree(cwd: str | Path, exclude: Sequence[str] = ()) -> str:
    """The tree of the working tree at `cwd` as it is now: tracked changes and
    untracked files (not ignored), without touching the real index."""
    specs = ["."] + [f":(exclude,literal){rel}" for rel in exclude]
    with scratch_index(cwd) as env:
        git(cwd, "add", "-A", "--", *specs, env=env)
        return git(cwd, "write-tree", env=env).strip()


def snapshot(cwd: str | Path, message: str) -> tuple[str | None, str]:
    """(HEAD, a commit of the working tree now whose parent is HEAD): what
    `git stash create` makes, untracked files included. Nothing is referenced:
    the commit lives as long as git keeps unreachable objects (2 weeks by
    default), like `git stash create`'s."""
    head = sha(cwd, "HEAD")
    tree = snapshot_tree(cwd)
    parents = ["-p", head] if head else []
    commit = git(cwd, "commit-tree", tree, *parents, "-m", message, env=identity(cwd)).strip()
    return head, commit
