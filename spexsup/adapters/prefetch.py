"""A census of the panes, started before it is needed.

`spex ls` and `spex show` start its tmux client before they import what
they need (`census_ahead`, from the command line alone), and take it up
once the store is open (`EarlyCensus`): the server answers (16 ms for 1 000
panes, most of it the server's own) while they import and read the store,
not after. Any other reader runs its census in a thread while it reads the
store (`started`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

    from spexsup.adapters.home import Census, TmuxHome

# The census clients `census_ahead` started, by (socket name, socket path,
# session asked for): the first EarlyCensus of the same takes its own up.
_AHEAD: dict[tuple[str | None, str | None, str | None], subprocess.Popen[str]] = {}


def census_ahead(home: str | None, only: str | None = None) -> None:
    """Start the census's tmux client now, on the server the environment and
    `home` (`--home`, else SPEXSUP_HOME…) name, before the command imports
    the rest (about 20 ms of `show` at 1 000 panes spent waiting on tmux
    otherwise). A home whose store names an older shared socket has its
    census taken again on the right server (`EarlyCensus` takes up only a
    client of its own server); one that cannot be resolved takes none."""
    from spexsup.adapters.home import TmuxHome
    from spexsup.errors import SpexError
    from spexsup.paths import resolve_home

    try:
        tmux = TmuxHome(home=resolve_home(home))
        _AHEAD[(tmux.socket_name, tmux.socket_path, only)] = tmux.census_begin(only)
    except (SpexError, OSError):
        return  # the command says what is wrong, as it would have


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
        ahead = _AHEAD.pop((tmux.socket_name, tmux.socket_path, only), None)
        # A client `census_ahead` started is not one of `tmux`'s clients.
        self._own = 0 if ahead is not None else 1
        self._client = ahead if ahead is not None else tmux.census_begin(only)

    def collect(self) -> Census:
        return self.tmux.census_of(self._client)

    def current(self, only: str | None) -> bool:
        """Whether it answers a census of `only` taken now: the same panes
        asked for, and no client of ours started but its own."""
        return only == self.only and self.tmux.clients <= self._since + self._own
