"""shell/turn.sh on its own: marker states, argv from NUL-separated bytes, the
reporter's argv and rc, signal deaths, and a marker it cannot write."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pexpect

from spexsup.pane.marker import Stage, read
from spexsup.paths import wrapper_path

REPORTER = """#!/bin/bash
# Records its argv and the marker it sees while it runs, exits $REPORTER_RC.
printf '%s\\n' "$@" >"$(dirname "$0")/reporter-args"
cat "$(dirname "$0")/outcome" >"$(dirname "$0")/marker-seen-by-reporter"
printf '%s' "$SPEXSUP_MARKER" >"$(dirname "$0")/marker-handed-to-reporter"
exit "${REPORTER_RC:-0}"
"""


def turn_dir(tmp_path: Path, argv: list[bytes], env: dict[str, str] | None = None) -> Path:
    d = tmp_path / "turn"
    d.mkdir()
    (d / "argv").write_bytes(b"".join(a + b"\0" for a in argv))
    (d / "env").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in (env or {}).items()))
    (d / "prompt").write_bytes(b"unused")
    reporter = d / "report.sh"
    reporter.write_text(REPORTER)
    reporter.chmod(0o755)
    (d / "reporter").write_bytes(str(reporter).encode() + b"\0" + b"s1\0" + b"t1\0")
    return d


def run(d: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # SHELL=/bin/true: the shell the wrapper execs at the end returns at once.
    return subprocess.run(
        ["bash", str(wrapper_path()), str(d)],
        env={**os.environ, "SHELL": "/bin/true", **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_runs_the_exact_argv_and_records_every_stage(tmp_path: Path) -> None:
    odd = "line one\nline 'two' \"$(date)\" `id` -rf é"
    got = tmp_path / "got"
    script = 'printf "%s\\0" "$@" >"$GOT"; echo "hello from the harness"; exit 3'
    d = turn_dir(
        tmp_path,
        [b"bash", b"-c", script.encode(), b"harness", odd.encode(), b"--"],
        {"GOT": str(got)},
    )
    r = run(d, REPORTER_RC="0")
    assert r.returncode == 0  # the exec'd shell's status
    assert got.read_bytes() == odd.encode() + b"\0--\0"
    assert "hello from the harness" in (d / "output.log").read_text()
    assert "hello from the harness" in r.stdout  # shown live in the pane too
    wrapper_pid = (d / "marker-seen-by-reporter").read_text().split(":")[1]
    seen = (d / "marker-seen-by-reporter").read_text()
    assert re.fullmatch(f"reporting:{wrapper_pid}:3:ran:[0-9]+", seen), seen
    assert (d / "marker-handed-to-reporter").read_text() == seen
    assert (d / "reporter-args").read_text().split() == ["s1", "t1", "3"]
    m = read(d)
    assert (m.stage, m.rc, m.cas) == (Stage.EXIT, 3, 0)
    assert not (d / "outcome.tmp").exists()


def test_signal_death_and_reporter_rc(tmp_path: Path) -> None:
    d = turn_dir(tmp_path, [b"bash", b"-c", b"kill -TERM $$"])
    run(d, REPORTER_RC="3")
    assert re.fullmatch("exit:143:cas:3:ran:[0-9]+", (d / "outcome").read_text())


def test_unwritable_marker_exits_125_before_the_harness(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    d = turn_dir(tmp_path, [b"touch", str(ran).encode()])
    # printf writes over neither a directory: not the first marker's own file,
    # nor the temporary file of the `mv` it falls back to.
    (d / "outcome").mkdir()
    (d / "outcome.tmp").mkdir()
    r = run(d)
    assert r.returncode == 125
    assert "cannot write the outcome marker" in r.stderr
    assert not ran.exists()
    assert list((d / "outcome").iterdir()) == []


def test_a_first_marker_the_disk_refuses_is_written_again_through_mv(tmp_path: Path) -> None:
    """The first marker's own file opens, then its write fails (ENOSPC: here
    /dev/full behind the name, a full disk's answer): the empty name is
    removed and the marker written as every later one is."""
    seen = tmp_path / "seen"
    d = tmp_path / "turn"
    peek = f"head -c 64 {d}/outcome >{seen}"  # the marker the harness runs under
    d = turn_dir(tmp_path, [b"bash", b"-c", peek.encode()])
    (d / "outcome").symlink_to("/dev/full")
    r = run(d)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"running:[0-9]+", seen.read_text()), seen.read_bytes()
    assert not (d / "outcome").is_symlink()
    assert re.fullmatch("exit:0:cas:0:ran:[0-9]+", (d / "outcome").read_text())


def test_keys_typed_are_dropped_by_the_wrapper_when_its_reporter_did_not(
    tmp_path: Path,
) -> None:
    """The exit reporter drops what was typed into the pane and says how much
    in `typed`; one that did not (killed, or an older spex) leaves it to the
    wrapper, which drops it with the reporter's interpreter and says so."""
    go = tmp_path / "go"
    wait = f"while [ ! -e {go} ]; do sleep 0.05; done"
    d = turn_dir(tmp_path, [b"bash", b"-c", wait.encode()])
    # A reporter that records nothing and drops nothing, a Python as spex's is.
    (d / "reporter").write_bytes(sys.executable.encode() + b"\0-c\0pass\0")
    child = pexpect.spawn(
        "bash",
        [str(wrapper_path()), str(d)],
        env={**os.environ, "SHELL": "/bin/true"},
        timeout=30,
    )
    try:
        child.expect(r"\[spex\] turn turn: ")
        child.send("echo oops\r")
        child.expect("echo oops")  # echoed: in the terminal's input queue
        go.touch()
        child.expect(r"turn turn ended rc=0; input typed during the turn was discarded")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert not (d / "typed").exists()
    assert re.fullmatch("exit:0:cas:0:ran:[0-9]+", (d / "outcome").read_text())


def test_the_first_marker_costs_no_mv_and_the_harness_gets_the_users_umask(
    tmp_path: Path,
) -> None:
    """A wave starts a hundred wrappers at once: the first marker is written
    into the file the wrapper creates, not through `mv` (the two final markers
    still are); the user's umask is read without a subshell, and the harness
    runs with it, not the wrapper's own 077."""
    shims = tmp_path / "shims"
    shims.mkdir()
    moves = tmp_path / "moves"
    real = shutil.which("mv")
    (shims / "mv").write_text(f'#!/bin/sh\necho "$@" >>{moves}\nexec {real} "$@"\n')
    (shims / "mv").chmod(0o755)
    got = tmp_path / "umask"
    d = turn_dir(tmp_path, [b"bash", b"-c", f"umask >{got}".encode()])
    path = f"{shims}:{os.environ['PATH']}"
    r = subprocess.run(
        ["bash", "-c", 'umask 027 && exec bash "$0" "$1"', str(wrapper_path()), str(d)],
        env={**os.environ, "SHELL": "/bin/true", "PATH": path},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert got.read_text().strip() == "0027"
    made = [line.split()[-2:] for line in moves.read_text().splitlines()]
    assert made == [[f"{d}/outcome.tmp", f"{d}/outcome"]] * 2, made  # reporting:, exit:
    assert re.fullmatch("exit:0:cas:0:ran:[0-9]+", (d / "outcome").read_text())


def test_empty_argv_is_reported_not_run(tmp_path: Path) -> None:
    d = turn_dir(tmp_path, [])
    run(d)
    assert re.fullmatch("exit:127:cas:0:ran:[0-9]+", (d / "outcome").read_text())
    assert "empty harness argv" in (d / "output.log").read_text()


def test_a_wrapper_is_alive_only_with_its_turn_dir_in_its_argv(tmp_path: Path) -> None:
    """The wake's liveness check: alive while running with the dir in argv;
    a process without it, a zombie and a reaped pid are all dead."""
    from spexsup.adapters.procs import Liveness, command_line_liveness

    mine = str(tmp_path / "turn")
    proc = subprocess.Popen(["sh", "-c", "sleep 30; :", "sh", mine], start_new_session=True)
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert command_line_liveness(proc.pid, mine) is Liveness.ALIVE
        assert command_line_liveness(other.pid, mine) is Liveness.DEAD
        # A prefix of an argument is not the argument.
        assert command_line_liveness(proc.pid, mine[:-1]) is Liveness.DEAD
        proc.kill()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # a zombie, not yet reaped
        assert command_line_liveness(proc.pid, mine) is Liveness.DEAD
    finally:
        for p in (proc, other):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert command_line_liveness(proc.pid, mine) is Liveness.DEAD


def test_the_wrapper_spells_only_the_turn_dir_names_turndir_owns() -> None:
    """`pane/turndir.py` owns the turn directory's layout; turn.sh (which
    cannot import it) spells the same names and no others."""
    import re

    from spexsup.pane import turndir

    script = wrapper_path().read_text()
    spelled = set(re.findall(r"\$dir/([A-Za-z][A-Za-z0-9_.-]*)", script))
    owned = {v for k, v in vars(turndir).items() if k.isupper() and isinstance(v, str)}
    # The marker's, the check's status's and the git start's temp files (and
    # the git start's scratch index); a limit wait's old output.
    scratch = {"outcome.tmp", "verify-rc.tmp", "git-start.tmp", "git-index.tmp", "limited-"}
    assert spelled, "the pattern finds the wrapper's turn-dir files"
    assert spelled - scratch <= owned, spelled - scratch - owned
    assert {turndir.OUTCOME, turndir.OUTPUT, turndir.ARGV, turndir.REPORTER} <= spelled
