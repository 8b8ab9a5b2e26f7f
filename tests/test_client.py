"""The tmux client process (spexsup.adapters.client), started without
`subprocess`: what Popen gave it (stdin from /dev/null, every other
descriptor closed, SIGPIPE at its default, both outputs read whole, a time
limit) it must still have; and a missing tmux is one line."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import pytest
from conftest import SPEX, Env

from spexsup.adapters.client import Client


def test_the_client_reads_both_outputs_whole_and_its_exit_code() -> None:
    # More than a pipe holds on each, written together: read as they come.
    script = (
        "head -c 200000 /dev/zero | tr '\\0' o; head -c 150000 /dev/zero | tr '\\0' e >&2; "
        'read -r line; echo "stdin:$line"; exit 7'
    )
    client = Client(["sh", "-c", script], os.environ)
    out, err = client.finish(30)
    assert client.returncode == 7
    assert out == "o" * 200000 + "stdin:\n"  # stdin is /dev/null
    assert err == "e" * 150000


def test_the_client_inherits_no_descriptor_of_ours() -> None:
    """As Popen's close_fds: a pipe spex holds open for others (the lease
    `spex maint` hands down) must not stay open in a tmux client, nor in a
    server one starts."""
    readable, writable = os.pipe()
    os.set_inheritable(writable, True)
    client = Client(["sh", "-c", "exec sleep 30"], os.environ)
    try:
        os.close(writable)
        poll = select.poll()
        poll.register(readable, select.POLLIN)
        assert poll.poll(10_000), "the client holds our pipe's write end"
        assert os.read(readable, 1) == b""
    finally:
        client.kill()
        os.close(readable)
    assert client.returncode == -signal.SIGKILL


def test_the_client_gets_sigpipe_at_its_default() -> None:
    """Python ignores SIGPIPE; a client must not inherit that (Popen's
    restore_signals), or a writer to a closed pipe would loop on EPIPE."""
    client = Client(["sh", "-c", "grep SigIgn /proc/self/status"], os.environ)
    out, _ = client.finish(30)
    ignored = int(out.split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1)), out


def test_a_client_past_its_time_is_killed_and_reaped() -> None:
    client = Client(["sh", "-c", "exec sleep 30"], os.environ)
    with pytest.raises(TimeoutError):
        client.finish(0.2)
    client.kill()
    assert client.returncode == -signal.SIGKILL


def test_a_missing_tmux_is_one_line(env: Env) -> None:
    """No tmux on the PATH: one line with a hint, no traceback, nothing made."""
    bare = env.root / "no-tmux-bin"
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    r = subprocess.run(
        [SPEX, "new", "a", "--", "bash", "-c", "exit 0"],
        env={**env.vars, "PATH": str(bare)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode != 0
    assert r.stderr.strip() == "spex: tmux is not installed (install tmux >= 3.2)", r.stderr
    assert "a" not in env.run("ls").stdout.split()
