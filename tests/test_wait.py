"""`spex wait` wakes on the store's commit of an end, not only on the turn's
marker: the wrapper writes its last marker after its exit reporter's
process ends, and that process outlives its commit (issue 40)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import Env, retry_until


# The harness's own reporter: once the test says so, the real one, then half
# a minute more in the pane (the marker stays `reporting:`, the end recorded).
def slow_reporter(commit: Path) -> str:
    body = f'while [ ! -e {commit} ]; do sleep 0.05; done; "$@"; s=$?; sleep 30; exit $s'
    return (
        'cd "$SPEXSUP_TURN_DIR" && { printf "bash\\0-c\\0%s\\0x\\0" '
        f"'{body}'; cat reporter; }} > reporter.new && mv reporter.new reporter"
    )


WAIT_PROBE = """
import sys
from spexsup.adapters import watch
from spexsup.core.spex import Spex
from spexsup.turn.read import wait

watch.COARSE_POLL = 3600.0  # no re-read but on an event
asleep = watch.DirWatch.wait


def wait_said(self, timeout):  # the test ends the turn once we sleep
    with open(sys.argv[1], "a") as f:
        f.write("asleep\\n")
    fired = asleep(self, timeout)
    with open(sys.argv[1], "a") as f:
        f.write("woken\\n" if fired else "timed-out\\n")
    return fired


watch.DirWatch.wait = wait_said
print(wait(Spex.open(), ["a"], timeout=10)[0].state)
"""


def test_wait_wakes_on_the_commit_of_an_end_before_the_last_marker(env: Env) -> None:
    go, commit, asleep = env.root / "go", env.root / "commit", env.root / "asleep"
    script = f"{slow_reporter(commit)}; while [ ! -e {go} ]; do sleep 0.05; done"
    assert env.run("new", "a", "--", "bash", "-c", script).returncode == 0
    assert env.run("wake", "a", "hi", "--window", "0.3").returncode == 0
    waiter = subprocess.Popen(
        [sys.executable, "-c", WAIT_PROBE, str(asleep)],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def sleeps(n: int) -> bool:
            return asleep.exists() and asleep.read_text().split().count("asleep") >= n

        assert retry_until(lambda: sleeps(1), seconds=30)
        go.touch()  # the harness exits: `reporting:` wakes the waiter, which sleeps again
        assert retry_until(lambda: sleeps(2), seconds=30)
        commit.touch()
        out, err = waiter.communicate(timeout=90)
        assert (waiter.returncode, out.strip()) == (0, "complete"), err
        assert asleep.read_text().split()[-1] == "woken"  # not by its timeout
        # Woken by the commit: the wrapper still waits for its reporter.
        marker = next((env.home / "turns" / "a").iterdir()) / "outcome"
        assert marker.read_text().startswith("reporting:"), marker.read_text()
    finally:
        if waiter.poll() is None:
            waiter.kill()
        env.run("stop", "a")
