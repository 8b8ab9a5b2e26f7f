#!/usr/bin/env python3
"""spex at 1000 sessions (issue 40's scale goals):

- `spex serve` with 1000 sessions (written straight into a throwaway home's
  store: it only reads them) and 10 open pages (each a GET / and the event
  stream a page holds), idle: the server's CPU over a window;

then, on a home of `--legs` sessions `spex new` made (1000; at 1000 `spex
new` takes minutes, so `make bench-ci` makes 200 and the wave's figures are
recorded only at 1000):

- `spex wait` on 100 sessions whose harnesses end one by one (20 ms apart,
  each released through its own FIFO, so nothing polls): the last end's
  record (its turn's `ended_at`, the reporter's commit) until the wait
  returns, p50 of N waves, the waiter's own latency; and, for information,
  the last harness's exit until then (the 100 exit reporters' queue for the
  machine's cores included);
- a 1000-leg wave (`spex fanout --all`, window 2 s, --max-concurrent at its
  default): until the last leg's harness started (each stamps
  $EPOCHREALTIME), and every leg's verdict against what its harness does
  (one in ten exits 0 at once: completed; one in ten exits 3: failed; the
  rest keep running: confirmed), as printed and as recorded;
- for information, `spex stop --all` over them after that wave (grace 1 s).

Each figure is recorded against its goal (bench/goals.py).

    python bench/fleet.py [--sessions 1000] [--legs 1000] [--n 5] [--seconds 60]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import select
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from goals import ci, record  # noqa: E402
from homes import Home  # noqa: E402

SPEX = str(Path(sys.executable).parent / "spex")
WAITED = 100  # sessions `spex wait` waits on


class Fleet:
    """A throwaway home with `count` sessions on a private tmux server."""

    def __init__(self, count: int) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spexfleet"))
        self.home = self.root / "state"
        self.home.mkdir()  # a SPEXSUP_HOME not made yet is refused
        self.fifos = self.root / "fifo"
        self.fifos.mkdir()
        self.started = self.root / "started"
        self.started.mkdir()
        self.env = {
            **os.environ,
            "SPEXSUP_HOME": str(self.home),
            "SPEXSUP_TMUX": f"spexfleet-{os.getpid()}",
            "TMUX_TMPDIR": str(self.root),
            "HOME": str(self.root),
            "SHELL": "/bin/sh",
        }
        for key in ("TMUX", "TMUX_PANE", "SPEXSUP_TMUX_SOCKET"):
            self.env.pop(key, None)
        self.names = [f"s{i:04d}" for i in range(count)]
        # By `spex new`, as a user makes them: sessions made in process by
        # sessions.create showed every fan-out over them stuck on its own
        # write lock for 30 s (not understood yet; see the commit).
        for i, name in enumerate(self.names):
            r = self.spex("new", name, "--", *self.harness(i, name))
            if r.returncode != 0:
                raise SystemExit(f"spex new {name}: {r.stderr}")

    def harness(self, i: int, name: str) -> list[str]:
        stamp = f'printf %s "$EPOCHREALTIME" > {self.started / name}'
        if i < WAITED:
            # Stamp its end, then end, when released through its FIFO.
            fifo = self.fifos / name
            os.mkfifo(fifo)
            end = f'printf %s "$EPOCHREALTIME" > {self.fifos / (name + ".end")}'
            return ["bash", "-c", f"{stamp}; read -r _ < {fifo}; {end}; exit 0"]
        if i % 10 == 0:
            return ["bash", "-c", f"{stamp}; exit 0"]
        if i % 10 == 1:
            return ["bash", "-c", f"{stamp}; exit 3"]
        return ["bash", "-c", f"{stamp}; exec sleep 3600"]

    def expected(self, i: int) -> str:
        if i >= WAITED and i % 10 == 0:
            return "completed"
        if i >= WAITED and i % 10 == 1:
            return "failed"
        return "confirmed"

    def spex(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [SPEX, *args],
            env=self.env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def close(self) -> None:
        subprocess.run(
            ["tmux", "-L", self.env["SPEXSUP_TMUX"], "kill-server"],
            env=self.env,
            capture_output=True,
            check=False,
        )
        # The turns' reporters may still run: end every process of this home.
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.environ().get("SPEXSUP_HOME") == str(self.home):
                    proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def serve_idle(home: Home, names: list[str], pages: int, seconds: float) -> float:
    """CPU share of an idle `spex serve` holding `pages` open pages."""
    proc = subprocess.Popen(
        [SPEX, "serve", "--port", "0"],
        env=home.env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    streams: list[http.client.HTTPConnection] = []
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline().strip() if ready else ""
        if "#token=" not in line:
            raise SystemExit(f"spex serve did not print its URL: {line!r}")
        base, token = line.split(": ", 1)[1].split("/#token=")
        port = int(base.rsplit(":", 1)[1])
        headers = {"Authorization": f"Bearer {token}"}
        for _ in range(pages):
            page = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            page.request("GET", "/", headers=headers)
            body = page.getresponse().read()
            assert names[-1].encode() in body, "the list page lacks a session"
            page.close()
            stream = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            stream.request("GET", f"/events?since={10**12}", headers=headers)
            assert stream.getresponse().status == 200
            streams.append(stream)
        time.sleep(2)  # the page loads' work done: from here on it is idle
        server = psutil.Process(proc.pid)
        before, start = cpu(server), time.monotonic()
        time.sleep(seconds)
        return 100 * (cpu(server) - before) / (time.monotonic() - start)
    finally:
        for stream in streams:
            if stream.sock is not None:
                with contextlib.suppress(OSError):
                    stream.sock.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def legs_of(r: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """A `fanout --json`'s legs (none, said why, when it printed no wave)."""
    doc = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
    if "legs" not in doc:
        print(f"  fanout exited {r.returncode}: {r.stdout[-500:]} {r.stderr[-500:]}")
    legs: list[dict[str, Any]] = doc.get("legs", [])
    return legs


def release(fifo: Path) -> bool:
    """Let the harness reading `fifo` end (on a starved machine a confirmed
    harness may not have opened it yet: ENXIO until it does); False when
    none read it within 10 s."""
    deadline = time.monotonic() + 10
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
            continue
        os.write(fd, b"go\n")
        os.close(fd)
        return True


def ended_at(fleet: Fleet, names: list[str]) -> list[float]:
    """When each session's current turn's end was recorded (the store's clock)."""
    db = sqlite3.connect(fleet.home / "state.db")
    try:
        marks = ",".join("?" * len(names))
        rows = db.execute(
            "SELECT t.ended_at FROM sessions s JOIN turns t ON t.id = s.current_turn"
            f" WHERE s.name IN ({marks})",
            names,
        ).fetchall()
    finally:
        db.close()
    return [float(at) for (at,) in rows if at is not None]


def wait_wakes(fleet: Fleet, n: int) -> list[tuple[float, float]]:
    """Per wave of the first 100 sessions: their harnesses released one by
    one, 20 ms apart; (the last end recorded, the last harness's exit) until
    `spex wait` returns (s)."""
    found = []
    for _ in range(n):
        r = fleet.spex("fanout", *fleet.names[:WAITED], "-m", "go", "--window", "1", "--json")
        legs = legs_of(r)
        # A leg the machine starved (say, past login_timeout) is no wake to time.
        names = [leg["session"] for leg in legs if leg["verdict"] == "confirmed"]
        if len(names) < WAITED:
            print(f"  {WAITED - len(names)} of {WAITED} legs not confirmed (rc {r.returncode})")
        if not names:
            continue
        waiter = subprocess.Popen(
            [SPEX, "wait", *names, "--timeout", "120"],
            env=fleet.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1)  # the wait has read every session and sleeps
        for name in names:
            (fleet.fifos / f"{name}.end").unlink(missing_ok=True)
        released = []
        for name in names:
            if release(fleet.fifos / name):
                released.append(name)
            else:
                print(f"  {name}'s harness never read its FIFO: {fleet.spex('show', name).stdout}")
            time.sleep(0.02)
        waiter.wait(150)
        returned = time.time()
        if waiter.returncode != 0:
            print(f"  spex wait exited {waiter.returncode}")
        ends = [fleet.fifos / f"{name}.end" for name in released]
        recorded = ended_at(fleet, released)
        if ends and all(end.exists() for end in ends) and len(recorded) == len(released):
            exited = max(float(end.read_text()) for end in ends)
            found.append((returned - max(recorded), returned - exited))
    return found


def big_wave(fleet: Fleet) -> tuple[float, float, int]:
    """The 1000-leg wave: (wall, until the last harness started, wrong verdicts)."""
    for stamp in fleet.started.iterdir():
        stamp.unlink()
    t0 = time.time()
    r = fleet.spex("fanout", "--all", "-m", "go", "--window", "2", "--json")
    wall = time.time() - t0
    printed = {leg["session"]: leg["verdict"] for leg in legs_of(r)}
    starts = [float(p.read_text()) for p in fleet.started.iterdir() if p.read_text()]
    launched = max(starts) - t0 if len(starts) == len(fleet.names) else float("inf")
    db = sqlite3.connect(fleet.home / "state.db", timeout=30)
    recorded = dict(
        db.execute(
            "SELECT s.name, t.verdict FROM sessions s JOIN turns t ON t.id = s.current_turn"
        ).fetchall()
    )
    db.close()
    wrong = 0
    for i, name in enumerate(fleet.names):
        want = fleet.expected(i)
        if printed.get(name) != want or recorded.get(name) != want:
            wrong += 1
            if wrong <= 5:
                got = f"printed {printed.get(name)}, recorded {recorded.get(name)}"
                print(f"  {name}: want {want}, {got}")
    if len(starts) != len(fleet.names):
        print(f"  only {len(starts)} of {len(fleet.names)} harnesses started")
    return wall, launched, wrong


def serve(args: argparse.Namespace) -> None:
    """spex serve's idle share over `args.sessions` sessions and 10 open pages."""
    home = Home()
    try:
        home.populate(args.sessions, 1)
        names = [f"s{i:05d}" for i in range(args.sessions)]
        share = serve_idle(home, names, 10, args.seconds)
        note = f"{args.seconds:.0f} s"
        said = record("serve_idle", share, note=note) if args.sessions == 1000 else "-"
        idle = f"{args.sessions} sessions, 10 open pages, idle {args.seconds:.0f} s"
        print(f"\nspex serve, {idle}: {share:.2f} % of a core ({said})")
    finally:
        home.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000, help="what spex serve shows")
    parser.add_argument("--legs", type=int, default=200 if ci() else 1000, help="spex new made")
    parser.add_argument("--n", type=int, default=2 if ci() else 5)
    parser.add_argument("--seconds", type=float, default=10 if ci() else 60)
    parser.add_argument(
        "--only-wait",
        action="store_true",
        help=f"only spex wait on {WAITED} sessions (--legs {WAITED} makes no more)",
    )
    args = parser.parse_args()
    if args.legs < WAITED:
        parser.error(f"--legs must be at least {WAITED}")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "spexsup")], check=True)
    if not args.only_wait:
        serve(args)
    started = time.monotonic()
    fleet = Fleet(args.legs)
    full = args.legs == 1000  # the wave's goals are for 1000 legs
    try:
        print(f"{args.legs} sessions made by spex new in {time.monotonic() - started:.0f} s")
        lags = wait_wakes(fleet, args.n) or [(float("inf"), float("inf"))]
        for key, what, figures in (
            ("wait", "the last end recorded", [lag[0] for lag in lags]),
            ("wait_exit", "the last harness's exit", [lag[1] for lag in lags]),
        ):
            p50 = statistics.median(figures) * 1000
            said = record(key, p50)
            print(
                f"spex wait on {WAITED} sessions, {what} -> wait returns, over {args.n} waves:"
                f" p50 {p50:.0f} ms, worst {max(figures) * 1000:.0f} ms ({said})"
            )
        if args.only_wait:
            return 0
        wall, launched, wrong = big_wave(fleet)
        said = record("wave1000", launched) if full else "not recorded: not 1000 legs"
        said_wrong = record("wave1000_wrong", wrong) if full else "-"
        print(
            f"{args.legs}-leg wave, 2 s window: every leg launched after {launched:.1f} s"
            f" ({said}), wall {wall:.1f} s; wrong verdicts {wrong} ({said_wrong})"
        )
        # Every leg's turn runs or ended: the panic button over all of them.
        t0 = time.monotonic()
        r = fleet.spex("stop", "--all", "--grace", "1", timeout=1200)
        took = time.monotonic() - t0
        said = record("stop_all", took, note=f"{args.legs} sessions")
        stopped = r.stdout.count(": stopped (")
        print(
            f"spex stop --all over {args.legs} sessions: {took:.1f} s, exit {r.returncode},"
            f" {stopped} stopped ({said})"
        )
    finally:
        fleet.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
