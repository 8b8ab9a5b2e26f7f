"""The test suite's fault points: where a spex process pauses or dies on
purpose when `SPEXSUP_FAULT` names that point, and nowhere else.

A test sets `SPEXSUP_FAULT=<point>` in the environment of the spex command
it runs; production never sets it (a scheduled command's environment drops
it, see turn.scheduled). Each point is one call, `at(Fault.X)`, in the step
the test races: a dictionary lookup when unset.

Imports only the standard library: the exit reporter, in the pane, calls it.
"""

from __future__ import annotations

import enum
import os
import signal
import time

ENV = "SPEXSUP_FAULT"
# How long a pause point holds its process: long enough for the race the
# test provokes meanwhile.
PAUSE = 2.0


class Fault(enum.StrEnum):
    # A wake admitted its turn and has not launched it (no tmux call in flight).
    PAUSE_BEFORE_LAUNCH = "pause-before-launch"
    # A launcher starved right after its launch, before it re-reads the store.
    PAUSE_AFTER_LAUNCH = "pause-after-launch"
    # The exit reporter recorded the end and dies (exit 9) before it starts
    # the next queued prompt: the next reader launches it.
    REPORTER_DIES_BEFORE_DEQUEUE = "reporter-dies-before-dequeue"
    # A queue's launcher SIGKILLs itself after its launch, before it writes
    # the wave leg's verdict: the leg's document must tell by itself.
    LAUNCHER_DIES_BEFORE_ITS_WORD = "launcher-dies-before-its-word"
    # A committer SIGKILLs itself between a hook's (or an on-complete's)
    # claim COMMIT and starting its runner: a reader must start it.
    AFTER_HOOK_CLAIM = "after-hook-claim"


def named(point: Fault) -> bool:
    """Whether the environment names `point` (for a step that must not run
    ahead of the fault it leads to)."""
    return os.environ.get(ENV) == point


def at(point: Fault) -> None:
    """Pause or die here if the environment names `point`; else nothing."""
    if os.environ.get(ENV) != point:
        return
    if point in (Fault.PAUSE_BEFORE_LAUNCH, Fault.PAUSE_AFTER_LAUNCH):
        time.sleep(PAUSE)
    elif point is Fault.REPORTER_DIES_BEFORE_DEQUEUE:
        os._exit(9)
    else:
        os.kill(os.getpid(), signal.SIGKILL)
