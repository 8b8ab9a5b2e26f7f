"""Tickets: a row naming the process that is mutating a session right now.

Every mutating operation (wake from admission through confirmation, stop,
resume, rm) holds one for its duration, so a maintenance lease can wait for
older operations to drain, and can tell a dead holder (pid + start token)
from a slow one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from spexsup.adapters.procs import own_identity
from spexsup.core.spex import Spex
from spexsup.state import lease


@contextmanager
def ticket(
    spex: Spex, session: str, op: str, bearer: int | None = None, *, wait: float | None = None
) -> Iterator[int]:
    """Hold a ticket on `session`, admitted by the lease in the same transaction.

    `bearer` is the epoch of the maintenance lease this operation runs under
    (the broker's own operations); None for ordinary ones. `wait` bounds the
    wait for the write lock (see Store.tx).
    """

    pid, token = own_identity()
    with spex.store.tx(wait) as db:
        lease.check_admission(db, session, bearer)
        cur = db.execute(
            "INSERT INTO tickets (session, op, pid, start_token, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (session, op, pid, token, time.time()),
        )
        ticket_id = cur.lastrowid
    assert ticket_id is not None
    try:
        yield ticket_id
    finally:
        with spex.store.tx() as db:
            db.execute("DELETE FROM tickets WHERE id = ?", (ticket_id,))
