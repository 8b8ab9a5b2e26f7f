"""spexsup.adapters.group: work queued by threads of one process, run together."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from spexsup.adapters.group import Group, held, named_lock


def test_items_queued_while_a_go_runs_go_together_in_order() -> None:
    running = threading.Event()
    release = threading.Event()
    goes: list[list[int]] = []

    def run_all(items: Sequence[int]) -> list[int]:
        goes.append(list(items))
        if len(goes) == 1:
            running.set()
            assert release.wait(30)
        return [i * 10 for i in items]

    group: Group[int, int] = Group(run_all)
    results: dict[int, int] = {}

    def call(i: int) -> None:
        results[i] = group.run(i)

    first = threading.Thread(target=call, args=(0,))
    first.start()
    assert running.wait(30)
    others = [threading.Thread(target=call, args=(i,)) for i in (1, 2, 3)]
    for t in others:
        t.start()
    # Each waits for the go under way (its item queued, not yet run).
    while sum(1 for t in others if t.is_alive()) < 3 or len(group._queued) < 3:
        assert first.is_alive()
        threading.Event().wait(0.01)
    release.set()
    for t in (first, *others):
        t.join(30)
    assert goes[0] == [0]
    assert sorted(goes[1]) == [1, 2, 3] and len(goes) == 2
    assert results == {0: 0, 1: 10, 2: 20, 3: 30}


def test_a_go_that_fails_fails_every_caller_of_it_and_no_other() -> None:
    def run_all(items: Sequence[str]) -> list[str]:
        if "bad" in items:
            raise RuntimeError("the go failed")
        return list(items)

    group: Group[str, str] = Group(run_all)
    with pytest.raises(RuntimeError, match="the go failed"):
        group.run("bad")
    assert group.run("good") == "good"


def test_named_locks_are_one_per_name_and_held_gives_up() -> None:
    assert named_lock("x") is named_lock("x") and named_lock("x") is not named_lock("y")
    lock = named_lock("held")
    taken = threading.Event()
    done = threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            assert done.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    assert taken.wait(30)
    with pytest.raises(TimeoutError), held(lock, 0.01, lambda: TimeoutError("busy")):
        pass
    done.set()
    t.join(30)
    with held(lock, 1, lambda: TimeoutError("busy")):
        pass
