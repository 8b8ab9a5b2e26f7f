"""Run one `run` hook's argv (DESIGN §8 "Hooks"): in a session of its own,
stdin from /dev/null, its output's head kept (`OUTPUT_LIMIT` bytes) and the
rest counted, and at its timeout its group and every descendant killed,
adopted orphans included.

Call it from a child subreaper (`procs.become_subreaper`) with no children of
its own: what the hook leaves running is reaped with `waitpid(-1)`. Each
function answers (ok, what happened): `exit 0`, `killed by SIGTERM`,
`timed out after 5s, killed`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from spexsup.adapters.procs import descendants, reap_children

# (ok, what happened), the output's head, the bytes dropped after it.
Ran = tuple[tuple[bool, str], bytes, int]

# The head of a hook's output that hooks.log keeps; the rest is counted.
OUTPUT_LIMIT = 16384
# After a kill at the timeout, how long to wait for the killed to be reaped.
KILL_WAIT = 2.0


def run(argv: list[str], env: dict[str, str], timeout: float) -> Ran:
    """Run `argv` in a session of its own; its output (the head kept, the
    rest counted) and what became of it and of whatever it left running."""
    out_r, out_w = os.pipe()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    # SIGCHLD writes a byte to wake_r: the wait below is woken by every exit.
    previous = signal.signal(signal.SIGCHLD, lambda *_: None)
    old_wakeup = signal.set_wakeup_fd(wake_w)
    try:
        try:
            pid = os.posix_spawnp(
                argv[0],
                argv,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, out_w, 1),
                    (os.POSIX_SPAWN_DUP2, out_w, 2),
                ],
                setsid=True,
                # Python ignores SIGPIPE and SIGXFSZ; an exec'd program expects them.
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
            )
        except OSError as e:
            return (False, f"cannot run {argv[0]!r}: {e.strerror or e}"), b"", 0
        finally:
            os.close(out_w)
        return _watch(pid, out_r, wake_r, timeout)
    finally:
        signal.set_wakeup_fd(old_wakeup)
        signal.signal(signal.SIGCHLD, previous)
        for fd in (out_r, wake_r, wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass


def _status_text(status: int) -> tuple[bool, str]:
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return code == 0, f"exit {code}"
    try:
        return False, f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return False, f"killed by signal {-code}"


def _watch(pid: int, out_r: int, wake_r: int, timeout: float) -> Ran:
    """Until the hook and everything it started have ended and its output is
    closed, or `timeout`: then kill what is left, the group and every
    descendant (adopted orphans included), and say so."""
    import select

    deadline = time.monotonic() + timeout
    head = bytearray()
    dropped = 0
    status: int | None = None
    reading = True
    while True:
        ended, left = reap_children()
        for child, child_status in ended:
            if child == pid:
                status = child_status
        if not reading and not left:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return _kill_left(pid, status, wake_r, timeout), bytes(head), dropped
        ready, _, _ = select.select([wake_r, *([out_r] if reading else [])], [], [], remaining)
        if out_r in ready:
            chunk = os.read(out_r, 65536)
            if not chunk:
                reading = False
            else:
                room = OUTPUT_LIMIT - len(head)
                head += chunk[:room]
                dropped += max(0, len(chunk) - room)
        if wake_r in ready:
            _drain(wake_r)
    assert status is not None  # reaped: no child is left
    ok, text = _status_text(status)
    return (ok, text), bytes(head), dropped


def _kill_left(pid: int, status: int | None, wake_r: int, timeout: float) -> tuple[bool, str]:
    """SIGKILL the hook's group (while its leader is unreaped, so the group id
    is still ours) and every descendant, until none is left or `KILL_WAIT`."""
    import select

    ran_out = status is None  # the hook itself was still running
    killed: set[int] = set()
    give_up = time.monotonic() + KILL_WAIT
    left = True
    while left:
        if status is None:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        for child in descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
                killed.add(child)
        ended, left = reap_children()
        for child, child_status in ended:
            killed.add(child)
            if child == pid:
                status = child_status
        if left and time.monotonic() >= give_up:
            break
        if left:
            select.select([wake_r], [], [], 0.05)
            _drain(wake_r)
    survivors = f", {len(descendants(os.getpid()))} would not die" if left else ""
    if ran_out or status is None:
        return (False, f"timed out after {timeout:g}s, killed{survivors}")
    others = len(killed - {pid})
    _, text = _status_text(status)
    noun = "process" if others == 1 else "processes"
    return (
        False,
        f"{text}, but left {others} {noun} running: killed at the {timeout:g}s timeout{survivors}",
    )
