"""spex top's board, piped as a table and drawn on the screen
(cli.top_screen) and the web page: its headers and each row's cells."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spexsup.pane.pretty import one_line as clean
from spexsup.present.render import span

if TYPE_CHECKING:
    from spexsup.conductors.top import Row

TOP_HEADERS = ("NAME", "STATE", "TURN", "AGE", "COST", "FLAGS", "LAST OUTPUT")


def age_anchor(turn: dict[str, Any] | None) -> tuple[float, str] | None:
    """What a board's age counts from, and what follows it: a turn still
    going, its start and ""; one that ended, its end and " ago"."""
    if turn is None:
        return None
    if turn["ended_at"] is None:
        return float(turn["started_at"]), ""
    return float(turn["ended_at"]), " ago"


def top_age(row: Row, now: float) -> str:
    """`12s` for a turn still going (since its start), `3m ago` since one ended."""
    return age_text(age_anchor(row.turn), now)


def age_text(anchor: tuple[float, str] | None, now: float) -> str:
    """`top_age` from the turn's `age_anchor`."""
    return "-" if anchor is None else span(max(0.0, now - anchor[0])) + anchor[1]


def top_cells(row: Row, now: float) -> list[str]:
    turn = "-"
    if row.turn is not None:
        rc = "" if row.turn["rc"] is None else f" rc={row.turn['rc']}"
        turn = f"{row.turn['state']}{rc}"
    # What agents said (the last output line, flags) reaches the screen printable.
    return [
        clean(c)
        for c in (
            row.name,
            row.state,
            turn,
            top_age(row, now),
            row.cost,
            ",".join(row.flags) or "-",
            row.last,
        )
    ]
