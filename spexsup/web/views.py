"""What the pages show, read through the functions the CLI's commands call.

Each view is the document a `--json` command builds (or the lines its text
output prints), gathered for one template: the list is `spex top`'s board
(`spex ls --json` plus flags, spend and last output line) with `spex top`'s
cells, a session is `spex show`'s lines, its log is `spex log --pretty`'s
text, the waves are `spex wave ls` / `spex wave show`'s. Nothing is decided here.

Reads run in the server's worker threads; each thread keeps one `Spex`
(SQLite connections belong to the thread that opened them).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from spexsup import ids, states
from spexsup.core import sessions
from spexsup.core.spex import Spex
from spexsup.errors import Refused
from spexsup.states import ACTIVE

# How much of a turn's output a session page shows (`spex log --pretty --tail`).
LOG_TAIL = 400

_local = threading.local()


def spex_for(home: Path) -> Spex:
    """This thread's handle on the state home (opened on first use)."""
    spex: Spex | None = getattr(_local, "spex", None)
    if spex is None or spex.home != home:
        spex = Spex.open(home)
        _local.spex = spex
    return spex


def last_event(spex: Spex) -> int:
    """The newest event id: a page rendered now has seen every event up to it,
    so its live stream starts after it (nothing is missed in between)."""
    from spexsup.state import events

    return events.last_id(spex.store.db)


def board(spex: Spex, wanted: str = "", pattern: str = "") -> dict[str, Any]:
    """The list page: `spex top`'s rows and cells in triage order (what needs
    a person first, `present.triage`), those of need `wanted` (or all) whose
    name matches `pattern` (as `spex top`'s filter reads it), and the
    header's counts of the rows shown."""
    from spexsup.conductors.top import Board
    from spexsup.present import triage
    from spexsup.present.board import age_anchor, top_cells
    from spexsup.present.render import short_id

    b = Board(spex, pattern=pattern)
    b.refresh()
    now = time.time()
    rows: list[dict[str, Any]] = []
    for r in b.shown:
        need = triage.need(r.state, r.turn, r.flags)
        if not triage.chosen(need, wanted):
            continue
        name, state, turn, age, cost, flags, last = top_cells(r, now)
        anchor = age_anchor(r.turn)
        rows.append(
            {
                "name": name,
                "state": state,
                "need": str(need),
                "rank": triage.rank(need),
                "turn": turn,
                "turn_id": short_id(r.turn["id"]) if r.turn else None,
                "age": age,
                "age_at": f"{anchor[0]:.3f}" if anchor else "",
                "age_then": anchor[1] if anchor else "",
                "cost": cost,
                "flags": flags,
                "last": last,
                "active": r.active,
            }
        )
    rows.sort(key=lambda row: row["rank"])  # stable: by name within a need
    counts = {
        "total": len(b.rows),
        "shown": len(rows),
        "attention": sum(row["need"] in triage.ATTENTION for row in rows),
        "running": sum(row["active"] for row in rows),
        "failed": sum(row["state"] == states.SessionState.FAILED for row in rows),
        "stopped": sum(row["state"] == states.SessionState.STOPPED for row in rows),
    }
    return {
        "rows": rows,
        "counts": counts,
        "wanted": wanted,
        "pattern": pattern,
        "filters": triage.FILTERS,
    }


def session(spex: Spex, name: str, turn: str | None = None) -> dict[str, Any]:
    """A session page: `spex show NAME`'s lines and its document, the turn shown
    (the current or last one, or `turn`), and that turn's `spex log --pretty`."""
    from spexsup.present.render import show_lines
    from spexsup.turn.read import describe

    ids.validate_name(name)
    (row,) = describe(spex, [name], turns=10, worktree_status=False)
    shown = (
        ids.resolve_turn(spex.store.db, name, turn) if turn else row["turn"] and row["turn"]["id"]
    )
    turn_doc = None
    if shown:
        turn_doc = next((t for t in row.get("turns") or () if t["id"] == shown), None)
        if turn_doc is None:
            from spexsup.turn.read import load_turn

            turn_doc = load_turn(spex, shown)
    return {
        "name": name,
        "doc": row,
        "lines": show_lines(row),
        "turn": turn_doc,
        "active": bool(turn_doc and turn_doc["state"] in ACTIVE),
        "log": log_text(spex, name, shown, tail=LOG_TAIL) if shown else "",
        "stopped": row["state"] == states.SessionState.STOPPED,
        "queued": queued(spex, name),
    }


def queued(spex: Spex, name: str) -> list[dict[str, Any]]:
    """`spex queue ls NAME`'s rows: id, position, age, first line."""
    from spexsup.pane.pretty import one_line as clean
    from spexsup.present.render import age
    from spexsup.turn.queue import entries, positions

    places = positions(entries(spex))
    now = time.time()
    return [
        {
            "id": e.id,
            "position": places[e.id],
            "age": age(now - e.created_at),
            "prompt": clean(e.first_line or ""),
        }
        for e in entries(spex, (name,))
    ]


def names(spex: Spex) -> list[dict[str, str]]:
    """Every session's name and state, by name (a fan-out's choices)."""
    return [{"name": s.name, "state": str(s.state)} for s in sessions.all_sessions(spex)]


def pretty_chunks(
    spex: Spex,
    name: str,
    turn: str,
    *,
    follow: bool,
    tail: int | None,
    stop: threading.Event | None = None,
) -> Any:
    """`spex log NAME --turn TURN --pretty` as text chunks (no colour, no
    escapes), in the order the turn wrote them; with `follow`, until it ends
    or `stop` is set."""
    from spexsup.pane import pretty, turndir
    from spexsup.turn.read import log

    chunks = log(spex, name, turn=turn, follow=follow, tail=tail, stop=stop)
    parser = turndir.meta(turndir.path(spex.home, name, turn)).get("outcome")
    rendered = pretty.render(chunks, parser if isinstance(parser, str) else None, color=False)
    screen = pretty.TerminalText(colours=False)
    for chunk in rendered:
        text = screen.feed(chunk)
        if text:
            yield text.decode("utf-8", "replace")
    rest = screen.feed(b"", final=True)
    if rest:
        yield rest.decode("utf-8", "replace")


def log_text(spex: Spex, name: str, turn: str, *, tail: int | None) -> str:
    return "".join(pretty_chunks(spex, name, turn, follow=False, tail=tail))


def turn_state(spex: Spex, name: str, turn: str) -> str:
    """A turn's state now; Refused for a turn the session does not have."""
    sessions.get(spex, name)
    row = spex.store.db.execute(
        "SELECT state FROM turns WHERE id = ? AND session = ?", (turn, name)
    ).fetchone()
    if row is None:
        raise Refused(f"session {name!r} has no turn {turn!r}", hint=f"spex show {name}")
    return str(row["state"])


def wave_list(spex: Spex) -> list[dict[str, Any]]:
    """`spex wave ls`: this host's waves and the fleet waves, newest first, each
    with the LEGS cell `spex wave ls` prints."""
    from spexsup.adapters import fleet
    from spexsup.conductors import waves
    from spexsup.present.progress import counts_line

    docs = [{**d, "kind": d.get("kind", "local")} for d in waves.list_waves(spex)]
    docs += [{**d, "kind": "fleet"} for d in fleet.list_docs(spex.home)]
    docs.sort(key=lambda d: float(d.get("created_at") or 0), reverse=True)
    return [
        {
            "id": d["id"],
            "kind": d["kind"],
            "state": d["state"],
            "legs": counts_line(d),
            "retry_of": d.get("retry_of") or "-",
        }
        for d in docs
    ]


def wave(spex: Spex, ident: str) -> dict[str, Any]:
    """`spex wave WAVE`: its summary line and one line per leg (a fleet wave:
    each leg named HOST:NAME, linked to nothing here)."""
    from spexsup.present.progress import leg_line, story_lines, summary

    if ident.startswith("fleet-"):
        from spexsup.adapters import fleet

        doc = fleet.load(spex.home, fleet.resolve(spex.home, ident))
        legs = [
            {
                "session": None,
                "line": leg_line({**leg, "session": f"{leg['host']}:{leg['session']}"}),
            }
            for leg in doc["legs"]
        ]
        return {
            "id": doc["id"],
            "summary": summary({**doc, "kind": "fleet"}),
            "story": [],
            "legs": legs,
            "prompt": doc.get("prompt_head", ""),
            "sessions": [],
        }
    from spexsup.conductors import waves
    from spexsup.present.spend import with_spend

    doc = with_spend(spex, waves.load(spex, ids.resolve_wave(spex.store.db, ident)))
    # Retried: each leg's last attempt across the retries (DESIGN §31).
    doc["combined"] = waves.story(spex, doc)
    return {
        "id": doc["id"],
        "summary": summary(doc),
        "story": story_lines(doc) if doc["combined"] is not None else [],
        "prompt": doc.get("prompt_head", ""),
        "legs": [{"session": leg["session"], "line": leg_line(leg)} for leg in doc["legs"]],
        "sessions": [leg["session"] for leg in doc["legs"]],
    }
