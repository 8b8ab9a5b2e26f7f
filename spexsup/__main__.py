"""spex's start: the `spex` command and `python -m spexsup` (the exit reporter)."""

from __future__ import annotations

import gc

# Sized so that a command's start-up never triggers a collection (see main).
START_THRESHOLD = 50_000


def main() -> None:
    # A start makes some 13 000 container objects (its modules' functions,
    # classes and dicts, a listing's rows), freed by reference counting. The
    # collector's default, a pass every 700 allocations, scanned them a dozen
    # times for cycles that hardly exist: 2-4 ms of a 30 ms `spex ls` (issue
    # 40). A pass every 50 000 keeps a long runner (serve, top, a 1 000-leg
    # fan-out) collecting its cycles.
    gc.set_threshold(START_THRESHOLD, *gc.get_threshold()[1:])
    from spexsup.cli import main as run_command

    run_command()


if __name__ == "__main__":
    main()
