"""The tests' own teardown (conftest.teardown): a tmux server that a process
of the test starts after the teardown's last pass, which that pass could
not see, must not outlive the test (a web test's server once ran on for
an hour, started by its queued prompt's launcher)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import psutil
from conftest import Env, retry_until, teardown


def servers(socket: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline[:1] == ["tmux"] and socket in cmdline:
            found.append(proc)
    return found


def test_a_server_started_after_the_last_pass_does_not_outlive_the_test(
    tmp_path: Path,
) -> None:
    tmux_tmpdir = Path(tempfile.mkdtemp(prefix="spx"))
    socket = f"late-{os.getpid()}-{tmux_tmpdir.name}"
    e = Env(tmp_path, tmp_path / "state", tmux_tmpdir, socket, dict(os.environ))
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    # A launcher the passes cannot see (nothing of the test in its
    # environment until it starts tmux), waiting for the gate.
    late = subprocess.Popen(
        ["env", "-i", f"PATH={os.environ['PATH']}", "sh", "-c",
         f'read go < "{gate}"; exec env TMUX_TMPDIR="{tmux_tmpdir}"'
         f' tmux -L "{socket}" -f /dev/null new-session -d "sleep 300"'],
        start_new_session=True,
    )  # fmt: skip

    def launch_between() -> None:
        gate.write_text("go\n")  # (blocks until the launcher reads it)
        assert late.wait(30) == 0
        assert retry_until(lambda: servers(socket) != [], 10)

    try:
        teardown(e, after_passes=launch_between)
        assert retry_until(lambda: servers(socket) == [], 10), servers(socket)
        assert not tmux_tmpdir.exists()
    finally:
        for proc in servers(socket):
            proc.kill()
