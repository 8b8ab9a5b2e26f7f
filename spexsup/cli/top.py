"""`spex top`: every session, live (the screen itself is `cli.top_screen`)."""

import sys
import time

from spexsup.cli import decl
from spexsup.cli.decl import command, open_spex
from spexsup.cli.params import ColorOpt, JsonOpt


@command()
def top(ctx: decl.Context, color: ColorOpt = "auto", as_json: JsonOpt = False) -> None:
    """Watch every session live: state, turn age, last output line, flags.

    \b
    Keys: up/down (or j/k) select; a or Enter attach (a popup inside tmux);
    l the turn's log in a pager; s stop; r resume; w wake with a prompt;
    / filter by name (a glob as in spex ls, or text the name contains;
    Enter applies, Esc clears); o order by name or by state (failed first,
    then running, stopped, idle); ? every key; q quit. It redraws when a
    turn starts, writes output or ends, and on every transition the event
    log records; idle, it uses no CPU. The terminal keeps its own colours;
    the states are coloured unless NO_COLOR is set or --color never.
    Not on a terminal (a pipe), it prints the table once and exits; --json
    prints the sessions as `spex ls --json` does, each with its `flags` and
    `last_output`.

    \b
    Examples:
      spex top
      spex top | grep failed
      spex top --json | jq -r '.[] | "\\(.name): \\(.last_output)"'
    """
    from spexsup.conductors.top import Board
    from spexsup.present.board import TOP_HEADERS, top_cells
    from spexsup.present.render import print_json, state_cell, table, use_color

    colored = use_color(color)
    spex = open_spex(ctx)
    board = Board(spex)
    board.refresh()
    if as_json:
        print_json([{**r.entry, "flags": r.flags, "last_output": r.last} for r in board.rows])
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        if not board.rows:
            decl.echo("no sessions (create one with: spex new NAME --harness HARNESS)")
            return
        now = time.time()
        rows = []
        for r in board.rows:
            cells = top_cells(r, now)
            cells[1] = state_cell(cells[1], r.state, colored)
            rows.append(cells)
        table(TOP_HEADERS, rows, tty=False)
        return
    from spexsup.cli import top_screen

    top_screen.run(board, color=colored)
