"""The order a person triages sessions in (`spex serve`'s list, DESIGN §18):
what needs them first, then what is under way, then what waits.

A session needs a person when its last turn failed (`failed`), was `lost`,
hit a usage or rate limit (`limited`, whatever its state: a turn waiting for
the reset is one too), ran its check (`verifying`: the verdict is near), or
was stopped by someone (`stopped`). Then `running`, then `idle`, then what
is being made or removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from spexsup import states


class Need(StrEnum):
    """A row's place in the list, in the list's order."""

    FAILED = "failed"
    LOST = "lost"
    LIMITED = "limited"
    VERIFYING = "verifying"
    STOPPED = "stopped"
    RUNNING = "running"
    IDLE = "idle"
    OTHER = "other"


ORDER = list(Need)
# The needs a person answers: the list's first group, and its filter `attention`.
ATTENTION = frozenset(ORDER[: ORDER.index(Need.STOPPED) + 1])
LIMITS = frozenset({states.Cause.USAGE_LIMIT, states.Cause.RATE_LIMITED})


def need(state: str, turn: Mapping[str, Any] | None, flags: Iterable[str]) -> Need:
    """Where a session with `state`, current or last `turn` (its `spex ls
    --json` document) and board `flags` goes."""
    turn = turn or {}
    if turn.get("cause") in LIMITS or turn.get("waiting_until"):
        return Need.LIMITED
    if state == states.SessionState.FAILED:
        return Need.LOST if turn.get("state") == states.TurnState.LOST else Need.FAILED
    if states.VERIFYING in flags:
        return Need.VERIFYING
    for word in (Need.STOPPED, Need.RUNNING, Need.IDLE):
        if state == word:
            return word
    return Need.OTHER


def rank(word: Need) -> int:
    return ORDER.index(word)


def chosen(word: Need, wanted: str) -> bool:
    """Whether the list's state filter `wanted` (a need, `attention`, or ""
    for all) lets a row of `word` through."""
    if not wanted:
        return True
    if wanted == "attention":
        return word in ATTENTION
    return word == wanted


FILTERS = ["", "attention", *(str(w) for w in ORDER if w != Need.OTHER)]
