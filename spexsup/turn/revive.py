"""`spex up --revive`: wake again the sessions whose turn a reboot interrupted."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from spexsup import states
from spexsup.adapters.procs import Liveness, identity_liveness, own_identity
from spexsup.core.spex import Spex
from spexsup.turn.reconcile import reconcile

if TYPE_CHECKING:
    pass


@contextmanager
def revivals(spex: Spex, names: Sequence[str] | None = None) -> Iterator[list[str]]:
    """Claim the sessions (of `names`, default all) whose current turn a
    reboot interrupted, for one `spex up --revive` to wake, and hold the
    claims while it does.

    A claim is a `revive` ticket taken in the transaction that finds the turn
    interrupted, so of two concurrent revives only one wakes each session;
    a claim whose holder died (pid + start token) no longer counts.
    """

    reconcile(spex, names)
    pid, token = own_identity()
    claimed: list[str] = []
    ids_: list[int] = []
    with spex.store.tx() as db:
        rows = db.execute(
            "SELECT s.name FROM sessions s JOIN turns t ON t.id = s.current_turn"
            " WHERE t.state = ? ORDER BY s.name",
            (states.TurnState.INTERRUPTED,),
        ).fetchall()
        for row in rows:
            name = row["name"]
            if names is not None and name not in names:
                continue
            held = db.execute(
                "SELECT id, pid, start_token FROM tickets WHERE session = ? AND op = 'revive'",
                (name,),
            ).fetchall()
            if any(
                identity_liveness(t["pid"], t["start_token"]) is not Liveness.DEAD for t in held
            ):
                continue
            cur = db.execute(
                "INSERT INTO tickets (session, op, pid, start_token, created_at)"
                " VALUES (?, 'revive', ?, ?, ?)",
                (name, pid, token, time.time()),
            )
            assert cur.lastrowid is not None
            ids_.append(cur.lastrowid)
            claimed.append(name)
    try:
        yield claimed
    finally:
        with spex.store.tx() as db:
            db.executemany("DELETE FROM tickets WHERE id = ?", [(i,) for i in ids_])
