"""The one way a command takes a session it is about to change.

`taken` checks the name and that the session exists (UnknownSession before
anything is held), takes the session's ticket (admitted by the maintenance
lease in the same transaction), reconciles its turns, and yields the
session as it is then, once. What the command then writes it decides in a
transaction of its own, re-reading the row there: that read is the
compare-and-swap, not a repetition.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from spexsup.core.sessions import Session, get
from spexsup.core.spex import Spex
from spexsup.core.tickets import ticket
from spexsup.record import Record
from spexsup.turn.reconcile import reconcile


class Taken(Record):
    session: Session
    ticket: int


@contextmanager
def taken(
    spex: Spex, name: str, op: str, bearer: int | None = None, *, wait: float | None = None
) -> Iterator[Taken]:
    """Hold `name` for `op` (stop, resume, rm): see the module's docstring.
    `wait` bounds the wait for the write lock (StateLocked past it)."""
    get(spex, name)
    with ticket(spex, name, op, bearer, wait=wait) as mine:
        reconcile(spex, [name])
        yield Taken(get(spex, name), mine)
