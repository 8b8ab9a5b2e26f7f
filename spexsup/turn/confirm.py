"""Startup confirmation: is the wrapper really running this turn, within the window?

Event-driven (inotify on the turn directory): the verdict comes when the
marker says `running` for a live wrapper pid, or when it ends early.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from spexsup import states
from spexsup.adapters.harness import Harness
from spexsup.adapters.procs import (
    Liveness,
    identity_liveness,
    is_zombie,
    start_token,
)
from spexsup.adapters.watch import DirWatch
from spexsup.pane import marker, report, turndir
from spexsup.pane.marker import Marker, Stage
from spexsup.record import Record
from spexsup.turn.launch import REPORTER_GRACE


def failure_message(harness: Harness, directory: Path, rc: int, cas: int | None) -> str:
    """`exited rc=N`, the reporter's rc when non-zero, a named cause, the last output lines."""
    decoded = turndir.output_end(directory)
    parts = [f"exited rc={rc}"]
    if cas not in (None, report.RECORDED, report.STALE, report.DEFERRED):
        parts.append(f"exit reporter rc={cas}")
    message = ", ".join(parts)
    for fatal in harness.fatal:
        if re.search(fatal.pattern, decoded):
            message = f"{fatal.cause}: {message}"
            break
    tail = turndir.output_tail(directory)
    return f"{message}: {tail}" if tail else message


def _pid_problem(pid: int, pane_pid: int) -> str | None:
    """Why `running:<pid>` can't be trusted, or None: alive, not a zombie, the pane's pid."""
    liveness = identity_liveness(pid, None)
    if liveness is Liveness.DEAD:
        return f"the turn's process (pid {pid}) is {'a zombie' if is_zombie(pid) else 'dead'}"
    if liveness is Liveness.UNPROVEN:
        return f"cannot inspect the turn's process (pid {pid})"
    if pid != pane_pid:
        return f"the turn's process (pid {pid}) is not the pane's process (pid {pane_pid})"
    return None


class Startup(Record):
    """What the window showed. `verdict` is confirmed, completed or failed;
    `rc` is the harness's exit status when it is known (exit or reporting)."""

    verdict: str
    marker: Marker
    error: str | None = None
    pid: int | None = None

    @property
    def rc(self) -> int | None:
        return self.marker.rc if self.marker.stage in (Stage.EXIT, Stage.REPORTING) else None


def confirm_startup(
    directory: Path, window: float, started: float, watch: DirWatch, pane_pid: int
) -> Startup:
    """Wait (event-driven) for the marker to prove the turn's startup, per DESIGN §2.5.

    `pane_pid` is tmux's pane_pid for the pane, read at launch. The pid checks
    run `settle` before the window ends and the re-read at its end, so a
    confirmed verdict costs nothing beyond the window. A marker still at
    `reporting:` when the window ends is an exit with a known rc, never a
    failure: its reporter gets a grace period and is never killed.

    Inside the window, `reporting:<pid>:0` is already the end: the wake
    records it itself (by the reporter's compare-and-swap: whichever comes
    first records it) rather than wait ~80 ms for the reporter's Python to
    start. A failure still waits for its reporter, which may defer it to us
    (a lock-class failure is retried) and whose own rc the verdict names.
    """
    deadline = started + window
    settle = min(0.1, window / 4)
    first: Marker | None = None
    token: str | None = None
    while True:
        m = marker.read(directory)
        if m.stage is Stage.EXIT:
            return Startup(states.Verdict.COMPLETED if m.rc == 0 else states.Verdict.FAILED, m)
        if m.stage is Stage.INVALID:
            return Startup(
                states.Verdict.FAILED, m, f"the turn's record is unreadable ({m.text!r})"
            )
        if m.stage is Stage.REPORTING and m.rc == 0:
            return Startup(states.Verdict.COMPLETED, m, None, m.pid)
        now = time.monotonic()
        if m.stage is Stage.REPORTING and now >= deadline:
            if now < deadline + REPORTER_GRACE:
                watch.wait(deadline + REPORTER_GRACE - now)
                continue
            return Startup(
                states.Verdict.COMPLETED if m.rc == 0 else states.Verdict.FAILED, m, None, m.pid
            )
        if first is None and now >= deadline - settle and m.stage is not Stage.REPORTING:
            if m.stage is Stage.NONE:
                why = "never confirmed startup (the turn did not start in its pane)"
                return Startup(states.Verdict.FAILED, m, why)
            assert m.pid is not None
            problem = _pid_problem(m.pid, pane_pid)
            if problem:
                return Startup(states.Verdict.FAILED, m, problem, m.pid)
            first, token = m, start_token(m.pid)
        if first is not None and now >= deadline:
            if m.stage is Stage.REPORTING:
                continue  # it exited while settling: wait for its exit like any other
            # A usage-limit wait (`limited:`), a verification (`verifying:`):
            # the same wrapper, alive.
            if first.pid is None or m.pid != first.pid or m.stage not in marker.LIVE:
                why = f"its start did not hold: the turn's record changed to {m.text!r}"
                return Startup(states.Verdict.FAILED, m, why)
            if identity_liveness(first.pid, token) is not Liveness.ALIVE:
                why = f"the turn's process (pid {first.pid}) died while its start was checked"
                return Startup(states.Verdict.FAILED, m, why)
            return Startup(states.Verdict.CONFIRMED, m, None, first.pid)
        target = deadline if first is not None else deadline - settle
        watch.wait(target - now)
