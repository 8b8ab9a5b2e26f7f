"""Event-driven waiting on turn directories (watchdog/inotify).

A `DirWatch` wakes its waiter on writes to the named files (by default the
outcome marker) in the watched directories, so a chatty harness appending
to its log does not wake a waiter that only needs the marker; a
coarse timeout on every wait guards against a missed event, so callers
re-read state after each wake-up and never busy-poll.

One watchdog observer serves the whole process (started on first use): its
threads are started once, not per wake, and a fan-out of many legs shares
them. Several waiters on one directory share one inotify watch.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from spexsup.adapters.mainwait import event_wait

if TYPE_CHECKING:
    from watchdog.events import FileSystemEvent
    from watchdog.observers.api import BaseObserver, ObservedWatch

Names = frozenset[str] | None

# Fallback re-read interval when no event arrives.
COARSE_POLL = 2.0


class _Hub:
    """The process's observer and, per directory, the waiters to wake."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.observer: BaseObserver | None = None
        self.watches: dict[tuple[str, bool], tuple[ObservedWatch, dict[DirWatch, Names]]]
        self.watches = {}

    def _start(self) -> BaseObserver:
        if self.observer is None:
            import logging

            from watchdog.observers import Observer

            # watchdog logs a benign race when a watch goes away mid-read; with
            # no handler configured, Python would print it on the terminal.
            logging.getLogger("watchdog").addHandler(logging.NullHandler())
            # Never stopped (daemon), so a long dispatch timeout costs nothing
            # and spares the thread a wake-up every second.
            self.observer = Observer(timeout=30)
            self.observer.daemon = True
            self.observer.start()
        return self.observer

    def add(self, directory: str, waiter: DirWatch, names: Names) -> tuple[str, bool]:
        """Wake `waiter` on writes to `names` in `directory`; returns the watch's key.

        A waiter for the marker alone asks the kernel for renames only: the
        wrapper always renames the marker into place, and the harness's
        output appending to output.log then costs the watcher nothing.
        """
        from watchdog.events import (
            FileClosedEvent,
            FileCreatedEvent,
            FileDeletedEvent,
            FileModifiedEvent,
            FileMovedEvent,
            FileSystemEventHandler,
        )

        key = (directory, names == MARKER_ONLY)
        with self.lock:
            if key in self.watches:
                self.watches[key][1][waiter] = names
                return key
            waiters = {waiter: names}

            class Wake(FileSystemEventHandler):
                def on_any_event(self, event: FileSystemEvent) -> None:
                    touched = {_basename(event.src_path), _basename(event.dest_path)}
                    for w, wanted in list(waiters.items()):
                        if wanted is None or touched & wanted:
                            w.fire(directory)

            # Writes only: watching opens/reads would wake us on our own
            # reads of the marker, turning the wait into a busy loop.
            writes: list[type[FileSystemEvent]] = [FileMovedEvent]
            if not key[1]:
                writes += [FileCreatedEvent, FileModifiedEvent, FileClosedEvent, FileDeletedEvent]
            watch = self._start().schedule(Wake(), directory, event_filter=writes)
            self.watches[key] = (watch, waiters)
            return key

    def remove(self, key: tuple[str, bool], waiter: DirWatch) -> None:
        with self.lock:
            entry = self.watches.get(key)
            if entry is None:
                return
            watch, waiters = entry
            waiters.pop(waiter, None)
            if not waiters:
                del self.watches[key]
                assert self.observer is not None
                # The directory may have been removed under us, its watch gone.
                with contextlib.suppress(KeyError, OSError):
                    self.observer.unschedule(watch)


def _basename(path: str | bytes) -> str:
    name = path.decode(errors="replace") if isinstance(path, bytes) else path
    return name.rsplit("/", 1)[-1]


_hub = _Hub()

MARKER_ONLY: Names = frozenset({"outcome"})


class DirWatch:
    def __init__(
        self,
        dirs: Iterable[Path],
        names: Names = MARKER_ONLY,
        changed: threading.Event | None = None,
    ) -> None:
        """Watch `dirs` for writes to files called `names` (None: any file);
        `changed`: another watch's, so that one wait wakes on either's files."""
        self.keys: list[tuple[str, bool]] = []
        self.names = names
        self.changed = changed or threading.Event()
        self._initial = [str(d) for d in dirs]
        # The directories written to since the last `take`: a waiter on many
        # turns re-reads only those, not all of them, on each wake-up.
        self._fired: set[str] = set()
        self._fired_lock = threading.Lock()

    def fire(self, directory: str) -> None:
        """An observed write in `directory` (the observer's thread)."""
        with self._fired_lock:
            self._fired.add(directory)
        self.changed.set()

    def take(self) -> set[str]:
        """The directories written to since the last call (and forget them)."""
        with self._fired_lock:
            fired, self._fired = self._fired, set()
        return fired

    def __enter__(self) -> DirWatch:
        for d in self._initial:
            self.add(Path(d))
        return self

    def add(self, d: Path) -> None:
        """Watch one more directory (e.g. a turn dir created after entering).

        A directory removed meanwhile (a concurrent `spex rm`) is not watched:
        the waiter is woken at once to read what is left, never an error."""
        try:
            self.keys.append(_hub.add(str(d), self, self.names))
        except FileNotFoundError:
            self.fire(str(d))

    def wait(self, timeout: float) -> bool:
        """Block until an event or `timeout` (capped at the coarse poll); clears the flag."""
        fired = event_wait(self.changed, max(0.0, min(timeout, COARSE_POLL)))
        self.changed.clear()
        return fired

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for key in self.keys:
            _hub.remove(key, self)
        self.keys.clear()
