"""Fan-out benchmark: waves of 10, 50 and 100 legs with a 1 s window, beside a
serial loop of `spex wake` over the same sessions. Run by bench/run.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEX = str(Path(sys.executable).parent / "spex")
WINDOW = 1.0


def sh(env: dict[str, str], *args: str) -> None:
    subprocess.run([SPEX, *args], env=env, check=True, capture_output=True)


def reset(env: dict[str, str], names: list[str]) -> None:
    """Stop and resume every session so the next wave finds them idle."""
    for name in names:
        subprocess.run([SPEX, "stop", name, "--grace", "0.5"], env=env, capture_output=True)
        subprocess.run([SPEX, "resume", name, "--force"], env=env, capture_output=True)


def run(n: int = 30) -> None:
    root = Path(tempfile.mkdtemp(prefix="spexwaves"))
    env = {
        **os.environ,
        "SPEXSUP_HOME": str(root / "state"),
        "SPEXSUP_TMUX": f"spexwaves-{os.getpid()}",
        "TMUX_TMPDIR": str(root),
    }
    print(f"\nFan-out waves, window {WINDOW} s (target: 100 legs within window + 2 s)\n")
    print(
        "| legs | wave, --max-concurrent 16 (default) | wave, --max-concurrent = legs"
        " | launch rate | serial `spex wake` loop |"
    )
    print("| --- | --- | --- | --- | --- |")
    try:
        made = 0
        for legs in (10, 50, 100):
            while made < legs:
                sh(env, "new", f"s{made}", "--", "bash", "-c", "exec sleep 600")
                made += 1
            names = [f"s{i}" for i in range(legs)]
            walls = []
            for limit in (16, legs):
                reset(env, names)
                t0 = time.monotonic()
                r = subprocess.run(
                    [
                        SPEX,
                        "fanout",
                        *names,
                        "-m",
                        "bench",
                        "--window",
                        str(WINDOW),
                        "--max-concurrent",
                        str(limit),
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                walls.append(time.monotonic() - t0)
                assert r.returncode == 0, r.stdout[-2000:] + r.stderr
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
    finally:
        subprocess.run(
            ["tmux", "-L", env["SPEXSUP_TMUX"], "kill-server"], capture_output=True, env=env
        )
        shutil.rmtree(root, ignore_errors=True)
