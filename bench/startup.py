#!/usr/bin/env python3
"""Start-up cost of `spex` commands, each against bare `python -c pass` in the same run.

Every measure runs its command and the bare interpreter alternately (so load
from other processes hits both alike) and reports p50 of N, and the
difference. `scale` grows the state (sessions, turn rows, a wide fan-out)
from 100 to 1000 sessions.

    python bench/startup.py [startup|scale|all] [--n 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BIN = Path(sys.executable).parent
SPEX = str(BIN / "spex")
PY = sys.executable
SLEEPER = ["bash", "-c", "exec sleep 300"]
TOY = """
import typer
app = typer.Typer(add_completion=False)
@app.command()
def hello(name: str, count: int = 1) -> None:
    print(name * count)
@app.command()
def bye(window: float = 2.0) -> None:
    print(window)
app()
"""


class Home:
    """A throwaway SPEXSUP_HOME on a private tmux server."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spexboot"))
        (self.root / "state").mkdir()  # a SPEXSUP_HOME not made yet is refused
        self.env = {
            **os.environ,
            "SPEXSUP_HOME": str(self.root / "state"),
            "SPEXSUP_TMUX": f"spexboot-{os.getpid()}-{self.root.name}",
            "TMUX_TMPDIR": str(self.root),
            # Pane shells start bare: hundreds of panes must not each run the
            # machine's rc files (pyenv init and the like).
            "HOME": str(self.root),
            "SHELL": "/bin/sh",
        }
        self.env.pop("TMUX", None)

    def spex(self, *args: str, check: bool = True, **extra: str) -> str:
        # Run from the throwaway root: sessions made here must not land in a
        # git work tree (a turn there first records the tree's state for spex diff).
        r = subprocess.run(
            [SPEX, *args],
            env={**self.env, **extra},
            cwd=self.root,
            capture_output=True,
            text=True,
            check=False,
        )
        if check and r.returncode != 0:
            raise SystemExit(f"spex {' '.join(args)}: {r.returncode} {r.stderr}")
        return r.stdout

    def tmux(self, *args: str) -> None:
        subprocess.run(
            ["tmux", "-L", self.env["SPEXSUP_TMUX"], *args],
            env=self.env,
            capture_output=True,
            check=False,
        )

    def populate(self, sessions: int, turns_each: int) -> None:
        """`sessions` sessions with tmux panes and `turns_each` ended turns each,
        written straight into SQLite (the shape spex itself writes)."""
        self.spex("ls")  # creates the schema
        db = sqlite3.connect(self.env["SPEXSUP_HOME"] + "/state.db")
        now = time.time()
        names = [f"s{i:05d}" for i in range(sessions)]
        with db:
            db.executemany(
                "INSERT INTO sessions (name, harness, cwd, env, created_at, state, current_turn)"
                " VALUES (?, 'demo', ?, '{}', ?, 'idle', ?)",
                [(n, str(self.root), now, f"20261130T000000Z-{n}-0") for n in names],
            )
            db.executemany(
                "INSERT INTO turns (id, session, state, verdict, rc, started_at, ended_at)"
                " VALUES (?, ?, 'complete', 'completed', 0, ?, ?)",
                (
                    (f"20261130T000000Z-{n}-{t}", n, now - t, now - t + 1)
                    for n in names
                    for t in range(turns_each)
                ),
            )
        db.close()
        # One tmux call per 100 panes.
        for i in range(0, sessions, 100):
            args: list[str] = []
            for n in names[i : i + 100]:
                args += ["new-session", "-d", "-s", n, "-c", str(self.root), ";"]
            self.tmux(*args[:-1])

    def close(self) -> None:
        self.tmux("kill-server")
        shutil.rmtree(self.root, ignore_errors=True)


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return (time.perf_counter() - t0) * 1000


def against_bare(n: int, run: Callable[[], float], env: dict[str, str]) -> tuple[float, float]:
    """p50 of `run` and of `python -c pass`, alternated."""
    ours, bare = [], []
    for _ in range(n):
        ours.append(run())
        bare.append(timed([PY, "-c", "pass"], env))
    return statistics.median(ours), statistics.median(bare)


# The targets are for "a machine where `python -c pass` takes ~10 ms"
# (its two-command typer toy: ~64 ms). Interpreter start-up scales with the
# machine, so each target is also shown scaled by this row's bare p50 / 10 ms;
# the toy row checks that the scale holds (expect about 54 ms times the scale).
REFERENCE_BARE_MS = 10.0
REFERENCE_TOY_MS = 64.0


def row(label: str, target: float | None, ours: float, bare: float) -> None:
    scale = bare / REFERENCE_BARE_MS
    if target is None:
        expected = (REFERENCE_TOY_MS - REFERENCE_BARE_MS) * scale
        limits = f"- | (the issue's toy, scaled: +{expected:.0f} ms) | -"
    else:
        met = "yes" if ours - bare <= target * scale else "NO"
        limits = f"≤ +{target:.0f} ms | ≤ +{target * scale:.0f} ms | {met}"
    print(
        f"| {label} | {ours:.0f} ms | {bare:.0f} ms | +{ours - bare:.0f} ms | {limits} |",
        flush=True,
    )


def compile_package() -> None:
    """Write spexsup's bytecode, as an installed wheel has it: an editable
    checkout under PYTHONDONTWRITEBYTECODE would recompile it on every run."""
    import spexsup

    package = str(Path(spexsup.__file__).parent)
    subprocess.run([PY, "-m", "compileall", "-q", package], check=True)


def run_startup(n: int) -> None:
    compile_package()
    home = Home()
    try:
        env = home.env
        print(f"\nStart-up, p50 of {n}, each beside bare `python -c pass` in the same run\n")
        print(
            "| command | spex | python -c pass | difference | target (10 ms python)"
            " | target scaled to this machine | met |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        toy = home.root / "toy.py"
        toy.write_text(TOY)
        ours, bare = against_bare(n, lambda: timed([PY, str(toy), "hello", "x"], env), env)
        row("two-command typer toy app (installed typer)", None, ours, bare)
        ours, bare = against_bare(n, lambda: timed([SPEX, "--help"], env), env)
        row("spex --help", 70, ours, bare)
        home.populate(200, 5)
        ours, bare = against_bare(n, lambda: timed([SPEX, "ls", "--json"], env), env)
        row("spex ls --json, 200 sessions", 120, ours, bare)
        ours, bare = against_bare(n, lambda: timed([SPEX, "show", "s00001"], env), env)
        row("spex show (a status-class read)", 80, ours, bare)
        completing = {
            **env,
            "_SPEX_COMPLETE": "complete_bash",
            "COMP_WORDS": "spex wake s0001",
            "COMP_CWORD": "2",
        }
        ours, bare = against_bare(n, lambda: timed([SPEX], completing), env)
        row("completion callback, session names", 80, ours, bare)

        window = 0.5
        count = iter(range(10**6))

        def wake_confirmed() -> float:
            name = f"c{next(count)}"
            home.spex("new", name, "--", *SLEEPER)
            return timed([SPEX, "wake", name, "go", "--window", str(window)], env) - window * 1000

        ours, bare = against_bare(n, wake_confirmed, env)
        row(f"spex wake, beyond its {window} s window (confirmed)", 130, ours, bare)
        home.spex("new", "quick", "--", "true")

        def wake_exits_at_once() -> float:
            return timed([SPEX, "wake", "quick", "go", "--window", "5"], env)

        ours, bare = against_bare(n, wake_exits_at_once, env)
        row("harness exits at once, 5 s window → verdict", 200, ours, bare)
    finally:
        home.close()


def run_scale(n: int) -> None:
    print(f"\nScale, p50 of {n} (bare python p50 in brackets)\n")
    print("| measure | 100 sessions | 1000 sessions |")
    print("| --- | --- | --- |")
    results: dict[str, list[str]] = {}
    for sessions in (100, 1000):
        home = Home()
        try:
            env = home.env
            # 200 turn rows per session: 200 000 at 1000 sessions.
            home.populate(sessions, 200)
            ours, bare = against_bare(n, lambda env=env: timed([SPEX, "ls", "--json"], env), env)  # type: ignore[misc]
            results.setdefault("ls --json (200 turns/session)", []).append(
                f"{ours:.0f} ms [{bare:.0f}]"
            )
            db = sqlite3.connect(env["SPEXSUP_HOME"] + "/state.db")
            with db:
                t0 = time.time()
                db.executemany(
                    "INSERT INTO turns (id, session, state, verdict, rc, started_at, ended_at)"
                    " VALUES (?, 's00000', 'complete', 'completed', 0, ?, ?)",
                    ((f"20261130T000001Z-x{t}", t0 - t, t0 - t + 1) for t in range(10_000)),
                )
            db.close()
            ours, bare = against_bare(n, lambda env=env: timed([SPEX, "show", "s00000"], env), env)  # type: ignore[misc]
            results.setdefault("show, a session with 10 200 turns", []).append(
                f"{ours:.0f} ms [{bare:.0f}]"
            )
        finally:
            home.close()
    for label, cells in results.items():
        print(f"| {label} | {' | '.join(cells)} |", flush=True)
    home = Home()
    try:
        for i in range(200):
            home.spex("new", f"f{i:03d}", "--", *SLEEPER)
        t0 = time.perf_counter()
        out = home.spex("fanout", "--all", "-m", "go", "--window", "2", "--max-concurrent", "16")
        took = time.perf_counter() - t0
        print(f"\n200-leg fan-out, 2 s window: {took:.1f} s; {out.strip().splitlines()[-1]}")
    finally:
        home.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", nargs="?", default="all", choices=["startup", "scale", "all"])
    parser.add_argument("--n", type=int, default=20)
    args = parser.parse_args()
    if args.what in ("startup", "all"):
        run_startup(args.n)
    if args.what in ("scale", "all"):
        run_scale(args.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
