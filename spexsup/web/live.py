"""Live updates for the pages: the event log and a turn's output, as SSE.

`Broadcaster` is `spex events --follow` inside the server: one thread runs
`events.follow` (woken by inotify on `events/tick`, which every committer
writes after its COMMIT) and hands each event to every open stream. A
stream that joins says where it was (`Last-Event-ID`, or the last event its
page had seen when it was rendered): what it missed is read from the log
up to the broadcaster's high-water mark, and everything after comes from
the broadcaster, so no event is missed or repeated.

`follow_log` is `spex log --pretty -f` for one turn, in a thread of its own
per open session page, until the turn ends.

Each SSE message is one JSON document; every one names its `session` and
`turn` (DESIGN §18).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from spexsup.state import events

# A stream further behind than this is told to reload its page instead.
MAX_BACKLOG = 1000
# Events held for one slow client before it is cut off (it reconnects).
QUEUE_SIZE = 2000
_END = object()


def sse(data: dict[str, Any], *, event: str | None = None, ident: int | None = None) -> str:
    """One SSE message: `id:`, `event:`, then the document on one `data:` line."""
    out = f"id: {ident}\n" if ident is not None else ""
    if event:
        out += f"event: {event}\n"
    return out + f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


class Stream:
    """One client's queue, filled from the broadcaster's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sessions: tuple[str, ...]) -> None:
        self.loop = loop
        self.sessions = sessions
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.lagged = False

    def push(self, doc: dict[str, Any]) -> None:
        if self.sessions and doc["session"] not in self.sessions:
            return
        if self.lagged:
            return
        item: Any = doc
        if self.queue.qsize() >= QUEUE_SIZE:  # a read of its length: safe from this thread
            self.lagged = True
            item = _END
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class Broadcaster:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.lock = threading.Lock()
        self.streams: set[Stream] = set()
        self.logs: set[Stream] = set()  # the live logs' queues, to end them too
        self.high = 0  # the last event handed to the streams
        self.ready = threading.Event()
        self.failed: str | None = None

    def start(self) -> None:
        threading.Thread(target=self._run, name="spex-events", daemon=True).start()
        self.ready.wait(10)

    def _run(self) -> None:
        from spexsup.core.spex import open_store

        try:
            store = open_store(self.home)
            start = events.last_id(store.db)
            with self.lock:
                self.high = start
            self.ready.set()
            for row in events.follow(store, start, forever=True):
                doc = events.as_json(row)
                with self.lock:
                    self.high = doc["id"]
                    for stream in self.streams:
                        with contextlib.suppress(RuntimeError):  # the server is stopping
                            stream.push(doc)
        except Exception as e:  # the pages keep working; only live updates stop
            self.failed = f"{type(e).__name__}: {e}"
            self.ready.set()

    def join(self, stream: Stream) -> int:
        """Add `stream`; the high-water mark from which it gets each event."""
        with self.lock:
            self.streams.add(stream)
            return self.high

    def leave(self, stream: Stream) -> None:
        with self.lock:
            self.streams.discard(stream)

    def end_all(self) -> None:
        """End every open stream now (the server is stopping: they would never
        end by themselves). Safe from a signal handler."""
        with self.lock:
            ending = [*self.streams, *self.logs]
        for stream in ending:
            with contextlib.suppress(RuntimeError):  # its loop is closed already
                stream.loop.call_soon_threadsafe(stream.queue.put_nowait, _END)


def backlog(
    home: Path, since: int, high: int, sessions: tuple[str, ...]
) -> list[dict[str, Any]] | None:
    """The events after `since` up to `high` (of `sessions`, or all), or None
    when there are more than MAX_BACKLOG (the page reloads instead)."""
    from spexsup.web.views import spex_for

    if high - since > MAX_BACKLOG:
        return None
    db = spex_for(home).store.db
    out: list[dict[str, Any]] = []
    after = since
    while after < high:
        rows = [r for r in events.read(db, after, sessions=sessions) if r["id"] <= high]
        if not rows:
            break
        out += [events.as_json(r) for r in rows]
        after = rows[-1]["id"]
    return out


async def event_stream(
    hub: Broadcaster, home: Path, since: int, sessions: tuple[str, ...]
) -> AsyncIterator[str]:
    """The SSE body of `/events`: the missed events, then each as it commits."""
    import anyio.to_thread

    stream = Stream(asyncio.get_running_loop(), sessions)
    high = hub.join(stream)
    try:
        yield "retry: 1000\n\n"
        missed = await anyio.to_thread.run_sync(backlog, home, since, high, sessions)
        if missed is None:
            yield sse({"session": None, "turn": None, "reason": "too far behind"}, event="reset")
            return
        for doc in missed:
            yield sse(doc, ident=doc["id"])
        while True:
            doc = await stream.queue.get()
            if doc is _END:
                return  # too slow: the browser reconnects with Last-Event-ID
            if doc["id"] > high:
                yield sse(doc, ident=doc["id"])
    finally:
        hub.leave(stream)


def follow_log(
    home: Path, name: str, turn: str, tail: int | None, closed: threading.Event
) -> Iterator[dict[str, Any]]:
    """`spex log NAME --turn TURN --pretty -f` as documents: each new piece of
    text, then the end (`state`). Runs in a thread; stops within a second
    once `closed` is set (the page went away), output or not."""
    from spexsup.core.spex import Spex
    from spexsup.web.views import pretty_chunks, turn_state

    spex = Spex.open(home)
    try:
        first = True
        for text in pretty_chunks(spex, name, turn, follow=True, tail=tail, stop=closed):
            if closed.is_set():
                return
            yield {"session": name, "turn": turn, "text": text, "first": first}
            first = False
        yield {"session": name, "turn": turn, "end": True, "state": turn_state(spex, name, turn)}
    finally:
        spex.close()


async def log_stream(
    hub: Broadcaster, home: Path, name: str, turn: str, tail: int | None
) -> AsyncIterator[str]:
    """The SSE body of a session page's live log: `log` messages (the first
    one replaces what the page shows), then one `end`."""
    loop = asyncio.get_running_loop()
    stream = Stream(loop, ())
    closed = threading.Event()

    def pump() -> None:
        try:
            for doc in follow_log(home, name, turn, tail, closed):
                loop.call_soon_threadsafe(stream.queue.put_nowait, doc)
        except Exception as e:
            doc = {"session": name, "turn": turn, "end": True, "state": None, "error": str(e)}
            with contextlib.suppress(RuntimeError):  # the loop is gone: the server stopped
                loop.call_soon_threadsafe(stream.queue.put_nowait, doc)
        finally:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stream.queue.put_nowait, _END)

    threading.Thread(target=pump, name=f"spex-log-{name}", daemon=True).start()
    with hub.lock:
        hub.logs.add(stream)
    try:
        yield "retry: 2000\n\n"
        while True:
            doc = await stream.queue.get()
            if doc is _END:
                return
            yield sse(doc, event="end" if doc.get("end") else "log")
    finally:
        closed.set()
        with hub.lock:
            hub.logs.discard(stream)
