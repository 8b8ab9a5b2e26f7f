"""Output that fits a terminal: a table narrowed column by column, a line
wrapped at a word.

A table too wide for the terminal gives up what matters least first: the
widest column that can still give something takes its next, narrower form
(a path shortened in the middle, `5s ago, ran 2s` as `5s ago`) or goes, and
so on until the rows fit. A column without steps (a name) never shrinks; a
line is cut at the edge only when nothing else can give. A pipe gets every
column whole (`render.table` never calls this for one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

# A step of a column's narrowing: a narrower form of each of its cells, or
# DROP (the column goes), or SQUEEZE (its paths shortened to the room left).
Step = Callable[[str], str] | str
DROP = "drop"
SQUEEZE = "squeeze"
# A squeezed path narrower than this says too little: the column goes instead.
MIN_SQUEEZED = 12

Grid = list[list[str]]


def table_width(grid: Grid) -> int:
    columns = len(grid[0])
    return sum(max(len(r[i]) for r in grid) for i in range(columns)) + 2 * (columns - 1)


def narrow(
    grid: Grid,
    sgrs: Grid,
    width: int,
    steps: Mapping[str, Sequence[Step]],
    shorten: Callable[[str, int], str],
) -> tuple[Grid, Grid]:
    """`grid` (the header row first) and its colours `sgrs`, narrowed to
    `width` by each header's `steps`, widest column first (the rightmost of
    equals). A step that narrows nothing is passed over. `shorten(cell,
    room)` squeezes a path. Returns new lists; the rows fit unless no column
    had a step left."""
    grid = [list(r) for r in grid]
    sgrs = [list(r) for r in sgrs]
    left = {h: list(steps.get(h, ())) for h in grid[0][1:]}
    while table_width(grid) > width:
        # the widest column that still has a step
        candidates = [
            (max(len(r[i]) for r in grid), i) for i, h in enumerate(grid[0]) if left.get(h)
        ]
        if not candidates:
            break
        _, col = max(candidates)
        step = left[grid[0][col]].pop(0)
        if step == DROP:
            for row in (*grid, *sgrs):
                del row[col]
            continue
        if step == SQUEEZE:
            others = table_width(grid) - max(len(r[col]) for r in grid)
            room = width - others
            if room < MIN_SQUEEZED and left[grid[0][col]]:
                continue  # too little room to say much: the next step decides
            for r in grid[1:]:
                r[col] = shorten(r[col], max(room, len(grid[0][col])))
            continue
        assert callable(step)
        for r in grid[1:]:
            r[col] = step(r[col])
    return grid, sgrs


def wrap(line: str, width: int, *, indent: str = "  ") -> list[str]:
    """`line` as lines of at most `width` columns, broken at words (the
    later ones indented); one line when it fits or `width` is 0 (a pipe)."""
    if width <= 0 or len(line) <= width:
        return [line]
    import textwrap

    return textwrap.wrap(
        line,
        width,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [line]


def for_stdout(line: str) -> list[str]:
    """`line` wrapped at a word to the terminal's width when stdout is one;
    whole for a pipe (a script reads one line)."""
    import sys

    if not sys.stdout.isatty():
        return wrap(line, 0)
    import shutil  # only for a terminal: with its archivers it costs a hot command 2 ms

    return wrap(line, shutil.get_terminal_size().columns)


def _first_clause(cell: str) -> str:
    """`5s ago, ran 2s` -> `5s ago`; `missing (spex up), worktree missing` -> `missing`."""
    return re.split(r",| \(", cell, maxsplit=1)[0]


def _no_flags(cell: str) -> str:
    """A TURN cell without its outcome flags: `3kq7 complete rc=0 (denied:Bash)`
    -> `3kq7 complete rc=0 (+1)`; a usage-limit wait as `waiting until 14:05`."""
    cell = cell.replace("waiting for usage reset", "waiting until")
    flags = re.search(r" \(([^()]*)\)$", cell)
    if flags is None:
        return cell
    return f"{cell[: flags.start()]} (+{flags.group(1).count(',') + 1})"


def _state_word(cell: str) -> str:
    """`idle (leased) +2 queued` -> `idle +2`."""
    queued = re.search(r"\+(\d+) queued", cell)
    return cell.split(" ")[0] + (f" +{queued.group(1)}" if queued else "")


def _outcomes_said(cell: str) -> str:
    """`3 legs: 3 complete · 0 failed · 0 skipped · 0 running` -> `3 legs: 3
    complete`: on a narrow terminal the outcomes no leg had go."""
    head, sep, outcomes = cell.partition(": ")
    said = [part for part in outcomes.split(" · ") if not part.startswith("0 ")]
    return f"{head}{sep}{' · '.join(said)}" if sep and said else cell


# `spex wave ls` on a terminal keeps WAVE, STATE and the legs: the retried
# wave and the kind go, the count keeps the outcomes some leg had.
WAVE_STEPS: Mapping[str, Sequence[Step]] = {
    "RETRY OF": (DROP,),
    "LEGS": (_outcomes_said,),
    "KIND": (DROP,),
}


# `spex ls` on a terminal keeps NAME, STATE, the turn and its age: the
# path squeezes then goes, the age loses its run time, the harness goes,
# the pane and state say one word, the turn counts its flags.
LS_STEPS: Mapping[str, Sequence[Step]] = {
    "CWD": (SQUEEZE, DROP),
    "WHEN": (_first_clause,),
    "HARNESS": (DROP,),
    "PANE": (_first_clause, DROP),
    "TURN": (_no_flags,),
    "STATE": (_state_word,),
}
