#!/usr/bin/env python3
"""The attention layer's costs: `spex events --follow` latency (commit to the
follower's stdout), `spex status-line` time against bare `python -c pass`,
and what recording an event adds to the exit reporter.

    python bench/events.py [--n 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spexsup import events
from spexsup.store import Store

SPEX = str(Path(sys.executable).parent / "spex")


def p50(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:.1f} ms, max {max(values) * 1000:.1f} ms"


def follow_latency(home: Path, n: int) -> list[float]:
    """Commit an event from this process; time until the follower prints it."""
    env = {**os.environ, "SPEXSUP_HOME": str(home)}
    proc = subprocess.Popen(
        [SPEX, "events", "--follow", "--json"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    store = Store(home)
    lags = []
    try:
        with store.tx() as db:
            events.record(db, "created", session="warmup")
        proc.stdout.readline()
        for i in range(n):
            started = time.perf_counter()
            with store.tx() as db:
                events.record(db, "created", session=f"s{i}")
            line = proc.stdout.readline()
            lags.append(time.perf_counter() - started)
            assert json.loads(line)["session"] == f"s{i}"
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait()
    return lags


def timed(argv: list[str], env: dict[str, str], n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=30)
    n = parser.parse_args().n
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "state"
        lags = follow_latency(home, n)
        print(f"events --follow latency (commit -> printed): {p50(lags)}")
        env = {**os.environ, "SPEXSUP_HOME": str(home)}
        bare, line = [], []
        for _ in range(n):
            bare += timed([sys.executable, "-c", "pass"], env, 1)
            line += timed([SPEX, "status-line"], env, 1)
        print(f"python -c pass: {p50(bare)}")
        print(f"spex status-line: {p50(line)}")
        # The exit reporter's extra work per event: the INSERT, the summary
        # written under the lock, the tick after the commit (no hooks).
        store = Store(home)
        with_event, without = [], []
        for i in range(n * 10):
            started = time.perf_counter()
            with store.tx() as db:
                db.execute("UPDATE settings SET value = ? WHERE key = 'x'", (str(i),))
            without.append(time.perf_counter() - started)
            started = time.perf_counter()
            with store.tx() as db:
                events.record(db, "completed", session="s", turn="t", rc=0)
            with_event.append(time.perf_counter() - started)
        print(f"a transaction: {p50(without)}; with one event: {p50(with_event)}")


if __name__ == "__main__":
    main()
