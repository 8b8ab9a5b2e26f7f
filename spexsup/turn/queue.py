"""Queued prompts: a wake that finds its session busy (or under a lease) is
kept, durably, and launched when the session is free again.

Who launches it: the process that records the running turn's end (the exit
reporter starts `spex internal dequeue NAME`, detached, so the pane's hand-back
never waits), or, if that process died, the next spex command that reads the
session (`reconcile` does the same). Exactly once: the admission that turns
an entry into a turn deletes the entry in its own transaction (`admit(...,
queued=ID)`), so racing launchers admit it once and the rest find it gone.

A prompt's bytes live in `queue/ID.prompt` (0600, written before its row
commits); its options (window, timeout, strict, on-limit, fresh) in the row.
Nothing launches while the session is stopped: `spex stop` pauses its queue,
`spex resume` continues it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from spexsup import dequeuer, ids, lease, ledger
from spexsup.errors import Failed, Refused, SessionBusy, SessionStopped, UnderLease
from spexsup.paths import ensure_private_dir, write_atomic
from spexsup.sessions import get
from spexsup.spex import Spex
from spexsup.turn import keys
from spexsup.turn.admit import Limits, QueueTaken, Verdict
from spexsup.turn.wake import KEY_ATTEMPTS, repeat_verdict, wake

DIR = "queue"
FREE = dequeuer.FREE


class Entry(NamedTuple):
    id: str
    session: str
    seq: int
    created_at: float
    options: dict[str, Any]
    first_line: str | None

    def as_json(self, position: int) -> dict[str, Any]:
        return {
            "schema_version": ids.SCHEMA_VERSION,
            "id": self.id,
            "session": self.session,
            "position": position,
            "first_line": self.first_line,
            "options": self.options,
            "created_at": self.created_at,
            "created_at_iso": ids.iso(self.created_at),
        }


def prompt_path(home: Path, entry: str) -> Path:
    return home / DIR / f"{entry}.prompt"


def _options(window: float | None, fresh: bool, limits: Limits) -> dict[str, Any]:
    out: dict[str, Any] = {"window": window, "fresh": fresh}
    out.update(timeout=limits.timeout, strict=limits.strict, on_limit=limits.on_limit)
    return {k: v for k, v in out.items() if v not in (None, False)}


def enqueue(
    spex: Spex,
    name: str,
    prompt: bytes,
    *,
    window: float | None,
    fresh: bool,
    limits: Limits,
    key: str | None = None,
) -> tuple[str, int]:
    """Keep `prompt` for `name`; (its entry id, its position: 1 is next).
    With `key`, claimed for the entry in the same transaction (`keys.claim`:
    keys.Repeat when another wake claimed it first, and nothing is kept)."""
    get(spex, name)
    entry = "q" + ids.new_id()
    ensure_private_dir(spex.home / DIR, under=spex.home)
    path = prompt_path(spex.home, entry)
    write_atomic(path, prompt)
    first = prompt.split(b"\n", 1)[0].decode(errors="replace")[:200] or None
    options = json.dumps(_options(window, fresh, limits))
    try:
        with spex.store.tx() as db:
            if key is not None:
                keys.claim(db, key, name, queued=entry)
            position = ledger.enqueue(db, entry, name, options, first)
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
    # The id, or a unique prefix of it or of its random part (as turn ids).
    found = [
        e
        for e in entries(spex)
        if e.id.startswith(entry) or e.id.rpartition("-")[2].startswith(entry)
    ]
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


def dequeue(spex: Spex, name: str) -> tuple[str, Verdict] | None:
    """Launch the session's next queued prompt if the session is free: (its
    entry, its verdict), or None when there is none, the session is not free,
    or another launcher took it. A prompt that cannot be admitted at all (its
    session's working directory is gone…) is dropped with the reason in its
    event, and the next one is tried."""
    dequeuer.STARTED.add((str(spex.home), name))  # our own reconciles start no other
    while True:
        found = entries(spex, (name,))
        if not found:
            return None
        head = found[0]
        row = spex.store.db.execute("SELECT state FROM sessions WHERE name = ?", (name,)).fetchone()
        if row is None or row["state"] not in FREE:
            return None
        if lease.in_scope(lease.current(spex.store.db), name) and (
            lease.current(spex.store.db)["state"] != "open"
        ):
            return None
        try:
            prompt = prompt_path(spex.home, head.id).read_bytes()
        except OSError as e:
            with spex.store.tx() as db:
                ledger.drop_queued(
                    db, head.id, name, error=f"its prompt is unreadable: {e.strerror}"
                )
            continue
        options = head.options
        limits = Limits(
            options.get("timeout"), bool(options.get("strict")), options.get("on_limit")
        )
        try:
            verdict = wake(
                spex,
                name,
                prompt,
                window=options.get("window"),
                fresh=bool(options.get("fresh")),
                limits=limits,
                queued=head.id,
            )
        except (QueueTaken, SessionBusy, SessionStopped, UnderLease):
            return None
        except (Failed, Refused) as e:
            # Not admitted: it would fail the same way every time.
            with spex.store.tx() as db:
                if not ledger.drop_queued(db, head.id, name, error=e.line()):
                    return None
            prompt_path(spex.home, head.id).unlink(missing_ok=True)
            continue
        prompt_path(spex.home, head.id).unlink(missing_ok=True)
        return head.id, verdict


def wake_or_queue(
    spex: Spex,
    name: str,
    prompt: bytes,
    *,
    window: float | None,
    fresh: bool,
    force: bool,
    limits: Limits,
    key: str | None = None,
) -> Verdict:
    """`spex wake --queue`: wake now, or keep the prompt while the session is
    busy or leased (verdict `queued`, its position). With `key`, a repeat
    (see `wake`) answers with the first wake's turn or entry."""
    for _ in range(KEY_ATTEMPTS):
        try:
            return wake(
                spex, name, prompt, window=window, fresh=fresh, force=force, limits=limits, key=key
            )
        except (SessionBusy, UnderLease):
            pass
        try:
            entry, position = enqueue(
                spex, name, prompt, window=window, fresh=fresh, limits=limits, key=key
            )
        except keys.Repeat:
            assert key is not None
            answer = repeat_verdict(spex, name, key)
            if answer is not None:
                return answer
            continue  # given back before we read it: try again
        # The turn that made us queue may have ended before the entry committed,
        # with nobody left to launch it: try once ourselves.
        launched = dequeue(spex, name)
        if launched is not None and launched[0] == entry:
            return launched[1]._replace(key=key)
        place = positions(entries(spex, (name,))).get(entry, position)
        return Verdict(name, None, "queued", queued=entry, position=place, key=key)
    raise Failed(f"key {key!r} was claimed and given back {KEY_ATTEMPTS} times", hint="retry")
