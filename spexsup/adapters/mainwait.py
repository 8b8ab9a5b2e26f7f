"""Waits in the main thread that let signal handlers run.

The kernel may hand a SIGINT or SIGTERM to any thread of the process that
does not block it (a fan-out's leg, watchdog's reader); Python runs the
handler in the main thread, and only when that thread next runs. A main
thread blocked without a timeout (`Future.result()`) sat out such a Ctrl-C
until what it waited for ended: a fan-out's 60 s windows. So every wait
here wakes the main thread at least every SIGNAL_CHECK seconds; other
threads wait as asked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")

SIGNAL_CHECK = 0.25


def event_wait(event: threading.Event, timeout: float) -> bool:
    """`event.wait(timeout)`, woken at least every SIGNAL_CHECK in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return event.wait(timeout)
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return event.is_set()
        if event.wait(min(left, SIGNAL_CHECK)):
            return True


def results(futures: Sequence[Future[T]]) -> list[T]:
    """Each future's result (or its exception), in order, once all are done."""
    from concurrent.futures import wait as wait_futures  # only where a pool ran them

    pending = set(futures)
    while pending:
        _, pending = wait_futures(pending, timeout=SIGNAL_CHECK)
    return [f.result() for f in futures]
