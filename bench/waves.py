"""Fan-out benchmark: waves of 10, 50 and 100 legs with a 1 s window, beside a
serial loop of `spex wake` over the same sessions. Run by bench/run.py. The
goal's figure (bench/goals.py) is the median of three 100-leg waves at the
default --max-concurrent, each over 100 sessions that never woke: one wave's
wall moves by a tenth of a second from run to run here, as much as the
distance to the goal. `quick` (make bench-ci): those three waves only."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from goals import record

SPEX = str(Path(sys.executable).parent / "spex")
WINDOW = 1.0


def sh(env: dict[str, str], *args: str) -> None:
    subprocess.run([SPEX, *args], env=env, check=True, capture_output=True)


def reset(env: dict[str, str], names: list[str]) -> None:
    """Stop and resume every session so the next wave finds them idle."""
    for name in names:
        subprocess.run([SPEX, "stop", name, "--grace", "0.5"], env=env, capture_output=True)
        subprocess.run([SPEX, "resume", name, "--force"], env=env, capture_output=True)


def fanout(
    env: dict[str, str], names: list[str], limit: int | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    """One wave over `names`, --max-concurrent at its default or `limit`:
    its wall time, and how it ended."""
    t0 = time.monotonic()
    r = subprocess.run(
        [SPEX, "fanout", *names, "-m", "bench", "--window", str(WINDOW)]
        + ([] if limit is None else ["--max-concurrent", str(limit)]),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return time.monotonic() - t0, r


def goal_waves(env: dict[str, str], waves: int = 3, legs: int = 100) -> None:
    """The goal's figure: the median wall of `waves` waves of `legs` legs at
    the default --max-concurrent, each over sessions of its own that never
    woke (no reset between them, whose stops and resumes would load the
    machine the next wave runs on)."""
    walls = []
    for w in range(waves):
        names = [f"g{w}-{i}" for i in range(legs)]
        for name in names:
            sh(env, "new", name, "--", "bash", "-c", "exec sleep 600")
        wall, r = fanout(env, names)
        walls.append(wall)
        if r.returncode != 0:
            last = r.stdout.splitlines()[-1:]
            print(f"{legs} legs: exit {r.returncode}: {last} {r.stderr.strip()}")
    said = record("wave100", statistics.median(walls))
    shown = ", ".join(f"{w:.2f}" for w in walls)
    print(
        f"{legs} legs, --max-concurrent at its default, median of {waves} waves:"
        f" {statistics.median(walls):.2f} s ({shown}; {said})"
    )


def run(n: int = 30, *, quick: bool = False) -> None:
    root = Path(tempfile.mkdtemp(prefix="spexwaves"))
    (root / "state").mkdir()  # a SPEXSUP_HOME not made yet is refused
    env = {
        **os.environ,
        "SPEXSUP_HOME": str(root / "state"),
        "SPEXSUP_TMUX": f"spexwaves-{os.getpid()}",
        "TMUX_TMPDIR": str(root),
        # Pane shells start bare: a hundred panes must not each run the
        # machine's rc files (pyenv init and the like).
        "HOME": str(root),
        "SHELL": "/bin/sh",
    }
    env.pop("TMUX", None)
    print(f"\nFan-out waves, window {WINDOW} s (goal: 100 legs, default concurrency, ≤ 2.0 s)\n")
    if not quick:
        print(
            "| legs | wave, --max-concurrent 16 (default) | wave, --max-concurrent = legs"
            " | launch rate | serial `spex wake` loop |"
        )
        print("| --- | --- | --- | --- | --- |")
    try:
        made = 0
        fresh = True  # the sessions never woke yet: nothing to reset
        for legs in () if quick else (10, 50, 100):
            while made < legs:
                sh(env, "new", f"s{made}", "--", "bash", "-c", "exec sleep 600")
                made += 1
            names = [f"s{i}" for i in range(legs)]
            walls = []
            for limit in (16, legs):
                if not fresh:
                    reset(env, names)
                fresh = False
                wall, r = fanout(env, names, None if limit == 16 else limit)
                walls.append(wall)
                if r.returncode != 0:
                    failed = [line for line in r.stdout.splitlines() if ": failed" in line]
                    print(f"{legs} legs: {len(failed)} failed: {r.stderr.strip()}")
                    for line in failed[:5]:
                        print(f"  {line}")
            reset(env, names)
            t0 = time.monotonic()
            for name in names:
                sh(env, "wake", name, "bench", "--window", str(WINDOW))
            serial = time.monotonic() - t0
            # Launch rate: legs per second of wall time beyond the one window.
            rate = legs / max(walls[1] - WINDOW, 1e-3)
            print(
                f"| {legs} | {walls[0]:.2f} s | {walls[1]:.2f} s | {rate:.0f} legs/s"
                f" | {serial:.1f} s |",
                flush=True,
            )
        goal_waves(env)
    finally:
        subprocess.run(
            ["tmux", "-L", env["SPEXSUP_TMUX"], "kill-server"], capture_output=True, env=env
        )
        shutil.rmtree(root, ignore_errors=True)
