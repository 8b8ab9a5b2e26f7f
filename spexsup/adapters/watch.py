"""Event-driven waiting on turn directories (inotify).

A `DirWatch` wakes its waiter on writes to the named files (by default the
outcome marker) in the watched directories, so a chatty harness appending
to its log does not wake a waiter that only needs the marker; a
coarse timeout on every wait guards against a missed event, so callers
re-read state after each wake-up and never busy-poll.

One inotify descriptor and its reader thread serve the whole process
(started on first use), not one per wake, and a fan-out of many legs shares
them. Several waiters on one directory share one inotify watch.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

from spexsup.adapters.mainwait import event_wait, quiet

Names = frozenset[str] | None

# Fallback re-read interval when no event arrives.
COARSE_POLL = 2.0

# inotify(7): the writes a waiter wakes on. Renames alone for the marker
# (the wrapper renames it into place); every write for anything else.
_MOVES = 0x40 | 0x80  # IN_MOVED_FROM | IN_MOVED_TO
_WRITES = _MOVES | 0x2 | 0x4 | 0x8 | 0x100 | 0x200  # MODIFY ATTRIB CLOSE_WRITE CREATE DELETE
_OVERFLOW, _IS_DIR, _MASK_ADD = 0x4000, 0x40000000, 0x20000000

# Called with the names written to, or None when the kernel lost events.
Wake = Callable[[set[str] | None], None]


class _Inotify:
    """The kernel's inotify, read by one daemon thread: watchdog's inotify
    observer without its imports (logging, dataclasses, ctypes.util: ~12 ms
    of every wake's start) and without a thread and a descriptor per watch."""

    def __init__(self) -> None:
        import ctypes

        self.ctypes = ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_CLOEXEC)
        if self.fd < 0:
            self._raise("inotify_init1")
        # Per watch descriptor: its waiters' masks and wake functions.
        self.wakes: dict[int, dict[object, tuple[int, Wake]]] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._read, name="spex-inotify", daemon=True).start()

    def _raise(self, what: str) -> None:
        err = self.ctypes.get_errno()
        raise OSError(err, os.strerror(err), what)

    def schedule(self, directory: str, mask: int, token: object, wake: Wake) -> int:
        """Wake `wake` with the names written to in `directory` (its events in
        `mask`); returns the watch descriptor. A missing directory is
        FileNotFoundError."""
        with self.lock:
            wd = self.libc.inotify_add_watch(self.fd, os.fsencode(directory), mask | _MASK_ADD)
            if wd < 0:
                self._raise(directory)
            self.wakes.setdefault(wd, {})[token] = (mask, wake)
            return int(wd)

    def unschedule(self, wd: int, token: object) -> None:
        with self.lock:
            wakes = self.wakes.get(wd, {})
            wakes.pop(token, None)
            if not wakes:
                self.wakes.pop(wd, None)
                self.libc.inotify_rm_watch(self.fd, wd)  # gone with its directory: fine

    def _read(self) -> None:
        quiet()  # a Ctrl-C is the main thread's: its wait sleeps through
        while True:
            try:
                data = os.read(self.fd, 65536)
            except InterruptedError:
                continue
            touched: dict[int, tuple[int, set[str] | None]] = {}
            i = 0
            while i + 16 <= len(data):
                wd = int.from_bytes(data[i : i + 4], "little", signed=True)
                mask = int.from_bytes(data[i + 4 : i + 8], "little")
                size = int.from_bytes(data[i + 12 : i + 16], "little")
                name = data[i + 16 : i + 16 + size].split(b"\0", 1)[0]
                i += 16 + size
                if mask & _OVERFLOW:  # events were lost: every waiter re-reads
                    touched = dict.fromkeys(list(self.wakes), (_WRITES, None))
                    break
                if not mask & _IS_DIR:
                    seen, names = touched.get(wd, (0, set()))
                    if names is not None:
                        names.add(name.decode(errors="replace"))
                    touched[wd] = (seen | mask, names)
            for wd, (seen, names) in touched.items():
                with self.lock:
                    wakes = list(self.wakes.get(wd, {}).values())
                for mask, wake in wakes:
                    if seen & mask:
                        wake(names)


class _Hub:
    """The process's inotify reader and, per directory, the waiters to wake."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inotify: _Inotify | None = None
        self.watches: dict[tuple[str, bool], tuple[int, dict[DirWatch, Names]]] = {}

    def add(self, directory: str, waiter: DirWatch, names: Names) -> tuple[str, bool]:
        """Wake `waiter` on writes to `names` in `directory`; returns the watch's key.

        A waiter for the marker alone asks the kernel for renames only: the
        wrapper always renames the marker into place, and the harness's
        output appending to output.log then costs the watcher nothing.
        Writes only: watching opens/reads would wake us on our own reads of
        the marker, turning the wait into a busy loop.
        """
        key = (directory, names == MARKER_ONLY)
        with self.lock:
            if key in self.watches:
                self.watches[key][1][waiter] = names
                return key
            waiters = {waiter: names}

            def wake(touched: set[str] | None) -> None:
                for w, wanted in list(waiters.items()):
                    if wanted is None or touched is None or touched & wanted:
                        w.fire(directory)

            if self.inotify is None:
                self.inotify = _Inotify()
            mask = _MOVES if key[1] else _WRITES
            self.watches[key] = (self.inotify.schedule(directory, mask, key, wake), waiters)
            return key

    def remove(self, key: tuple[str, bool], waiter: DirWatch) -> None:
        with self.lock:
            entry = self.watches.get(key)
            if entry is None:
                return
            wd, waiters = entry
            waiters.pop(waiter, None)
            if not waiters:
                del self.watches[key]
                assert self.inotify is not None
                with contextlib.suppress(OSError):
                    self.inotify.unschedule(wd, key)


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
