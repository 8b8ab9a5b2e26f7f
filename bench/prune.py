"""Retention benchmark (issue 17): prune 100 000 turn rows and 10 000 turn
directories, and what the writers' opportunistic prune adds to the command
that triggers it (p50/p95). No tmux: rows are written straight into a fresh
home's SQLite, as months of use would have left them.

    .venv/bin/python bench/prune.py [--sessions 100] [--turns 1000] [--dirs 10000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from spexsup.config import Retention
from spexsup.core import retention
from spexsup.state.store import Store

DAY = 86400.0


def build(home: Path, sessions: int, per_session: int, dirs: int) -> int:
    """`sessions` sessions of `per_session` finished turns each, all 200 days
    old; every turn of the first `dirs // per_session` sessions (the ones a
    prune takes first) gets a directory with a prompt and a 1 KiB output.log.
    Returns the turn count."""
    store = Store(home)
    start = time.time() - 200 * DAY
    with_dirs = dirs // per_session
    with store.tx() as db:
        for s in range(sessions):
            name = f"s{s:03d}"
            rows = [
                (f"t{s:03d}-{i:06d}", name, "complete", 0, start + i, start + i + 1)
                for i in range(per_session)
            ]
            db.executemany(
                "INSERT INTO turns (id, session, state, rc, started_at, ended_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            db.execute(
                "INSERT INTO sessions (name, harness, cwd, created_at, current_turn, state)"
                " VALUES (?, 'demo', '/', ?, ?, 'idle')",
                (name, start, rows[-1][0]),
            )
            for turn, *_ in rows if s < with_dirs else ():
                d = home / "turns" / name / turn
                d.mkdir(parents=True)
                (d / "prompt").write_bytes(b"p" * 64)
                (d / "output.log").write_bytes(b"x" * 1024)
    store.close()
    return sessions * per_session


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(label: str, samples: list[float]) -> None:
    ms = [s * 1000 for s in samples]
    print(
        f"| {label} | {len(ms)} | {statistics.median(ms):.1f} | {pct(ms, 0.95):.1f}"
        f" | {max(ms):.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--turns", type=int, default=1000, help="per session")
    parser.add_argument("--dirs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="spexprune"))
    try:
        print(
            f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}, cpus {os.cpu_count()}"
        )
        home = root / "big"
        t = time.perf_counter()
        total = build(home, args.sessions, args.turns, args.dirs)
        print(f"built {total} turn rows, {args.dirs} dirs in {time.perf_counter() - t:.1f} s")

        # The writers' cost, on the big home before it is pruned: a call that
        # is not due (one read), and one that is due (claim + bounded prune).
        store = Store(home)
        retention.claim_auto(store)  # pruned just now: the next calls are not due
        not_due: list[float] = []
        due: list[float] = []
        removed: list[int] = []
        for _ in range(args.runs):
            t = time.perf_counter()
            retention.maybe_prune(home)
            not_due.append(time.perf_counter() - t)
        for _ in range(args.runs):
            with store.tx() as db:
                db.execute("UPDATE settings SET value = '0' WHERE key = 'pruned_at'")
            t = time.perf_counter()
            done = retention.maybe_prune(home)
            due.append(time.perf_counter() - t)
            assert done is not None
            removed.append(sum(done.turns.values()))
        print(
            "\n| opportunistic prune (in the writer, after its output) | runs | p50 ms"
            " | p95 ms | max ms |"
        )
        print("| --- | --- | --- | --- | --- |")
        timed("not due (once an hour: one read)", not_due)
        timed(
            f"due: claim + up to {retention.AUTO_TURNS} turns, {retention.AUTO_BUDGET} s budget"
            f" (removed {min(removed)}..{max(removed)})",
            due,
        )

        store.close()
        shutil.rmtree(home)  # the manual prune starts from the whole home again
        build(home, args.sessions, args.turns, args.dirs)
        store = Store(home)
        policy = Retention(keep_turns=1, keep_days=36500)
        t = time.perf_counter()
        dry = retention.prune(store, home, policy, dry_run=True)
        dry_s = time.perf_counter() - t
        t = time.perf_counter()
        use = retention.du(store, home, policy)
        du_s = time.perf_counter() - t
        left_dirs = sum(1 for _ in (home / "turns").glob("*/*"))
        t = time.perf_counter()
        done = retention.prune(store, home, policy)
        prune_s = time.perf_counter() - t
        rows = sum(done.turns.values())
        (left,) = store.db.execute("SELECT count(*) FROM turns").fetchone()
        store.close()
        print("\n| manual (`spex prune`, keep_turns = 1) | seconds | rate |")
        print("| --- | --- | --- |")
        print(f"| --dry-run over {sum(dry.turns.values())} candidates | {dry_s:.2f} | |")
        print(f"| du ({use['total_bytes']} bytes) | {du_s:.2f} | |")
        print(
            f"| prune {rows} rows, {left_dirs} dirs ({done.bytes} bytes) | {prune_s:.2f}"
            f" | {rows / prune_s:.0f} rows/s |"
        )
        print(f"\n{left} turn rows left (one per session)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
