"""`make stress`: random wake/stop/resume/rm/wait/ls on 10 sessions by 8
concurrent workers for a fixed time, while a freezer suspends a random spex
process (a command, or a turn's exit reporter) with SIGSTOP for up to 2.5 s
and then resumes it, then invariants checked in SQLite and in the process
table.

Runs the installed `spex` the way users do, on a private tmux server and a
throwaway state home. Prints what it checked and what it found; exits 1 on
any wrong verdict, stuck turn, surviving process or traceback.

One wake in four queues when its session is busy (or the home is full),
one in five carries an idempotency key that other wakes repeat, and the
home runs at most `--max-running` turns at once (config.toml's
max_running), which a sampler checks every 20 ms.

With `--waves`, the wave mode (issue 40): 100-leg waves (`spex fanout`,
each followed by `spex wait`) one after another on 100 sessions, while a
killer sends SIGKILL at random to a spex CLI (the fan-out or the wait), a
turn's exit reporter, or a harness (with its children, as a crash takes
them); then 0 wrong verdicts (printed or recorded against what each
harness does, a killed harness excepted), 0 stuck turns and 0 surviving
processes.

    python tests/stress.py [--seconds 60] [--workers 8] [--sessions 10] [--seed 1]
                           [--max-running 6]
    python tests/stress.py --waves [--seconds 60] [--sessions 100] [--seed 1]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
AGENT = str(HERE / "harnesses" / "stress_agent.sh")
SPEX = str(Path(sys.executable).parent / "spex")
# The exit codes each operation may honestly end with.
ALLOWED = {
    "wake": {0, 1, 3},
    "stop": {0, 3},
    "resume": {0, 3},
    "rm": {0, 3},
    "new": {0, 3},
    "wait": {0, 1, 3, 124},
    "ls": {0},
    "fanout": {0, 1},
}


@dataclass
class Run:
    env: dict[str, str]
    home: Path
    ops: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    # The verdicts of keyed wakes (first and repeats).
    keyed: list[dict[str, object]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    live: set[int] = field(default_factory=set)
    frozen: int = 0
    # The most turns the sampler saw starting or running at once.
    peak_running: int = 0
    # Wave mode: spex CLIs the killer ended (their exit is -9, not a fault),
    # the turns whose harness it killed, and its kills by kind.
    killed_pids: set[int] = field(default_factory=set)
    killed_turns: set[str] = field(default_factory=set)
    kills: Counter[str] = field(default_factory=Counter)
    # Wave mode: waves started; the killer ends a CLI in every third only,
    # so most waves print their legs' verdicts.
    waves_started: int = 0

    def spex(self, op: str, *args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.Popen(
            [SPEX, *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with self.lock:
            self.live.add(proc.pid)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            with self.lock:
                self.problems.append(f"spex {' '.join(args)} hung for 120 s")
        finally:
            with self.lock:
                self.live.discard(proc.pid)
        r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        with self.lock:
            self.ops[op] += 1
            self.codes[f"{op}:{r.returncode}"] += 1
            if proc.pid in self.killed_pids:
                pass  # the killer's doing: no output to judge
            elif "Traceback" in r.stderr or "internal error" in r.stderr:
                self.problems.append(f"traceback from spex {' '.join(args)}: {r.stderr.strip()}")
            elif op in ALLOWED and r.returncode not in ALLOWED[op]:
                self.problems.append(f"spex {' '.join(args)} exited {r.returncode}: {r.stderr}")
        return r


def worker(run: Run, rng: random.Random, names: list[str], deadline: float) -> None:
    while time.monotonic() < deadline:
        name = rng.choice(names)
        op = rng.choices(
            ["wake", "stop", "resume", "rm", "wait", "ls"], weights=[8, 3, 3, 1, 2, 1]
        )[0]
        if op == "wake":
            prompt = f"{rng.choice(['0', '0.2', '0.8', '2'])} {rng.choice([0, 0, 0, 3])}"
            window = rng.choice(["0.3", "0.5", "1"])
            # One wake in four queues when the session is busy.
            queue = ["--queue"] if rng.random() < 0.25 else []
            # One in five with a key that a few other wakes of the session repeat.
            key = ["--key", f"{name}-k{rng.randint(0, 9)}"] if rng.random() < 0.2 else []
            # One in five checked (issue 27): a check that takes a while and
            # fails one time in three, which the turn's end must follow.
            check_rc = rng.choice([0, 0, 1]) if rng.random() < 0.2 else None
            verify = []
            if check_rc is not None:
                verify = ["--verify", f"sleep 0.{rng.randint(0, 5)}; exit {check_rc}"]
            r = run.spex(
                "wake", "wake", name, "--window", window, *queue, *key, *verify, "--json", "--",
                prompt,
            )  # fmt: skip
            if r.returncode in (0, 1) and r.stdout:
                v = json.loads(r.stdout)
                if v.get("repeat"):
                    with run.lock:
                        run.ops["repeated key"] += 1
                        run.keyed.append(v)
                    continue
                if key:
                    with run.lock:
                        run.keyed.append(v)
                if v["verdict"] == "queued":
                    with run.lock:
                        run.ops["queued"] += 1
                    continue
                v["expected_rc"] = int(prompt.split()[1])
                v["check_rc"] = check_rc
                with run.lock:
                    if check_rc is not None:
                        run.ops["checked"] += 1
                    run.verdicts.append(v)
        elif op == "stop":
            run.spex("stop", "stop", name, "--grace", "0.5")
        elif op == "resume":
            run.spex("resume", "resume", name)
        elif op == "rm":
            if run.spex("rm", "rm", name, "--force").returncode == 0:
                run.spex("new", "new", name, "--", AGENT)
        elif op == "wait":
            run.spex("wait", "wait", name, "--timeout", "2")
        else:
            run.spex("ls", "ls", "--json")


def reporters(home: Path) -> list[int]:
    """The exit reporters running now for this run's turns."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info["cmdline"] or []
        if "turn-exit" in argv:
            try:
                if proc.environ().get("SPEXSUP_HOME") == str(home):
                    found.append(proc.pid)
            except psutil.Error:
                continue
    return found


def freezer(run: Run, rng: random.Random, deadline: float) -> None:
    """Suspend a random spex process (as Ctrl-Z or a starved machine would)
    for up to 2.5 s, then let it go on; it must still tell the truth."""
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 0.8))
        with run.lock:
            candidates = sorted(run.live)
        candidates += reporters(run.home) if rng.random() < 0.3 else []
        if not candidates:
            continue
        pid = rng.choice(candidates)
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            continue
        try:
            time.sleep(rng.uniform(0.1, 2.5))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        run.frozen += 1


def sampler(run: Run, limit: int, deadline: float) -> None:
    """Every 20 ms: how many turns start or run now, never above the limit."""
    db = sqlite3.connect(run.home / "state.db", timeout=30)
    try:
        while time.monotonic() < deadline:
            (now,) = db.execute(
                "SELECT count(*) FROM turns WHERE state IN ('starting', 'running')"
            ).fetchone()
            run.peak_running = max(run.peak_running, now)
            if now > limit:
                with run.lock:
                    run.problems.append(f"{now} turns running at once, max_running is {limit}")
            time.sleep(0.02)
    finally:
        db.close()


def key_repeats(run: Run, turns: dict[str, sqlite3.Row]) -> int:
    """Keys that started more than one turn (of those still on record: a
    removed session's turns and keys go with it, and the key is free again)."""
    started: dict[str, set[str]] = {}
    for v in run.keyed:
        if v["verdict"] in ("confirmed", "completed") and str(v["turn"]) in turns:
            started.setdefault(str(v["key"]), set()).add(str(v["turn"]))
    twice = {k: t for k, t in started.items() if len(t) > 1}
    for key, ids in twice.items():
        run.problems.append(f"key {key} started {len(ids)} turns: {sorted(ids)}")
    return len(twice)


def queue_stuck(db: sqlite3.Connection) -> list[str]:
    """Sessions free to run (idle or failed, not stopped) whose next queued
    prompt waits for nothing: nobody launched it."""
    rows = db.execute(
        "SELECT DISTINCT q.session FROM queue q JOIN sessions s ON s.name = q.session"
        " WHERE s.state IN ('idle', 'failed') AND NOT EXISTS (SELECT 1 FROM turns t"
        " WHERE t.id = q.after_turn AND t.state IN ('starting', 'running'))"
    ).fetchall()
    return [r[0] for r in rows]


def surviving(run: Run) -> list[int]:
    """Processes of this home's ended turns still alive (each a problem)."""
    survivors = []
    for proc in psutil.process_iter():
        try:
            environ = proc.environ()
            ours = environ.get("SPEXSUP_HOME") == str(run.home) and environ.get("SPEXSUP_TURN")
            if ours and proc.status() != psutil.STATUS_ZOMBIE:
                survivors.append(proc.pid)
        except psutil.Error:
            continue
    for pid in survivors:
        run.problems.append(f"process {pid} of an ended turn survived")
    return survivors


def check(run: Run, names: list[str]) -> dict[str, int]:
    """Let the queues drain, end every turn, then check the invariants;
    returns the counts found."""
    db = sqlite3.connect(run.home / "state.db", timeout=30)
    db.row_factory = sqlite3.Row
    # Queued prompts launch as turns end, with no reader needed: watch only.
    settle = time.monotonic() + 60
    while time.monotonic() < settle:
        busy = db.execute("SELECT count(*) FROM sessions WHERE state = 'running'").fetchone()[0]
        waiting = db.execute(
            "SELECT count(*) FROM queue q JOIN sessions s ON s.name = q.session"
            " WHERE s.state != 'stopped'"
        ).fetchone()[0]
        if not busy and not waiting:
            break
        time.sleep(0.5)
    stuck_queue = queue_stuck(db)
    for name in stuck_queue:
        run.problems.append(f"session {name} is free with a queued prompt nobody launched")
    for name in names:
        run.spex("stop", "stop", name, "--grace", "1")
    turns = {r["id"]: r for r in db.execute("SELECT * FROM turns")}
    stuck = [t for t in turns.values() if t["state"] in ("starting", "running")]
    for t in stuck:
        run.problems.append(f"turn {t['id']} of {t['session']} stuck {t['state']}")
    lost = [t for t in turns.values() if t["state"] == "lost"]
    for t in lost:
        run.problems.append(f"turn {t['id']} of {t['session']} lost: {t['error']}")
    wrong = 0
    for v in run.verdicts:
        row = turns.get(str(v["turn"]))
        if row is None:
            continue  # its session was removed since
        why = None
        if row["verdict"] != v["verdict"]:
            why = f"printed {v['verdict']}, recorded {row['verdict']}"
        elif v["verdict"] == "completed" and (row["state"], row["rc"]) != ("complete", 0):
            why = f"completed, but the turn ended {row['state']} rc={row['rc']}"
        elif v["verdict"] == "failed" and v["rc"] is not None and v["rc"] != v["expected_rc"]:
            why = f"failed rc={v['rc']}, but the agent exits {v['expected_rc']}"
        elif v["verdict"] == "completed" and v["expected_rc"] != 0:
            why = "completed, but the agent exits non-zero"
        elif v["verdict"] == "completed" and v.get("check_rc") not in (None, 0):
            why = "completed, but its check exits non-zero"
        elif (
            v["verdict"] == "completed" and v.get("check_rc") == 0 and "verified" not in v["flags"]
        ):
            why = "completed with its check passed, but not flagged verified"
        elif row["state"] == "complete" and v.get("check_rc") not in (None, 0):
            why = "its turn ended complete, but its check exits non-zero"
        if why:
            wrong += 1
            run.problems.append(f"wrong verdict for turn {v['turn']}: {why}")
    survivors = surviving(run)
    tracebacks = sum(1 for p in run.problems if p.startswith("traceback"))
    return {
        "turns": len(turns),
        "wrong verdicts": wrong,
        "keys that started two turns": key_repeats(run, turns),
        "most running at once": run.peak_running,
        "stuck turns": len(stuck) + len(stuck_queue),
        "lost turns": len(lost),
        "survivors": len(survivors),
        "tracebacks": tracebacks,
    }


def open_run(seconds_tag: str) -> tuple[Run, Path, Path]:
    """A throwaway home on a private tmux server: (run, root, tmux dir)."""
    root = Path(tempfile.mkdtemp(prefix=f"spex-stress-{seconds_tag}-"))
    tmux_tmpdir = Path(tempfile.mkdtemp(prefix="sst"))
    home = root / "state"
    home.mkdir(mode=0o700)
    env = {
        **os.environ,
        "SPEXSUP_HOME": str(home),
        "SPEXSUP_TMUX": f"stress-{os.getpid()}",
        "TMUX_TMPDIR": str(tmux_tmpdir),
        "HOME": str(root),
        "SHELL": "/bin/bash",
    }
    for key in ("TMUX", "TMUX_PANE", "SPEXSUP_TMUX_SOCKET", "SPEXSUP_WRAPPER"):
        env.pop(key, None)
    return Run(env, home), root, tmux_tmpdir


def close_run(run: Run, tmux_tmpdir: Path) -> None:
    subprocess.run(
        ["tmux", "-L", run.env["SPEXSUP_TMUX"], "kill-server"], env=run.env, capture_output=True
    )
    shutil.rmtree(tmux_tmpdir, ignore_errors=True)


def summary(run: Run, root: Path, found: dict[str, int]) -> int:
    """The closing lines every mode prints; 1 on any problem (state kept)."""
    print("  exit codes: " + ", ".join(f"{k} {v}" for k, v in sorted(run.codes.items())))
    print("  checked: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    for problem in run.problems[:20]:
        print(f"  PROBLEM: {problem}")
    if run.problems:
        print(f"  {len(run.problems)} problem(s); state kept in {root}")
        return 1
    shutil.rmtree(root, ignore_errors=True)
    print("  ok")
    return 0


def run_random(args: argparse.Namespace) -> int:
    """Random operations by `--workers` threads, a freezer and a sampler."""
    run, root, tmux_tmpdir = open_run("random")
    (run.home / "config.toml").write_text(f"max_running = {args.max_running}\n")
    names = [f"s{i}" for i in range(args.sessions)]
    for name in names:
        run.spex("new", "new", name, "--", AGENT)
    deadline = time.monotonic() + args.seconds
    rng = random.Random(args.seed)
    threads = [
        threading.Thread(target=worker, args=(run, random.Random(rng.random()), names, deadline))
        for _ in range(args.workers)
    ]
    threads.append(
        threading.Thread(target=freezer, args=(run, random.Random(rng.random()), deadline))
    )
    threads.append(threading.Thread(target=sampler, args=(run, args.max_running, deadline)))
    started = time.monotonic()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        found = check(run, names)
    finally:
        close_run(run, tmux_tmpdir)
    took = time.monotonic() - started
    print(
        f"stress: {sum(run.ops.values())} operations in {took:.0f} s by {args.workers} workers"
        f" on {args.sessions} sessions (seed {args.seed})"
    )
    print("  operations: " + ", ".join(f"{k} {v}" for k, v in sorted(run.ops.items())))
    print(f"  suspended (SIGSTOP, then SIGCONT): {run.frozen} spex processes")
    return summary(run, root, found)


# Wave mode: each session's harness sleeps a while and exits with a fixed rc,
# chosen per session (a wave sends every leg the same prompt).
WAVE_AGENT = "sleep {seconds}; exit {rc}"
WAVE_WINDOW = "1"


@dataclass(frozen=True)
class Behaviour:
    seconds: str
    rc: int


def harnesses(run: Run) -> list[tuple[int, str]]:
    """(pid, turn) of each harness running now in this home: the `bash -c`
    of WAVE_AGENT, named `wave-agent` by its $0."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info["cmdline"] or []
        if len(argv) > 3 and argv[:2] == ["bash", "-c"] and argv[3] == "wave-agent":
            try:
                environ = proc.environ()
            except psutil.Error:
                continue
            if environ.get("SPEXSUP_HOME") == str(run.home) and environ.get("SPEXSUP_TURN"):
                found.append((proc.pid, environ["SPEXSUP_TURN"]))
    return found


def killer(run: Run, rng: random.Random, deadline: float) -> None:
    """Every 0.1-0.6 s, SIGKILL one process: a turn's exit reporter, a
    harness with its children, or (once in every third wave) a spex CLI: the
    fan-out or its wait."""
    cli_killed_in = 0
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.1, 0.6))
        with run.lock:
            wave = run.waves_started
        cli_due = wave % 3 == 0 and cli_killed_in != wave
        kind = rng.choices(["cli", "reporter", "harness"], weights=[1 if cli_due else 0, 3, 3])[0]
        victims: list[tuple[int, str | None]]
        if kind == "cli":
            cli_killed_in = wave
            with run.lock:
                victims = [(pid, None) for pid in sorted(run.live)]
        elif kind == "reporter":
            victims = [(pid, None) for pid in reporters(run.home)]
        else:
            victims = [(pid, turn) for pid, turn in harnesses(run)]
        if not victims:
            continue
        pid, turn = rng.choice(victims)
        try:
            doomed = [pid]
            if kind == "harness":
                doomed += [c.pid for c in psutil.Process(pid).children(recursive=True)]
            with run.lock:
                if kind == "cli":
                    run.killed_pids.add(pid)
                if turn is not None:
                    run.killed_turns.add(turn)
            for victim in doomed:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
        except psutil.Error:
            continue
        run.kills[kind] += 1


def waves(run: Run, names: list[str], deadline: float) -> None:
    """100-leg waves one after another: fan out, then wait for every leg."""
    while time.monotonic() < deadline:
        with run.lock:
            run.waves_started += 1
        r = run.spex("fanout", "fanout", *names, "-m", "go", "--window", WAVE_WINDOW, "--json")
        if r.stdout.strip().startswith("{"):
            doc = json.loads(r.stdout)
            with run.lock:
                run.ops["wave"] += 1
                run.verdicts.extend(doc.get("legs", []))
        else:
            with run.lock:
                run.ops["wave without its summary"] += 1
        run.spex("wait", "wait", *names, "--timeout", "60")


def check_waves(run: Run, names: list[str], behaviour: dict[str, Behaviour]) -> dict[str, int]:
    """End every turn, then: each turn's recorded end against what its
    harness does (unless the killer killed that harness), each printed
    verdict against the recorded one, no turn stuck, no process left."""
    db = sqlite3.connect(run.home / "state.db", timeout=30)
    db.row_factory = sqlite3.Row
    run.spex("wait", "wait", *names, "--timeout", "60")
    for name in names:
        run.spex("stop", "stop", name, "--grace", "1")
    turns = {r["id"]: r for r in db.execute("SELECT * FROM turns")}
    stuck = [t for t in turns.values() if t["state"] in ("starting", "running")]
    for t in stuck:
        run.problems.append(f"turn {t['id']} of {t['session']} stuck {t['state']}")
    # A turn whose launcher the killer ended before it confirmed the start is
    # recorded lost, as DESIGN says; any other lost turn is a fault.
    lost = [t for t in turns.values() if t["state"] == "lost"]
    orphaned = [t for t in lost if t["launcher_pid"] in run.killed_pids]
    for t in lost:
        if t["launcher_pid"] not in run.killed_pids:
            run.problems.append(f"turn {t['id']} of {t['session']} lost: {t['error']}")
    wrong = 0
    for t in turns.values():
        b = behaviour[t["session"]]
        why = None
        if t["id"] in run.killed_turns or t["state"] == "aborted":
            continue  # its harness was killed, or the closing stop ended it
        if t["state"] == "complete" and b.rc != 0:
            why = f"ended complete, but its harness exits {b.rc}"
        elif t["state"] == "failed" and t["rc"] is not None and t["rc"] != b.rc:
            why = f"ended failed rc={t['rc']}, but its harness exits {b.rc}"
        elif t["state"] == "failed" and t["rc"] is None:
            why = f"ended failed with no rc: {t['error']}"
        if why:
            wrong += 1
            run.problems.append(f"wrong end for turn {t['id']} of {t['session']}: {why}")
    for leg in run.verdicts:
        row = turns.get(str(leg.get("turn")))
        if row is None or leg.get("verdict") in (None, "queued"):
            if leg.get("verdict") not in ("refused", "queued"):
                wrong += 1
                run.problems.append(f"leg {leg.get('session')}: printed {leg.get('verdict')}")
            continue
        if row["verdict"] != leg["verdict"]:
            wrong += 1
            run.problems.append(
                f"wrong verdict for turn {row['id']}: printed {leg['verdict']},"
                f" recorded {row['verdict']}"
            )
    survivors = surviving(run)
    return {
        "turns": len(turns),
        "legs printed": len(run.verdicts),
        "wrong verdicts": wrong,
        "stuck turns": len(stuck),
        "lost with their killed launcher": len(orphaned),
        "lost otherwise": len(lost) - len(orphaned),
        "survivors": len(survivors),
        "tracebacks": sum(1 for p in run.problems if p.startswith("traceback")),
    }


def run_waves(args: argparse.Namespace) -> int:
    """100-leg waves under a killer (issue 40, item 3)."""
    run, root, tmux_tmpdir = open_run("waves")
    rng = random.Random(args.seed)
    names = [f"w{i:03d}" for i in range(args.sessions)]
    behaviour = {
        name: Behaviour(rng.choice(["0", "0.3", "1.5", "3"]), rng.choice([0, 0, 0, 3]))
        for name in names
    }
    for name in names:
        b = behaviour[name]
        script = WAVE_AGENT.format(seconds=b.seconds, rc=b.rc)
        run.spex("new", "new", name, "--", "bash", "-c", script, "wave-agent")
    deadline = time.monotonic() + args.seconds
    threads = [
        threading.Thread(target=waves, args=(run, names, deadline)),
        threading.Thread(target=killer, args=(run, random.Random(rng.random()), deadline)),
    ]
    started = time.monotonic()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        found = check_waves(run, names, behaviour)
    finally:
        close_run(run, tmux_tmpdir)
    took = time.monotonic() - started
    print(
        f"stress --waves: {run.waves_started} waves of {args.sessions} legs in {took:.0f} s"
        f" ({run.ops['wave']} printed their legs)"
        f" (seed {args.seed}); killed (SIGKILL): "
        + ", ".join(f"{k} {run.kills[k]}" for k in ("cli", "reporter", "harness"))
    )
    return summary(run, root, found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waves", action="store_true", help="the wave mode (see above)")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--sessions", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-running", type=int, default=6)
    args = parser.parse_args()
    if args.waves:
        args.sessions = args.sessions or 100
        return run_waves(args)
    args.sessions = args.sessions or 10
    return run_random(args)


if __name__ == "__main__":
    sys.exit(main())
