"""The maintenance command's processes (DESIGN §5): spawn it, signal it, kill
what it left.

The command runs in its own session and process group with exactly the
broker fds 3, 4, 5. It never outlives `spex maint`: the kernel sends it
SIGKILL when `spex maint` dies (PR_SET_PDEATHSIG), and `Signals` forwards a
SIGINT or SIGTERM that `spex maint` gets to its group (the exit code is then
128+N). What escaped its session with the fds is killed by
`signal_with_groups` before the lease is released.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spexsup.adapters.procs import start_token
from spexsup.conductors.broker.protocol import BROKER_FDS
from spexsup.errors import SpexError

PR_SET_PDEATHSIG = 1


class CommandNotFound(SpexError):
    exit_code = 127


class Signals:
    """SIGINT/SIGTERM to `spex maint`: remembered (the exit code is 128+N) and
    forwarded to the command's group as SIGTERM; a second one sends SIGKILL."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.target: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        self._old = {s: signal.signal(s, self._on) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)

    def _on(self, signum: int, frame: object) -> None:
        again = self.received is not None
        if not again:
            self.received = signum
        self.forward(signal.SIGKILL if again else signal.SIGTERM)

    def forward(self, sig: int = signal.SIGTERM) -> None:
        if self.target is not None and self.received is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.target, sig)


def spawn(command: Sequence[str], home: Path) -> tuple[int, int, int, socket.socket, int]:
    """Start CMD in a new session with the broker fds at exactly 3, 4, 5, and
    SPEXSUP_HOME set to `home`.

    Returns its pid, our ends of the three channels and the inode of the
    command's end of the socketpair (the pipes share one inode per pipe).

    A plain fork from the main thread (no other thread runs yet), so the
    child can ask for PR_SET_PDEATHSIG: the kernel SIGKILLs the command
    if `spex maint` dies, which fires when the forking thread dies. The
    sources sit above 9 (close-on-exec) so a dup2 never lands on itself;
    an exec failure comes back over a close-on-exec pipe.
    """
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (req_w, resp_r)]
    high.append(fcntl.fcntl(theirs.fileno(), fcntl.F_DUPFD_CLOEXEC, 10))
    env = {**os.environ, "SPEXSUP_MAINTENANCE_BROKER_FDS": BROKER_FDS}
    env["SPEXSUP_HOME"] = str(home)
    libc = ctypes.CDLL(None, use_errno=True)
    err_r, err_w = os.pipe()  # both close-on-exec (PEP 446)
    parent = os.getpid()
    argv = list(command)
    pid = os.fork()
    if pid == 0:  # the child: only async-signal-safe steps, then exec
        code = 127
        try:
            os.setsid()
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # died before the request took effect
                os._exit(137)
            for target, source in zip((3, 4, 5), high, strict=True):
                os.dup2(source, target)
            os.execvpe(argv[0], argv, env)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.write(err_w, f"{e.errno or 0}".encode())
        finally:
            os._exit(code)
    os.close(err_w)
    for fd in (req_w, resp_r, *high):
        os.close(fd)
    peer = os.fstat(theirs.fileno()).st_ino
    theirs.close()
    with os.fdopen(err_r, "rb") as errors:
        failure = errors.read()
    if failure:
        os.waitpid(pid, 0)
        for fd in (req_r, resp_w):
            os.close(fd)
        ours.close()
        errno = int(failure)
        raise CommandNotFound(f"cannot run {argv[0]!r}: {os.strerror(errno)}")
    return pid, req_r, resp_w, ours, peer


def start_token_of(pid: int) -> str:
    """Our own unreaped child's start token (its zombie keeps the pid and stat)."""

    token = start_token(pid)
    assert token is not None
    return token


def signal_with_groups(pids: Sequence[int], sig: signal.Signals) -> None:
    """Signal each process and its process group, never our own group.
    psutil refuses a pid reused since it was found."""
    import psutil

    own = os.getpgrp()
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            group = os.getpgid(pid)
            proc.send_signal(sig)
        except (psutil.Error, OSError):
            continue
        if group not in (own, 0, 1):
            with contextlib.suppress(OSError):
                os.killpg(group, sig)
