"""Usage and cost transitions (issue 26): one row per attempt and model, and
the per-day sums `spex cost` reads, written with the turn's end."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from spexsup.usage import BAD_USAGE, KINDS, token_count

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Mapping, Sequence

# --- usage ----------------------------------------------------------------------


def record_usage(
    db: sqlite3.Connection,
    session: str,
    turn: str,
    *,
    harness: str | None,
    runs: Sequence[Mapping[str, Any]],
) -> bool:
    """A turn's usage rows (see `store.USAGE_MIGRATION`), in the transaction
    that records its end: one per model per attempt (`runs`, each with
    `attempt`, `cause`, `exact`, `parts` [(model, counts or None, reported
    cost or None)], `running`, `resumed`, `conversation`). Written once per
    turn: a second report of the same end finds them and writes nothing
    (False). A wave leg's rows name its wave, so a wave's spend is one
    indexed sum.

    A `running` attempt (codex) counted the conversation's running total:
    its own share is that less the last total recorded for the conversation;
    with none recorded, a resumed one's share is unknown (NULL, not exact).

    A field that held no usage (a run's `bad`, see `spexsup.adapters.meter`) becomes
    the turn's flag `bad-usage:FIELD`, added to those its end recorded."""
    if db.execute("SELECT 1 FROM usage WHERE turn = ? LIMIT 1", (turn,)).fetchone():
        return False
    found = db.execute("SELECT wave FROM wave_turns WHERE turn = ?", (turn,)).fetchone()
    wave = found[0] if found else None
    now = time.time()
    day = time.strftime("%Y-%m-%d", time.localtime(now))
    seen: set[str | None] = set()
    for run in runs:
        conversation = run.get("conversation")
        exact = bool(run.get("exact"))
        parts = list(run.get("parts") or ()) or [(None, None, None)]
        running = None
        if run.get("running") and len(parts) == 1 and parts[0][1] is not None:
            model, total, cost = parts[0]
            running = json.dumps([int(n) for n in total])
            share: list[int] | None = [int(n) for n in total]
            last = None
            if conversation:
                last = db.execute(
                    "SELECT running FROM usage WHERE conversation = ? AND running IS NOT NULL"
                    " ORDER BY id DESC LIMIT 1",
                    (conversation,),
                ).fetchone()
            if last is not None:
                before = _running(last[0])
                share = (
                    None if before is None else [a - b for a, b in zip(total, before, strict=True)]
                )
                if share is None or min(share) < 0:  # not the same running total: a new count
                    share, exact = None, False
            elif run.get("resumed"):
                share, exact = None, False
            parts = [(model, share, cost)]
        for model, counts, cost in parts:
            tokens = list(counts) if counts is not None else [None] * 4
            firsts = (int(not seen), int(model not in seen))
            seen.add(model)
            known = counts is not None
            flags = (int(cost is not None), int(known), int(exact and known))
            db.execute(
                "INSERT INTO usage (turn, attempt, session, harness, wave, model, cause,"
                " input, output, cache_read, cache_write, cost, exact, conversation, running,"
                " turn_first, model_first, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    turn,
                    int(run.get("attempt") or 1),
                    session,
                    harness,
                    wave,
                    model,
                    run.get("cause"),
                    *tokens,
                    cost,
                    int(exact and counts is not None),
                    conversation,
                    running,
                    *firsts,
                    now,
                ),
            )
            keys = (day, session, harness or "", model or "", wave or "", *flags)
            db.execute(
                "INSERT INTO usage_days (day, session, harness, model, wave, priced, known,"
                " exact, rows, turns, model_turns, input, output, cache_read, cache_write, cost)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT DO UPDATE SET rows = rows + 1, turns = turns + excluded.turns,"
                " model_turns = model_turns + excluded.model_turns,"
                " input = input + excluded.input, output = output + excluded.output,"
                " cache_read = cache_read + excluded.cache_read,"
                " cache_write = cache_write + excluded.cache_write, cost = cost + excluded.cost",
                (*keys, *firsts, *[int(n or 0) for n in tokens], float(cost or 0.0)),
            )
    bad = [f"{BAD_USAGE}{field}" for run in runs for field in run.get("bad") or ()]
    if bad:
        row = db.execute("SELECT flags FROM turns WHERE id = ?", (turn,)).fetchone()
        marked: list[str] = list(json.loads(row[0] or "[]")) if row is not None else []
        marked += [flag for flag in dict.fromkeys(bad) if flag not in marked]
        db.execute("UPDATE turns SET flags = ? WHERE id = ?", (json.dumps(marked), turn))
    return True


def _running(text: str) -> list[int] | None:
    """A recorded running total, or None when it is not four token counts
    (written by an older spex from a number that was no usage)."""
    try:
        total = json.loads(text)
    except ValueError:
        return None
    if not isinstance(total, list) or len(total) != len(KINDS):
        return None
    counts = [token_count(n) for n in total]
    return None if None in counts else [int(n or 0) for n in counts]


def rebuild_usage_days(db: sqlite3.Connection) -> None:
    """`usage_days` summed anew from the usage rows (each row's local day as
    of now): what `record_usage` keeps up row by row, for a repair or a
    table filled otherwise (the benches)."""
    db.execute("DELETE FROM usage_days")
    db.execute(
        "INSERT INTO usage_days (day, session, harness, model, wave, priced, known, exact,"
        " rows, turns, model_turns, input, output, cache_read, cache_write, cost)"
        " SELECT date(at, 'unixepoch', 'localtime'), session, coalesce(harness, ''),"
        " coalesce(model, ''), coalesce(wave, ''), cost IS NOT NULL, input IS NOT NULL,"
        " exact, count(*), sum(turn_first), sum(model_first), coalesce(sum(input), 0),"
        " coalesce(sum(output), 0), coalesce(sum(cache_read), 0),"
        " coalesce(sum(cache_write), 0), coalesce(sum(cost), 0.0)"
        " FROM usage GROUP BY 1, 2, 3, 4, 5, 6, 7, 8"
    )


def prune_usage(
    db: sqlite3.Connection,
    *,
    day: str,
    start: float,
    sessions: Sequence[str] | None,
    limit: int,
) -> int:
    """Retention's cut: the per-day sums of the local days before `day`, and
    at most `limit` usage rows recorded before `start` (that day's first
    second), of `sessions` only when given. Returns the rows deleted."""
    only = f" AND session IN ({','.join('?' * len(sessions))})" if sessions is not None else ""
    db.execute(f"DELETE FROM usage_days WHERE day < ?{only}", [day, *(sessions or ())])
    cur = db.execute(
        f"DELETE FROM usage WHERE id IN (SELECT id FROM usage WHERE at < ?{only} LIMIT ?)",
        [start, *(sessions or ()), int(limit)],
    )
    return cur.rowcount
