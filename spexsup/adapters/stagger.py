"""Staggered starts: launches of one harness kept `spacing` seconds apart,
across every spex process of a state home (issue 25).

Agent CLIs that share one login can break it when a fleet starts at once:
simultaneous cold starts refresh a shared OAuth token together and every
session but one fails with 401. `reserve` gives each launch its slot, a
time at least `spacing` after the slot reserved before it, and names that
launch (its predecessor), so the launcher can also keep `spacing` from the
moment its predecessor's harness really started (spexsup.turn.wake): the
wrapper's steps before the harness (the login shell's environment, a
worktree's snapshot) take longer on a loaded machine, so launches spaced
exactly can still start their harnesses closer together than `spacing`.

The reservations are kept in `stagger/<harness>` (0600, in a 0700
directory) under an flock held only while that file is read and written: a
blocking lock the kernel hands over, so launchers of one harness are queued
in the order they took it, and a launcher that dies holds nothing (its slot
stays reserved: the next one is only later). The waits are the caller's, so
a stop can cut them short.

Times are CLOCK_MONOTONIC, shared by every process of one boot, stored with
the boot id: a wall-clock step neither stalls nor bunches launches, and a
reservation made before a reboot is forgotten.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from spexsup import lazyre
from spexsup.adapters.procs import boot_id
from spexsup.errors import Invalid
from spexsup.paths import ensure_private_dir
from spexsup.record import Record

DIR = "stagger"
HARNESS_RE = lazyre.compile(r"[A-Za-z0-9_-]{1,64}")
# A launch is named SESSION/TURN (a turn directory under turns/, never a path out).
LAUNCH_RE = lazyre.compile(r"[A-Za-z0-9_-]{1,64}/[A-Za-z0-9_-]{1,64}")


class Slot(Record):
    """A launch's reserved start (on `now`'s clock), and the launch reserved
    just before it this boot (its name and slot), if any."""

    at: float
    before: str | None = None
    before_at: float | None = None


def now() -> float:
    """The clock slots are reserved on (seconds, this boot)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def reserve(home: Path, harness: str, spacing: float, launch: str) -> Slot:
    """Reserve the slot of one launch of `harness`, named `launch`: now, or
    `spacing` after the last slot reserved, whichever is later. Each call
    reserves its own slot, so N concurrent launchers get N slots `spacing`
    apart; one that does not launch after all leaves a gap, never two
    starts closer than `spacing`.

    The harness name becomes a file name, so it must be a harness name
    (letters, digits, `_` and `-`). Blocks only while another launcher reads
    and writes the file (microseconds), never for the wait.
    """
    if not HARNESS_RE.fullmatch(harness):
        raise Invalid(f"invalid harness name {harness!r} for a staggered start")
    if not LAUNCH_RE.fullmatch(launch):
        raise Invalid(f"invalid launch name {launch!r} for a staggered start")
    import fcntl  # only a launch that is staggered pays for it

    directory = ensure_private_dir(home / DIR, under=home)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(directory / harness, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the close, or by our death
        boot = boot_id() or "-"
        last = _last(os.pread(fd, 1024, 0), boot)
        at = now()
        if last is not None:
            at = max(at, last[0] + spacing)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{boot} {at!r} {launch}\n".encode(), 0)
    finally:
        os.close(fd)
    return Slot(at) if last is None else Slot(at, last[1], last[0])


def _last(data: bytes, boot: str) -> tuple[float, str] | None:
    """The last slot reserved and its launch, if the file holds one of this
    boot (a torn or foreign file holds none: the launch goes at once)."""
    try:
        stored, at, launch = data.decode().split()
        value = float(at)
    except (UnicodeDecodeError, ValueError):
        return None
    if stored != boot or not 0 <= value < float("inf") or not LAUNCH_RE.fullmatch(launch):
        return None
    return value, launch


def left(at: float) -> float:
    """Seconds until `at` (0 or less: now)."""
    return at - now()
