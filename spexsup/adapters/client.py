"""A short-lived client process (tmux's), started and read without `subprocess`.

Every command that reads the census or launches a turn runs tmux clients.
Importing `subprocess` (with locale and selectors) took 2.8 ms of each such
start, against a budget of 40 ms beyond bare Python (issue 40). What a tmux
client needs is small: `posix_spawnp` starts it (no Python runs in the
child), stdin from /dev/null, stdout and stderr on pipes, every other
descriptor closed (as Popen's close_fds: a lease's inherited pipe must never
reach a tmux server the client starts), SIGPIPE back to its default (as
Popen's restore_signals); `finish` reads both pipes with poll until they
close, then reaps the client, within a time limit.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


class Client:
    """A running client: its pid and the read ends of its stdout and stderr."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        actions: list[tuple[int, ...]] = [(os.POSIX_SPAWN_DUP2, out_w, 1)]
        actions.append((os.POSIX_SPAWN_DUP2, err_w, 2))
        actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable()]
        try:
            devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            try:
                actions.append((os.POSIX_SPAWN_DUP2, devnull, 0))
                self.pid = os.posix_spawnp(
                    argv[0], list(argv), dict(env), file_actions=actions, setsigdef=_DEFAULTS
                )
            finally:
                os.close(devnull)
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        self.out, self.err = out_r, err_r
        self.returncode: int | None = None

    def finish(self, timeout: float) -> tuple[str, str]:
        """(stdout, stderr) once the client closed both and exited (`returncode`);
        TimeoutError past `timeout`, the client left running (see `kill`)."""
        deadline = time.monotonic() + timeout
        read: dict[int, list[bytes]] = {self.out: [], self.err: []}
        poll = select.poll()
        for fd in read:
            poll.register(fd, select.POLLIN)
        still_open = set(read)
        while still_open:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            for fd, _ in poll.poll(left * 1000):
                chunk = os.read(fd, 65536)
                if chunk:
                    read[fd].append(chunk)
                else:
                    poll.unregister(fd)
                    still_open.discard(fd)
        out, err = (b"".join(read[fd]).decode(errors="replace") for fd in (self.out, self.err))
        self._close()
        # Its pipes closed: it is exiting. Reaped as Popen.wait does, by
        # tries a little further apart each time.
        delay = 0.0005
        while not self._reaped():
            if time.monotonic() >= deadline:
                raise TimeoutError
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return out, err

    def kill(self, wait: float = 1.0) -> None:
        """SIGKILL the client and reap it (at most `wait` s); its pipes are not
        read: a client of a frozen server may leave them open."""
        self._close()
        if self.returncode is not None:
            return
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + wait
        while not self._reaped() and time.monotonic() < deadline:
            time.sleep(0.005)

    def _reaped(self) -> bool:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): as Popen says
                self.returncode = 0
                return True
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode is not None

    def _close(self) -> None:
        for fd in (self.out, self.err):
            if fd >= 0:
                os.close(fd)
        self.out = self.err = -1


# What Popen's restore_signals puts back (Python ignores SIGPIPE itself).
_DEFAULTS = (signal.SIGPIPE, signal.SIGXFSZ)


def _inheritable() -> list[int]:
    """This process's inheritable descriptors above stderr (the lease's pipes
    under `spex maint`), for the child to close."""
    found = []
    for entry in Path("/proc/self/fd").iterdir():
        fd = int(entry.name)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    found.append(fd)
            except OSError:
                continue  # the listing's own descriptor, closed since
    return found
