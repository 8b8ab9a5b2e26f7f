"""`spex top`: every session, live (the screen itself is `cli.top_screen`)."""

import sys
import time
from typing import TYPE_CHECKING

import typer

from spexsup.cli.app import app, open_spex
from spexsup.cli.params import JsonOpt
from spexsup.cli.render import span

if TYPE_CHECKING:
    from spexsup.top import Row

HEADERS = ("NAME", "STATE", "TURN", "AGE", "FLAGS", "LAST OUTPUT")


def age(row: "Row", now: float) -> str:
    """`12s` for a turn still going (since its start), `3m ago` since one ended."""
    if row.turn is None:
        return "-"
    if row.turn["ended_at"] is None:
        return span(max(0.0, now - row.turn["started_at"]))
    return span(max(0.0, now - row.turn["ended_at"])) + " ago"


def cells(row: "Row", now: float) -> list[str]:
    turn = "-"
    if row.turn is not None:
        rc = "" if row.turn["rc"] is None else f" rc={row.turn['rc']}"
        turn = f"{row.turn['state']}{rc}"
    from spexsup.pane.pretty import one_line

    # What agents said (the last output line, flags) reaches the screen printable.
    return [
        one_line(c)
        for c in (row.name, row.state, turn, age(row, now), ",".join(row.flags) or "-", row.last)
    ]


@app.command()
def top(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Watch every session live: state, turn age, last output line, flags.

    \b
    Keys: up/down (or j/k) select; a or Enter attach (a popup inside tmux);
    l the turn's log in a pager; s stop; r resume; w wake with a prompt;
    q quit. It redraws when a turn starts, writes output or ends, and on
    every transition the event log records; idle, it uses no CPU.
    Not on a terminal (a pipe), it prints the table once and exits; --json
    prints the sessions as `spex ls --json` does, each with its `flags` and
    `last_output`.

    \b
    Examples:
      spex top
      spex top | grep error
      spex top --json | jq -r '.[] | "\\(.name): \\(.last_output)"'
    """
    from spexsup.cli.render import print_json, table
    from spexsup.top import Board

    spex = open_spex(ctx)
    board = Board(spex)
    board.refresh()
    if as_json:
        print_json([{**r.entry, "flags": r.flags, "last_output": r.last} for r in board.rows])
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        if not board.rows:
            typer.echo("no sessions (create one with: spex new NAME --harness HARNESS)")
            return
        now = time.time()
        table(HEADERS, [cells(r, now) for r in board.rows], tty=False)
        return
    from spexsup.cli import top_screen

    top_screen.run(board)
