"""Salvage branches: the unsaved work `spex rm --salvage` (and `spex keep`) kept.

`spex rm --salvage` commits a worktree's unsaved work to a branch
`spex/salvage/NAME-<time>` (its stashes to `…-stash-N`, see `worktree`) in
the worktree's repository, and `record` notes each branch in the state
(table `salvages`), so it is found once no session of that repository is
left. `find` lists the salvage branches that exist now in every repository
spex knows of: those on record and those of the worktree sessions, so a
branch under `spex/salvage/` that spex did not record (an older spex's)
shows too, its session read from its name. `delete` removes branches as
`git branch -D` would, by compare-and-swap on the commit that was listed,
and never one that is checked out. The commit stays in the repository until
git collects unreachable objects, and the line that says the branch went
names it, so it can be had back (`git branch NAME COMMIT`).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import lazyre
from spexsup.adapters.git import GitError, git, sha
from spexsup.core.worktree import Worktree
from spexsup.ids import iso
from spexsup.state import ledger

if TYPE_CHECKING:
    from spexsup.core.spex import Spex

PREFIX = "spex/salvage/"
# What `worktree._salvage` names them: the session, a UTC time, a stash's number.
_NAME = lazyre.compile(r"spex/salvage/([A-Za-z0-9_-]{1,64})-([0-9]{8}T[0-9]{6}Z)(?:-stash-[0-9]+)?")


@dataclass(frozen=True)
class Salvage:
    """One salvage branch. `error` says why its repository could not be read
    (the branch is then as recorded, not as it is)."""

    repo: str
    branch: str
    commit: str
    short: str  # the commit as git abbreviates it
    session: str | None
    created_at: float
    error: str | None = None

    def public(self) -> dict[str, Any]:
        return {
            "kind": "salvage",
            "branch": self.branch,
            "commit": self.commit,
            "session": self.session,
            "repo": self.repo,
            "created_at": self.created_at,
            "created_at_iso": iso(self.created_at),
            "age_seconds": max(0, round(time.time() - self.created_at)),
            "error": self.error,
        }


def record(spex: Spex, session: str, repo: str, branches: Sequence[str]) -> None:
    """Note the salvage branches just made in `repo` for `session`."""
    shas = {b: sha(repo, f"refs/heads/{b}") for b in branches}
    with spex.store.tx() as db:
        for branch, commit in shas.items():
            if commit is not None:
                ledger.record_salvage(db, repo, branch, commit, session)


def _from_name(branch: str) -> tuple[str | None, float | None]:
    """(session, when) as spex names a salvage branch; Nones for another name."""
    m = _NAME.fullmatch(branch)
    if m is None:
        return None, None
    return m.group(1), float(calendar.timegm(time.strptime(m.group(2), "%Y%m%dT%H%M%SZ")))


def _known_repos(spex: Spex) -> dict[str, dict[str, Any]]:
    """Every repository spex knows of, each with its recorded salvage rows by branch."""
    db = spex.store.db
    repos: dict[str, dict[str, Any]] = {}
    for row in db.execute("SELECT worktree FROM sessions WHERE worktree IS NOT NULL"):
        wt = Worktree.from_json(row["worktree"])
        if wt is not None:
            repos.setdefault(wt.repo, {})
    for row in db.execute("SELECT * FROM salvages ORDER BY created_at"):
        repos.setdefault(row["repo"], {})[row["branch"]] = row
    return repos


def _branches(repo: str) -> list[tuple[str, str, str, float]] | str:
    """(branch, commit, short, committer time) of every `spex/salvage/` branch,
    or why the repository cannot be read."""
    if not Path(repo).is_dir():
        return f"the repository {repo} is gone"
    fmt = "%(refname)%00%(objectname)%00%(objectname:short)%00%(committerdate:unix)"
    try:
        out = git(repo, "for-each-ref", f"--format={fmt}", f"refs/heads/{PREFIX}")
    except GitError as e:
        return e.stderr.strip().splitlines()[-1] if e.stderr.strip() else e.message
    found = []
    for line in out.splitlines():
        ref, commit, short, when = line.split("\0")
        found.append((ref.removeprefix("refs/heads/"), commit, short, float(when or 0)))
    return found


def find(
    spex: Spex, *, sessions: Sequence[str] = (), older_than: float | None = None
) -> list[Salvage]:
    """The salvage branches there are now, oldest first: of `sessions` only
    when given, older than `older_than` seconds only when given. A recorded
    branch whose repository cannot be read is listed as recorded, with why."""
    now = time.time()
    found = []
    for repo, records in _known_repos(spex).items():
        branches = _branches(repo)
        if isinstance(branches, str):
            for r in records.values():
                c = r["commit_sha"]
                found.append(
                    Salvage(repo, r["branch"], c, c[:7], r["session"], r["created_at"], branches)
                )
            continue
        for branch, commit, short, committed in branches:
            named, stamped = _from_name(branch)
            row = records.get(branch)
            session = row["session"] if row is not None else named
            when = row["created_at"] if row is not None else stamped or committed
            found.append(Salvage(repo, branch, commit, short, session, when))
    if sessions:
        found = [s for s in found if s.session in sessions]
    if older_than is not None:
        found = [s for s in found if now - s.created_at > older_than]
    return sorted(found, key=lambda s: (s.created_at, s.repo, s.branch))


@dataclass(frozen=True)
class Deletion:
    """What `delete` did to one salvage branch: `deleted`, `forgotten` (its
    repository is gone, and the record with it) or `kept` (`why`)."""

    salvage: Salvage
    outcome: str
    why: str | None = None

    def public(self) -> dict[str, Any]:
        return {**self.salvage.public(), "outcome": self.outcome, "why": self.why}


def _checked_out(repo: str) -> dict[str, str]:
    """Branch → the worktree that has it checked out."""
    out = git(repo, "worktree", "list", "--porcelain", check=False)
    held, path = {}, ""
    for line in out.splitlines():
        if line.startswith("worktree "):
            path = line[len("worktree ") :]
        elif line.startswith("branch refs/heads/"):
            held[line[len("branch refs/heads/") :]] = path
    return held


def delete(spex: Spex, chosen: Sequence[Salvage]) -> list[Deletion]:
    """Delete each branch if it still points at the commit listed and no
    worktree has it checked out; forget its record. A branch of a repository
    that is gone is only forgotten; one of a repository git cannot read stays."""
    done = []
    held: dict[str, dict[str, str]] = {}
    for s in chosen:
        if s.error is not None:
            if Path(s.repo).exists():
                done.append(Deletion(s, "kept", s.error))
                continue
            with spex.store.tx() as db:
                ledger.forget_salvage(db, s.repo, s.branch)
            done.append(Deletion(s, "forgotten", s.error))
            continue
        if s.repo not in held:
            held[s.repo] = _checked_out(s.repo)
        if s.branch in held[s.repo]:
            done.append(Deletion(s, "kept", f"checked out in {held[s.repo][s.branch]}"))
            continue
        git(s.repo, "update-ref", "-d", f"refs/heads/{s.branch}", s.commit, check=False)
        now = sha(s.repo, f"refs/heads/{s.branch}")
        if now is not None:
            done.append(Deletion(s, "kept", f"it moved to {now[:12]} since it was listed"))
            continue
        with spex.store.tx() as db:
            ledger.forget_salvage(db, s.repo, s.branch)
        done.append(Deletion(s, "deleted"))
    return done


def forget_deleted(spex: Spex) -> None:
    """Forget the records of branches deleted behind spex's back (by hand)."""
    for repo, records in _known_repos(spex).items():
        if not records:
            continue
        branches = _branches(repo)
        if isinstance(branches, str):
            continue
        there = {b for b, *_ in branches}
        gone = [b for b in records if b not in there]
        if gone:
            with spex.store.tx() as db:
                for branch in gone:
                    ledger.forget_salvage(db, repo, branch)
