"""Worktree sessions against real git repositories (a bare repo as the remote,
so "pushed" is real), real tmux and the installed `spex`: creation and its
setup, rm that never loses work, salvage byte for byte, a hand-removed
worktree, leases and races, spex diff, best-of-N with keep."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import HARNESSES, SPEX, Env, retry_until

IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


@dataclass
class Repo:
    path: Path
    remote: Path

    def git(self, *args: str, cwd: Path | None = None) -> str:
        res = subprocess.run(
            ["git", "-C", str(cwd or self.path), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert res.returncode == 0, (args, res.stderr)
        return res.stdout

    def worktree(self, name: str) -> Path:
        return self.path.parent / f"{self.path.name}.spex" / name

    def branch_exists(self, branch: str) -> bool:
        res = subprocess.run(
            [
                "git",
                "-C",
                str(self.path),
                "show-ref",
                "--verify",
                "--quiet",
                f"refs/heads/{branch}",
            ],
            check=False,
        )
        return res.returncode == 0

    def branches(self) -> list[str]:
        return self.git("branch", "--format=%(refname:short)").split()

    def worktrees(self) -> list[str]:
        out = self.git("worktree", "list", "--porcelain")
        return [ln[9:] for ln in out.splitlines() if ln.startswith("worktree ")]


@pytest.fixture
def repo(env: Env, monkeypatch: pytest.MonkeyPatch) -> Repo:
    return make_repo(env, monkeypatch)


def make_repo(env: Env, monkeypatch: pytest.MonkeyPatch) -> Repo:
    """`proj` (one commit on main, pushed) with a bare `remote.git` as origin
    (the `repo` fixture here and in the other files of git tests).

    The state home's config names the demo harness as the default, so that
    `spex new --worktree` needs no --harness here.
    """
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text('default_harness = "demo"\n')
    for key, value in IDENTITY.items():
        monkeypatch.setenv(key, value)
        env.vars[key] = value
    remote = env.root / "remote.git"
    path = env.root / "proj"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    r = Repo(path, remote)
    (path / "README").write_text("hello\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("print('app')\n")
    (path / ".gitignore").write_text("*.log\nnode_modules/\n")
    r.git("add", "-A")
    r.git("commit", "-qm", "initial")
    r.git("remote", "add", "origin", str(remote))
    r.git("push", "-q", "-u", "origin", "main")
    return r


def new(env: Env, repo: Repo, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return env.run("new", name, "--worktree", "--repo", str(repo.path), *args)


def made(env: Env, repo: Repo, name: str, *args: str) -> Path:
    r = new(env, repo, name, *args)
    assert r.returncode == 0, r.stderr
    return repo.worktree(name)


def session(env: Env, name: str) -> dict[str, Any]:
    r = env.run("show", name, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def names(env: Env) -> list[str]:
    return [row["name"] for row in json.loads(env.run("ls", "--json").stdout)]


def one_line_error(r: subprocess.CompletedProcess[str], code: int) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("spex: "), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr


def trusted_setup(env: Env, repo: Repo, text: str) -> None:
    """Write the repo's .spexsup.toml and trust it, as its user would."""
    (repo.path / ".spexsup.toml").write_text(text)
    r = env.run("trust", str(repo.path))
    assert r.returncode == 0, r.stderr


def files_of(top: Path) -> dict[str, bytes]:
    """Every file and symlink under `top` but .git, as git would store it."""
    out = {}
    for p in top.rglob("*"):
        if ".git" in p.relative_to(top).parts:
            continue
        if p.is_symlink():
            out[str(p.relative_to(top))] = os.fsencode(p.readlink())
        elif p.is_file():
            out[str(p.relative_to(top))] = p.read_bytes()
    return out


def tree_of(repo: Repo, rev: str) -> dict[str, bytes]:
    listing = repo.git("ls-tree", "-r", "-z", "--name-only", rev).split("\0")
    out = {}
    for rel in filter(None, listing):
        blob = subprocess.run(
            ["git", "-C", str(repo.path), "cat-file", "blob", f"{rev}:{rel}"],
            capture_output=True,
            check=True,
        )
        out[rel] = blob.stdout
    return out


# --- 1. creation -------------------------------------------------------------


def test_new_worktree_makes_branch_and_cwd_and_rm_clean_removes_both(env: Env, repo: Repo) -> None:
    head = repo.git("rev-parse", "HEAD").strip()
    r = new(env, repo, "feat")
    assert r.returncode == 0, r.stderr
    wt = repo.worktree("feat")
    assert f"created feat (demo) in {wt} on branch spex/feat" in r.stdout
    assert str(wt) in repo.worktrees()
    assert repo.git("rev-parse", "spex/feat").strip() == head
    assert repo.git("branch", "--show-current", cwd=wt).strip() == "spex/feat"
    # The worktree is the session's cwd, and the pane's.
    row = session(env, "feat")
    assert row["cwd"] == str(wt)
    assert row["worktree"]["branch"] == "spex/feat"
    assert row["worktree"]["base"] == head
    assert row["worktree"]["base_ref"] == "refs/heads/main"
    assert row["worktree"]["repo"] == str(repo.path)
    assert row["worktree"]["state"] == "ok"
    assert row["worktree"]["unsaved"] is None
    panes = env.tmux("list-panes", "-t", "=feat", "-F", "#{pane_current_path}")
    assert panes.stdout.split() == [str(wt)]
    assert "worktree missing" not in env.run("ls").stdout
    again = new(env, repo, "feat")
    one_line_error(again, 3)
    assert "session 'feat' already exists" in again.stderr
    r = env.run("rm", "feat")
    assert r.returncode == 0, r.stderr
    assert "feat: deleted branch spex/feat" in r.stdout
    assert not wt.exists()
    assert str(wt) not in repo.worktrees()
    assert not repo.branch_exists("spex/feat")
    assert names(env) == []
    assert env.tmux("has-session", "-t", "=feat").returncode != 0


def test_branch_base_and_worktree_dir(env: Env, repo: Repo) -> None:
    first = repo.git("rev-parse", "HEAD").strip()
    (repo.path / "later").write_text("later\n")
    repo.git("add", "later")
    repo.git("commit", "-qm", "later")
    where = env.root / "elsewhere"
    r = new(
        env, repo, "old", "--branch", "topic/old", "--base", first, "--worktree-dir", str(where)
    )
    assert r.returncode == 0, r.stderr
    wt = where / "old"
    assert repo.git("rev-parse", "HEAD", cwd=wt).strip() == first
    assert repo.git("branch", "--show-current", cwd=wt).strip() == "topic/old"
    assert not (wt / "later").exists()
    row = session(env, "old")
    assert row["worktree"]["base_ref"] == first  # a commit, not a branch
    # Default --repo is the current directory.
    res = subprocess.run(
        [SPEX, "new", "here", "--worktree"],
        cwd=repo.path,
        env=env.vars,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert session(env, "here")["cwd"] == str(repo.worktree("here"))


def test_bad_worktree_input_is_one_line_and_changes_nothing(env: Env, repo: Repo) -> None:
    plain = env.root / "plain"
    plain.mkdir()
    before = (repo.branches(), repo.worktrees())
    cases = [
        (["new", "a", "--branch", "x"], 2),
        (["new", "a", "--worktree", "--repo", str(repo.path), "--cwd", str(env.root)], 2),
        (["new", "a", "--worktree", "--repo", str(plain)], 2),
        (["new", "a", "--worktree", "--repo", str(env.root / "nope")], 2),
        (["new", "a", "--worktree", "--repo", str(repo.path), "--branch", "a..b"], 2),
        (["new", "a", "--worktree", "--repo", str(repo.path), "--branch", "-x"], 2),
        (["new", "a", "--worktree", "--repo", str(repo.path), "--base", "nosuchref"], 2),
        (["new", "a", "--worktree", "--repo", str(repo.path), "--base", "--help"], 2),
        (["new", "a", "--worktree", "--repo", str(repo.path), "--branch", "main"], 3),
        (["new", "a.b", "--worktree", "--repo", str(repo.path)], 2),
        (["rm", "a", "--salvage", "--keep-worktree"], 2),
        (["worktree", "status", "nope"], 3),
        (["diff", "nope"], 3),
        (["keep", "wnope", "1"], 3),
        (["keep", "bad/id", "1"], 2),
        (["fanout", "--worktrees", "0", "--repo", str(repo.path), "-m", "x"], 2),
        (["fanout", "--repo", str(repo.path), "-m", "x", "a"], 2),
    ]
    for args, code in cases:
        r = env.run(*args)
        one_line_error(r, code)
    (repo.worktree("taken")).mkdir(parents=True)
    one_line_error(new(env, repo, "taken"), 3)
    assert names(env) == []
    assert (repo.branches(), repo.worktrees()) == before
    assert sorted(p.name for p in repo.worktree("x").parent.iterdir()) == ["taken"]


NOBODY = 65534


def test_a_worktree_parent_of_another_user_is_refused(env: Env, repo: Repo) -> None:
    """Whoever owns the directory a worktree goes in can swap the worktree's
    files under the agent: another user's parent is refused, nothing made."""
    before = (repo.branches(), repo.worktrees())
    theirs = repo.worktree("a").parent
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    r = new(env, repo, "a")
    one_line_error(r, 3)
    assert str(theirs) in r.stderr and f"uid {NOBODY}" in r.stderr, r.stderr
    # --worktree-dir too; and a symlink planted by another user to a directory of ours.
    mine = env.root / "mine"
    mine.mkdir()
    link = env.root / "link"
    link.symlink_to(mine)
    os.lchown(link, NOBODY, NOBODY)
    for where in (theirs, link):
        r = new(env, repo, "b", "--worktree-dir", str(where))
        one_line_error(r, 3)
        assert str(where) in r.stderr and f"uid {NOBODY}" in r.stderr, r.stderr
    assert names(env) == []
    assert (repo.branches(), repo.worktrees()) == before
    assert list(theirs.iterdir()) == [] and list(mine.iterdir()) == []
    # A parent of our own, through a symlink of our own, is fine.
    os.lchown(link, os.getuid(), os.getgid())
    assert new(env, repo, "c", "--worktree-dir", str(link)).returncode == 0
    assert (mine / "c").is_dir()


@pytest.mark.parametrize(
    "toml",
    [
        'copy = ".env"',
        'copy = ["/etc/passwd"]',
        'copy = ["../outside"]',
        'copy = ["missing.txt"]',
        'symlink = [".git"]',
        "post_create = [1, 2]",
        "copy = [",
    ],
)
def test_bad_setup_file_changes_nothing(env: Env, repo: Repo, toml: str) -> None:
    (repo.path / ".spexsup.toml").write_text(toml + "\n")
    before = (repo.branches(), repo.worktrees())
    one_line_error(new(env, repo, "a"), 2)
    assert (repo.branches(), repo.worktrees()) == before
    assert names(env) == []
    assert not repo.worktree("a").exists()


def test_setup_copies_symlinks_and_runs_post_create_in_the_pane(env: Env, repo: Repo) -> None:
    (repo.path / ".env").write_bytes(b"SECRET=1\n\x00\xff")
    (repo.path / "node_modules" / "dep").mkdir(parents=True)
    (repo.path / "node_modules" / "dep" / "index.js").write_text("module.exports = 1\n")
    (repo.path / "conf.d").mkdir()
    (repo.path / "conf.d" / "a.conf").write_text("a\n")
    trusted_setup(
        env,
        repo,
        'copy = [".env", "conf.d"]\nsymlink = ["node_modules"]\n'
        'post_create = ["sh", "-c", '
        '"echo SETUP-RAN-IN-$(basename \\"$PWD\\"); echo made > built.txt"]\n',
    )
    r = new(env, repo, "web")
    assert r.returncode == 0, r.stderr
    wt = repo.worktree("web")
    # It says what ran.
    assert (
        f"ran post_create of {repo.path}/.spexsup.toml: sh -c"
        " 'echo SETUP-RAN-IN-$(basename \"$PWD\"); echo made > built.txt'"
    ) in r.stdout, r.stdout
    assert (wt / ".env").read_bytes() == b"SECRET=1\n\x00\xff"
    assert not (wt / ".env").is_symlink()
    assert (wt / "conf.d" / "a.conf").read_text() == "a\n"
    assert (wt / "node_modules").is_symlink()
    assert (wt / "node_modules").readlink() == repo.path / "node_modules"
    assert (wt / "built.txt").read_text() == "made\n"
    # Its output is in the pane (and its log), and the pane is a shell again.
    assert retry_until(
        lambda: "SETUP-RAN-IN-web" in env.tmux("capture-pane", "-p", "-t", "=web:0.0").stdout
    )
    log = env.home / "turns" / "web" / "post-create" / "output.log"
    assert "SETUP-RAN-IN-web" in log.read_text()
    assert session(env, "web")["state"] == "idle"
    # A turn after post_create launches in the same pane.
    assert env.run("wake", "web", "hello", "--window", "1").returncode == 0
    assert env.run("wait", "web", "--timeout", "30").returncode == 0
    # Unchanged copies and our symlink are not unsaved work; built.txt is.
    r = env.run("rm", "web")
    one_line_error(r, 3)
    assert "1 untracked file" in r.stderr
    (wt / "built.txt").unlink()
    # A copy that was edited is work.
    (wt / "conf.d" / "a.conf").write_text("edited\n")
    r = env.run("rm", "web")
    one_line_error(r, 3)
    assert "1 untracked file" in r.stderr
    (wt / "conf.d" / "a.conf").write_text("a\n")
    r = env.run("rm", "web")
    assert r.returncode == 0, r.stderr
    assert not wt.exists()
    # The originals behind the copies and the symlink are untouched.
    assert (repo.path / ".env").read_bytes() == b"SECRET=1\n\x00\xff"
    assert (repo.path / "node_modules" / "dep" / "index.js").exists()
    assert (repo.path / "conf.d" / "a.conf").read_text() == "a\n"


def test_failing_post_create_fails_new_and_removes_everything(env: Env, repo: Repo) -> None:
    trusted_setup(
        env,
        repo,
        'post_create = ["sh", "-c", "echo half > half.txt; echo npm ERR broken; exit 7"]\n',
    )
    before = (repo.branches(), repo.worktrees())
    r = new(env, repo, "bad")
    one_line_error(r, 1)
    assert "rc=7" in r.stderr
    assert "npm ERR broken" in r.stderr
    assert names(env) == []
    assert (repo.branches(), repo.worktrees()) == before
    assert not repo.worktree("bad").exists()
    assert not repo.worktree("bad").parent.exists()  # we made it, and it is empty
    assert env.tmux("has-session", "-t", "=bad").returncode != 0
    assert not (env.home / "turns" / "bad").exists()
    # The name and the branch are free again.
    (repo.path / ".spexsup.toml").unlink()
    assert new(env, repo, "bad").returncode == 0


def nothing_made(env: Env, repo: Repo, name: str, before: Any) -> None:
    assert names(env) == []
    assert (repo.branches(), repo.worktrees()) == before
    assert not repo.worktree(name).exists()
    assert not (env.home / "turns" / name).exists()
    assert env.tmux("has-session", "-t", f"={name}").returncode != 0


def test_post_create_waits_for_a_new_shell_still_reading_its_rc_files(env: Env, repo: Repo) -> None:
    """The pane `spex new --worktree` makes is moments old when post_create
    launches into it: a login shell still running an rc job (zsh runs rc
    commands as jobs) is starting up, not busy, as it is for a turn's wake."""
    zsh, tmux = shutil.which("zsh"), shutil.which("tmux")
    if zsh is None or tmux is None:
        pytest.fail("zsh is not installed (make test installs it: contrib/system-packages.sh)")
    home = Path(env.vars["HOME"])
    started, flag = env.root / "rc-started", env.root / "rc-ran"
    rc = f"[ -n \"$TMUX\" ] && {{ : >'{started}'; sleep 2; : >'{flag}'; }}\n"
    (home / ".zshrc").write_text(rc)
    env.vars["SHELL"] = zsh
    # spex's tmux client holds post_create's launch until the rc job runs.
    shim = env.root / "shim"
    shim.mkdir()
    (shim / "tmux").write_text(
        "#!/bin/sh\n"
        f'case "$*" in *respawn-pane*post-create*)\n'
        f"    for _ in $(seq 100); do [ -e '{started}' ] && break; sleep 0.1; done ;;\n"
        "esac\n"
        f'exec {tmux} "$@"\n'
    )
    (shim / "tmux").chmod(0o755)
    env.vars["PATH"] = f"{shim}:{env.vars['PATH']}"
    ran = env.root / "ran"
    (repo.path / ".spexsup.toml").write_text(f'post_create = ["touch", "{ran}"]\n')
    assert env.run("trust", str(repo.path)).returncode == 0
    r = env.run("new", "a", "--worktree", "--repo", str(repo.path), input=b"")
    assert r.returncode == 0, r.stderr
    assert ran.exists() and flag.exists()  # the rc job was waited for, not killed


def test_post_create_runs_only_when_its_exact_file_is_trusted(env: Env, repo: Repo) -> None:
    ran = env.root / "ran"
    setup = repo.path / ".spexsup.toml"
    setup.write_text(f'post_create = ["touch", "{ran}"]\n')
    before = (repo.branches(), repo.worktrees())
    # Off a terminal (stdin a pipe): refused, naming the way to trust it.
    r = env.run("new", "a", "--worktree", "--repo", str(repo.path), input=b"y\n")
    one_line_error(r, 3)
    assert f"post_create of {setup} is not trusted" in r.stderr, r.stderr
    assert f"spex trust {setup}" in r.stderr, r.stderr
    nothing_made(env, repo, "a", before)
    assert not ran.exists()
    assert json.loads(env.run("trust", "--list", "--json").stdout) == []

    r = env.run("trust", str(repo.path))
    assert r.returncode == 0, r.stderr
    assert f"trusted: {setup} (sha256 " in r.stdout
    assert f"post_create: touch {ran}" in r.stdout
    for entry in (env.home / "trust").iterdir():
        assert entry.stat().st_mode & 0o777 == 0o600, entry
    r = env.run("new", "a", "--worktree", "--repo", str(repo.path), input=b"")
    assert r.returncode == 0, r.stderr
    assert f"ran post_create of {repo.path}/.spexsup.toml: touch {ran}" in r.stdout
    assert ran.exists()
    assert session(env, "a")["worktree"]["post_create"] == ["touch", str(ran)]

    # One byte changed: not trusted until trusted again.
    ran.unlink()
    setup.write_text(f'post_create = ["touch", "{ran}"]  # changed\n')
    before = (repo.branches(), repo.worktrees())
    r = env.run("new", "b", "--worktree", "--repo", str(repo.path), input=b"")
    one_line_error(r, 3)
    assert "changed since it was trusted" in r.stderr, r.stderr
    assert "b" not in names(env) and not ran.exists()
    assert (repo.branches(), repo.worktrees()) == before
    (row,) = json.loads(env.run("trust", "--list", "--json").stdout)
    assert row["path"] == str(setup) and row["state"] == "changed"
    assert row["post_create"] == ["touch", str(ran)]
    assert "changed" in env.run("trust", "--list").stdout

    r = env.run("trust", "--revoke", str(setup))
    assert r.returncode == 0, r.stderr
    assert f"no longer trusted: {setup}" in r.stdout
    assert json.loads(env.run("trust", "--list", "--json").stdout) == []
    one_line_error(env.run("trust", "--revoke", str(repo.path)), 3)
    # Bad input: one line, exit 2, nothing recorded.
    # (Bare `spex trust` lists, as `trust ls` does: issue 38, item 14.)
    for args in (["--list", str(repo.path)], ["--revoke"], [str(env.root / "nope")]):
        one_line_error(env.run("trust", *args), 2)
    (repo.path / "src" / ".spexsup.toml").write_text('copy = "not a list"\n')
    one_line_error(env.run("trust", str(repo.path / "src")), 2)
    assert json.loads(env.run("trust", "--list", "--json").stdout) == []


def test_post_create_on_a_terminal_shows_the_commands_and_asks(env: Env, repo: Repo) -> None:
    import pexpect

    ran = env.root / "ran"
    setup = repo.path / ".spexsup.toml"
    # A title escape hidden in the argv is shown, never sent to the terminal.
    setup.write_text(f'post_create = ["sh", "-c", "touch {ran} # \\u001b]0;owned\\u0007"]\n')
    before = (repo.branches(), repo.worktrees())

    def spawn(name: str) -> pexpect.spawn:
        argv = ["new", name, "--worktree", "--repo", str(repo.path)]
        return pexpect.spawn(SPEX, argv, env=env.vars, timeout=60, dimensions=(30, 200))

    child = spawn("a")
    try:
        child.expect_exact(f"{setup} runs this in the new worktree (post_create):")
        child.expect_exact(f"sh -c $'touch {ran} # \\e]0;owned\\x07'")
        child.expect(r"Trust this file \(sha256 [0-9a-f]{12}\) and run it\? \[y/N\]: ")
        assert b"\x1b]0;owned" not in (child.before or b"")
        child.sendline("n")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 3
    assert b"spex trust" in (child.before or b"")
    nothing_made(env, repo, "a", before)
    assert not ran.exists()

    child = spawn("a")
    try:
        child.expect(r"\[y/N\]: ")
        child.sendline("y")
        child.expect_exact(f"ran post_create of {repo.path}/.spexsup.toml: sh -c $'touch")
        child.expect_exact("created a (demo)")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert ran.exists()
    # The yes trusted that file: no question the next time, even off a terminal.
    (row,) = json.loads(env.run("trust", "--list", "--json").stdout)
    assert row["path"] == str(setup) and row["state"] == "current"
    assert env.run("new", "b", "--worktree", "--repo", str(repo.path), input=b"").returncode == 0


def test_setup_path_tracked_in_git_fails_cleanly(env: Env, repo: Repo) -> None:
    (repo.path / ".spexsup.toml").write_text('copy = ["README"]\n')
    before = (repo.branches(), repo.worktrees())
    r = new(env, repo, "dup")
    one_line_error(r, 1)
    assert "already in the new worktree" in r.stderr
    assert (repo.branches(), repo.worktrees()) == before
    assert names(env) == []


# --- 2. rm never loses work ---------------------------------------------------


def make_modified(repo: Repo, wt: Path) -> str:
    (wt / "README").write_text("changed\n")
    return "1 file modified"


def make_staged(repo: Repo, wt: Path) -> str:
    (wt / "src" / "app.py").write_text("print('staged')\n")
    repo.git("add", "src/app.py", cwd=wt)
    return "1 file modified"


def make_deleted(repo: Repo, wt: Path) -> str:
    (wt / "README").unlink()
    return "1 file modified"


def make_untracked(repo: Repo, wt: Path) -> str:
    (wt / "notes").mkdir()
    (wt / "notes" / "a.md").write_text("a\n")
    (wt / "b.md").write_text("b\n")
    return "2 untracked files"


def make_commits(repo: Repo, wt: Path, salt: str = "") -> str:
    """Two commits; `salt` makes them differ from another worktree's made in
    the same second from the same base (else they are the very same commits)."""
    for i in range(2):
        (wt / f"c{i}").write_text(f"{i}{salt}\n")
        repo.git("add", f"c{i}", cwd=wt)
        repo.git("commit", "-qm", f"c{i}{salt}", cwd=wt)
    return "2 commits not pushed or merged"


def make_stash(repo: Repo, wt: Path) -> str:
    (wt / "README").write_text("stashed\n")
    repo.git("stash", "-q", cwd=wt)
    return "1 stash made in it"


def test_rm_all_removes_nothing_while_one_worktree_holds_unsaved_work(env: Env, repo: Repo) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    clean = made(env, repo, "clean")
    dirty = made(env, repo, "dirty")
    assert env.run("new", "z", "--harness", "demo").returncode == 0
    (dirty / "notes.txt").write_text("mine\n")
    before = env.run("ls", "--json").stdout
    r = env.run("rm", "--all")
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        f"spex: dirty: worktree {dirty} holds unsaved work: 1 untracked file"
        " (commit and push it, or spex rm dirty --salvage, or --keep-worktree)",
        "spex: 1 of 4 sessions refused; removed nothing",
    ]
    assert env.run("ls", "--json").stdout == before
    assert names(env) == ["a", "clean", "dirty", "z"]
    assert clean.is_dir()
    assert (dirty / "notes.txt").read_text() == "mine\n"
    assert repo.branch_exists("spex/clean")
    # Told what to do, the same command goes through.
    r = env.run("rm", "--all", "--salvage")
    assert r.returncode == 0, r.stderr
    assert names(env) == []
    assert not clean.exists() and not dirty.exists()


def test_rm_of_several_removes_the_others_when_one_turns_unsaved_after_the_check(
    env: Env, repo: Repo
) -> None:
    """`spex rm --force` of several checks them all, then removes them at
    once. A worktree whose turn, stopped by its removal, leaves unsaved work
    (its harness writes a file on SIGTERM) refuses its own removal after the
    check, and no other's: the rest go, it is named, exit 3, and it is left
    `removing` for `spex rm` again; `--json` lists each."""
    trees = {}
    for w in ("w1", "w2"):
        up = env.root / f"up-{w}"
        body = f"trap 'echo late >late.txt; exit 0' TERM; touch {up}; sleep 300 & wait $!"
        trees[w] = made(env, repo, w, "--", "bash", "-c", body)
        r = env.run("wake", w, "go", "--window", "1")
        assert r.returncode == 0, r.stderr
        assert retry_until(up.exists, 20)
    for name in ("a", "b", "c", "d"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    r = env.run("rm", "a", "w1", "c", "--force")
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stdout.splitlines() == ["removed a", "removed c"]
    assert r.stderr.startswith(f"spex: w1: worktree {trees['w1']} holds unsaved work"), r.stderr
    r = env.run("rm", "b", "w2", "d", "--force", "--json")
    assert r.returncode == 3, (r.stdout, r.stderr)
    docs = json.loads(r.stdout)
    assert [(d["session"], d["ok"]) for d in docs] == [("b", True), ("w2", False), ("d", True)]
    assert (docs[1]["exit_code"], docs[1]["error"][:4]) == (3, "w2: ")
    assert names(env) == ["w1", "w2"]
    for w, tree in trees.items():
        assert session(env, w)["state"] == "removing"
        assert (tree / "late.txt").read_text() == "late\n"


@pytest.mark.parametrize(
    "make",
    [make_modified, make_staged, make_deleted, make_untracked, make_commits, make_stash],
)
def test_rm_refuses_each_kind_of_unsaved_work(env: Env, repo: Repo, make: Any) -> None:
    wt = made(env, repo, "w")
    what = make(repo, wt)
    before = files_of(wt)
    head = repo.git("rev-parse", "HEAD", cwd=wt)
    r = env.run("rm", "w")
    one_line_error(r, 3)
    assert f"holds unsaved work: {what} (" in r.stderr
    assert "--salvage" in r.stderr
    # Nothing changed: session, home, worktree, branch, files.
    assert names(env) == ["w"]
    assert session(env, "w")["state"] == "idle"
    assert session(env, "w")["pane"] == "ok"
    assert files_of(wt) == before
    assert repo.git("rev-parse", "HEAD", cwd=wt) == head
    assert repo.branch_exists("spex/w")
    assert json.loads(env.run("worktree", "status", "w", "--json").stdout)[0]["unsaved"] == what
    # --force stops turns; it never deletes work either.
    one_line_error(env.run("rm", "w", "--force"), 3)
    assert files_of(wt) == before


def test_pushed_or_merged_commits_are_saved(env: Env, repo: Repo) -> None:
    wt = made(env, repo, "p")
    make_commits(repo, wt)
    one_line_error(env.run("rm", "p"), 3)
    repo.git("push", "-q", "origin", "spex/p", cwd=wt)
    assert env.run("rm", "p").returncode == 0
    assert not repo.branch_exists("spex/p")
    assert repo.git("rev-parse", "origin/spex/p")  # still on the remote

    wt = made(env, repo, "m")
    make_commits(repo, wt, salt="m")  # not the commits of p just pushed
    one_line_error(env.run("rm", "m"), 3)
    repo.git("merge", "-q", "--no-edit", "spex/m")  # into main, the base
    r = env.run("rm", "m")
    assert r.returncode == 0, r.stderr
    assert not wt.exists()


def test_salvage_keeps_every_byte(env: Env, repo: Repo) -> None:
    wt = made(env, repo, "s")
    make_commits(repo, wt)
    unpushed = repo.git("rev-parse", "HEAD", cwd=wt).strip()
    (wt / "c0").write_text("stash me\n")
    repo.git("stash", "-q", cwd=wt)
    stash = repo.git("rev-parse", "stash@{0}").strip()
    (wt / "README").write_text("staged version\n")
    repo.git("add", "README", cwd=wt)
    (wt / "README").write_text("edited after staging\n")  # index and tree differ
    (wt / "src" / "app.py").unlink()
    (wt / "deep" / "er").mkdir(parents=True)
    (wt / "deep" / "er" / "blob.bin").write_bytes(bytes(range(256)) * 40)
    (wt / "name with spaces & 'quotes'.txt").write_text("q\n")
    (wt / "ünïcode.txt").write_text("ü\n")
    (wt / "link").symlink_to("README")
    (wt / "ignored.log").write_text("ignored\n")
    expected = files_of(wt)
    del expected["ignored.log"]  # ignored files are not work (DESIGN §8)
    r = env.run("rm", "s")
    one_line_error(r, 3)
    r = env.run("rm", "s", "--salvage")
    assert r.returncode == 0, r.stderr
    salvaged = [b for b in repo.branches() if b.startswith("spex/salvage/s-")]
    assert len(salvaged) == 2, salvaged
    work = min(salvaged, key=len)
    assert f"s: salvaged unsaved work to branch {work}" in r.stdout
    assert f"s: salvaged a stash to branch {work}-stash-0" in r.stdout
    # Every byte, and nothing else: the tree is exactly the working tree.
    assert tree_of(repo, work) == expected
    # The unpushed commits, the staged index and the stash are all reachable.
    parents = repo.git("log", "-1", "--format=%P", work).split()
    assert parents[0] == unpushed
    assert tree_of(repo, parents[1])["README"] == b"staged version\n"
    assert repo.git("rev-parse", f"{work}-stash-0").strip() == stash
    assert not wt.exists()
    assert not repo.branch_exists("spex/s")
    assert names(env) == []


def test_keep_worktree_removes_only_the_session(env: Env, repo: Repo) -> None:
    wt = made(env, repo, "k")
    make_commits(repo, wt)
    make_untracked(repo, wt)
    before = files_of(wt)
    r = env.run("rm", "k", "--keep-worktree")
    assert r.returncode == 0, r.stderr
    assert f"kept worktree {wt} and branch spex/k" in r.stdout
    assert names(env) == []
    assert files_of(wt) == before
    assert repo.branch_exists("spex/k")
    assert str(wt) in repo.worktrees()
    # The branch is taken: a new session on it is refused, nothing half-made.
    one_line_error(
        env.run("new", "k2", "--worktree", "--repo", str(repo.path), "--branch", "spex/k"), 3
    )


def test_hand_removed_worktree_is_reported_and_never_run_elsewhere(env: Env, repo: Repo) -> None:
    wt = made(env, repo, "gone")
    repo.git("worktree", "remove", "--force", str(wt))
    ls = env.run("ls")
    assert "worktree missing" in ls.stdout
    assert json.loads(env.run("ls", "--json").stdout)[0]["worktree"]["state"] == "missing"
    r = env.run("wake", "gone", "hello")
    one_line_error(r, 3)
    assert "removed behind spex" in r.stderr
    assert session(env, "gone")["turns"] == []
    assert not (env.home / "turns" / "gone").exists()
    r = env.run("rm", "gone")
    assert r.returncode == 0, r.stderr
    assert not repo.branch_exists("spex/gone")


def test_hand_removed_worktree_with_unpushed_commits_keeps_them(env: Env, repo: Repo) -> None:
    wt = made(env, repo, "gone")
    make_commits(repo, wt)
    tip = repo.git("rev-parse", "spex/gone").strip()
    subprocess.run(["rm", "-rf", str(wt)], check=True)
    r = env.run("rm", "gone")
    one_line_error(r, 3)
    assert "2 commits not pushed or merged" in r.stderr
    r = env.run("rm", "gone", "--salvage")
    assert r.returncode == 0, r.stderr
    (work,) = [b for b in repo.branches() if b.startswith("spex/salvage/gone-")]
    assert repo.git("rev-parse", f"{work}^").strip() == tip
    assert not repo.branch_exists("spex/gone")


# --- 3. status ------------------------------------------------------------------


def test_worktree_status_and_show(env: Env, repo: Repo) -> None:
    wt = made(env, repo, "st")
    made(env, repo, "other")
    (wt / "n").write_text("n\n")
    repo.git("add", "n", cwd=wt)
    repo.git("commit", "-qm", "the subject line", cwd=wt)
    (repo.path / "m").write_text("m\n")
    repo.git("add", "m")
    repo.git("commit", "-qm", "main moved")
    make_modified(repo, wt)
    (wt / "u").write_text("u\n")
    rows = json.loads(env.run("worktree", "status", "--json").stdout)
    assert [r["name"] for r in rows] == ["other", "st"]
    st = rows[1]
    assert (st["branch"], st["ahead"], st["behind"]) == ("spex/st", 1, 1)
    assert (st["modified"], st["untracked"], st["unsaved_commits"]) == (1, 1, 1)
    assert st["last_commit"] == "the subject line"
    assert st["unsaved"] == "1 file modified, 1 untracked file, 1 commit not pushed or merged"
    text = env.run("worktree", "status", "st").stdout
    assert "spex/st" in text and "the subject line" in text
    shown = session(env, "st")
    assert shown["worktree"]["ahead"] == 1
    assert "1 ahead / 1 behind base" in env.run("show", "st").stdout
    env.run("new", "plain", "--cwd", str(env.root))
    one_line_error(env.run("worktree", "status", "plain"), 3)
    assert session(env, "plain")["worktree"] is None


# --- 5. tickets, leases, races ------------------------------------------------------


def blocking_post_create(env: Env, repo: Repo) -> tuple[Path, Path]:
    """A post_create that says it started, then waits for a release file."""
    started, release = env.root / "started", env.root / "release"
    trusted_setup(
        env,
        repo,
        'post_create = ["sh", "-c", '
        f'"touch {started}; while [ ! -e {release} ]; do sleep 0.05; done"]\n',
    )
    return started, release


def test_concurrent_new_on_one_branch_exactly_one_wins(env: Env, repo: Repo) -> None:
    started, release = blocking_post_create(env, repo)
    first = subprocess.Popen(
        [SPEX, "new", "one", "--worktree", "--repo", str(repo.path), "--branch", "shared"],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert retry_until(started.exists, seconds=60)
    # The first holds the branch mid-creation: the second is refused cleanly.
    r = new(env, repo, "two", "--branch", "shared")
    one_line_error(r, 3)
    assert "already exists" in r.stderr
    assert not repo.worktree("two").exists()
    assert str(repo.worktree("two")) not in repo.worktrees()
    # Neither a wake nor an rm can race the creation.
    one_line_error(env.run("wake", "one", "hi"), 3)
    r = env.run("rm", "one")
    one_line_error(r, 3)
    assert "still being created" in r.stderr
    release.touch()
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert names(env) == ["one"]
    assert repo.git("branch", "--show-current", cwd=repo.worktree("one")).strip() == "shared"


def test_racing_new_on_one_branch(env: Env, repo: Repo) -> None:
    procs = [
        subprocess.Popen(
            [SPEX, "new", f"r{i}", "--worktree", "--repo", str(repo.path), "--branch", "race"],
            env=env.vars,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    codes = []
    errs: list[str] = []
    for p in procs:
        _, err = p.communicate(timeout=120)
        errs.append(err)
        codes.append(p.returncode)
        assert "Traceback" not in err
    assert sorted(codes) == [0, 3, 3, 3], (codes, errs)
    (winner,) = names(env)
    assert [w for w in repo.worktrees() if w != str(repo.path)] == [str(repo.worktree(winner))]
    spex_dir = repo.worktree(winner).parent
    assert sorted(p.name for p in spex_dir.iterdir()) == [winner]


def test_lease_bars_worktree_creation_and_waits_for_it(env: Env, repo: Repo) -> None:
    out = env.root / "rc"
    op = env.root / "op.sh"
    op.write_text(f"#!/bin/bash\nspex new leased --worktree --repo {repo.path}; echo $? >{out}\n")
    op.chmod(0o755)
    assert env.run("maint", "--all", "--", str(op)).returncode == 0
    assert out.read_text().strip() == "3"
    assert names(env) == []
    assert not repo.branch_exists("spex/leased")
    # A lease waits (draining) for a creation that holds its ticket.
    started, release = blocking_post_create(env, repo)
    creating = subprocess.Popen(
        [SPEX, "new", "slow", "--worktree", "--repo", str(repo.path)],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert retry_until(started.exists, seconds=60)
    seen = env.root / "seen.json"
    maint = subprocess.Popen(
        [SPEX, "maint", "--all", "--wait", "60", "--", "bash", "-c", f"spex ls --json >{seen}"],
        env=env.vars,
        stderr=subprocess.PIPE,
        text=True,
    )

    def lease_state() -> str:
        return str(json.loads(env.run("maint", "--status", "--json").stdout)["state"])

    assert retry_until(lambda: lease_state() == "draining", seconds=30)
    assert not seen.exists()
    release.touch()
    assert creating.wait(timeout=60) == 0
    assert maint.wait(timeout=60) == 0
    (row,) = json.loads(seen.read_text())
    assert row["state"] == "idle"  # the command ran only after creation finished


def test_rm_after_new_was_killed_mid_creation(env: Env, repo: Repo) -> None:
    started, _ = blocking_post_create(env, repo)
    creating = subprocess.Popen(
        [SPEX, "new", "cut", "--worktree", "--repo", str(repo.path)],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert retry_until(started.exists, seconds=60)
    creating.send_signal(signal.SIGKILL)
    creating.wait(timeout=10)
    assert session(env, "cut")["state"] == "creating"
    one_line_error(env.run("wake", "cut", "hi"), 3)
    r = env.run("rm", "cut")
    assert r.returncode == 0, r.stderr
    assert names(env) == []
    assert not repo.worktree("cut").exists()
    assert not repo.branch_exists("spex/cut")


def test_interrupted_new_undoes_the_worktree(env: Env, repo: Repo) -> None:
    started, _ = blocking_post_create(env, repo)
    creating = subprocess.Popen(
        [SPEX, "new", "int", "--worktree", "--repo", str(repo.path)],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert retry_until(started.exists, seconds=60)
    creating.send_signal(signal.SIGINT)
    assert creating.wait(timeout=60) == 130
    assert names(env) == []
    assert not repo.worktree("int").exists()
    assert not repo.branch_exists("spex/int")

    # post_create's process is gone too.
    def waiting() -> bool:
        for p in psutil.process_iter(["cmdline"]):
            if any(str(env.root / "release") in arg for arg in p.info["cmdline"] or []):
                return True
        return False

    assert retry_until(lambda: not waiting())


# --- 6. spex diff -----------------------------------------------------------------


WRITER = ["--", "sh", "-c", 'printf "%s\\n" "$1" >> out.txt', "writer"]


def test_diff_shows_what_a_turn_changed(env: Env, repo: Repo) -> None:
    wt = made(env, repo, "d", *WRITER)
    (wt / "before.txt").write_text("made by hand before the turn\n")
    assert env.run("wake", "d", "first turn", "--window", "1").returncode == 0
    assert env.run("wait", "d", "--timeout", "30").returncode == 0
    first = session(env, "d")["turn"]["id"]
    start = json.loads((env.home / "turns" / "d" / first / "git-start").read_text())
    assert start["head"] == repo.git("rev-parse", "HEAD", cwd=wt).strip()
    r = env.run("diff", "d")
    assert r.returncode == 0, r.stderr
    assert "+++ b/out.txt" in r.stdout
    assert "+first turn" in r.stdout
    assert "before.txt" not in r.stdout  # it was there when the turn started
    assert env.run("wake", "d", "second turn", "--window", "1").returncode == 0
    assert env.run("wait", "d", "--timeout", "30").returncode == 0
    # The first turn ends where the second began.
    doc = json.loads(env.run("diff", "d", "--turn", first, "--json").stdout)
    assert doc["turn"] == first and doc["end_is_now"] is False
    assert doc["files"] == [{"path": "out.txt", "added": 1, "deleted": 0}]
    # Any id people type names the turn: a prefix of its random part, last~N.
    short = first.rpartition("-")[2][:4]
    assert json.loads(env.run("diff", "d", "--turn", short, "--json").stdout)["turn"] == first
    assert json.loads(env.run("diff", "d", "--turn", "last~1", "--json").stdout)["turn"] == first
    second = json.loads(env.run("diff", "d", "--json").stdout)
    assert second["files"] == [{"path": "out.txt", "added": 1, "deleted": 0}]
    assert "+second turn" in env.run("diff", "d").stdout
    assert "out.txt" in env.run("diff", "d", "--stat").stdout
    one_line_error(env.run("diff", "d", "--turn", "nosuch"), 3)
    one_line_error(env.run("diff", "d", "--turn", "bad/id"), 2)


def test_diff_for_a_plain_session_in_a_repo_and_refused_outside(env: Env, repo: Repo) -> None:
    env.run("new", "plain", "--cwd", str(repo.path), *WRITER)
    assert env.run("wake", "plain", "hello", "--window", "1").returncode == 0
    assert env.run("wait", "plain", "--timeout", "30").returncode == 0
    r = env.run("diff", "plain")
    assert "+hello" in r.stdout, r.stderr
    # The real index was never touched: out.txt is still untracked.
    assert repo.git("status", "--porcelain").strip() == "?? out.txt"
    outside = env.root / "outside"
    outside.mkdir()
    env.run("new", "out", "--cwd", str(outside), *WRITER)
    one_line_error(env.run("diff", "out"), 3)
    assert env.run("wake", "out", "x", "--window", "1").returncode == 0
    r = env.run("diff", "out")
    one_line_error(r, 3)
    assert "no git state" in r.stderr


# --- 4. best of N -------------------------------------------------------------------


def test_best_of_three_then_keep_one(env: Env, repo: Repo) -> None:
    r = env.run(
        "fanout",
        "--worktrees",
        "3",
        "--repo",
        str(repo.path),
        "--prefix",
        "bo",
        "-m",
        "solve it",
        "--window",
        "1",
        "--json",
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    wave = doc["id"]
    assert [leg["session"] for leg in doc["legs"]] == ["bo-1", "bo-2", "bo-3"]
    assert doc["best_of"]["sessions"] == ["bo-1", "bo-2", "bo-3"]
    base = repo.git("rev-parse", "HEAD").strip()
    for n in ("bo-1", "bo-2", "bo-3"):
        wt = repo.worktree(n)
        assert repo.git("rev-parse", "HEAD", cwd=wt).strip() == base
        assert repo.git("branch", "--show-current", cwd=wt).strip() == f"spex/{n}"
    assert env.run("wait", "bo-1", "bo-2", "bo-3", "--timeout", "60").returncode == 0
    # Each leg's work: bo-1 commits (the keeper), bo-2 leaves an untracked
    # file, bo-3 commits and does not push.
    make_commits(repo, repo.worktree("bo-1"))
    (repo.worktree("bo-2") / "idea.txt").write_text("leg two\n")
    make_commits(repo, repo.worktree("bo-3"))
    shown = json.loads(env.run("wave", wave, "--json").stdout)
    stats = {leg["session"]: leg["diffstat"] for leg in shown["legs"]}
    assert stats["bo-1"] == stats["bo-3"] == "2 files changed, 2 insertions(+)"
    assert stats["bo-2"] == "1 file changed, 1 insertion(+)"
    assert "2 files changed" in env.run("wave", wave).stdout
    r = env.run("keep", "last", "bo-1", "--json")  # the one id grammar: last is this wave
    assert r.returncode == 0, r.stderr
    outcomes = {o["session"]: o for o in json.loads(r.stdout)}
    assert outcomes["bo-1"]["outcome"] == "kept"
    assert outcomes["bo-2"]["outcome"] == outcomes["bo-3"]["outcome"] == "removed"
    assert any("salvaged unsaved work" in d for d in outcomes["bo-2"]["detail"])
    assert any("salvaged unsaved work" in d for d in outcomes["bo-3"]["detail"])
    assert names(env) == ["bo-1"]
    assert repo.branch_exists("spex/bo-1") and repo.worktree("bo-1").exists()
    assert not repo.worktree("bo-2").exists() and not repo.worktree("bo-3").exists()
    (two,) = [b for b in repo.branches() if b.startswith("spex/salvage/bo-2-")]
    assert tree_of(repo, two)["idea.txt"] == b"leg two\n"
    (three,) = [b for b in repo.branches() if b.startswith("spex/salvage/bo-3-")]
    assert "c1" in tree_of(repo, three)
    assert "kept bo-1" in env.run("wave", wave).stdout
    # keep only works on best-of-N waves.
    env.run("new", "plain", "--cwd", str(env.root))
    plain = json.loads(env.run("fanout", "plain", "-m", "x", "--window", "1", "--json").stdout)
    one_line_error(env.run("keep", plain["id"], "plain"), 3)
    one_line_error(env.run("keep", wave, "9"), 2)


def test_keep_while_legs_run_refuses_before_changing_anything(env: Env, repo: Repo) -> None:
    """Issue 38, item 5: `spex keep last 2` while legs still ran printed
    `repo-2: kept`, refused the others and exited 3. Every leg is checked
    first: refused with each leg that would stay, and nothing changed."""
    (env.home / "harnesses.toml").write_text(
        f'[harness.slow]\nfresh = ["{HARNESSES / "sleeper.sh"}", "{{prompt}}"]\n'
    )
    r = env.run(
        "fanout", "--worktrees", "3", "--repo", str(repo.path), "--prefix", "bo",
        "--harness", "slow", "-m", "solve it", "--window", "1", timeout=180,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert env.run("stop", "bo-3").returncode == 0  # one leg that can go
    before = (repo.branches(), repo.worktrees(), names(env))
    r = env.run("keep", "last", "2")
    one_line_error(r, 3)
    assert r.stdout == ""
    assert r.stderr.startswith("spex: wave w"), r.stderr
    assert ": nothing kept or removed: bo-1: session 'bo-1' has a running turn " in r.stderr
    assert "bo-3" not in r.stderr
    assert r.stderr.endswith("(stop them first, or spex keep last 2 --force)\n"), r.stderr
    assert (repo.branches(), repo.worktrees(), names(env)) == before
    assert "kept" not in env.run("wave", "last").stdout
    r = env.run("keep", "last", "2", "--force", "--json")
    assert r.returncode == 0, r.stderr
    outcomes = {o["session"]: o["outcome"] for o in json.loads(r.stdout)}
    assert outcomes == {"bo-2": "kept", "bo-1": "removed", "bo-3": "removed"}
    assert names(env) == ["bo-2"]


def test_best_of_without_a_harness_is_refused_like_new(env: Env, repo: Repo) -> None:
    (env.home / "config.toml").unlink()  # no default_harness
    before = (repo.branches(), repo.worktrees())
    prompt = env.root / "prompt.md"
    prompt.write_text("solve it")
    for args in (["-m", "solve it"], ["-f", str(prompt)], ["-f", "-", "--json"]):
        r = env.run("fanout", "--worktrees", "2", "--repo", str(repo.path), *args, input=b"x")
        one_line_error(r, 2)
        assert r.stderr.startswith(
            "spex: no harness given and no default_harness in config.toml"
            " (--harness one of: claude, codex, command, demo, opencode, pi)\n"
        ), r.stderr
        if "--json" in args:
            assert json.loads(r.stdout)["exit_code"] == 2
    assert (
        env.run("new", "a", "--cwd", str(env.root)).stderr.split(" (")[0] == r.stderr.split(" (")[0]
    )
    assert names(env) == []
    assert json.loads(env.run("waves", "--json").stdout) == []
    assert (repo.branches(), repo.worktrees()) == before
    assert not repo.worktree("proj-1").exists()


def test_best_of_refuses_taken_names_before_making_anything(env: Env, repo: Repo) -> None:
    env.run("new", "x-2", "--cwd", str(env.root))
    before = (repo.branches(), repo.worktrees())
    r = env.run("fanout", "--worktrees", "3", "--repo", str(repo.path), "--prefix", "x", "-m", "m")
    one_line_error(r, 3)
    assert (repo.branches(), repo.worktrees()) == before
    assert names(env) == ["x-2"]


def test_an_unknown_key_in_spexsup_toml_is_a_warning_and_the_rest_applies(
    env: Env, repo: Repo
) -> None:
    ran = env.root / "ran"
    setup = repo.path / ".spexsup.toml"
    setup.write_text(f'post_create = ["touch", "{ran}"]\nsymlnk = ["x"]\n')
    r = env.run("trust", str(repo.path))
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        f"spex: warning: {setup}: unknown key 'symlnk' at the top level, ignored"
        " (did you mean 'symlink'?)"
    ]
    assert f"post_create: touch {ran}" in r.stdout
    r = env.run("new", "a", "--worktree", "--repo", str(repo.path), input=b"")
    assert r.returncode == 0, r.stderr
    assert ran.exists() and "symlnk" in r.stderr
    # spex doctor, run inside the work tree, names it too (a warning: it passes).
    d = subprocess.run(
        [SPEX, "doctor"], cwd=repo.path, env=env.vars, capture_output=True, text=True, check=False
    )
    assert d.returncode == 0, d.stdout
    assert f"warn  config: {setup}: unknown key 'symlnk'" in d.stdout
    setup.write_text('copy = ["no-such-file"]\n')
    d = subprocess.run(
        [SPEX, "doctor"], cwd=repo.path, env=env.vars, capture_output=True, text=True, check=False
    )
    assert d.returncode == 1
    assert f"FAIL  config: {setup}: copy: 'no-such-file' does not exist" in d.stdout
