"""Verdicts that check the work (issue 27): `--verify CMD` runs after the
harness exits 0, in the pane, and the turn's end depends on it; `spex
verify` runs it again on a finished turn. Real git repositories, a fake
agent that edits files (tests/harnesses/edit.sh), real checks."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import Env, harness, retry_until
from test_turns import turn_processes_alive

EDIT = harness("edit.sh")


def git_repo(env: Env, name: str = "proj") -> Path:
    path = env.root / name
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    return path


def agent(env: Env, name: str, cwd: Path, *args: str) -> None:
    r = env.run("new", name, "--cwd", str(cwd), *args, "--", "bash", EDIT)
    assert r.returncode == 0, r.stderr


def show(env: Env, name: str) -> dict[str, Any]:
    r = env.run("show", name, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def turn_of(env: Env, name: str) -> dict[str, Any]:
    return show(env, name)["turn"]  # type: ignore[no-any-return]


def verifications(env: Env, turn: str) -> list[dict[str, Any]]:
    db = sqlite3.connect(env.home / "state.db")
    db.row_factory = sqlite3.Row
    rows = db.execute("SELECT * FROM verifications WHERE turn = ? ORDER BY attempt", (turn,))
    out = [dict(r) for r in rows]
    db.close()
    return out


def events_of(env: Env, turn: str) -> list[dict[str, Any]]:
    r = env.run("events", "--json")
    lines = [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]
    return [e for e in lines if e["turn"] == turn]


def test_a_passing_check_completes_the_turn_verified(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo)
    check = "grep -qx fixed work.txt && echo all 3 tests passed"
    r = env.run("wake", "a", "fixed", "--verify", check, "--window", "5", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    v = json.loads(r.stdout)
    assert (v["verdict"], v["flags"]) == ("completed", ["verified"]), v
    t = turn_of(env, "a")
    assert (t["state"], t["rc"], t["flags"], t["cause"]) == ("complete", 0, ["verified"], None)
    assert t["verify"]["state"] == "verified" and t["verify"]["rc"] == 0, t["verify"]
    assert t["verify"]["command"] == check and t["verify"]["tail"] == "all 3 tests passed"
    directory = env.home / "turns" / "a" / t["id"]
    log = (directory / "verify.log").read_text()
    assert log == f"[spex] verifying: {check}\nall 3 tests passed\n", log
    # The check ran in the turn's cwd: it saw the agent's work.
    assert (repo / "work.txt").read_text() == "fixed\n"
    kinds = [e["kind"] for e in events_of(env, t["id"])]
    assert kinds.index("verifying") < kinds.index("completed"), kinds
    ended = next(e for e in events_of(env, t["id"]) if e["kind"] == "completed")
    assert ended["payload"]["verify_rc"] == 0, ended
    # The pane said so too, and `wait` and `show` name it.
    assert "(verified)" in env.run("wait", "a").stdout
    assert "complete rc=0  " in env.run("show", "a").stdout


def test_a_failing_check_fails_the_turn_with_its_last_lines(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo)
    check = "echo 'FAIL test_login: expected 200, got 500'; exit 3"
    r = env.run("wake", "a", "broken", "--verify", check, "--window", "5", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    v = json.loads(r.stdout)
    assert v["verdict"] == "failed", v
    assert v["error"] == (
        f"its check `{check}` failed (rc 3): FAIL test_login: expected 200, got 500"
    ), v
    t = turn_of(env, "a")
    assert (t["state"], t["rc"], t["cause"], t["flags"]) == ("failed", 0, "verify", [])
    assert t["verify"]["state"] == "verify-failed" and t["verify"]["rc"] == 3
    assert show(env, "a")["state"] == "failed"
    assert env.run("wait", "a").returncode == 1


def test_a_turn_that_failed_on_its_own_never_runs_the_check(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo, "--env", "EDIT_RC=7")
    marker = env.root / "checked"
    r = env.run("wake", "a", "x", "--verify", f"touch {marker}", "--window", "5", "--json")
    assert r.returncode == 1
    t = turn_of(env, "a")
    assert (t["state"], t["rc"], t["verify"]) == ("failed", 7, None), t
    assert not marker.exists()
    assert not (env.home / "turns" / "a" / t["id"] / "verify.log").exists()


def test_a_wake_that_exits_is_verified_by_the_reporter_alone(env: Env) -> None:
    """The wake returns `confirmed` while the check runs; nobody watches: the
    turn's own reporter records the check's verdict."""
    repo = git_repo(env)
    agent(env, "a", repo)
    gate = env.root / "gate"
    check = f"while [ ! -e {gate} ]; do sleep 0.05; done; grep -q done work.txt"
    r = env.run("wake", "a", "done", "--verify", check, "--window", "0.5", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    v = json.loads(r.stdout)
    assert v["verdict"] == "confirmed", v
    t = turn_of(env, "a")
    assert t["state"] == "running" and t["verify"]["state"] == "verifying", t
    assert show(env, "a")["state"] == "running"
    (row,) = json.loads(env.run("top", "--json").stdout)
    assert row["flags"] == ["verifying"], row["flags"]
    assert env.run("wait", "a", "--timeout", "0.3").returncode != 0  # still running
    outcome = env.home / "turns" / "a" / t["id"] / "outcome"
    assert outcome.read_text().startswith("verifying:")
    gate.touch()
    assert retry_until(lambda: turn_of(env, "a")["state"] != "running", 20)
    t = turn_of(env, "a")
    assert (t["state"], t["flags"]) == ("complete", ["verified"]), t


def test_a_check_past_its_time_limit_is_ended_with_its_whole_tree(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo)
    pids = env.root / "pids"
    # A check whose child ignores SIGTERM: the limit's SIGKILL ends it.
    check = f"(trap '' TERM; echo $BASHPID >> {pids}; sleep 60) & echo $$ >> {pids}; wait"
    r = env.run(
        "wake", "a", "x", "--verify", f"bash -c {json.dumps(check)}", "--verify-timeout", "1",
        "--window", "0.3", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert env.run("wait", "a", "--timeout", "30").returncode == 1
    t = turn_of(env, "a")
    assert (t["state"], t["cause"]) == ("failed", "verify-timeout"), t
    assert "ran past its time limit (1s)" in t["error"], t["error"]
    assert t["verify"]["state"] == "verify-timed-out" and t["verify"]["rc"] == 124
    for pid in map(int, pids.read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", pid
    # The verdict is committed before the wrapper and its reporter exit.
    assert retry_until(lambda: turn_processes_alive(t["id"]) == [], 30), t["id"]


def test_stop_ends_a_check_that_ignores_sigterm(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo)
    pids = env.root / "pids"
    check = f"trap '' TERM; echo $$ >> {pids}; sleep 60 & wait; sleep 60"
    r = env.run("wake", "a", "x", "--verify", check, "--window", "0.3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert retry_until(lambda: pids.exists() and pids.read_text().strip() != "", 10)
    turn = turn_of(env, "a")
    assert turn["verify"]["state"] == "verifying"
    r = env.run("stop", "a", "--grace", "0.5")
    assert r.returncode == 0, r.stdout + r.stderr
    t = turn_of(env, "a")
    assert t["state"] == "aborted", t
    assert t["verify"]["state"] == "verify-failed", t["verify"]
    for pid in map(int, pids.read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", pid
    assert retry_until(lambda: turn_processes_alive(t["id"]) == [], 5)


def test_a_wrapper_killed_while_verifying_is_lost_not_complete(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo)
    r = env.run("wake", "a", "x", "--verify", "sleep 60", "--window", "0.3")
    assert r.returncode == 0, r.stderr
    t = turn_of(env, "a")
    outcome = env.home / "turns" / "a" / t["id"] / "outcome"
    assert retry_until(lambda: outcome.read_text().startswith("verifying:"), 10)
    wrapper = int(outcome.read_text().split(":")[1])
    os.kill(wrapper, 9)
    assert retry_until(lambda: turn_of(env, "a")["state"] != "running", 10)
    t = turn_of(env, "a")
    assert t["state"] == "lost", t
    assert t["verify"]["state"] == "verify-failed", t["verify"]


def test_spex_verify_reruns_the_check_and_records_a_new_attempt(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo)
    check = "grep -qx fixed work.txt"
    r = env.run("wake", "a", "not yet", "--verify", check, "--window", "5")
    assert r.returncode == 1
    first = turn_of(env, "a")
    assert first["cause"] == "verify"
    # A person fixes the work by hand, then asks again.
    (repo / "work.txt").write_text("fixed\n")
    r = env.run("verify", "a")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == (
        f"a: turn {first['id']} check `{check}` passed (attempt 2); the turn is now complete"
    ), r.stdout
    t = turn_of(env, "a")
    assert t["id"] == first["id"]  # the same turn, not a new one
    assert (t["state"], t["flags"], t["cause"], t["error"]) == (
        "complete",
        ["verified"],
        None,
        None,
    )
    assert [v["state"] for v in verifications(env, t["id"])] == ["verify-failed", "verified"]
    assert show(env, "a")["state"] == "idle"
    verified = [e for e in events_of(env, t["id"]) if e["kind"] == "verified"]
    assert verified and verified[-1]["payload"]["verify_rc"] == 0, verified
    # And back: the work breaks, the rerun fails the turn again (--json).
    (repo / "work.txt").write_text("broken\n")
    r = env.run("verify", "a", "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert (doc["ok"], doc["state"], doc["changed"]) == (False, "failed", True), doc
    assert doc["verify"]["attempt"] == 3 and doc["verify"]["rc"] == 1
    assert (turn_of(env, "a")["cause"]) == "verify"
    log = (env.home / "turns" / "a" / t["id"] / "verify.log").read_text()
    assert log.count("[spex] verifying: ") == 3, log


def test_spex_verify_keeps_an_end_the_turn_earned_on_its_own(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo, "--env", "EDIT_RC=7")
    assert env.run("wake", "a", "x", "--window", "5").returncode == 1
    r = env.run("verify", "a", "--verify", "true")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1].endswith("passed (attempt 1); the turn stays failed")
    t = turn_of(env, "a")
    assert (t["state"], t["rc"], t["flags"]) == ("failed", 7, [])


def test_spex_verify_bad_input_changes_nothing(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo)
    for args, code, said in (
        (["verify", "nope"], 3, "spex: no session named 'nope'"),
        (["verify", "a"], 3, "spex: session 'a' has no turn yet"),
        (["verify", "a", "--verify-timeout", "soon"], 2, "spex: invalid --verify-timeout"),
        (["verify", "a", "--verify", ""], 2, "spex: --verify: an empty command"),
    ):
        r = env.run(*args)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        assert r.stderr.startswith(said) and "Traceback" not in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert env.run("wake", "a", "x", "--window", "5").returncode == 0
    r = env.run("verify", "a")
    assert r.returncode == 2 and r.stderr.startswith("spex: a: no check to run"), r.stderr
    r = env.run("wake", "a", "x", "--verify", "sleep 30", "--window", "0.3")
    assert r.returncode == 0
    r = env.run("verify", "a")
    assert r.returncode == 3 and "is still running" in r.stderr, r.stderr
    env.run("stop", "a", "--grace", "0.2")


def test_wake_verify_options_are_checked(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo)
    for args, said in (
        (["--verify", "true", "--no-verify"], "spex: --verify and --no-verify: choose one"),
        (["--verify", "  "], "spex: --verify: an empty command"),
        (["--verify-timeout", "soon"], "spex: invalid --verify-timeout"),
    ):
        r = env.run("wake", "a", *args, "x")
        assert r.returncode == 2 and r.stderr.startswith(said), (args, r.stderr)
    assert show(env, "a")["turn"] is None


def test_the_session_repository_and_harness_checks_in_that_order(env: Env) -> None:
    repo = git_repo(env)
    (repo / ".spexsup.toml").write_text('verify = "echo repo check"\nverify_timeout = "2m"\n')
    agent(env, "a", repo)
    # The repository's file is arbitrary code: refused until trusted.
    r = env.run("wake", "a", "x", "--window", "5")
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stderr.startswith(f"spex: the verify of {repo / '.spexsup.toml'} is not trusted")
    assert show(env, "a")["turn"] is None
    assert env.run("wake", "a", "x", "--no-verify", "--window", "5").returncode == 0
    assert turn_of(env, "a")["verify"] is None
    assert env.run("trust", str(repo)).returncode == 0
    assert env.run("wake", "a", "x", "--window", "5").returncode == 0
    t = turn_of(env, "a")
    assert t["verify"]["command"] == "echo repo check" and t["verify"]["tail"] == "repo check"
    meta = json.loads((env.home / "turns" / "a" / t["id"] / "meta.json").read_text())
    assert meta["verify_timeout"] == 120
    # Editing the file withdraws the trust.
    (repo / ".spexsup.toml").write_text('verify = "rm -rf ~"\n')
    assert env.run("wake", "a", "x", "--window", "5").returncode == 3
    # The session's own check wins over the repository's.
    assert env.run("edit", "a", "--verify", "echo session check").returncode == 0
    assert env.run("wake", "a", "x", "--window", "5").returncode == 0
    assert turn_of(env, "a")["verify"]["tail"] == "session check"
    assert "echo session check" in env.run("show", "a").stdout
    # A harness's check applies where nothing else says.
    (env.home / "harnesses.toml").write_text(
        f'[harness.edits]\nfresh = ["bash", "{EDIT}", "{{prompt}}"]\n'
        'verify = ["sh", "-c", "echo harness check"]\n'
    )
    r = env.run("new", "b", "--harness", "edits", "--cwd", str(env.root))
    assert r.returncode == 0, r.stderr
    assert env.run("wake", "b", "x", "--window", "5").returncode == 0
    assert turn_of(env, "b")["verify"]["tail"] == "harness check"


@pytest.mark.parametrize(
    "toml",
    ["verify = 3\n", 'verify = ["sh", ""]\n', 'verify = "true"\nverify_timeout = "soon"\n'],
)
def test_a_malformed_repository_check_is_one_line_and_starts_nothing(env: Env, toml: str) -> None:
    repo = git_repo(env)
    (repo / ".spexsup.toml").write_text(toml)
    agent(env, "a", repo)
    r = env.run("wake", "a", "x", "--window", "5")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("spex: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert show(env, "a")["turn"] is None


def test_hooks_see_the_check_rc(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo)
    out = env.root / "hook.out"
    run = ["sh", "-c", f"echo $SPEX_VERIFY_RC $SPEX_CAUSE >> {out}"]
    (env.home / "config.toml").write_text(f"[[hook]]\non = ['failed']\nrun = {json.dumps(run)}\n")
    assert env.run("wake", "a", "x", "--verify", "exit 5", "--window", "5").returncode == 1
    assert retry_until(lambda: out.exists() and out.read_text() == "5 verify\n", 15), (
        out.read_text() if out.exists() else None
    )


# --- best of N that decides -------------------------------------------------------


def edits_harness(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        f'[harness.edits]\nfresh = ["bash", "{EDIT}", "{{prompt}}"]\n'
        # The same, signing its work: a turn's environment is the login's and
        # the session's, never the fanout command's own.
        f'[harness.signs]\nfresh = ["env", "EDIT_SIGN=1", "bash", "{EDIT}", "{{prompt}}"]\n'
    )


def best_of(env: Env, repo: Any, check: str, *args: str) -> subprocess.CompletedProcess[str]:
    return env.run(
        "fanout", "--worktrees", "3", "--repo", str(repo.path), "--prefix", "try",
        "--harness", "signs", "-m", "fix it", "--verify", check, "--keep-best", *args,
        timeout=120,
    )  # fmt: skip


def tree_file(repo: Any, rev: str, path: str) -> str:
    return repo.git("show", f"{rev}:{path}")  # type: ignore[no-any-return]


@pytest.fixture
def repo(env: Env, monkeypatch: pytest.MonkeyPatch) -> Any:
    from test_worktree import make_repo

    edits_harness(env)
    r = make_repo(env, monkeypatch)
    edits_harness(env)
    return r


def test_best_of_three_keeps_the_leg_that_passed(env: Env, repo: Any) -> None:
    """Only leg 2's work passes the check: leg 2 is kept, legs 1 and 3 are
    removed with their work salvaged to branches."""
    r = best_of(env, repo, "grep -q 'by try-2' work.txt")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "kept try-2 (the first to pass its check): 1 file changed, 2 insertions(+)" in r.stdout
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    assert doc["best_of"]["kept"] == "try-2"
    names = [row["name"] for row in json.loads(env.run("ls", "--json").stdout)]
    assert names == ["try-2"], names
    kept = show(env, "try-2")
    assert kept["turn"]["flags"] == ["verified"]
    assert (Path(kept["worktree"]["path"]) / "work.txt").read_text() == "fix it\nby try-2\n"
    salvage = sorted(b for b in repo.branches() if b.startswith("spex/salvage/"))
    assert len(salvage) == 2, salvage
    work = sorted(tree_file(repo, b, "work.txt") for b in salvage)
    assert work == ["fix it\nby try-1\n", "fix it\nby try-3\n"], work
    for b in salvage:
        assert b in r.stdout
    assert "spex/try-2" in r.stdout  # the kept branch, and how to merge it
    assert repo.branch_exists("spex/try-2")


def test_best_of_three_where_none_passes_removes_nothing(env: Env, repo: Any) -> None:
    r = best_of(env, repo, "echo 'no luck for' $SPEXSUP_SESSION; exit 1", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["state"] == "failed", doc["state"]
    assert doc["keep"]["leg"] is None and doc["keep"]["outcomes"] == []
    tails = {name: c["tail"] for name, c in doc["keep"]["checks"].items()}
    assert tails == {f"try-{i}": f"no luck for try-{i}" for i in (1, 2, 3)}, tails
    names = sorted(row["name"] for row in json.loads(env.run("ls", "--json").stdout))
    assert names == ["try-1", "try-2", "try-3"]
    assert not [b for b in repo.branches() if b.startswith("spex/salvage/")]
    r = env.run("wave", "last")
    assert r.stdout.count("verify failed (rc 1)") == 3, r.stdout


def test_pick_smallest_keeps_the_passing_leg_with_the_smallest_diff(env: Env, repo: Any) -> None:
    # Legs 1 and 3 pass; leg 3's check adds a big file to its work first.
    check = (
        "case $SPEXSUP_SESSION in try-2) exit 1;; try-3) seq 100 > big.txt;; esac;"
        " sleep 0.$((${SPEXSUP_SESSION#try-} * 3))"
    )
    r = best_of(env, repo, check, "--pick", "smallest")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "kept try-1 (the smallest diff that passed)" in r.stdout, r.stdout
    assert [row["name"] for row in json.loads(env.run("ls", "--json").stdout)] == ["try-1"]


def test_keep_best_options_are_checked(env: Env, repo: Any) -> None:
    for args, said in (
        (["-m", "x", "--keep-best"], "spex: --keep-best keeps one leg of a best of N"),
        (["--worktrees", "2", "-m", "x", "--keep-best", "--no-verify"],
         "spex: --keep-best decides by each leg's check"),
        (["--worktrees", "2", "-m", "x", "--pick", "smallest"], "spex: --pick needs --keep-best"),
        (["--worktrees", "2", "-m", "x", "--keep-best", "--pick", "big"], "spex: invalid --pick"),
    ):  # fmt: skip
        r = env.run("fanout", "--repo", str(repo.path), "--harness", "edits", *args)
        assert r.returncode == 2 and r.stderr.startswith(said), (args, r.stderr)
    assert json.loads(env.run("ls", "--json").stdout) == []


def test_retry_failed_retries_the_legs_whose_check_failed(env: Env, repo: Any) -> None:
    for name in ("a", "b"):
        agent(env, name, repo.path)
    flag = env.root / "allow"
    check = f'[ "$SPEXSUP_SESSION" = a ] || [ -e {flag} ]'
    r = env.run("fanout", "a", "b", "-m", "go", "--verify", check, "--wait", timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "verify failed (rc 1)" in r.stdout, r.stdout
    flag.touch()
    r = env.run("fanout", "--retry-failed", "last", "--wait", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    assert [leg["session"] for leg in doc["legs"]] == ["b"]
    assert doc["turn_options"]["verify"] == ["sh", "-c", check]
    assert doc["legs"][0]["verify"]["state"] == "verified", doc["legs"][0]


def test_a_rerun_that_passes_a_leg_moves_its_wave(env: Env, repo: Any) -> None:
    for name in ("a", "b"):
        agent(env, name, repo.path)
    flag = env.root / "allow"
    check = f'[ "$SPEXSUP_SESSION" = a ] || [ -e {flag} ]'
    assert env.run("fanout", "a", "b", "-m", "go", "--verify", check, "--wait").returncode == 1
    assert json.loads(env.run("wave", "last", "--json").stdout)["state"] == "partial"
    flag.touch()
    assert env.run("verify", "b").returncode == 0
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    legs = {leg["session"]: (leg["verdict"], leg["turn_state"]) for leg in doc["legs"]}
    assert legs == {"a": ("completed", "complete"), "b": ("completed", "complete")}, legs
    assert doc["state"] == "complete", doc["state"]
    assert doc["history"][-1]["event"] in ("leg-reverified", "wave-ended"), doc["history"][-2:]


# --- spex verify under fire (hostile pass) ------------------------------------------


def test_an_interrupted_rerun_is_no_verdict(env: Env) -> None:
    """Ctrl-C while `spex verify` runs a check ends the check's tree; the
    attempt is recorded as not finished, the turn keeps its end (a reaped
    check once read as rc 0: an interrupted check passed the turn)."""
    import signal
    import time

    from conftest import SPEX

    repo = git_repo(env)
    agent(env, "a", repo)
    assert env.run("wake", "a", "x", "--verify", "exit 1", "--window", "5").returncode == 1
    before = turn_of(env, "a")
    pidf = env.root / "pid"
    check = f"trap '' INT; echo $$ > {pidf}; sleep 60"
    p = subprocess.Popen(
        [SPEX, "verify", "a", "--verify", check, "--json"],
        env=env.vars, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert retry_until(lambda: pidf.exists() and pidf.read_text().strip() != "", 10)
        started = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert time.monotonic() - started < 10
    assert p.returncode == 130, (out, err)
    doc = json.loads(out)
    assert (doc["ok"], doc["changed"], doc["state"], doc["exit_code"]) == (
        False, False, "failed", 130,
    ), doc  # fmt: skip
    assert doc["error"] == f"its check `{check}` was interrupted (signal 2)", doc
    assert (doc["verify"]["state"], doc["verify"]["rc"]) == ("verify-failed", None), doc
    t = turn_of(env, "a")
    assert (t["state"], t["cause"], t["flags"], t["error"]) == (
        before["state"], before["cause"], before["flags"], before["error"],
    ), t  # fmt: skip
    pid = int(pidf.read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


def test_a_rerun_is_decided_by_the_check_exit_not_by_a_child_holding_its_output(
    env: Env,
) -> None:
    """A check that leaves a background child with its stdout (a server it
    started) has ended when it exits: not at its time limit, as `timed out`."""
    import time

    repo = git_repo(env)
    agent(env, "a", repo)
    assert env.run("wake", "a", "x", "--verify", "true", "--window", "5").returncode == 0
    pidf = env.root / "pid"
    started = time.monotonic()
    check = f"sleep 60 & echo $! > {pidf}; echo all passed"
    r = env.run("verify", "a", "--verify", check, "--verify-timeout", "30", "--json")
    assert time.monotonic() - started < 15
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert (doc["verify"]["state"], doc["verify"]["rc"]) == ("verified", 0), doc
    assert doc["verify"]["tail"] == "all passed", doc
    # What it left running in its session was ended with it.
    pid = int(pidf.read_text())
    assert retry_until(
        lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", 5
    )


def test_a_rerun_that_cannot_log_or_print_leaves_no_check_verifying(env: Env) -> None:
    repo = git_repo(env)
    agent(env, "a", repo)
    assert env.run("wake", "a", "x", "--verify", "true", "--window", "5").returncode == 0
    t = turn_of(env, "a")
    log = env.home / "turns" / "a" / t["id"] / "verify.log"
    log.unlink()
    log.mkdir()
    r = env.run("verify", "a")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"spex: a: cannot write {log}"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert [v["state"] for v in verifications(env, t["id"])] == ["verified"]
    log.rmdir()
    # The caller's output closed mid-run (`spex verify a | head -1`): the
    # check still runs to its end and is recorded, never left `verifying`.
    from conftest import SPEX

    check = "seq 200000; echo all passed"
    p = subprocess.Popen(
        [SPEX, "verify", "a", "--verify", check], env=env.vars, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert p.stdout is not None
    p.stdout.read(10)
    p.stdout.close()
    p.wait(timeout=30)
    rows = verifications(env, t["id"])
    assert [(v["state"], v["rc"]) for v in rows] == [("verified", 0), ("verified", 0)], rows
    assert rows[-1]["tail"].endswith("all passed")


def test_a_check_that_is_not_utf8_is_refused_before_anything_starts(env: Env) -> None:
    """Undecodable bytes on the command line (`--verify $'echo \\xff'`) once
    crashed the wake after its turn was admitted (an internal error, the
    turn left `lost`)."""
    from conftest import SPEX

    repo = git_repo(env)
    agent(env, "a", repo)
    for args in (
        [b"wake", b"a", b"x", b"--verify", b"echo \xff", b"--window", b"5"],
        [b"edit", b"a", b"--verify", b"echo \xff"],
        [b"new", b"b", b"--cwd", str(repo).encode(), b"--verify", b"echo \xff", b"--", b"true"],
    ):
        r = subprocess.run([SPEX.encode(), *args], env=env.vars, capture_output=True, check=False)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith(b"spex: --verify: a verify command must be valid UTF-8"), (
            r.stderr
        )
        assert len(r.stderr.strip().splitlines()) == 1
    assert show(env, "a")["turn"] is None and show(env, "a")["verify"] is None
    assert env.run("show", "b").returncode == 3


def test_a_symlinked_repository_check_can_be_trusted(env: Env) -> None:
    """A `.spexsup.toml` that is a symlink (a shared file): `spex trust REPO`
    once read the link target's directory for a .spexsup.toml, recorded an
    empty trust (`trusted:  (sha256 )`), and the hint named the target,
    which `spex trust` refused: the check could never be trusted."""
    repo = git_repo(env)
    shared = env.root / "shared.toml"
    shared.write_text('verify = "echo shared check"\n')
    (repo / ".spexsup.toml").symlink_to(shared)
    agent(env, "a", repo)
    r = env.run("wake", "a", "x", "--window", "5")
    assert r.returncode == 3, r.stdout + r.stderr
    hint = f"spex trust {repo / '.spexsup.toml'} (or wake --no-verify)"
    assert r.stderr.startswith(f"spex: the verify of {shared} is not trusted"), r.stderr
    assert hint in r.stderr, r.stderr
    # What the hint says works.
    r = env.run("trust", str(repo / ".spexsup.toml"))
    assert r.returncode == 0, r.stderr
    assert str(shared) in r.stdout and "(sha256 )" not in r.stdout, r.stdout
    assert env.run("wake", "a", "x", "--window", "5").returncode == 0
    assert turn_of(env, "a")["verify"]["tail"] == "shared check"
    # Editing the file it points to withdraws the trust.
    shared.write_text('verify = "echo changed"\n')
    r = env.run("wake", "a", "x", "--window", "5")
    assert r.returncode == 3 and "changed since it was trusted" in r.stderr, r.stderr
    assert env.run("trust", str(repo)).returncode == 0
    assert env.run("wake", "a", "x", "--window", "5").returncode == 0
    assert turn_of(env, "a")["verify"]["tail"] == "changed"


def test_the_pane_check_is_decided_by_its_exit_not_by_a_child_holding_its_output(
    env: Env,
) -> None:
    """A check that starts a server in the background (holding its stdout)
    and exits 0 once hung the turn until its time limit, then failed it
    `verify-timeout`. Its exit decides; what it left running is ended."""
    import time

    repo = git_repo(env)
    agent(env, "a", repo)
    pids = env.root / "pids"
    check = (
        f"sleep 60 & echo $! >> {pids}; sleep 60 >/dev/null 2>&1 & echo $! >> {pids};"
        " echo all passed"
    )
    started = time.monotonic()
    r = env.run(
        "wake", "a", "x", "--verify", check, "--verify-timeout", "40", "--window", "30", "--json"
    )
    assert time.monotonic() - started < 20, r.stdout
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["flags"] == ["verified"], r.stdout
    t = turn_of(env, "a")
    assert (t["state"], t["flags"]) == ("complete", ["verified"]), t
    assert (t["verify"]["rc"], t["verify"]["tail"]) == (0, "all passed"), t["verify"]
    for pid in map(int, pids.read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", pid
    # The verdict is committed before the wrapper and its reporter exit.
    assert retry_until(lambda: turn_processes_alive(t["id"]) == [], 30), t["id"]


def test_a_check_the_turn_dir_lost_never_passes_for_complete(env: Env) -> None:
    """A harness that truncates its turn's `verify` file: the check the
    launcher recorded cannot run, and the turn does not end complete."""
    repo = git_repo(env)
    script = ': > "$SPEXSUP_TURN_DIR/verify"'
    assert env.run("new", "a", "--cwd", str(repo), "--", "sh", "-c", script).returncode == 0
    r = env.run("wake", "a", "x", "--verify", "true", "--window", "5", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    t = turn_of(env, "a")
    assert (t["state"], t["cause"]) == ("failed", "verify"), t
    assert "its check was never run" in t["error"], t["error"]
