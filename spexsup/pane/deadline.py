"""`python -m spexsup.pane.deadline TURN_DIR WRAPPER_PID GRACE`: end a turn that ran
past its time limit.

Started by the wrapper's watchdog (a child of the wrapper, so inside the
turn's own process tree): it ends every process of the turn except the
wrapper and its own ancestors, SIGTERM first and SIGKILL after the grace,
the way `spex stop` does. The wrapper then reports rc 124 (`timed-out`).
What survived SIGKILL (a process in uninterruptible sleep, a frozen one) is
left in the turn dir's `survivors` file, which the exit reporter records on
the turn (`spex show`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from spexsup.pane import turndir


def _ancestors(pid: int) -> set[int]:
    from spexsup.adapters.procs import parent_pid

    seen = {pid}
    while (parent := parent_pid(pid)) not in (None, 0, 1) and parent not in seen:
        assert parent is not None
        seen.add(parent)
        pid = parent
    return seen


def end_turn(directory: Path, wrapper: int, grace: float) -> list[int]:
    """Reap the turn's processes; the pids that survived SIGKILL."""
    import os

    from spexsup.adapters.procs import reap, turn_processes

    spare = _ancestors(os.getpid())
    turn = directory.name

    def find() -> list:  # type: ignore[type-arg]
        return [p for p in turn_processes(turn, wrapper) if p.pid not in spare]

    return [p.pid for p in reap(find, grace)]


def main(argv: list[str]) -> int:
    try:
        directory, wrapper, grace = Path(argv[0]), int(argv[1]), float(argv[2])
    except (IndexError, ValueError):
        print(
            "spex: usage: python -m spexsup.pane.deadline TURN_DIR WRAPPER_PID GRACE",
            file=sys.stderr,
        )
        return 2
    survivors = end_turn(directory, wrapper, grace)
    if survivors:
        try:
            turndir.write_survivors(directory, survivors)
        except OSError as e:
            print(f"spex: cannot record the survivors in {directory}: {e}", file=sys.stderr)
        print(f"spex: process(es) {survivors} survived SIGKILL", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
