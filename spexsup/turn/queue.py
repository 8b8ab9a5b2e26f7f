"""Queued prompts: a wake that finds its session busy (or under a lease) is
kept, durably, and launched when the session is free again.

Who launches it: the process that records the running turn's end (the exit
reporter starts `spex internal dequeue NAME`, detached, so the pane's hand-back
never waits), or, if that process died, the next spex command that reads the
session (`reconcile` does the same). Exactly once: the admission that turns
an entry into a turn deletes the entry in its own transaction (`admit(...,
queued=ID)`), so racing launchers admit it once and the rest find it gone.

A prompt's bytes live in `queue/ID.prompt` (0600, written before its row
commits); its options in the row: the JSON form of its `WakeRequest`
(`queue_options`, read back by `WakeRequest.from_queue`).
Nothing launches while the session is stopped: `spex stop` pauses its queue,
`spex resume` continues it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from spexsup import faults, ids, states
from spexsup.adapters import dequeuer
from spexsup.adapters.watch import DirWatch
from spexsup.core import wavedoc
from spexsup.core.sessions import get
from spexsup.core.spex import Spex
from spexsup.errors import (
    AtLimit,
    Failed,
    Refused,
    SessionBusy,
    SessionStopped,
    SpexError,
    UnderLease,
)
from spexsup.paths import ensure_private_dir, write_atomic
from spexsup.record import Record
from spexsup.state import lease, ledger
from spexsup.states import ACTIVE, COMPLETE
from spexsup.turn import keys
from spexsup.turn.admit import QueueTaken, Verdict, new_turn_id
from spexsup.turn.request import WakeRequest, Wave
from spexsup.turn.wake import STORE_FILES, start

DIR = "queue"
FREE = dequeuer.FREE


class Entry(Record):
    id: str
    session: str
    seq: int
    created_at: float
    options: dict[str, Any]
    first_line: str | None
    after_turn: str | None = None

    @property
    def wave(self) -> Wave | None:
        """The fan-out this prompt is a leg of, with its running limit."""
        return self.request(b"").wave

    def request(self, prompt: bytes) -> WakeRequest:
        """The wake this entry launches, with `prompt` (its file's bytes)."""
        return WakeRequest.from_queue(self.session, prompt, self.options, self.id)

    def as_json(self, position: int) -> dict[str, Any]:
        return {
            "schema_version": ids.SCHEMA_VERSION,
            "id": self.id,
            "session": self.session,
            "position": position,
            "first_line": self.first_line,
            "options": self.options,
            "after_turn": self.after_turn,
            "created_at": self.created_at,
            "created_at_iso": ids.iso(self.created_at),
        }


def prompt_path(home: Path, entry: str) -> Path:
    return home / DIR / f"{entry}.prompt"


def enqueue(spex: Spex, request: WakeRequest, *, after_turn: str | None = None) -> tuple[str, int]:
    """Keep `request` (its prompt, and its options as the row's JSON:
    `WakeRequest.queue_options`) for its session (with `after_turn`, the
    turn of `request.after` it waits for: until that turn ends); (its entry
    id, its position: 1 is next). With `request.key`, claimed for the entry in the same transaction
    (`keys.claim`: keys.Repeat when another wake claimed it first, and
    nothing is kept). A fan-out leg keeps its wave (and the wave's running
    limit and budget) for its launch."""
    name, prompt = request.name, request.prompt
    get(spex, name)
    entry = "q" + ids.new_id()
    ensure_private_dir(spex.home / DIR, under=spex.home)
    path = prompt_path(spex.home, entry)
    write_atomic(path, prompt)
    first = prompt.split(b"\n", 1)[0].decode(errors="replace")[:200] or None
    options = json.dumps(request.queue_options())
    try:
        with spex.store.tx() as db:
            if request.key is not None:
                mark = keys.fingerprint(prompt, request.fresh, tuple(request.limits))
                keys.claim(db, request.key, name, mark, queued=entry)
            position = ledger.enqueue(db, entry, name, options, first, after_turn)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return entry, position


def entries(spex: Spex, names: tuple[str, ...] = ()) -> list[Entry]:
    """The queued prompts, oldest first (of `names` only, if given)."""
    rows = spex.store.db.execute("SELECT * FROM queue ORDER BY seq").fetchall()
    out = [
        Entry(
            r["id"],
            r["session"],
            r["seq"],
            r["created_at"],
            json.loads(r["options"]),
            r["first_line"],
            r["after_turn"],
        )
        for r in rows
    ]
    return [e for e in out if not names or e.session in names]


def positions(found: list[Entry]) -> dict[str, int]:
    """Each entry's place in its session's queue (1: next)."""
    seen: dict[str, int] = {}
    out = {}
    for e in found:
        seen[e.session] = seen.get(e.session, 0) + 1
        out[e.id] = seen[e.session]
    return out


def remove(spex: Spex, entry: str, *, error: str | None = None) -> Entry:
    """Drop one queued prompt; Refused if there is none by that id (or prefix)."""
    # The id, or a unique prefix of any form it is printed in (ids.matches).
    every = entries(spex)
    found = [e for e in every if e.id == entry] or [e for e in every if ids.matches(e.id, entry)]
    if len(found) != 1:
        why = "no queued prompt" if not found else "more than one queued prompt starts with"
        raise Refused(f"{why} {entry!r}", hint="see spex queue")
    (e,) = found
    with spex.store.tx() as db:
        ledger.drop_queued(db, e.id, e.session, error=error)
    prompt_path(spex.home, e.id).unlink(missing_ok=True)
    return e


def clear(spex: Spex, name: str) -> list[Entry]:
    """Drop every queued prompt of `name`."""
    gone = entries(spex, (name,))
    for e in gone:
        with spex.store.tx() as db:
            ledger.drop_queued(db, e.id, e.session)
        prompt_path(spex.home, e.id).unlink(missing_ok=True)
    return gone


def dequeue(spex: Spex, name: str, *, keep: bool = False) -> dict[str, Verdict]:
    """Launch the session's next queued prompt if the session is free; what
    this call did, by entry: the launched one's verdict, and a `skipped`
    verdict for each one whose `--after` turn ended otherwise than it asked
    (then the next is tried). Nothing when there is none, the session is not
    free, its next waits for a turn still running, or another launcher took
    it. A prompt that cannot be admitted at all (its session's working
    directory is gone…) is dropped with the reason in its event.

    An entry that ended without a turn (skipped, dropped) used no running
    slot: the prompts of other sessions that wait for one are handed to
    their launchers as this call returns (else nobody would: no turn ends).

    `keep` (the detached launcher, `spex internal dequeue`): when the turn
    it launched ends while it still confirms it (the end recorded in this
    process), it launches the next prompt itself, as the launcher the end
    would have started: no second Python start between a short turn and the
    next. Should it stop before that launch, it starts that launcher."""
    key = (str(spex.home), name)
    dequeuer.STARTED.add(key)  # our own reconciles start no other
    after = os.environ.pop(dequeuer.AFTER_ENV, None)
    if after is not None:
        _await_end(spex, after)
    done: dict[str, Verdict] = {}
    freed = [False]
    if keep:
        dequeuer.KEPT[key] = False
    try:
        return _take(spex, name, done, freed, keep)
    finally:
        if keep and dequeuer.KEPT.pop(key, False):
            dequeuer.start(spex.home, name)  # handed to us, and we stopped short of it
        if freed[0]:
            dequeuer.start_waiting(spex.store.db, spex.home)


# How long a launcher started before its turn's end is recorded waits for it
# (`dequeuer.start_early`); past it, it looks once and leaves the rest to
# whoever records the end.
AFTER_WAIT = 60.0


def _await_end(spex: Spex, turn: str) -> None:
    """Until `turn` is no longer starting or running (woken by the store's
    commits), at most AFTER_WAIT."""
    deadline = time.monotonic() + AFTER_WAIT
    with DirWatch([spex.home], names=STORE_FILES) as watch:
        while (left := deadline - time.monotonic()) > 0:
            row = spex.store.db.execute("SELECT state FROM turns WHERE id = ?", (turn,)).fetchone()
            if row is None or row["state"] not in ACTIVE:
                return
            watch.wait(left)


def _take(
    spex: Spex, name: str, done: dict[str, Verdict], freed: list[bool], keep: bool = False
) -> dict[str, Verdict]:
    """`dequeue`'s loop; `freed[0]` is set when an entry ends without a turn."""
    key = (str(spex.home), name)
    while True:
        if keep:
            dequeuer.KEPT[key] = False  # taken: this pass looks at the queue afresh
        found = entries(spex, (name,))
        if not found:
            return done
        head = found[0]
        row = spex.store.db.execute("SELECT state FROM sessions WHERE name = ?", (name,)).fetchone()
        if row is None or row["state"] not in FREE:
            return done
        if lease.in_scope(lease.current(spex.store.db), name) and (
            lease.current(spex.store.db)["state"] != "open"
        ):
            return done
        if head.after_turn is not None:
            skipped = _after(spex, head)
            if skipped is None:
                return done  # its turn still runs: that turn's end starts us again
            if isinstance(skipped, Verdict):
                done[head.id] = skipped
                freed[0] = True
                _tell_wave(spex, head, skipped)
                continue
        if head.wave is not None and head.wave.budget is not None:
            why = wavedoc.over_budget(spex, head.wave.id, head.wave.budget)
            if why is not None:
                turn = new_turn_id()
                with spex.store.tx() as db:
                    if not ledger.skip_queued(
                        db, head.id, name, turn, why, head.wave.id, cause=states.Cause.BUDGET
                    ):
                        return done
                prompt_path(spex.home, head.id).unlink(missing_ok=True)
                done[head.id] = Verdict(name, turn, states.Verdict.SKIPPED, error=why)
                freed[0] = True
                _tell_wave(spex, head, done[head.id])
                continue
        try:
            prompt = prompt_path(spex.home, head.id).read_bytes()
        except OSError as e:
            why = f"its prompt is unreadable: {e.strerror}"
            with spex.store.tx() as db:
                ledger.drop_queued(db, head.id, name, error=why)
            freed[0] = True
            _tell_wave(spex, head, Verdict(name, None, states.Verdict.FAILED, error=why))
            continue
        try:
            verdict = start(spex, head.request(prompt))
        except (QueueTaken, SessionBusy, SessionStopped, UnderLease, AtLimit):
            return done  # a running limit: the end of a running turn starts us again
        except (Failed, Refused) as e:
            # Not admitted: it would fail the same way every time.
            with spex.store.tx() as db:
                if not ledger.drop_queued(db, head.id, name, error=e.line()):
                    return done
            prompt_path(spex.home, head.id).unlink(missing_ok=True)
            freed[0] = True
            _tell_wave(spex, head, Verdict(name, None, states.Verdict.FAILED, error=e.line()))
            continue
        prompt_path(spex.home, head.id).unlink(missing_ok=True)
        done[head.id] = verdict
        faults.at(faults.Fault.LAUNCHER_DIES_BEFORE_ITS_WORD)
        _tell_wave(spex, head, verdict)
        if not (keep and dequeuer.KEPT.get(key)):
            return done


def _tell_wave(spex: Spex, entry: Entry, verdict: Verdict) -> None:
    """A queued fan-out leg has launched (or will never): its verdict in its
    wave's document. Best effort: a wave document finds its legs' turns by
    itself (`wavedoc.merge_turns`), this only adds what the launch said."""
    if entry.wave is None:
        return

    def change(doc: wavedoc.Doc) -> None:
        for leg in doc["legs"]:
            if leg["session"] == entry.session and leg.get("queued") == entry.id:
                leg.update(
                    turn=verdict.turn or leg["turn"],
                    verdict=verdict.verdict,
                    rc=verdict.rc,
                    error=verdict.error,
                    flags=list(verdict.flags),
                )

    with contextlib.suppress(SpexError):  # the wave was pruned: nobody reads its legs
        wavedoc.mutate(spex, entry.wave.id, change)


def _after(spex: Spex, head: Entry) -> Verdict | bool | None:
    """An entry queued `--after` a turn: None while that turn runs; False when
    it ended as asked (launch the entry); else the entry ends `skipped` here,
    and its verdict."""
    row = spex.store.db.execute(
        "SELECT state FROM turns WHERE id = ?", (head.after_turn,)
    ).fetchone()
    if row is not None and row["state"] in ACTIVE:
        return None
    state = row["state"] if row is not None else None
    if state == COMPLETE or (head.options.get("after_any") and state is not None):
        return False
    other = head.options.get("after", "?")
    why = f"after: {other} ended {state}" if state else f"after: {other}'s turn is gone"
    turn = new_turn_id()
    wave = head.wave.id if head.wave is not None else None
    with spex.store.tx() as db:
        if not ledger.skip_queued(db, head.id, head.session, turn, why, wave):
            return None  # another launcher got there first
    prompt_path(spex.home, head.id).unlink(missing_ok=True)
    return Verdict(head.session, turn, states.Verdict.SKIPPED, error=why)
