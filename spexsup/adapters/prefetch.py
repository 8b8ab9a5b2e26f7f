"""A census of the panes, started before it is needed.

`spex ls` and `spex show` start its tmux client as soon as the store is
open (`EarlyCensus`): the server answers (16 ms for 1 000 panes, most of it
the server's own) while they import the rest of what they need and read the
store, not after. Any other reader runs its census in a thread while it
reads the store (`started`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spexsup.adapters.home import Census, TmuxHome


def started(call: Callable[[], Census]) -> Callable[[], Census]:
    """`call` run in a thread from now; the function returned waits for its
    answer, or raises what it raised."""
    box: list[Census | BaseException] = []

    def run() -> None:
        try:
            box.append(call())
        except BaseException as e:  # raised again where it is collected
            box.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def collect() -> Census:
        thread.join()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    return collect


class EarlyCensus:
    """`tmux.census(only)`, its client started now (a process of its own: a
    thread would wait on the importing one for the GIL). What it reads
    stands in for a census taken later only while this process starts no
    other tmux client: a reconcile's fence or respawn meanwhile would leave
    it behind."""

    def __init__(self, tmux: TmuxHome, only: str | None = None) -> None:
        self.tmux = tmux
        self.only = only
        self._since = tmux.clients
        self._client = tmux.census_begin(only)

    def collect(self) -> Census:
        return self.tmux.census_of(self._client)

    def current(self, only: str | None) -> bool:
        """Whether it answers a census of `only` taken now: the same panes
        asked for, and no client of ours started but its own."""
        return only == self.only and self.tmux.clients <= self._since + 1
