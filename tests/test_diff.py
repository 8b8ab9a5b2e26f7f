"""`spex diff` through the installed command, against real git repositories:
`no changes`, colour and paging on a terminal like git's (pexpect), plain
text through a pipe, `--no-pager`, and its JSON contract."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pexpect
import psutil
import pytest
from conftest import SPEX, Env, harness, retry_until
from test_worktree import IDENTITY, WRITER, Repo, made, make_repo, one_line_error

PAGER = harness("recording_pager.sh")
SGR = "\x1b["


@pytest.fixture
def repo(env: Env, monkeypatch: pytest.MonkeyPatch) -> Repo:
    return make_repo(env, monkeypatch)


def turn(env: Env, name: str, prompt: str) -> None:
    assert env.run("wake", name, prompt, "--window", "1").returncode == 0
    assert env.run("wait", name, "--timeout", "30").returncode == 0


def on_terminal(env: Env, *args: str, extra: dict[str, str] | None = None) -> tuple[str, int]:
    """`spex ARGS` on a pseudo-terminal: (what it showed, exit status)."""
    child = pexpect.spawn(
        SPEX, list(args), env={**env.vars, **(extra or {})}, timeout=60, encoding="utf-8"
    )
    try:
        child.expect(pexpect.EOF)
        shown = child.before
    finally:
        child.close(force=True)
    assert child.exitstatus is not None, shown
    return shown, child.exitstatus


def test_a_turn_that_changed_nothing_says_no_changes(env: Env, repo: Repo) -> None:
    made(env, repo, "idle", "--", "true")
    turn(env, "idle", "change nothing")
    for args in ((), ("--stat",)):
        r = env.run("diff", "idle", *args)
        assert (r.returncode, r.stdout, r.stderr) == (0, "no changes\n", "")
    # On a terminal too: one line, no pager for nothing.
    record = env.root / "pager-record"
    extra = {"SPEXSUP_PAGER": PAGER, "PAGER_RECORD": str(record)}
    shown, code = on_terminal(env, "diff", "idle", extra=extra)
    assert (code, shown.strip()) == (0, "no changes")
    assert not record.exists()
    doc = json.loads(env.run("diff", "idle", "--json").stdout)
    assert doc["files"] == [] and doc["schema_version"] == 1


def test_on_a_terminal_the_diff_is_coloured_and_paged_like_git(env: Env, repo: Repo) -> None:
    made(env, repo, "d", *WRITER)
    turn(env, "d", "a new line")
    record = env.root / "pager-record"
    extra = {"SPEXSUP_PAGER": PAGER, "PAGER_RECORD": str(record)}
    shown, code = on_terminal(env, "diff", "d", extra=extra)
    assert code == 0, shown
    fed = record.read_text()
    assert fed.startswith("pager ran LESS=FRX args=\n"), fed  # LESS=FRX when unset, as git
    assert "a new line" in fed and SGR in fed  # git's colours reach the pager
    assert "a new line" in shown  # and the pager showed it
    # $PAGER when SPEXSUP_PAGER is unset; the user's LESS is kept.
    record.unlink()
    extra = {"PAGER": f"{PAGER} --from-pager", "PAGER_RECORD": str(record), "LESS": "R"}
    assert on_terminal(env, "diff", "d", "--stat", extra=extra)[1] == 0
    fed = record.read_text()
    assert fed.startswith("pager ran LESS=R args=--from-pager\n") and "out.txt" in fed, fed
    # SPEXSUP_PAGER wins over PAGER; NO_COLOR keeps the pager, drops colour.
    record.unlink()
    other = env.root / "other-record"
    extra = {
        "SPEXSUP_PAGER": PAGER,
        "PAGER": f"env PAGER_RECORD={other} {PAGER}",
        "PAGER_RECORD": str(record),
        "NO_COLOR": "1",
    }
    shown, code = on_terminal(env, "diff", "d", extra=extra)
    assert code == 0 and "a new line" in record.read_text() and not other.exists()
    assert SGR not in record.read_text() and SGR not in shown
    # --no-pager: coloured, straight to the terminal.
    record.unlink()
    extra = {"SPEXSUP_PAGER": PAGER, "PAGER_RECORD": str(record)}
    shown, code = on_terminal(env, "diff", "d", "--no-pager", extra=extra)
    assert code == 0 and "a new line" in shown and SGR in shown
    assert not record.exists()
    # A pager that is not installed: the diff as it is, not an error.
    for missing in ("/nonexistent/pager -R", "no-such-pager-here"):
        shown, code = on_terminal(env, "diff", "d", extra={"SPEXSUP_PAGER": missing})
        assert code == 0 and "a new line" in shown and "spex:" not in shown, (missing, shown)
    # An empty one or cat: no pager, as for git.
    for none in ("", "cat"):
        shown, code = on_terminal(env, "diff", "d", extra={"SPEXSUP_PAGER": none})
        assert code == 0 and "a new line" in shown, (none, shown)


def test_a_pager_quit_early_is_no_failure(env: Env, repo: Repo) -> None:
    wt = made(env, repo, "big", "--", "true")
    turn(env, "big", "nothing")
    (wt / "big.txt").write_text("".join(f"line {i}\n" for i in range(200_000)))
    shown, code = on_terminal(env, "diff", "big", extra={"SPEXSUP_PAGER": "head -n 3"})
    assert code == 0, shown
    assert "spex:" not in shown


def test_through_a_pipe_nothing_changes(env: Env, repo: Repo) -> None:
    made(env, repo, "p", *WRITER)
    turn(env, "p", "piped line")
    # Even a git configured to colour always is not coloured into a pipe.
    Path(env.vars["HOME"], ".gitconfig").write_text("[color]\n\tui = always\n")
    record = env.root / "pager-record"
    extra = {"SPEXSUP_PAGER": PAGER, "PAGER": PAGER, "PAGER_RECORD": str(record)}
    r = env.run("diff", "p", extra=extra)
    assert r.returncode == 0, r.stderr
    assert "+piped line" in r.stdout and SGR not in r.stdout
    assert not record.exists()


def test_diff_json_contract_and_failures(env: Env, repo: Repo) -> None:
    made(env, repo, "j", *WRITER)
    turn(env, "j", "json line")
    doc = json.loads(env.run("diff", "j", "--json").stdout)
    assert doc["schema_version"] == 1
    assert next(iter(doc)) == "schema_version"
    assert doc["files"] == [{"path": "out.txt", "added": 1, "deleted": 0}]
    assert not [k for k in doc if k.endswith("_at")]  # no epoch field without its twin
    for args, code in ((("diff", "nosuch"), 3), (("diff", "j", "--turn", "bad/id"), 2)):
        r = env.run(*args, "--json")
        one_line_error(r, code)
        assert json.loads(r.stdout) == {
            "schema_version": 1,
            "ok": False,
            "error": r.stderr.strip().removeprefix("spex: "),
            "exit_code": code,
        }


@pytest.mark.parametrize("lines", [1, 200_000])
def test_ctrl_c_belongs_to_the_pager_and_spex_waits_for_it(
    env: Env, repo: Repo, lines: int
) -> None:
    """A Ctrl-C while the pager shows the diff must not end spex under the
    pager (the shell would be back while the pager holds the terminal). It
    ends git when git was still writing (exit 130), else nothing (exit 0)."""
    wt = made(env, repo, "i", "--", "true")
    turn(env, "i", "nothing")
    (wt / "new.txt").write_text("".join(f"line {i}\n" for i in range(lines)))
    script, ready, done = env.root / "pager.sh", env.root / "ready", env.root / "done"
    script.write_text(
        f"#!/bin/sh\ntrap 'echo got-int' INT\ntouch {ready}\nsleep 5\ncat >/dev/null\n"
        f"sleep 0.5\ntouch {done}\n"
    )
    script.chmod(0o755)
    env_ = {**env.vars, "SPEXSUP_PAGER": str(script)}
    child = pexpect.spawn(SPEX, ["diff", "i"], env=env_, timeout=30, encoding="utf-8")
    try:
        assert retry_until(ready.exists)
        if lines == 1:  # git is done writing: wait till it is gone too
            spex = psutil.Process(child.pid)
            assert retry_until(lambda: all(c.name() != "git" for c in spex.children()))
        child.sendintr()
        child.expect("got-int")
        child.expect(pexpect.EOF)
        assert done.exists(), child.before  # spex ended after its pager, not before
    finally:
        child.close(force=True)
    assert child.exitstatus == (130 if lines > 1 else 0), child.before


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    r = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, env=env, check=False
    )
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout.strip()


def _work_tree(cwd: Path) -> str:
    """The tree of `cwd`'s work tree now (untracked included), through a
    scratch index: what a turn's start snapshot must hold."""
    scratch = Path(_git(cwd, "rev-parse", "--show-toplevel")).parent / "scratch.index"
    env = {**os.environ, "GIT_INDEX_FILE": str(scratch)}
    real = Path(_git(cwd, "rev-parse", "--absolute-git-dir")) / "index"
    if real.exists():
        shutil.copyfile(real, scratch)
    try:
        _git(cwd, "add", "-A", "--", ":/", env=env)
        return _git(cwd, "write-tree", env=env)
    finally:
        scratch.unlink(missing_ok=True)


@pytest.mark.parametrize(
    "shape", ["plain", "unborn", "quoted name", "linked worktree", "no identity", "subdirectory"]
)
def test_a_turn_records_the_work_tree_it_started_from(
    env: Env, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    """`git-start` holds the toplevel, HEAD and a commit of the work tree as
    the turn began (tracked edits and untracked files, the repo's own index
    untouched), whichever way the wrapper made it: its own git calls in the
    plain case, spexsup.pane.snapshot for the rest (an unborn HEAD, a path
    JSON escapes, no identity to commit with). A session in a subdirectory
    records the whole tree, as `spex diff` compares it (the wrapper's own
    calls recorded only the subdirectory's changes, and the edits elsewhere
    showed as the turn's)."""
    for key, value in IDENTITY.items():
        if shape != "no identity":
            monkeypatch.setenv(key, value)
            env.vars[key] = value
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    env.vars["GIT_CONFIG_NOSYSTEM"] = "1"
    top = env.root / ('proj "é"' if shape == "quoted name" else "proj")
    subprocess.run(["git", "init", "-q", "-b", "main", str(top)], check=True)
    (top / "tracked.txt").write_text("one\n")
    (top / "sub").mkdir()
    (top / "sub" / "inner.txt").write_text("inner\n")
    if shape != "unborn":
        ident = ["-c", "user.name=t", "-c", "user.email=t@e"]
        _git(top, "add", "tracked.txt", "sub/inner.txt")
        _git(top, *ident, "commit", "-qm", "initial")
    cwd = top
    if shape == "linked worktree":
        cwd = env.root / "linked"
        _git(top, "worktree", "add", "-q", "-b", "side", str(cwd))
    if shape == "no identity":
        # git must not make one up from the user's passwd entry.
        _git(top, "config", "user.useConfigOnly", "true")
    (cwd / "tracked.txt").write_text("one\ntwo\n")
    (cwd / "untracked.txt").write_text("new\n")
    toplevel = cwd
    if shape == "subdirectory":
        cwd = top / "sub"  # the edits above are outside it
        (cwd / "inner.txt").write_text("inner\nedited\n")
    real_index = Path(_git(cwd, "rev-parse", "--absolute-git-dir")) / "index"
    index = real_index.read_bytes() if real_index.exists() else None
    status = _git(cwd, "status", "--porcelain")
    expected_tree = _work_tree(cwd)
    assert env.run("new", "g", "--cwd", str(cwd), "--", "true").returncode == 0
    turn(env, "g", "look")
    tid = json.loads(env.run("show", "g", "--json").stdout)["turn"]["id"]
    start = json.loads((env.home / "turns" / "g" / tid / "git-start").read_text())
    head = None if shape == "unborn" else _git(cwd, "rev-parse", "HEAD")
    assert start["toplevel"] == str(toplevel) and start["head"] == head
    assert start["error"] is None
    assert _git(cwd, "rev-parse", f"{start['snapshot']}^{{tree}}") == expected_tree
    parents = _git(cwd, "rev-list", "--parents", "-n1", start["snapshot"]).split()[1:]
    assert parents == ([] if head is None else [head])
    # The repo's own index and status as they were; nothing left in the turn dir.
    assert (real_index.read_bytes() if real_index.exists() else None) == index
    assert _git(cwd, "status", "--porcelain") == status
    left = {p.name for p in (env.home / "turns" / "g" / tid).iterdir()}
    assert not left & {"git-start.todo", "git-index.tmp", "git-start.tmp"}


def test_a_waves_legs_in_one_work_tree_share_its_recorded_start(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fan-out records each work tree once, before any of its legs there
    launches, and every leg in it (a subdirectory too) gets that record:
    a hundred wrappers each snapshotting the same tree at the same moment
    spent more CPU than the rest of their turns' starts. Another tree has
    its own record; `spex diff` reads a leg's as before."""
    for key, value in IDENTITY.items():
        monkeypatch.setenv(key, value)
        env.vars[key] = value
    tops = [env.root / "one", env.root / "two"]
    for top in tops:
        subprocess.run(["git", "init", "-q", "-b", "main", str(top)], check=True)
        (top / "sub").mkdir()
        (top / "sub" / "tracked.txt").write_text("one\n")
        _git(top, "add", ".")
        _git(top, "commit", "-qm", "initial")
        (top / "before.txt").write_text("made before the wave\n")
    expected = [_work_tree(top) for top in tops]
    cwds = {"a": tops[0], "b": tops[0], "c": tops[0] / "sub", "d": tops[1]}
    for name, cwd in cwds.items():
        write = ["sh", "-c", f'echo "$1" > {name}.txt', "writer"]
        assert env.run("new", name, "--cwd", str(cwd), "--", *write).returncode == 0
    r = env.run("fanout", *cwds, "-m", "go", "--wait", "--json", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    wave = json.loads(r.stdout)
    turns = {leg["session"]: leg["turn"] for leg in wave["legs"]}
    starts = {}
    for name, tid in turns.items():
        directory = env.home / "turns" / name / tid
        starts[name] = json.loads((directory / "git-start").read_text())
        assert not (directory / "git-start.todo").exists()
    assert starts["a"] == starts["b"] == starts["c"] != starts["d"]
    for start, top, tree in zip((starts["a"], starts["d"]), tops, expected, strict=True):
        assert (start["toplevel"], start["error"]) == (str(top), None)
        assert _git(top, "rev-parse", f"{start['snapshot']}^{{tree}}") == tree
        message = _git(top, "log", "-1", "--format=%s", start["snapshot"])
        assert message == f"spex: start of wave {wave['id']}"
    # What a leg changed is a change since the record; what was there before is not.
    changed = {f["path"] for f in json.loads(env.run("diff", "d", "--json").stdout)["files"]}
    assert changed == {"d.txt"}
    changed = {f["path"] for f in json.loads(env.run("diff", "c", "--json").stdout)["files"]}
    assert changed == {"a.txt", "b.txt", "sub/c.txt"}
