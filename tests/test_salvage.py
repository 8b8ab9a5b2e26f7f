"""Salvage branches through the installed `spex`, in real git repositories:
found by `spex worktree status` (text and JSON) after their session is gone,
deleted by `spex prune --salvage` (dry run, --yes, --older-than, the
terminal's question), kept when checked out; and `spex keep`'s next step,
run as printed."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import time
from datetime import UTC, datetime
from typing import Any

import pexpect
import pytest
from conftest import SPEX, Env
from test_worktree import Repo, made, make_repo, make_stash, one_line_error, tree_of


@pytest.fixture
def repo(env: Env, monkeypatch: pytest.MonkeyPatch) -> Repo:
    return make_repo(env, monkeypatch)


def salvage_branches(repo: Repo) -> list[str]:
    return [b for b in repo.branches() if b.startswith("spex/salvage/")]


def salvaged(env: Env, repo: Repo, name: str, text: str = "mine\n") -> str:
    """A worktree session whose untracked work `spex rm --salvage` keeps; its branch."""
    wt = made(env, repo, name)
    (wt / "notes.txt").write_text(text)
    before = set(salvage_branches(repo))
    r = env.run("rm", name, "--salvage")
    assert r.returncode == 0, r.stderr
    (branch,) = set(salvage_branches(repo)) - before
    return branch


def status_docs(env: Env, *args: str) -> list[dict[str, Any]]:
    r = env.run("worktree", "status", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def salvage_docs(env: Env, *args: str) -> list[dict[str, Any]]:
    return [d for d in status_docs(env, *args) if d["kind"] == "salvage"]


def old_branch(repo: Repo, branch: str) -> str:
    """A salvage branch made by hand (as an older spex would have), at HEAD."""
    repo.git("branch", branch, "main")
    return repo.git("rev-parse", branch).strip()


def test_a_salvage_branch_is_listed_once_its_session_is_gone(env: Env, repo: Repo) -> None:
    branch = salvaged(env, repo, "gone")
    assert env.run("ls", "--json").stdout.strip() == "[]"
    commit = repo.git("rev-parse", branch).strip()
    (doc,) = status_docs(env)
    assert doc["kind"] == "salvage" and doc["schema_version"] == 1
    assert (doc["branch"], doc["commit"], doc["session"]) == (branch, commit, "gone")
    assert doc["repo"] == str(repo.path) and doc["error"] is None
    assert 0 <= time.time() - doc["created_at"] < 120 and 0 <= doc["age_seconds"] < 120
    when = datetime.fromtimestamp(doc["created_at"], UTC).isoformat(timespec="milliseconds")
    assert doc["created_at_iso"] == when.replace("+00:00", "Z")
    text = env.run("worktree", "status").stdout
    assert text.startswith("no worktree sessions")
    assert "salvage branches (git log BRANCH shows one; spex prune --salvage deletes them):" in text
    assert "BRANCH  " in text and "  SESSION  REPO" in text
    (row,) = [line.split() for line in text.splitlines() if line.startswith(branch)]
    short = repo.git("rev-parse", "--short", branch).strip()
    assert row[:2] == [branch, short] and row[3] == "ago", row
    assert row[-2:] == ["gone", str(repo.path)], row


def test_status_lists_worktrees_and_salvage_as_documents_of_their_kind(
    env: Env, repo: Repo
) -> None:
    """Stash branches too; a branch of an older spex (or by hand) under
    spex/salvage/ in a repository spex knows: its session and age from its name."""
    wt = made(env, repo, "live")
    make_stash(repo, wt)
    (wt / "x").write_text("x\n")
    assert env.run("rm", "live", "--salvage").returncode == 0
    made(env, repo, "other")
    handmade = old_branch(repo, "spex/salvage/old-try-20200102T030405Z")
    old_branch(repo, "spex/salvage/by-hand")
    docs = status_docs(env)
    assert [d["kind"] for d in docs] == ["worktree"] + ["salvage"] * 4
    assert docs[0]["name"] == "other" and docs[0]["schema_version"] == 1
    by_branch = {d["branch"]: d for d in docs[1:]}
    old = by_branch["spex/salvage/old-try-20200102T030405Z"]
    assert (old["session"], old["commit"]) == ("old-try", handmade)
    assert old["created_at_iso"] == "2020-01-02T03:04:05.000Z"
    assert by_branch["spex/salvage/by-hand"]["session"] is None
    mine = [b for b in by_branch if b.startswith("spex/salvage/live-")]
    assert len(mine) == 2 and any(b.endswith("-stash-0") for b in mine), mine
    assert all(by_branch[b]["session"] == "live" for b in mine)
    # Oldest first: the one named for 2020 leads.
    assert docs[1]["branch"] == "spex/salvage/old-try-20200102T030405Z"
    # NAMEs: those sessions and their salvage branches only.
    assert [d["kind"] for d in status_docs(env, "other")] == ["worktree"]
    r = env.run("worktree", "status", "nosuch", "--json")
    one_line_error(r, 3)
    assert json.loads(r.stdout) == {
        "schema_version": 1,
        "ok": False,
        "error": r.stderr.strip().removeprefix("spex: "),
        "exit_code": 3,
    }


def test_prune_salvage_dry_run_then_yes_deletes_and_names_the_commit(env: Env, repo: Repo) -> None:
    branch = salvaged(env, repo, "s", "precious\n")
    commit = repo.git("rev-parse", branch).strip()
    short = repo.git("rev-parse", "--short", branch).strip()
    # Without --salvage, prune leaves salvage branches be.
    assert env.run("prune", "--older-than", "0s").returncode == 0
    assert salvage_branches(repo) == [branch]
    r = env.run("prune", "--salvage", "--dry-run")
    assert (r.returncode, r.stdout) == (0, f"would delete {branch} ({short}) in {repo.path}\n")
    doc = json.loads(env.run("prune", "--salvage", "--dry-run", "--json").stdout)
    assert doc["schema_version"] == 1 and doc["dry_run"] is True
    assert [(d["branch"], d["outcome"]) for d in doc["salvage"]] == [(branch, "would-delete")]
    assert salvage_branches(repo) == [branch]
    # Off a terminal nothing asks; --yes is what a person at one types.
    r = env.run("prune", "--salvage", "--yes")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"deleted {branch} (was {short}) in {repo.path}\n"
    assert salvage_branches(repo) == []
    assert salvage_docs(env) == []
    assert env.run("prune", "--salvage").stdout == "no salvage branches\n"
    # The line says enough to have it back.
    repo.git("branch", "back", short)
    assert tree_of(repo, "back")["notes.txt"] == b"precious\n"
    assert repo.git("rev-parse", "back").strip() == commit


def test_prune_salvage_older_than_keeps_the_young(env: Env, repo: Repo) -> None:
    made(env, repo, "keeper")  # a session of the repo: its hand-made branch is found
    old = "spex/salvage/ancient-20200101T000000Z"
    old_branch(repo, old)
    young = salvaged(env, repo, "young")
    r = env.run("prune", "--salvage", "--older-than", "30d", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(d["branch"], d["outcome"]) for d in doc["salvage"]] == [(old, "deleted")]
    assert salvage_branches(repo) == [young]
    assert env.run("prune", "--salvage", "--older-than", "30d").stdout == (
        "no salvage branches older than 30d\n"
    )
    one_line_error(env.run("prune", "--salvage", "--older-than", "soon"), 2)
    one_line_error(env.run("prune", "--yes"), 2)  # --yes goes with --salvage only
    assert salvage_branches(repo) == [young]


def test_prune_salvage_on_a_terminal_asks_first(env: Env, repo: Repo) -> None:
    branch = salvaged(env, repo, "t")

    def prune(*args: str) -> pexpect.spawn:
        return pexpect.spawn(SPEX, ["prune", "--salvage", *args], env=env.vars, timeout=30)

    for answer in ("n", ""):
        child = prune()
        try:
            child.expect_exact(f"delete 1 salvage branch ({branch})? [y/N]: ")
            child.sendline(answer)
            child.expect_exact("spex: deleted nothing (not confirmed) (--yes skips the question)")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        assert child.exitstatus == 3, answer
        assert salvage_branches(repo) == [branch], answer
    child = prune()
    try:
        child.expect_exact("? [y/N]: ")
        child.sendline("y")
        child.expect_exact(f"deleted {branch} (was ")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert salvage_branches(repo) == []


def test_a_checked_out_salvage_branch_is_kept(env: Env, repo: Repo) -> None:
    branch = salvaged(env, repo, "c")
    elsewhere = env.root / "looking"
    repo.git("worktree", "add", "-q", str(elsewhere), branch)
    r = env.run("prune", "--salvage", "--yes")
    assert r.returncode == 1
    assert r.stderr == f"spex: kept {branch} in {repo.path}: checked out in {elsewhere}\n"
    assert salvage_branches(repo) == [branch]
    assert [d["branch"] for d in salvage_docs(env)] == [branch]


def test_a_salvage_branch_deleted_by_hand_is_forgotten(env: Env, repo: Repo) -> None:
    branch = salvaged(env, repo, "h")
    repo.git("branch", "-D", branch)
    assert salvage_docs(env) == []
    assert env.run("prune", "--salvage").stdout == "no salvage branches\n"
    with sqlite3.connect(env.home / "state.db") as db:
        assert db.execute("SELECT count(*) FROM salvages").fetchone() == (0,)


def test_keep_prints_the_next_step_and_it_works(env: Env, repo: Repo) -> None:
    r = env.run(
        "fanout", "--worktrees", "2", "--repo", str(repo.path), "--prefix", "k",
        "-m", "try", "--window", "1", "--json", timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert env.run("wait", "k-1", "k-2", "--timeout", "60").returncode == 0
    (repo.worktree("k-1") / "answer.txt").write_text("the kept answer\n")
    repo.git("add", "answer.txt", cwd=repo.worktree("k-1"))
    repo.git("commit", "-qm", "the answer", cwd=repo.worktree("k-1"))
    (repo.worktree("k-2") / "draft.txt").write_text("the other try\n")
    r = env.run("keep", "last", "k-1")
    assert r.returncode == 0, r.stderr
    (two,) = salvage_branches(repo)
    lines = r.stdout.splitlines()
    step = f"next: cd {repo.path} && git switch main && git merge spex/k-1"
    assert step in lines, r.stdout
    assert "  then spex rm k-1 (its worktree and branch go, the merge keeps the work)" in lines
    assert f"the other legs' unsaved work is on {two}" in lines
    assert "  (spex worktree ls lists them; spex prune --salvage deletes them)" in lines
    # The next step, run as printed, merges; then rm removes the kept leg cleanly.
    command = step.removeprefix("next: ")
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env.vars)
    assert done.returncode == 0, done.stderr
    assert (repo.path / "answer.txt").read_text() == "the kept answer\n"
    r = env.run("rm", "k-1")
    assert r.returncode == 0, r.stderr
    assert "k-1: deleted branch spex/k-1" in r.stdout
    # keep --json: the removed leg names its salvage branch.
    assert [d["session"] for d in salvage_docs(env)] == ["k-2"]


def test_keep_json_names_the_salvage_branches(env: Env, repo: Repo) -> None:
    r = env.run(
        "fanout", "--worktrees", "2", "--repo", str(repo.path), "--prefix", "j",
        "-m", "try", "--window", "1", "--json", timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert env.run("wait", "j-1", "j-2", "--timeout", "60").returncode == 0
    (repo.worktree("j-2") / "draft.txt").write_text("draft\n")
    outcomes = json.loads(env.run("keep", "last", "1", "--json").stdout)
    (two,) = salvage_branches(repo)
    assert [(o["session"], o["outcome"], o["salvaged"]) for o in outcomes] == [
        ("j-1", "kept", []),
        ("j-2", "removed", [two]),
    ]
    assert re.fullmatch(r"spex/salvage/j-2-[0-9]{8}T[0-9]{6}Z", two)
