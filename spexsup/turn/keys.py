"""Idempotent wakes: `--key K` names the turn its first wake started.

The key is claimed in the transaction that admits the turn (`admit`) or keeps
the queued prompt (`queue.enqueue`), so of any number of wakes with one key,
however they race, one starts a turn; the rest are *repeats* and answer with
that turn (`wake.repeat_verdict`). A key remembers what its first wake asked
(`fingerprint`: the prompt and the turn's options): a wake with the same key
and anything else is refused (`KeyReused`), as idempotency keys are in the
APIs people know. A wake that is refused, or whose turn never
launched, leaves no key: a retry can start it. A key lives as long as what it
names: it goes with its turn (retention), its queue entry (dropped), and its
session (`spex rm`). A queued entry's key follows it into the turn it became.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from spexsup.errors import Invalid, Refused, clip
from spexsup.record import Record
from spexsup.state import ledger

if TYPE_CHECKING:
    import sqlite3

MAX_KEY = 200


class Claim(Record):
    """What a key names: a turn, or a queue entry (and later its turn)."""

    key: str
    session: str
    turn: str | None
    queued: str | None
    # What its first wake asked (`fingerprint`); None for a key older than that.
    fingerprint: str | None = None


class Repeat(Exception):
    """The key was claimed first by another wake: answer with its turn."""

    def __init__(self, claim: Claim) -> None:
        super().__init__(claim.key)
        self.claim = claim


class KeyElsewhere(Refused):
    """The key names a turn of another session."""

    def __init__(self, key: str, session: str) -> None:
        super().__init__(
            f"key {clip(key)!r} names a turn of {session}",
            hint="a key names one wake of one session; give this wake a key of its own",
        )


class KeyReused(Refused):
    """The key names a wake of another prompt, or of other turn options."""

    def __init__(self, claim: Claim) -> None:
        named = f"turn {claim.turn}" if claim.turn else f"queue entry {claim.queued}"
        super().__init__(
            f"key {clip(claim.key)!r} was used for a different prompt ({named})",
            hint="a key names one wake: the same prompt and options repeat it;"
            " give another wake a key of its own",
        )


def fingerprint(prompt: bytes, fresh: bool, options: tuple[object, ...]) -> str:
    """What a wake asks, as a key remembers it: the prompt's bytes, `--fresh`
    and the turn's options (`request.Limits`, as a tuple). Not the window or
    `--force`, which say how to wake, not what the turn is."""
    # Here: hashlib loads OpenSSL (~3 ms), which only a wake with a key needs.
    import hashlib

    digest = hashlib.sha256(prompt)
    digest.update(json.dumps([fresh, list(options)], default=list).encode())
    return digest.hexdigest()


def validate(key: str) -> str:
    """A key is 1-200 printable characters (no NUL, no control character)."""
    if not key or len(key) > MAX_KEY or not key.isprintable():
        raise Invalid(
            f"invalid --key {clip(key)!r}",
            hint=f"1-{MAX_KEY} printable characters, e.g. deploy-2026-12-01",
        )
    return key


def leg_key(key: str, session: str) -> str:
    """A fan-out leg's key: one per session, so a retried fan-out with the
    same key starts no leg twice."""
    return f"{key}/{session}"


def _claim(row: sqlite3.Row) -> Claim:
    return Claim(row["key"], row["session"], row["turn"], row["queued"], row["fingerprint"])


def _same(claim: Claim, mark: str) -> Claim:
    """The claim, when its wake asked what this one asks; else KeyReused."""
    if claim.fingerprint is not None and claim.fingerprint != mark:
        raise KeyReused(claim)
    return claim


def lookup(db: sqlite3.Connection, key: str, session: str, mark: str) -> Claim | None:
    """What `key` names, if anything; KeyElsewhere for another session's key,
    KeyReused when its wake asked something other than `mark`."""
    row = db.execute("SELECT * FROM wake_keys WHERE key = ?", (key,)).fetchone()
    if row is None:
        return None
    if row["session"] != session:
        raise KeyElsewhere(key, row["session"])
    return _same(_claim(row), mark)


def claim(
    db: sqlite3.Connection,
    key: str,
    session: str,
    mark: str,
    *,
    turn: str | None = None,
    queued: str | None = None,
) -> None:
    """Inside the admitting (or enqueueing) transaction: claim `key` for a
    wake that asks `mark` (`fingerprint`), or raise Repeat (or KeyElsewhere,
    or KeyReused for another prompt) when another wake claimed it first."""
    first = ledger.claim_key(db, key, session, fingerprint=mark, turn=turn, queued=queued)
    if first is None:
        return
    if first["session"] != session:
        raise KeyElsewhere(key, first["session"])
    raise Repeat(_same(_claim(first), mark))
