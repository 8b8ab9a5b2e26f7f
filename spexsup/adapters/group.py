"""Threads of one process sharing a costly step: group commit, named locks.

A wave's legs are threads of one process that each need the same costly,
serialised step (a write of the wave's document, a tmux client call). Done
one by one, a hundred legs wait in line for a hundred of them. A `Group`
lets the first to arrive lead: it runs everything queued so far in one go,
and whoever arrives meanwhile waits for the next go (group commit, as
databases commit many transactions with one sync). Each caller still gets
its own result, or the exception of the go that held its item, and returns
only once that go is done: nothing is acknowledged before it happened.

Imports nothing of spexsup.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Entry(Generic[Item, Result]):
    def __init__(self, item: Item) -> None:
        self.item = item
        self.done = False
        self.result: Result | None = None
        self.error: BaseException | None = None


class Group(Generic[Item, Result]):
    """Run `items` queued by several threads together: `run_all` gets every
    item queued while the previous go ran, in arrival order, and returns one
    result per item in the same order."""

    def __init__(self, run_all: Callable[[Sequence[Item]], Sequence[Result]]) -> None:
        self.run_all = run_all
        self._cond = threading.Condition()
        self._queued: list[_Entry[Item, Result]] = []
        self._leading = False

    def run(self, item: Item) -> Result:
        """`item`'s result, once a go that held it has run (this thread's, or another's)."""
        mine: _Entry[Item, Result] = _Entry(item)
        with self._cond:
            self._queued.append(mine)
            while self._leading and not mine.done:
                self._cond.wait()
            if not mine.done:
                self._leading = True
                batch, self._queued = self._queued, []
        if not mine.done:
            self._lead(batch)
        if mine.error is not None:
            raise mine.error
        return mine.result  # type: ignore[return-value]

    def _lead(self, batch: list[_Entry[Item, Result]]) -> None:
        try:
            results = self.run_all([e.item for e in batch])
            assert len(results) == len(batch)
            for entry, result in zip(batch, results, strict=True):
                entry.result = result
        except BaseException as e:
            for entry in batch:
                entry.error = e
        finally:
            with self._cond:
                for entry in batch:
                    entry.done = True
                self._leading = False
                self._cond.notify_all()


_LOCKS: dict[str, threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()


def named_lock(name: str) -> threading.RLock:
    """This process's one re-entrant lock called `name` (made on first use)."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(name)
        if lock is None:
            lock = _LOCKS[name] = threading.RLock()
        return lock


def _forget_locks() -> None:
    """A forked child holds none of its parent's threads' locks."""
    global _LOCKS_GUARD
    _LOCKS.clear()
    _LOCKS_GUARD = threading.Lock()


os.register_at_fork(after_in_child=_forget_locks)


@contextmanager
def held(lock: threading.RLock, timeout: float, refused: Callable[[], Exception]) -> Iterator[None]:
    """Hold `lock`, waiting at most `timeout` seconds for it; else raise `refused()`."""
    if not lock.acquire(timeout=timeout):
        raise refused()
    try:
        yield
    finally:
        lock.release()
