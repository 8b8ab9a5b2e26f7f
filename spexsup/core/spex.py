"""The handle every operation takes: the state home, its store, its tmux server.

Also the one place that composes the store with what listens to it
(`open_store`): the event log (`events`) and the hooks (`HookListener`).
The store, the event log and the hooks know nothing of each other's
listening; only this module wires them.

The exit reporter opens its store here on every turn end, and `--no-hooks`
sets `NO_HOOKS` here before `spex status-line`: what this module imports at
its top costs next to nothing; `spexsup.adapters.home` (the tmux adapter), the store
and `spexsup.core.hooks` are imported where they are needed.
"""

# Plain os calls on str paths: this runs in every writer's transaction.
# ruff: noqa: PTH111, PTH123
from __future__ import annotations

import os
from typing import TYPE_CHECKING, TypeVar

from spexsup import faults
from spexsup.errors import SpexError
from spexsup.state import events

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Iterator, Sequence
    from pathlib import Path

    from spexsup.adapters.home import TmuxHome
    from spexsup.state.store import Store


T = TypeVar("T")

# How many sessions a command of several works on at once (`Spex.at_once`):
# each mostly waits (a grace, a wrapper's last steps), and their hunts for
# processes share one pass over /proc (`procs.turn_processes`).
AT_ONCE = 32


class Spex:
    # A plain class: a dataclass costs every command ~1.5 ms to define.
    def __init__(self, home: Path, store: Store, tmux: TmuxHome | None = None) -> None:
        self.home = home
        self.store = store
        if tmux is None:
            from spexsup.adapters.home import TmuxHome

            tmux = TmuxHome()
        self.tmux = tmux

    @classmethod
    def open(cls, home: str | Path | None = None, tmux: TmuxHome | None = None) -> Spex:
        from spexsup.adapters.home import TmuxHome
        from spexsup.paths import resolve_home

        path = resolve_home(home)
        store = open_store(path)
        tmux = tmux or TmuxHome(home=path, fallback=store.setting("tmux_socket"))
        return cls(path, store, tmux)

    def sibling(self) -> Spex:
        """This home again on a connection of its own, for another thread."""
        return Spex(self.home, self.store.sibling(), self.tmux)

    def at_once(
        self, names: Sequence[str], work: Callable[[Spex, str], T]
    ) -> Iterator[tuple[str, T | SpexError]]:
        """`work(spex, name)` for each of `names`, up to AT_ONCE together, each
        thread on a connection of its own: yields (name, its result or the
        SpexError that ended it) in their order, each as soon as it and those
        before it are done; one's error stops none of the others. When the
        caller stops reading (a signal), the work under way finishes and no
        more starts. (A command of many sessions, one after another, waited
        out each one's grace and its scans: `stop --all` over 1 000, 4 minutes.)"""
        import threading
        from concurrent.futures import ThreadPoolExecutor

        from spexsup.adapters.mainwait import results

        local = threading.local()

        def one(name: str) -> T | SpexError:
            if getattr(local, "spex", None) is None:
                local.spex = self.sibling()  # a SQLite connection belongs to its thread
            try:
                return work(local.spex, name)
            except SpexError as e:
                return e

        pool = ThreadPoolExecutor(max_workers=max(1, min(len(names), AT_ONCE)))
        try:
            futures = [pool.submit(one, name) for name in names]
            for name, future in zip(names, futures, strict=True):
                yield name, results([future])[0]  # in the main thread: a signal gets through
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def resume_hooks(self) -> None:
        """What a reconciling reader does for the hooks (once per process and
        home): start the claims that nobody started (see `hooks.resume`).
        Costs a file read or two without a `[[hook]]` table; never raises."""
        home = str(self.store.home)
        if home in _resumed or hooks_disabled() or not hooks_configured(home):
            return
        _resumed.add(home)
        try:
            from spexsup.core import hooks

            hooks.resume(self.store.home, self.store.db)
        except Exception as e:
            events.log_line(home, f"queued hooks not started: {e}")

    def close(self) -> None:
        self.store.close()


def open_store(home: Path) -> Store:
    """The store of `home` with its listeners, in this order: the event log
    (the summary rewrite, then the tick), then the hooks (their claims,
    after the summary; their runners, after the tick)."""
    from spexsup.state.store import Store

    return Store(home, (events, HOOKS))


class HookListener:
    """The hooks as a commit listener: claim the hook runs of the events a
    transaction recorded inside it (so they commit with the events or not at
    all), start their runners after its COMMIT.

    Cheap until a config file has a `[[hook]]` table: the exit reporter
    commits through it on every turn end. `hooks` (which imports TOML and
    dataclasses) is imported only then, and never with `--no-hooks` or
    SPEXSUP_NO_HOOKS. Never raises: the transition must commit whatever
    happens here; failures go to hooks.log.
    """

    def __init__(self) -> None:
        # Per connection with an open transaction: its event ids and how many
        # (event, hook) pairs it claimed, the runners to start after the COMMIT.
        self._claimed: dict[sqlite3.Connection, tuple[tuple[int, ...], int]] = {}

    def migrated(self, store: Store) -> None:
        pass

    def before_commit(self, store: Store) -> None:
        ids = events.pending_ids(store.db)
        if not ids or hooks_disabled() or not hooks_configured(store.home):
            return
        try:
            from spexsup.core import hooks

            self._claimed[store.db] = (ids, hooks.claim(store.db, ids, hooks.runnable(store.home)))
        except Exception as e:
            events.log_line(store.home, f"hooks of events {ids[0]}..{ids[-1]} not run: {e}")

    def after_commit(self, store: Store) -> None:
        ids, claimed = self._claimed.pop(store.db, ((), 0))
        if not claimed:
            return
        try:
            from spexsup.core import hooks

            faults.at(faults.Fault.AFTER_HOOK_CLAIM)
            hooks.start_runners(store.home, claimed)
        except Exception as e:
            events.log_line(store.home, f"hooks of events {ids[0]}..{ids[-1]} not started: {e}")

    def discard(self, db: sqlite3.Connection) -> None:
        self._claimed.pop(db, None)


HOOKS = HookListener()
_resumed: set[str] = set()

# `spex --no-hooks …`: this process only. Never an environment variable, which
# would reach the tmux server this command may start, and every later turn.
NO_HOOKS = False


def hooks_disabled() -> bool:
    """`--no-hooks` on this command, or SPEXSUP_NO_HOOKS=1 in its environment."""
    return NO_HOOKS or os.environ.get("SPEXSUP_NO_HOOKS", "") not in ("", "0")


def hooks_configured(home: Path | str) -> bool:
    """Does a config file hold a `[[hook]]` or `[[notify]]` table? Bytes and substrings only:
    the exit reporter asks on every turn end and must not pay for TOML."""
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    for path in (f"{xdg}/spexsup/config.toml", f"{home}/config.toml"):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if (b"hook" in data or b"notify" in data) and b"[[" in data:
            return True
    return False
