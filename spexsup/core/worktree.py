"""Git worktrees per session (opt-in), and the guarantee that no work is lost.

`spex new NAME --worktree` makes a new branch (default `spex/NAME`) from a
base and checks it out in a worktree of its own, at
`<repo>/../<repo-name>.spex/NAME` unless told otherwise; the worktree is the
session's cwd. `.spexsup.toml` at the repo root may ask for files to copy or
symlink from the repo and an argv to run in the new worktree (`post_create`,
run in the session's pane by the turn wrapper, its failure undoes it all).
A repository's post_create is arbitrary code: it runs only once the user
trusted that file's exact bytes (`spex trust`, or a confirmation on a
terminal), recorded by content hash under the state home.

Removal never loses work. Unsaved work is: tracked files modified, untracked
files (not ignored, and not a copy or symlink setup made that is still
unchanged), commits on the worktree's HEAD or branch that are on no remote
branch and not merged into the base, and stashes made on the branch. `spex
rm` refuses while there is any; `--salvage` first commits all of it to
`spex/salvage/NAME-<time>` (stashes to `…-stash-N`) and checks that commit
holds the worktree's exact state; `--keep-worktree` leaves worktree and
branch alone. Only a worktree with no unsaved work (or a salvaged one) is
removed, and its branch is deleted only if it still points where it did
when it was inspected.

Every turn records the git state of its cwd at its start in `git-start`
(HEAD and a snapshot commit of the working tree, untracked files included),
which is what `spex diff` compares. Git runs as a subprocess with an argv
list; user input never reaches a shell."""

from __future__ import annotations

import contextlib
import filecmp
import json
import os
import shutil
import stat
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from spexsup.adapters.git import GitError, git, identity, scratch_index, sha, snapshot_tree
from spexsup.core.setupfile import SETUP_FILE
from spexsup.errors import Failed, Invalid, Refused, unknown_key

SETUP_KEYS = ("copy", "symlink", "post_create", "verify", "verify_timeout")
_LIST_KEYS = ("copy", "symlink", "post_create")


# The turn id that tags the pane (and SPEXSUP_TURN) while post_create runs.
POST_CREATE = "post-create"


@dataclass(frozen=True)
class Setup:
    """`.spexsup.toml`: paths (relative to the repo root) to copy or symlink into
    a new worktree, and an argv to run in it."""

    copy: tuple[str, ...] = ()
    symlink: tuple[str, ...] = ()
    post_create: tuple[str, ...] = ()
    # The check of every turn's work in the repository (`--verify`), an argv
    # (a string runs as `sh -c`), and its time limit; like post_create, it
    # runs only once the file is trusted.
    verify: tuple[str, ...] = ()
    verify_timeout: float | None = None
    # The file's real path and the sha256 of the bytes these fields came from
    # (empty when there is no file): what trust is recorded against.
    path: str = ""
    sha256: str = ""


@dataclass(frozen=True)
class Worktree:
    """A session's worktree, as stored in `sessions.worktree` (JSON).

    `base` is the commit the branch started from; `base_ref` the ref it was
    taken from (`refs/heads/main`), or the commit itself, and is what "merged
    into the base" is measured against.
    """

    repo: str
    branch: str
    base: str
    base_ref: str
    path: str
    copy: tuple[str, ...] = ()
    symlink: tuple[str, ...] = ()
    # The post_create argv that ran when the worktree was made (empty: none).
    post_create: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | None) -> Worktree | None:
        if not text:
            return None
        data = json.loads(text)
        data["copy"] = tuple(data.get("copy", ()))
        data["symlink"] = tuple(data.get("symlink", ()))
        data["post_create"] = tuple(data.get("post_create", ()))
        return cls(**data)

    @property
    def missing(self) -> bool:
        """Removed behind spex's back: the directory, or its `.git` link, is gone."""
        return not (Path(self.path) / ".git").exists()

    def public(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "branch": self.branch,
            "base": self.base,
            "base_ref": self.base_ref,
            "path": self.path,
            "post_create": list(self.post_create),
            "state": "missing" if self.missing else "ok",
        }


def _relative(value: object, where: str) -> str:
    """A path inside the repo: relative, normalised, no `..`, not `.git`."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise Invalid(f"{where}: {value!r} is not a path")
    parts = PurePosixPath(value).parts
    if PurePosixPath(value).is_absolute() or ".." in parts or not parts or parts[0] == ".git":
        raise Invalid(f"{where}: {value!r} must be a relative path inside the repo")
    return str(PurePosixPath(*parts))


def load_setup(repo: Path) -> Setup:
    """Read `<repo>/.spexsup.toml` (absent: no setup). Invalid on any bad entry,
    and when a path to copy or symlink does not exist in the repo; an unknown
    key is warned of and ignored."""
    import tomllib

    path = repo / SETUP_FILE
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        return Setup()
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise Invalid(f"cannot read {path}: {e}") from None
    except RecursionError:
        raise Invalid(f"cannot read {path}: nested too deeply") from None
    for key in sorted(set(data) - set(SETUP_KEYS)):
        unknown_key(str(path), key, SETUP_KEYS)
    lists: dict[str, tuple[str, ...]] = {}
    for key in _LIST_KEYS:
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise Invalid(f"{path}: {key} must be a list of strings")
        lists[key] = tuple(value)
    for key in ("copy", "symlink"):
        checked = tuple(_relative(v, f"{path}: {key}") for v in lists[key])
        for rel in checked:
            if not (repo / rel).exists():
                raise Invalid(f"{path}: {key}: {rel!r} does not exist in {repo}")
        lists[key] = checked
    if lists["post_create"] and any("\0" in a for a in lists["post_create"]):
        raise Invalid(f"{path}: post_create holds a NUL byte")
    from spexsup import durations
    from spexsup.adapters.harness import verify_argv

    verify = verify_argv(data.get("verify", []), str(path))
    limit = data.get("verify_timeout")
    if limit is not None:
        limit = durations.parse(limit, f"{path}: verify_timeout", maximum=durations.WEEK)
    return Setup(
        lists["copy"],
        lists["symlink"],
        lists["post_create"],
        verify,
        limit,
        os.path.realpath(path),
        sha256(raw),
    )


def sha256(data: bytes) -> str:
    import hashlib  # lazily: `spex ls` loads this module for any worktree session

    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Request:
    """What `spex new --worktree` was asked for; None means the default."""

    branch: str | None = None
    base: str | None = None
    repo: str | None = None
    parent: str | None = None


@dataclass(frozen=True)
class Plan:
    """A worktree about to be made, validated before anything changes."""

    worktree: Worktree
    setup: Setup = field(default_factory=Setup)


def plan(name: str, request: Request) -> Plan:
    """Validate `request` for session `name`: the repo, the branch (new, well
    formed), the base (a commit), the path (free), `.spexsup.toml`.

    Invalid for bad input, Refused when the branch or the path exists.
    """
    try:
        start = Path(request.repo or ".").expanduser().absolute()
    except FileNotFoundError:
        raise Invalid("the current directory no longer exists", hint="--repo DIR") from None
    if not start.is_dir():
        raise Invalid(f"no such directory {str(start)!r}", hint="--repo DIR")
    try:
        top = git(start, "rev-parse", "--show-toplevel").strip()
    except GitError:
        raise Invalid(f"{start} is not inside a git work tree", hint="--repo DIR") from None
    repo = Path(top)
    branch = request.branch or f"spex/{name}"
    ok = git(repo, "check-ref-format", "--branch", branch, check=False).strip()
    if not ok or branch.startswith("-") or branch.startswith("spex/salvage/"):
        raise Invalid(f"invalid branch name {branch!r}", hint="see git check-ref-format")
    if sha(repo, f"refs/heads/{branch}") is not None:
        raise Refused(f"branch {branch!r} already exists in {repo}", hint="--branch NAME")
    base_arg = request.base or "HEAD"
    if base_arg.startswith("-"):
        raise Invalid(f"invalid base {base_arg!r}")
    base = sha(repo, f"{base_arg}^{{commit}}")
    if base is None:
        why = "has no commits yet" if request.base is None else f"has no commit {base_arg!r}"
        raise Invalid(f"{repo} {why}", hint="--base REF")
    # `base_arg` cannot start with "-" (checked above); this mode of rev-parse
    # does not take --end-of-options in git 2.39.
    full = git(repo, "rev-parse", "--symbolic-full-name", base_arg, check=False)
    base_ref = full.strip() if full.strip().startswith("refs/") else base
    if request.parent is not None:
        parent = Path(request.parent).expanduser().absolute()
    else:
        parent = repo.parent / f"{repo.name}.spex"
    check_parent(parent)
    path = parent / name
    if path.exists() or path.is_symlink():
        raise Refused(f"{path} already exists", hint="--worktree-dir DIR, or remove it")
    setup = load_setup(repo)
    worktree = Worktree(
        str(repo), branch, base, base_ref, str(path), setup.copy, setup.symlink, setup.post_create
    )
    return Plan(worktree, setup)


def check_parent(parent: Path) -> None:
    """Refused when the directory the worktree goes in exists and is not ours
    (or root's), or is a symlink another user made: whoever owns it can swap
    the worktree's files under the agent. A missing one `add` makes, ours."""
    try:
        link = parent.lstat()
    except FileNotFoundError:
        return
    except OSError as e:
        raise Failed(f"cannot read {parent}: {e.strerror}") from None
    target = link
    if stat.S_ISLNK(link.st_mode):
        try:
            target = parent.stat()
        except OSError:
            raise Refused(f"{parent} is a symlink to nothing", hint="--worktree-dir DIR") from None
    for st in (link, target):
        if st.st_uid not in (os.geteuid(), 0):
            raise Refused(
                f"the worktree directory {parent} belongs to uid {st.st_uid}, not to you",
                hint="--worktree-dir DIR of your own",
            )
    if not stat.S_ISDIR(target.st_mode):
        raise Refused(f"{parent} is not a directory", hint="--worktree-dir DIR")


def add(p: Plan) -> bool:
    """Create the branch, then the worktree, then the setup copies and symlinks;
    True when the worktree's parent directory was made too (for `discard`).

    The branch is created on its own first (git refuses an existing one under
    a ref lock), so of two racing creations exactly one gets it and the
    other, Refused, touches nothing of the winner's. A failure part-way
    undoes what this call made, and only that.
    """
    wt = p.worktree
    try:
        git(wt.repo, "branch", "--no-track", "--end-of-options", wt.branch, wt.base)
    except GitError as e:
        if "already exists" in e.stderr or "cannot lock ref" in e.stderr:
            raise Refused(
                f"branch {wt.branch!r} already exists in {wt.repo}", hint="--branch NAME"
            ) from None
        raise
    made_parent = not Path(wt.path).parent.exists()
    made = False
    try:
        Path(wt.path).parent.mkdir(parents=True, exist_ok=True)
        check_parent(Path(wt.path).parent)  # again: it may have been planted since `plan`
        try:
            git(wt.repo, "worktree", "add", "--end-of-options", wt.path, wt.branch)
        except GitError as e:
            if "already exists" in e.stderr or "already checked out" in e.stderr:
                raise Refused(f"cannot add worktree {wt.path}: {e.message}") from None
            raise
        made = True
        _apply_setup(wt)
    except BaseException as e:
        discard(wt, made=made, made_parent=made_parent, cause=e)
        raise
    return made_parent


def _apply_setup(wt: Worktree) -> None:
    repo, path = Path(wt.repo), Path(wt.path)
    for rel in (*wt.copy, *wt.symlink):
        if (path / rel).exists() or (path / rel).is_symlink():
            raise Failed(
                f"{SETUP_FILE}: {rel!r} is already in the new worktree (tracked in git?)",
                hint="copy and symlink are for untracked files",
            )
    for rel in wt.copy:
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        if (repo / rel).is_dir() and not (repo / rel).is_symlink():
            shutil.copytree(repo / rel, path / rel, symlinks=True)
        else:
            shutil.copy2(repo / rel, path / rel, follow_symlinks=False)
    for rel in wt.symlink:
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).symlink_to(repo / rel)


def discard(
    wt: Worktree, *, made: bool, made_parent: bool = False, cause: BaseException | None = None
) -> None:
    """Undo a creation: force-remove the worktree (it holds nothing but what
    we just made), delete the branch if it still points at the base, and the
    parent directory if we made it and it is empty. Problems become notes on
    `cause`, which the caller re-raises."""
    steps: list[tuple[str, ...]] = []
    if made:
        steps.append(("worktree", "remove", "--force", "--force", wt.path))
    steps.append(("update-ref", "-d", f"refs/heads/{wt.branch}", wt.base))
    for step in steps:
        try:
            git(wt.repo, *step)
        except GitError as e:
            if cause is not None:
                cause.add_note(f"undoing the worktree: {e.message}")
    if made_parent:
        with contextlib.suppress(OSError):
            Path(wt.path).parent.rmdir()


@dataclass(frozen=True)
class Status:
    """What a worktree holds now. `unsaved_commits` counts commits on HEAD or
    the branch that are on no remote branch and not merged into the base;
    `exempt` lists untracked paths that are unchanged setup copies/symlinks."""

    state: str  # ok | missing
    head: str | None
    branch_tip: str | None
    modified: int
    untracked: int
    unsaved_commits: int
    stashes: tuple[str, ...]
    ahead: int | None
    behind: int | None
    last_commit: str | None
    exempt: tuple[str, ...] = ()

    @property
    def unsaved(self) -> bool:
        return bool(self.modified or self.untracked or self.unsaved_commits or self.stashes)

    def summary(self) -> str:
        """`3 files modified, 2 commits not pushed or merged`."""

        def n(count: int, one: str, many: str) -> str:
            return f"{count} {one if count == 1 else many}"

        parts = []
        if self.modified:
            parts.append(n(self.modified, "file modified", "files modified"))
        if self.untracked:
            parts.append(n(self.untracked, "untracked file", "untracked files"))
        if self.unsaved_commits:
            parts.append(n(self.unsaved_commits, "commit", "commits") + " not pushed or merged")
        if self.stashes:
            parts.append(n(len(self.stashes), "stash", "stashes") + " made in it")
        return ", ".join(parts) or "nothing unsaved"

    def public(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "head": self.head,
            "ahead": self.ahead,
            "behind": self.behind,
            "modified": self.modified,
            "untracked": self.untracked,
            "unsaved_commits": self.unsaved_commits,
            "stashes": len(self.stashes),
            "last_commit": self.last_commit,
            "unsaved": self.summary() if self.unsaved else None,
        }


def _porcelain(path: str) -> tuple[int, list[str]]:
    """Tracked entries that differ from HEAD (staged or not), and untracked paths."""
    out = git(path, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    fields = out.split("\0")
    modified, untracked = 0, []
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        code, rel = entry[:2], entry[3:]
        if code == "??":
            untracked.append(rel)
        elif code != "!!":
            modified += 1
            if "R" in code or "C" in code:
                i += 1  # the source path of a rename or copy follows
    return modified, untracked


def _exempt(wt: Worktree, rel: str) -> bool:
    """An untracked path that is a setup copy or symlink, still as setup made it."""
    repo, path = Path(wt.repo), Path(wt.path)
    for link in wt.symlink:
        if rel == link:
            target = path / rel
            return target.is_symlink() and str(target.readlink()) == str(repo / link)
    for copied in wt.copy:
        if rel == copied or rel.startswith(copied + "/"):
            mine, theirs = path / rel, repo / rel
            if mine.is_symlink() or theirs.is_symlink():
                return (
                    mine.is_symlink()
                    and theirs.is_symlink()
                    and mine.readlink() == theirs.readlink()
                )
            return theirs.is_file() and filecmp.cmp(mine, theirs, shallow=False)
    return False


def _base_now(wt: Worktree) -> str:
    """The base as it is now (the base branch may have moved on), else the
    commit the worktree started from."""
    if wt.base_ref.startswith("refs/"):
        return sha(wt.repo, f"{wt.base_ref}^{{commit}}") or wt.base
    return wt.base


def _stashes(wt: Worktree, branches: Sequence[str]) -> tuple[str, ...]:
    """Stash commits made on `branches` (git names the branch in the stash's subject)."""
    out = git(wt.repo, "stash", "list", "--format=%H%x00%gs", check=False)
    found = []
    for line in out.splitlines():
        sha, _, subject = line.partition("\0")
        for b in branches:
            if subject.startswith((f"WIP on {b}: ", f"On {b}: ")):
                found.append(sha)
                break
    return tuple(found)


def inspect(wt: Worktree) -> Status:
    """Read the worktree's state. Raises Failed (GitError) when git cannot
    tell, e.g. the main repository is gone: unknown is never "clean"."""
    if not Path(wt.repo).is_dir():
        raise Failed(
            f"the repository {wt.repo} of worktree {wt.path} is gone",
            hint="spex rm NAME --keep-worktree removes just the session",
        )
    missing = wt.missing
    branch_tip = sha(wt.repo, f"refs/heads/{wt.branch}")
    head = None if missing else sha(wt.path, "HEAD")
    modified, untracked = (0, []) if missing else _porcelain(wt.path)
    exempt = tuple(rel for rel in untracked if _exempt(wt, rel))
    tips = list(dict.fromkeys(t for t in (head, branch_tip) if t))
    base_now = _base_now(wt)
    unsaved_commits = 0
    if tips:
        out = git(wt.repo, "rev-list", "--count", *tips, "--not", "--remotes", base_now)
        unsaved_commits = int(out.strip() or 0)
    current = "" if missing else git(wt.path, "branch", "--show-current").strip()
    stashes = _stashes(wt, [b for b in dict.fromkeys((wt.branch, current)) if b])
    ahead = behind = None
    last = None
    if head is not None:
        counts = git(wt.repo, "rev-list", "--left-right", "--count", f"{base_now}...{head}")
        behind, ahead = (int(x) for x in counts.split())
        last = git(wt.path, "log", "-1", "--format=%s").strip() or None
    return Status(
        state="missing" if missing else "ok",
        head=head,
        branch_tip=branch_tip,
        modified=modified,
        untracked=len(untracked) - len(exempt),
        unsaved_commits=unsaved_commits,
        stashes=stashes,
        ahead=ahead,
        behind=behind,
        last_commit=last,
        exempt=exempt,
    )


@dataclass
class Removal:
    """What `spex rm` did to a worktree session's worktree and branch."""

    path: str
    branch: str
    kept_worktree: bool = False
    salvage: str | None = None
    stash_branches: list[str] = field(default_factory=list)
    branch_kept: str | None = None  # why the branch was not deleted

    def lines(self) -> list[str]:
        out = []
        if self.kept_worktree:
            out.append(f"kept worktree {self.path} and branch {self.branch}")
            return out
        if self.salvage:
            out.append(f"salvaged unsaved work to branch {self.salvage}")
        out.extend(f"salvaged a stash to branch {b}" for b in self.stash_branches)
        out.append(f"removed worktree {self.path}")
        if self.branch_kept:
            out.append(f"kept branch {self.branch}: {self.branch_kept}")
        else:
            out.append(f"deleted branch {self.branch}")
        return out


def unsaved_refusal(name: str, wt: Worktree, status: Status, *, removing: bool) -> Refused:
    left = "; the session is left removing" if removing else ""
    return Refused(
        f"{name}: worktree {wt.path} holds unsaved work: {status.summary()}{left}",
        hint=f"commit and push it, or spex rm {name} --salvage, or --keep-worktree",
    )


def guard(name: str, wt: Worktree, *, salvage: bool) -> None:
    """Refuse (before anything changes) while the worktree holds unsaved work,
    unless it is to be salvaged. Failed when its state cannot be read."""
    status = inspect(wt)
    if status.unsaved and not salvage:
        raise unsaved_refusal(name, wt, status, removing=False)


def _salvage(name: str, wt: Worktree, status: Status) -> tuple[str, list[str]]:
    """Commit everything to a new branch `spex/salvage/NAME-<time>`.

    Its tree is the working tree (untracked files included, unchanged setup
    files excluded); its parents are HEAD, the branch tip when it differs,
    and the index when it differs from both (a staged version then edited
    again). Stashes made in the worktree get branches `…-stash-N`. The
    branches are created, never overwritten. Returns (branch, stash branches).
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    branch = f"spex/salvage/{name}-{stamp}"
    ident = identity(wt.repo)
    parents = [t for t in dict.fromkeys((status.head, status.branch_tip)) if t]
    if status.state == "ok":
        tree = snapshot_tree(wt.path, status.exempt)
        with scratch_index(wt.path) as env:
            index_tree = git(wt.path, "write-tree", env=env, check=False).strip()
        head_tree = sha(wt.path, "HEAD^{tree}")
        if parents and index_tree and index_tree not in (tree, head_tree):
            msg = f"spex salvage of {name}: the index of {wt.path}"
            index_commit = git(
                wt.path, "commit-tree", index_tree, "-p", parents[0], "-m", msg, env=ident
            ).strip()
            parents.append(index_commit)
    else:
        tip = status.branch_tip or wt.base
        tree = git(wt.repo, "rev-parse", f"{tip}^{{tree}}").strip()
    message = (
        f"spex salvage of session {name}\n\n"
        f"worktree {wt.path} on branch {wt.branch} ({status.summary()})"
    )
    args = [a for p in parents for a in ("-p", p)]
    commit = git(wt.repo, "commit-tree", tree, *args, "-m", message, env=ident).strip()
    git(wt.repo, "update-ref", f"refs/heads/{branch}", commit, "")
    stash_branches = []
    for i, stash in enumerate(status.stashes):
        b = f"{branch}-stash-{i}"
        git(wt.repo, "update-ref", f"refs/heads/{b}", stash, "")
        stash_branches.append(b)
    if status.state == "ok" and snapshot_tree(wt.path, status.exempt) != tree:
        raise Failed(
            f"{name}: the worktree changed while it was salvaged to {branch}; nothing removed",
            hint=f"spex rm {name} --salvage again",
        )
    return branch, stash_branches


def dispose(name: str, wt: Worktree, *, salvage: bool, keep: bool) -> Removal:
    """Remove a session's worktree and branch during `spex rm`, after its turn
    and tmux pane are gone, re-checking for unsaved work first.

    Unsaved work and no `salvage`: Refused (the session stays `removing`).
    The branch is deleted by compare-and-swap on the tip that was inspected,
    so a commit that lands meanwhile keeps it.
    """
    removal = Removal(wt.path, wt.branch, kept_worktree=keep)
    if keep:
        return removal
    status = inspect(wt)
    force = False
    if status.unsaved:
        if not salvage:
            raise unsaved_refusal(name, wt, status, removing=True)
        removal.salvage, removal.stash_branches = _salvage(name, wt, status)
        force = True
    if status.state == "ok":
        for rel in status.exempt:
            target = Path(wt.path) / rel
            if target.is_symlink() or not target.is_dir():
                target.unlink()
        for rel in wt.copy:
            with contextlib.suppress(OSError):  # only empty dirs left by the unlinks go
                _remove_empty_dirs(Path(wt.path) / rel)
    try:
        git(wt.repo, "worktree", "remove", *(["--force"] if force else []), wt.path)
    except GitError as e:
        if Path(wt.path).exists():
            raise Refused(
                f"{name}: git would not remove worktree {wt.path} ({e.message});"
                " the session is left removing",
                hint=f"look at it, then spex rm {name} again (or --salvage, --keep-worktree)",
            ) from None
        git(wt.repo, "worktree", "prune")
    if status.branch_tip is not None:
        ref = f"refs/heads/{wt.branch}"
        git(wt.repo, "update-ref", "-d", ref, status.branch_tip, check=False)
        if sha(wt.repo, f"refs/heads/{wt.branch}") is not None:
            removal.branch_kept = "it moved while the worktree was removed"
    else:
        removal.branch_kept = "it was already gone"
    return removal


def _remove_empty_dirs(top: Path) -> None:
    if top.is_dir() and not top.is_symlink():
        for sub in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if sub.is_dir() and not sub.is_symlink():
                sub.rmdir()
        top.rmdir()


def describe(name: str, wt: Worktree) -> dict[str, Any]:
    """A worktree's public view with its status; an unreadable one says why."""
    entry: dict[str, Any] = {"name": name, **wt.public()}
    try:
        entry.update(inspect(wt).public())
    except Failed as e:
        entry["error"] = e.line()
    return entry
