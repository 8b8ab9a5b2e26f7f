"""The handle every operation takes: the state home, its store, the tmux home."""

from __future__ import annotations

from pathlib import Path

from spexsup.home import TmuxHome
from spexsup.paths import resolve_home
from spexsup.store import Store


class Spex:
    # A plain class: a dataclass costs every command ~1.5 ms to define.
    def __init__(self, home: Path, store: Store, tmux: TmuxHome | None = None) -> None:
        self.home = home
        self.store = store
        self.tmux = tmux if tmux is not None else TmuxHome()

    @classmethod
    def open(cls, home: str | Path | None = None, tmux: TmuxHome | None = None) -> Spex:
        path = resolve_home(home)
        store = Store(path)
        tmux = tmux or TmuxHome(home=path, fallback=store.setting("tmux_socket"))
        return cls(path, store, tmux)

    def close(self) -> None:
        self.store.close()
