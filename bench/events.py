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

from goals import record

from spexsup.core.spex import open_store
from spexsup.state import events

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
    store = open_store(home)
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


def reporter(home: Path, n: int) -> tuple[list[float], list[float]]:
    """The exit reporter as a turn's wrapper runs it (`python -m spexsup
    internal turn-exit`), wall time per end; and in-process, its record_exit
    (the end, its event, the summary rewrite that the end changes, the tick)."""
    from spexsup.pane.report import record_reported_exit

    store = open_store(home)
    with store.tx() as db:
        db.execute(
            "INSERT INTO sessions (name, harness, cwd, created_at, state)"
            " VALUES ('r', 'command', '/', 0, 'idle')"
        )

    def begin(turn: str) -> Path:
        with store.tx() as db:
            db.execute(
                "INSERT INTO turns (id, session, state, started_at) VALUES (?, 'r', 'running', 0)",
                (turn,),
            )
            db.execute(
                "UPDATE sessions SET current_turn = ?, state = 'running' WHERE name = 'r'", (turn,)
            )
            events.record(db, "launched", session="r", turn=turn)
        directory = home / "turns" / "r" / turn
        directory.mkdir(parents=True)
        return directory

    argv = [sys.executable, "-m", "spexsup", "--home", str(home), "internal", "turn-exit", "r"]
    wall = []
    for i in range(n):
        turn = f"p{i:05d}"
        begin(turn)
        started = time.perf_counter()
        subprocess.run([*argv, turn, "0"], check=True)
        wall.append(time.perf_counter() - started)
    inside = []
    for i in range(n * 10):
        turn = f"i{i:05d}"
        directory = begin(turn)
        started = time.perf_counter()
        assert record_reported_exit(store, "r", turn, 0, directory, None) == 0
        inside.append(time.perf_counter() - started)
    return wall, inside


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20)
    n = parser.parse_args().n
    # As an installed wheel runs: bytecode compiled.
    package = Path(__file__).resolve().parent.parent / "spexsup"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "state"
        home.mkdir()  # a SPEXSUP_HOME not made yet is refused
        print(f"\nEvents and status line, n={n}\n")
        lags = follow_latency(home, n)
        said = record("events_follow", statistics.median(lags) * 1000)
        print(f"events --follow latency (commit -> printed), goal ≤ 50 ms: {p50(lags)} ({said})")
        env = {**os.environ, "SPEXSUP_HOME": str(home)}
        bare, line = [], []
        for _ in range(n):
            bare += timed([sys.executable, "-c", "pass"], env, 1)
            line += timed([SPEX, "status-line"], env, 1)
        print(f"python -c pass: {p50(bare)}")
        said = record("status_line", statistics.median(line) * 1000)
        print(f"spex status-line, goal ≤ 30 ms: {p50(line)} ({said})")
        wall, inside = reporter(home, n)
        print(f"exit reporter (python -m spexsup internal turn-exit): {p50(wall)}")
        print(f"  of which record_exit with its event, summary and tick: {p50(inside)}")
        store = open_store(home)
        plain, with_event = [], []
        for i in range(n * 10):
            started = time.perf_counter()
            with store.tx() as db:
                db.execute("UPDATE settings SET value = ? WHERE key = 'x'", (str(i),))
            plain.append(time.perf_counter() - started)
            started = time.perf_counter()
            with store.tx() as db:
                events.record(db, "completed", session="s", turn="t", rc=0)
            with_event.append(time.perf_counter() - started)
        print(f"a transaction: {p50(plain)}; with one event (summary unchanged): {p50(with_event)}")


if __name__ == "__main__":
    main()
