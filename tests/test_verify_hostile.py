"""Verified verdicts under fire (DESIGN §16): checks written to break the
pane step and `spex verify`, and turns whose wrapper or tmux server dies
while their check runs. Real tmux, real processes, real git repositories."""

from __future__ import annotations

from conftest import Env
from test_verify import agent, git_repo, turn_of


def test_a_multi_line_check_is_quoted_by_its_output_not_by_its_own_lines(env: Env) -> None:
    """A check of several lines (a TOML multi-line string, `--verify
    $'make lint\\nmake test'`) once headed verify.log with all its lines: the
    failure's last lines quoted the command's rest as if the check had said it."""
    repo = git_repo(env)
    agent(env, "a", repo)
    check = "true\ntest -e nothing"
    r = env.run("wake", "a", "x", "--verify", check, "--window", "5", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    t = turn_of(env, "a")
    assert (t["cause"], t["verify"]["tail"]) == ("verify", None), t["verify"]
    assert t["error"] == f"its check `{check}` failed (rc 1)", t["error"]
    r = env.run("verify", "a", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    assert turn_of(env, "a")["verify"]["tail"] is None
    log = (env.home / "turns" / "a" / t["id"] / "verify.log").read_text()
    assert log.splitlines() == [
        "[spex] verifying: true test -e nothing",
        "[spex] verifying: true test -e nothing (spex verify)",
    ], log
