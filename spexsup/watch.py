"""Event-driven waiting on turn directories (watchdog/inotify).

A `DirWatch` wakes its waiter on any filesystem event in the watched
directories; a coarse timeout on every wait guards against a missed event, so
callers re-read state after each wake-up and never busy-poll.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers.api import BaseObserver

# watchdog logs a benign race when an observer stops mid-read; with no handler
# configured, Python would print it on the user's terminal.
logging.getLogger("watchdog").addHandler(logging.NullHandler())

# Fallback re-read interval when no event arrives.
COARSE_POLL = 0.5


class DirWatch:
    def __init__(self, dirs: Iterable[Path]) -> None:
        self.dirs = [Path(d) for d in dirs]
        self.changed = threading.Event()
        self._observer: BaseObserver | None = None
        self._handler: FileSystemEventHandler | None = None

    def __enter__(self) -> DirWatch:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        changed = self.changed

        class Wake(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                changed.set()

        self._handler = Wake()
        self._observer = Observer()
        self._observer.daemon = True
        for d in self.dirs:
            self.add(d)
        self._observer.start()
        return self

    def add(self, d: Path) -> None:
        """Watch one more directory (e.g. a turn dir created after entering)."""
        assert self._observer is not None and self._handler is not None
        self._observer.schedule(self._handler, str(d), recursive=False)

    def wait(self, timeout: float) -> bool:
        """Block until an event or `timeout` (capped at the coarse poll); clears the flag."""
        fired = self.changed.wait(max(0.0, min(timeout, COARSE_POLL)))
        self.changed.clear()
        return fired

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)
