#!/usr/bin/env python3
"""Start-up cost of `spex` commands, each against bare `python -c pass` in the same run.

Every measure runs its command and the bare interpreter alternately (so load
from other processes hits both alike) and reports p50 of N, and the
difference, against the goals of bench/goals.py, unscaled (each recorded for
bench/report.py). `scale` grows the state: 1000 sessions with 200 turns each,
a session with 10 200 turns, a 200-leg wave.

    python bench/startup.py [startup|scale|all] [--n 20]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from goals import BY_KEY, ci, record, show
from homes import Home

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


@dataclass(frozen=True)
class Timing:
    """One run, or the p50s of many: wall time and the CPU time the process
    (and the children it waited for) spent, both in ms. Load from other
    processes stretches the wall time far more than the CPU time."""

    wall: float
    cpu: float


def timed(argv: list[str], env: dict[str, str]) -> Timing:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - t0) * 1000
    proc.returncode = 0  # reaped above: keep Popen from waiting again
    return Timing(wall, (usage.ru_utime + usage.ru_stime) * 1000)


def against_bare(n: int, run: Callable[[], Timing], env: dict[str, str]) -> tuple[Timing, Timing]:
    """p50s of `run` and of `python -c pass`, alternated."""
    ours, bare = [], []
    for _ in range(n):
        ours.append(run())
        bare.append(timed([PY, "-c", "pass"], env))
    return p50(ours), p50(bare)


def p50(runs: list[Timing]) -> Timing:
    return Timing(statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs))


HEADER = """\
| command | spex | python -c pass | difference | CPU difference | goal (beyond python) | verdict |
| --- | --- | --- | --- | --- | --- | --- |"""


def row(key: str, ours: Timing, bare: Timing, label: str | None = None) -> None:
    """One table row against its goal (bench/goals.py, unscaled), recorded."""
    goal = BY_KEY[key]
    wall, cpu = ours.wall - bare.wall, ours.cpu - bare.cpu
    said = record(key, wall, bare=bare.wall, cpu=cpu)
    limit = "-" if goal.limit is None else f"≤ {show(goal, goal.limit)}"
    print(
        f"| {label or goal.label} | {ours.wall:.0f} ms | {bare.wall:.0f} ms | +{wall:.0f} ms"
        f" | {cpu:+.0f} ms | {limit} | {said} |",
        flush=True,
    )


def imported(argv: list[str], env: dict[str, str]) -> list[str]:
    """The modules `argv` (a Python program) imports, in order (`-X importtime`)."""
    r = subprocess.run(
        [PY, "-X", "importtime", *argv], env=env, capture_output=True, text=True, check=True
    )
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("import time:")]
    return [ln.rpartition("|")[2].strip() for ln in lines[1:]]  # (the first is the header)


def standard_imports(argv: list[str], env: dict[str, str]) -> list[str]:
    """What `spex ARGS` imports beyond bare Python that is neither spex's own
    nor a dependency's: the standard library's share of its start."""
    import importlib.util

    bare = set(imported(["-c", "pass"], env))
    found = []
    for module in dict.fromkeys(imported(argv, env)):
        if module in bare or module.partition(".")[0] == "spexsup":
            continue
        top = importlib.util.find_spec(module.partition(".")[0])
        # (importtime lists the tries that failed too: nt, msvcrt)
        standard = top is not None and "site-packages" not in (top.origin or "")
        if standard and importlib.util.find_spec(module) is not None:
            found.append(module)
    return found


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
        print(HEADER)
        toy = home.root / "toy.py"
        toy.write_text(TOY)
        ours, bare = against_bare(n, lambda: timed([PY, str(toy), "hello", "x"], env), env)
        row("toy", ours, bare)
        ours, bare = against_bare(n, lambda: timed([SPEX, "--help"], env), env)
        row("help", ours, bare)
        home.populate(200, 5)
        ours, bare = against_bare(n, lambda: timed([SPEX, "ls", "--json"], env), env)
        row("ls200", ours, bare)
        # The part of that row spex cannot cut by its own code: importing the
        # standard modules the same command imports (re, pathlib, json,
        # sqlite3, typing, subprocess…), with nothing of spex's.
        floor = [PY, "-c", "import " + ", ".join(standard_imports([SPEX, "ls", "--json"], env))]
        ours, bare = against_bare(n, lambda: timed(floor, env), env)
        row("floor", ours, bare)
        ours, bare = against_bare(n, lambda: timed([SPEX, "show", "s00001"], env), env)
        row("show", ours, bare)
        completing = {
            **env,
            "_SPEX_COMPLETE": "complete_bash",
            "COMP_WORDS": "spex wake s0001",
            "COMP_CWORD": "2",
        }
        ours, bare = against_bare(n, lambda: timed([SPEX], completing), env)
        row("completion", ours, bare)

        window = 0.5
        count = iter(range(10**6))

        def wake_confirmed() -> Timing:
            name = f"c{next(count)}"
            home.spex("new", name, "--", *SLEEPER)
            took = timed([SPEX, "wake", name, "go", "--window", str(window)], env)
            return Timing(took.wall - window * 1000, took.cpu)

        ours, bare = against_bare(n, wake_confirmed, env)
        row("wake", ours, bare, f"spex wake, beyond its {window} s window (confirmed)")
        home.spex("new", "quick", "--", "true")

        def wake_exits_at_once() -> Timing:
            return timed([SPEX, "wake", "quick", "go", "--window", "5"], env)

        ours, bare = against_bare(n, wake_exits_at_once, env)
        row("exit", ours, bare)
    finally:
        home.close()


def run_scale(n: int) -> None:
    print(f"\nScale, p50 of {n}, each beside bare `python -c pass` in the same run\n")
    print(HEADER)
    home = Home()
    try:
        env = home.env
        # 200 turn rows per session: 200 000 in all.
        home.populate(1000, 200)
        ours, bare = against_bare(n, lambda: timed([SPEX, "ls", "--json"], env), env)
        row("ls1000", ours, bare)
        db = sqlite3.connect(env["SPEXSUP_HOME"] + "/state.db")
        with db:
            t0 = time.time()
            db.executemany(
                "INSERT INTO turns (id, session, state, verdict, rc, started_at, ended_at)"
                " VALUES (?, 's00000', 'complete', 'completed', 0, ?, ?)",
                ((f"20261130T000001Z-x{t}", t0 - t, t0 - t + 1) for t in range(10_000)),
            )
        db.close()
        ours, bare = against_bare(n, lambda: timed([SPEX, "show", "s00000"], env), env)
        row("show10200", ours, bare)
    finally:
        home.close()
    home = Home()
    try:
        for i in range(200):
            home.spex("new", f"f{i:03d}", "--", *SLEEPER)
        t0 = time.perf_counter()
        # --max-concurrent at its default, as the goal says.
        out = home.spex("fanout", "--all", "-m", "go", "--window", "2")
        took = time.perf_counter() - t0
        said = record("wave200", took)
        print(
            f"\n200-leg fan-out, 2 s window: {took:.1f} s (goal ≤ 3.5 s: {said});"
            f" {out.strip().splitlines()[-1]}"
        )
    finally:
        home.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", nargs="?", default="all", choices=["startup", "scale", "all"])
    parser.add_argument("--n", type=int, default=5 if ci() else 20)
    args = parser.parse_args()
    if args.what in ("startup", "all"):
        run_startup(args.n)
    if args.what in ("scale", "all"):
        run_scale(args.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
