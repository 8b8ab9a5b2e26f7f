"""Waits in the main thread that let signal handlers run.

The kernel may hand a SIGINT or SIGTERM to any thread of the process that
does not block it (a fan-out's leg, watchdog's reader); Python runs the
handler in the main thread, and only when that thread next runs. A main
thread blocked without a timeout (`Future.result()`) sat out such a Ctrl-C
until what it waited for ended: a fan-out's 60 s windows. So every wait
here wakes the main thread at least every SIGNAL_CHECK seconds; other
threads wait as asked.

Unless no other thread can be handed one: a helper thread of ours that
blocks them (`quiet`) never is, and when every thread but the main one is
quiet, the signal goes to the main thread, whose wait it interrupts (a
lock's wait is interruptible on POSIX) and whose handler then runs at once.
Such a wait sleeps through: each wake-up costs a waiting `spex wake` a
fifth of a millisecond of CPU here, four of them a second (issue 40).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")

SIGNAL_CHECK = 0.25

# The threads that called `quiet`.
_quiet: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def quiet() -> None:
    """Block SIGINT and SIGTERM in the calling thread, a helper of ours that
    starts no process (a child would inherit the mask), so the kernel hands
    them to the main thread."""
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    _quiet.add(threading.current_thread())


def _signals_come_here() -> bool:
    """In the main thread: does every other thread block SIGINT and SIGTERM?"""
    main = threading.main_thread()
    return all(t is main or t in _quiet for t in threading.enumerate())


def event_wait(event: threading.Event, timeout: float) -> bool:
    """`event.wait(timeout)`, woken at least every SIGNAL_CHECK in the main
    thread while another thread could be handed its signal."""
    if threading.current_thread() is not threading.main_thread() or _signals_come_here():
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
