#!/usr/bin/env python3
"""CPU used by an idle `spex top` watching many sessions (`make bench`).

Makes a throwaway SPEXSUP_HOME with N sessions on a private tmux server
(pane shells are /bin/sh with a temp HOME), optionally starts a long turn
(`sleep`) in K of them, runs `spex top` on a pty, waits until the board
shows every session, lets it settle, then measures over a window the CPU
time of the `spex top` process (its threads and the children it waited
for), its context switches (about one per wake-up) and the bytes it drew.

    python bench/top_idle.py [--sessions 1000] [--running 0] [--chatty 0] [--seconds 60]

With the goal's shape (1000 sessions, none running) its CPU share and its
resident memory at the window's end are recorded against their goals
(bench/goals.py); `make bench-ci` shortens the window to 10 s.

With K = 0 nothing is due and the process should sleep the whole window;
with running turns it redraws their ages once a second. `--chatty C` makes
C of the running turns print a line every 10 ms: the board reads their last
line at most once a second, however fast they write.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from goals import ci, record  # noqa: E402
from homes import Home  # noqa: E402

from spexsup.core import sessions  # noqa: E402
from spexsup.core.spex import Spex  # noqa: E402

SPEX = str(Path(sys.executable).parent / "spex")
ROWS, COLS = 60, 160
CHATTY = 'i=0; while :; do i=$((i+1)); echo "line $i"; sleep 0.01; done'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--running", type=int, default=0, help="sessions with a long turn running")
    ap.add_argument("--chatty", type=int, default=0, help="of those, turns printing 100 lines/s")
    ap.add_argument(
        "--seconds", type=float, default=10.0 if ci() else 60.0, help="the measured window"
    )
    args = ap.parse_args()
    if not 0 <= args.chatty <= args.running <= args.sessions:
        ap.error("need 0 <= --chatty <= --running <= --sessions")

    home = Home()
    env = {**home.env, "TERM": "xterm-256color"}
    os.environ.update({k: v for k, v in env.items() if k != "TERM"})
    os.environ.pop("TMUX", None)
    names = [f"s{i:05d}" for i in range(args.sessions)]
    child = None
    try:
        # The idle sessions written straight into the store (one ended turn
        # each; spex new makes 1000 in minutes), those that run made by spex.
        home.populate(args.sessions - args.running, 1)
        spex = Spex.open(Path(env["SPEXSUP_HOME"]))
        for i, name in enumerate(names[args.sessions - args.running :]):
            work = CHATTY if i < args.chatty else "exec sleep 3600"
            sessions.create(spex, name, sessions.Spec(command=["sh", "-c", work], window=0.3))
        spex.close()
        if args.running:
            subprocess.run(
                [SPEX, "fanout", *names[args.sessions - args.running :], "-m", "go"],
                env=env,
                capture_output=True,
                check=True,
            )
        child = pexpect.spawn(SPEX, ["top"], env=env, dimensions=(ROWS, COLS), timeout=60)
        seen = b""
        deadline = time.monotonic() + 60
        # The last row the screen has room for (a board of 1000 shows its top).
        shown = names[min(len(names), ROWS - 20) - 1].encode()
        while shown not in seen and time.monotonic() < deadline:
            seen += read(child, 1.0)
        if shown not in seen:
            print(f"spex top never showed {shown.decode()}", file=sys.stderr)
            return 1
        settle = time.monotonic() + 2
        while time.monotonic() < settle:
            read(child, 0.5)
        proc = psutil.Process(child.pid)
        cpu0, ctx0, threads = cpu(proc), switches(proc.pid), proc.num_threads()
        drawn = 0
        start = time.monotonic()
        end = start + args.seconds
        while time.monotonic() < end:
            drawn += len(read(child, min(1.0, end - time.monotonic())))
        spent = cpu(proc) - cpu0
        woke = switches(proc.pid) - ctx0
        window = time.monotonic() - start
        rss = proc.memory_info().rss / 2**20
        share = 100 * spent / window
        print(
            f"spex top, {args.sessions} sessions ({args.running} running,"
            f" {args.chatty} chatty), {window:.0f} s:"
            f" cpu {spent:.3f} s ({share:.3f}% of a core),"
            f" {woke} context switches, {drawn} bytes drawn, {threads} threads,"
            f" {rss:.0f} MB resident"
        )
        if args.sessions == 1000 and not args.running:
            note = f"{window:.0f} s"
            print(
                f"  CPU goal ≤ 0.5 %: {record('top_cpu', share, note=note)};"
                f" memory goal ≤ 80 MB: {record('top_rss', rss)}"
            )
        child.send("q")
        child.expect(pexpect.EOF)
        return 0
    finally:
        if child is not None and child.isalive():
            child.terminate(force=True)
        home.close()


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def switches(pid: int) -> int:
    """Context switches of every thread of `pid` (psutil counts the main one only)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:
            continue  # a thread that just ended
        for line in text.splitlines():
            if line.endswith("ctxt_switches:") or "ctxt_switches:" in line:
                total += int(line.split()[1])
    return total


def read(child: pexpect.spawn, seconds: float) -> bytes:
    """What the screen printed within `seconds` (b"" if nothing)."""
    if seconds <= 0:
        return b""
    try:
        data: bytes = child.read_nonblocking(65536, timeout=seconds)
        return data
    except (pexpect.TIMEOUT, pexpect.EOF):
        return b""


if __name__ == "__main__":
    sys.exit(main())
