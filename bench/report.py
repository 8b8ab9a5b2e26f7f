#!/usr/bin/env python3
"""The closing table of `make bench`: every figure the bench scripts
recorded (bench/goals.py's `record`, one JSON line each in the results
file) against its goal, in the goals' order, met or NOT MET.

Exits 0 whatever it finds, unless `--fail-over FACTOR` is given (`make
bench-ci`: 2): then 1 when a figure is more than FACTOR times its goal (a
goal of 0 fails on any figure above 0), and, for a figure that carries its
CPU time too (the start-up rows), when that is over as well: a loaded
machine stretches wall time, not the CPU a command spends. A goal nothing measured is listed as
such and fails nothing; a figure recorded twice counts by its last value.

    python bench/report.py RESULTS [--fail-over 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from goals import GOALS, show, verdict


def latest(results: Path) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    if results.exists():
        for line in results.read_text().splitlines():
            if line.strip():
                doc = json.loads(line)
                found[doc["key"]] = doc
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--fail-over", type=float, default=None, metavar="FACTOR")
    args = parser.parse_args()
    found = latest(args.results)
    print("\nEvery figure against its goal (goals unscaled; bench/goals.py)\n")
    print("| measure | figure | python -c pass | goal | verdict |")
    print("| --- | --- | --- | --- | --- |")
    over = []
    met = judged = 0
    for goal in GOALS:
        doc = found.get(goal.key)
        limit = "-" if goal.limit is None else f"≤ {show(goal, goal.limit)}"
        if doc is None:
            print(f"| {goal.label} | not measured | - | {limit} | - |")
            continue
        figure = float(doc["figure"])
        bare = "-" if doc.get("bare") is None else f"{doc['bare']:.0f} ms"
        said = verdict(goal, figure)
        note = f" ({doc['note']})" if doc.get("note") else ""
        cpu = doc.get("cpu")
        shown = show(goal, figure) + ("" if cpu is None else f" (CPU {cpu:+.0f} ms)")
        print(f"| {goal.label}{note} | {shown} | {bare} | {limit} | {said} |")
        if goal.limit is not None:
            judged += 1
            met += said == "met"
            bound = max(goal.limit, goal.open_at or 0) * (args.fail_over or 0)
            if args.fail_over is not None and figure > bound and (cpu is None or cpu > bound):
                times = f"{args.fail_over:g} times the goal (or its open figure)"
                over.append(f"{goal.label}: {show(goal, figure)} > {times}")
    print(f"\n{met} of {judged} measured goals met.")
    if over:
        print(f"More than {args.fail_over:g} times the goal:")
        for line in over:
            print(f"  {line}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
