#!/usr/bin/env python3
"""Benchmarks (`make bench`): startup confirmation, and fan-out waves.

Runs on a throwaway SPEXSUP_HOME and a private tmux server of its own, and
compares spexsup's event-driven confirmer with a reference that polls the
marker every 25 ms over a fixed window (the design spexsup improves on).

    python bench/run.py [turns|waves|all] [--n 30]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from goals import BY_KEY, ci, record, show  # noqa: E402

from spexsup.adapters.watch import DirWatch  # noqa: E402
from spexsup.core import sessions  # noqa: E402
from spexsup.core.spex import Spex  # noqa: E402
from spexsup.pane import marker, report, turndir  # noqa: E402
from spexsup.pane.marker import Stage  # noqa: E402
from spexsup.turn.admit import admit  # noqa: E402
from spexsup.turn.confirm import confirm_startup  # noqa: E402
from spexsup.turn.front import wake  # noqa: E402
from spexsup.turn.launch import launch  # noqa: E402
from spexsup.turn.request import WakeRequest  # noqa: E402

POLL = 0.025
SLEEPER = ["bash", "-c", "exec sleep 300"]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, round(0.95 * len(xs)) - 1)]


def reference_confirm(directory: Path, window: float) -> str:
    """The baseline: poll the marker every 25 ms until exit or the fixed window ends."""
    deadline = time.monotonic() + window
    while time.monotonic() < deadline:
        m = marker.read(directory)
        if m.stage is Stage.EXIT:
            return "completed" if m.rc == 0 else "failed"
        time.sleep(POLL)
    m = marker.read(directory)
    return "confirmed" if m.stage is Stage.RUNNING else "failed"


def reference_wake(spex: Spex, name: str, window: float) -> str:
    session, turn, directory, _, _ = admit(spex, WakeRequest(name, b"bench", fresh=True))
    launch(spex, session, turn, directory)
    return reference_confirm(directory, window)


class Bench:
    def __init__(self, n: int) -> None:
        self.n = n
        self.root = Path(tempfile.mkdtemp(prefix="spexbench"))
        os.environ["SPEXSUP_HOME"] = str(self.root / "state")
        (self.root / "state").mkdir()  # a SPEXSUP_HOME not made yet is refused
        os.environ["SPEXSUP_TMUX"] = f"spexbench-{os.getpid()}"
        os.environ["TMUX_TMPDIR"] = str(self.root)
        # Measure spex, not the machine's rc files: pane shells start bare.
        os.environ["HOME"] = str(self.root)
        os.environ["SHELL"] = "/bin/sh"
        self.spex = Spex.open()
        self.count = 0

    def close(self) -> None:
        subprocess.run(
            ["tmux", "-L", os.environ["SPEXSUP_TMUX"], "kill-server"],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)

    def session(self, command: list[str], env: dict[str, str] | None = None) -> str:
        self.count += 1
        name = f"b{self.count}"
        # Outside any git work tree: a turn there first records its state.
        spec = sessions.Spec(cwd=str(self.root), command=command, env=env or {})
        sessions.create(self.spex, name, spec)
        return name

    # (1) overhead beyond the window, confirmed turns
    def overhead(self, window: float) -> tuple[list[float], list[float]]:
        ours, ref = [], []
        for _ in range(self.n):
            name = self.session(SLEEPER)
            t0 = time.monotonic()
            v = wake(self.spex, WakeRequest(name, b"bench", window=window))
            assert v.verdict == "confirmed", v
            ours.append((time.monotonic() - t0 - window) * 1000)
            name = self.session(SLEEPER)
            t0 = time.monotonic()
            assert reference_wake(self.spex, name, window) == "confirmed"
            ref.append((time.monotonic() - t0 - window) * 1000)
        return ours, ref

    # (2) early failure: the wrapper writes exit: -> the verdict is known.
    # The marker is written when `mv -f` renames it into place, which sets
    # its ctime (a coarse clock: this errs on the slow side).
    def early_failure(self) -> tuple[list[float], list[float]]:
        ours, ref = [], []
        a = self.session(["bash", "-c", "exit 7"])
        b = self.session(["bash", "-c", "exit 7"])
        for _ in range(self.n):
            v = wake(self.spex, WakeRequest(a, b"bench", window=5))
            known = time.time_ns()
            assert v.verdict == "failed" and v.turn
            written = (turndir.path(self.spex.home, a, v.turn) / turndir.OUTCOME).stat().st_ctime_ns
            ours.append((known - written) / 1e6)
            session, turn, directory, _, _ = admit(self.spex, WakeRequest(b, b"bench", fresh=True))
            launch(self.spex, session, turn, directory)
            assert reference_confirm(directory, 5) == "failed"
            known = time.time_ns()
            ref.append((known - (directory / "outcome").stat().st_ctime_ns) / 1e6)
            # The reporter leaves a failure to its live launcher (us): record it.
            report.record_exit(self.spex.store, b, turn, 7, directory)
        return ours, ref

    # (3) CPU burnt by the waiting process through a 2 s window
    def cpu_in_window(self, window: float = 2.0) -> tuple[list[float], list[float]]:
        ours, ref = [], []
        for _ in range(self.n):
            name = self.session(SLEEPER)
            session, turn, directory, _, _ = admit(
                self.spex, WakeRequest(name, b"bench", fresh=True)
            )
            with DirWatch([directory]) as watch:
                pane_pid = launch(self.spex, session, turn, directory)
                c0 = cpu()
                r = confirm_startup(directory, window, time.monotonic(), watch, pane_pid)
                ours.append((cpu() - c0) * 1000)
            assert r.verdict == "confirmed", r
            name = self.session(SLEEPER)
            session, turn, directory, _, _ = admit(
                self.spex, WakeRequest(name, b"bench", fresh=True)
            )
            launch(self.spex, session, turn, directory)
            c0 = cpu()
            assert reference_confirm(directory, window) == "confirmed"
            ref.append((cpu() - c0) * 1000)
        return ours, ref

    # (4) harness exit -> verdict, exit reporter included
    def exit_to_verdict(self) -> tuple[list[float], list[float]]:
        stamp = self.root / "stamp"
        script = f'printf %s "$EPOCHREALTIME" > "{stamp}"; exit 0'
        ours, ref = [], []
        a = self.session(["bash", "-c", script])
        b = self.session(["bash", "-c", script])
        for _ in range(self.n):
            v = wake(self.spex, WakeRequest(a, b"bench", window=5))
            known = time.time_ns()
            assert v.verdict == "completed", v
            ours.append((known - float(stamp.read_text()) * 1e9) / 1e6)
            assert reference_wake(self.spex, b, 5) == "completed"
            known = time.time_ns()
            ref.append((known - float(stamp.read_text()) * 1e9) / 1e6)
        return ours, ref


def row(key: str, ours: list[float], ref: list[float]) -> str:
    goal = BY_KEY[key]
    said = record(key, p50(ours))
    return (
        f"| {goal.label} | {p50(ours):.1f} / {p95(ours):.1f} ms | "
        f"{p50(ref):.1f} / {p95(ref):.1f} ms | ≤ {show(goal, goal.limit)} p50 | {said} |"
    )


def run_turns(n: int) -> None:
    bench = Bench(n)
    try:
        measures: list[tuple[str, Callable[[], tuple[list[float], list[float]]]]] = [
            ("confirm_overhead", lambda: bench.overhead(0.5)),
            ("early_failure", bench.early_failure),
            ("waiter_cpu", bench.cpu_in_window),
            ("exit_reporter", bench.exit_to_verdict),
        ]
        print(f"\nStartup confirmation, {n} wakes each (p50 / p95)\n")
        print("| measure | spexsup (inotify) | reference (25 ms poll) | goal | verdict |")
        print("| --- | --- | --- | --- | --- |")
        for key, measure in measures:
            ours, ref = measure()
            print(row(key, ours, ref), flush=True)
    finally:
        bench.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", nargs="?", default="all", choices=["turns", "waves", "all"])
    parser.add_argument("--n", type=int, default=5 if ci() else 30)
    args = parser.parse_args()
    # The exit reporter imports spexsup on every turn end: measure it as an
    # installed wheel runs (bytecode compiled), even where the environment
    # sets PYTHONDONTWRITEBYTECODE.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "spexsup")], check=True)
    if args.what in ("turns", "all"):
        run_turns(args.n)
    if args.what in ("waves", "all"):
        import importlib.util

        spec = importlib.util.spec_from_file_location("waves", REPO / "bench" / "waves.py")
        if spec is None or spec.loader is None or not (REPO / "bench" / "waves.py").exists():
            print("\n(wave benchmark not available yet)")
        else:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            module.run(args.n, quick=ci())
    return 0


if __name__ == "__main__":
    sys.exit(main())
