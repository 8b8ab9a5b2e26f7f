#!/usr/bin/env python3
"""A queued prompt's end-to-next-launch latency (issue 25): from the moment
a turn's harness exits to the moment the next queued prompt's harness
starts, with nobody watching (the exit reporter records the end and starts
the launcher, which admits, respawns the pane and starts the wrapper).

One session, `--n` prompts queued behind a first turn; each turn writes the
clock when its harness starts and just before it exits. Prints p50, p90 and
the worst of the `--n` gaps. With `--max-running`, the same through a
home's running limit: two sessions take turns under `max_running = 1`, so
every launch waits for the other session's end.

    python bench/queue_next.py [--n 10] [--max-running]
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

import psutil
from goals import ci, record

SPEX = str(Path(sys.executable).parent / "spex")


def spex(env: dict[str, str], *args: str) -> str:
    r = subprocess.run([SPEX, *args], env=env, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"spex {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def gaps(log: Path) -> list[float]:
    """Seconds from each turn's exit to the next turn's start, in clock order."""
    marks = sorted(
        (float(at), kind) for kind, at in (line.split() for line in log.read_text().splitlines())
    )
    out, last_end = [], None
    for at, kind in marks:
        if kind == "start" and last_end is not None:
            out.append(at - last_end)
            last_end = None
        elif kind == "end":
            last_end = at
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5 if ci() else 10)
    parser.add_argument("--max-running", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="spex-bench-queue-"))
    tmux_tmpdir = Path(tempfile.mkdtemp(prefix="sbq"))
    home = root / "state"
    home.mkdir(mode=0o700, parents=True)  # a SPEXSUP_HOME not made yet is refused
    env = {
        **os.environ,
        "SPEXSUP_HOME": str(home),
        "SPEXSUP_TMUX": f"bench-queue-{os.getpid()}",
        "TMUX_TMPDIR": str(tmux_tmpdir),
        "HOME": str(root),
        "SHELL": "/bin/bash",
    }
    for key in ("TMUX", "TMUX_PANE", "SPEXSUP_TMUX_SOCKET"):
        env.pop(key, None)
    log = root / "marks"
    now = "$(date +%s.%N)"
    script = f'echo "start {now}" >> {log}; sleep 0.3; echo "end {now}" >> {log}'
    names = ["a", "b"] if args.max_running else ["a"]
    try:
        if args.max_running:
            (home / "config.toml").write_text("max_running = 1\n")
        for name in names:
            spex(env, "new", name, "--", "bash", "-c", script)
        spex(env, "wake", names[0], "first", "--window", "0.1")
        for i in range(args.n):
            spex(env, "wake", names[(i + 1) % len(names)], "--queue", f"next {i}")
        deadline = time.monotonic() + 30 + args.n * 3
        while time.monotonic() < deadline:
            if log.exists() and log.read_text().count("end ") == args.n + 1:
                break
            time.sleep(0.2)
        found = gaps(log)
    finally:
        # The last turn's reporter may still run (and would make the home
        # again): let it end, then stop every process of this home and the
        # bench's own server (its TMUX_TMPDIR: never the user's).
        subprocess.run([SPEX, "wait", *names, "--timeout", "30"], env=env, capture_output=True)
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("SPEXSUP_HOME") == str(home):
                    proc.kill()
            except psutil.Error:
                continue
        subprocess.run(
            ["tmux", "-L", env["SPEXSUP_TMUX"], "kill-server"], env=env, capture_output=True
        )
        shutil.rmtree(tmux_tmpdir, ignore_errors=True)
    if len(found) != args.n:
        print(f"queue: only {len(found)} of {args.n} queued prompts launched; kept {root}")
        return 1
    shutil.rmtree(root, ignore_errors=True)
    found.sort()
    p90 = found[min(len(found) - 1, int(len(found) * 0.9))]
    p50 = statistics.median(found) * 1000
    what = "through max_running = 1, two sessions" if args.max_running else "one session"
    said = "" if args.max_running else f" (goal p50 ≤ 100 ms: {record('queue', p50)})"
    print(
        f"queue ({what}): end -> next launch over {args.n} prompts:"
        f" p50 {p50:.0f} ms, p90 {p90 * 1000:.0f} ms, worst {found[-1] * 1000:.0f} ms{said}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
