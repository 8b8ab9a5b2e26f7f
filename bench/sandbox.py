#!/usr/bin/env python3
"""What a sandbox costs a turn's start (`make bench`; DESIGN §19): side by
side in one run, alternating, the same harness in an unsandboxed session, a
sandboxed one with no network, and a sandboxed one with the default
network gate.

Two figures per kind, p50 of --n turns:
- wake: `spex wake --window 0.05` to its verdict, the wall time (the harness
  writes the time and exits: the verdict is its end);
- harness: from the wake's start to the harness's first instruction (it
  writes the time), which is where the probe and the gate are paid.

Goal: a sandboxed turn within 60 ms of an unsandboxed one, on both.

    python bench/sandbox.py [--n 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from goals import record

REPO = Path(__file__).resolve().parent.parent
SPEX = str(Path(sys.executable).parent / "spex")
KINDS = {
    "plain": [],
    "sandbox, network none": ["--sandbox", "--network", "none"],
    "sandbox, network gate": ["--sandbox"],
}


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SPEX, *args], env=env, capture_output=True, text=True, check=False)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=15)
    n = parser.parse_args().n
    if shutil.which("bwrap") is None:
        print("bench/sandbox.py: bubblewrap is not installed (make test installs it)")
        return 2
    root = Path(tempfile.mkdtemp(prefix="spx-bench-sbx"))
    (root / "state").mkdir()  # a SPEXSUP_HOME not made yet is refused
    env = {
        **os.environ,
        "SPEXSUP_HOME": str(root / "state"),
        "SPEXSUP_TMUX": f"bench-sbx-{os.getpid()}",
        "TMUX_TMPDIR": str(root),
        # Measure spex, not the machine's rc files: a turn's login shell
        # starts bare (a pyenv init in ~/.bashrc cost seconds, and its
        # rehash lock, left by a shell a turn's end killed, hung the next).
        "HOME": str(root),
        "SHELL": "/bin/sh",
    }
    env.pop("TMUX", None)
    try:
        names = {}
        for i, (kind, flags) in enumerate(KINDS.items()):
            cwd = root / f"w{i}"
            cwd.mkdir()
            script = 'printf "%s" "$EPOCHREALTIME" > started'
            made = run(env, "--create", "new", f"s{i}", "--cwd", str(cwd), *flags,
                       "--", "bash", "-c", script)  # fmt: skip
            if made.returncode != 0:
                print(made.stderr, end="")
                return 1
            names[kind] = (f"s{i}", cwd)
        wake_ms: dict[str, list[float]] = {k: [] for k in KINDS}
        start_ms: dict[str, list[float]] = {k: [] for k in KINDS}
        for _ in range(n):
            for kind, (name, cwd) in names.items():
                (cwd / "started").unlink(missing_ok=True)
                t0 = time.time()
                woke = run(env, "wake", name, "--window", "0.05", "go")
                wake_ms[kind].append((time.time() - t0) * 1000)
                if woke.returncode != 0:
                    print(f"{kind}: {woke.stdout}{woke.stderr}", end="")
                    return 1
                deadline = time.monotonic() + 10
                stamp = cwd / "started"
                while not (stamp.exists() and stamp.read_text()) and time.monotonic() < deadline:
                    time.sleep(0.002)
                started = float(stamp.read_text())
                start_ms[kind].append((started - t0) * 1000)
        plain_wake = statistics.median(wake_ms["plain"])
        plain_start = statistics.median(start_ms["plain"])
        print(f"sandbox start-up, p50 of {n} (goal: within 60 ms of plain)")
        worst = 0.0
        print(f"{'':24} {'wake->verdict':>14} {'wake->harness':>14}")
        for kind in KINDS:
            w, s = statistics.median(wake_ms[kind]), statistics.median(start_ms[kind])
            line = f"{kind:24} {w:11.0f} ms {s:11.0f} ms"
            if kind != "plain":
                dw, ds = w - plain_wake, s - plain_start
                worst = max(worst, dw, ds)
                line += f"   +{dw:.0f} / +{ds:.0f} ms"
            print(line)
        print(f"worst beyond plain: +{worst:.0f} ms ({record('sandbox', worst)})")
    finally:
        subprocess.run(
            ["tmux", "-L", env["SPEXSUP_TMUX"], "kill-server"],
            env=env,
            capture_output=True,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
