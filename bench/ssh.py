#!/usr/bin/env python3
"""`spex -H host ls --json`: cold (a new ssh connection and the version
check), warm (through the shared connection) and local (the same home,
no ssh), p50 of N each, through a private sshd on 127.0.0.1 (tests/sshd.py;
needs root and openssh-server).

    python bench/ssh.py [--n 10] [--sessions 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from sshd import SPEX, running  # noqa: E402

from spexsup import config  # noqa: E402
from spexsup.adapters import hosts  # noqa: E402


def p50(fn: Callable[[], None], n: int, before: Callable[[], None] | None = None) -> float:
    times = []
    for _ in range(n):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--sessions", type=int, default=20)
    args = ap.parse_args()
    with running() as d:
        remote = d.home("remote")
        local = d.dir / "local"
        local.mkdir()
        (local / "config.toml").write_text(d.host_table("box", remote))
        run_dir = d.dir / "run"
        run_dir.mkdir(mode=0o700)
        env = {
            **os.environ,
            "SPEXSUP_HOME": str(local),
            "XDG_RUNTIME_DIR": str(run_dir),
            "HOME": str(d.dir),
            "SHELL": "/bin/sh",
        }
        env.pop("TMUX", None)
        env.pop("SPEXSUP_TMUX", None)
        os.environ["XDG_RUNTIME_DIR"] = str(run_dir)  # where control_path looks, below

        def spex(*words: str) -> None:
            subprocess.run([SPEX, *words], env=env, check=True, capture_output=True)

        for i in range(args.sessions):
            spex("--home", str(remote), "new", f"s{i}", "--cwd", str(d.dir), "--", "true")
        host = hosts.lookup(config.load(local), "box")
        ctl = hosts.control_path(host, local)

        def close_master() -> None:
            subprocess.run(
                ["ssh", *host.ssh_options, "-o", f"ControlPath={ctl}", "-O", "exit", host.ssh],
                capture_output=True,
                check=False,
            )
            for _ in range(100):
                if not ctl.exists():
                    break
                time.sleep(0.01)

        before = d.accepted()
        cold = p50(lambda: spex("-H", "box", "ls", "--json"), args.n, before=close_master)
        spex("-H", "box", "ls", "--json")
        opened = d.accepted()
        warm = p50(lambda: spex("-H", "box", "ls", "--json"), args.n)
        reused = d.accepted() == opened
        here = p50(lambda: spex("--home", str(remote), "ls", "--json"), args.n)
        close_master()
        print(f"spex ls --json, {args.sessions} sessions, p50 of {args.n}:")
        print(f"  local (no ssh)          {here:7.1f} ms")
        print(f"  -H box warm (shared)    {warm:7.1f} ms  (+{warm - here:.1f} ms)")
        print(f"  -H box cold (new conn)  {cold:7.1f} ms  (+{cold - here:.1f} ms)")
        print(
            f"  ssh connections: {opened - before} for {args.n + 1} cold+1 runs,"
            f" {'none' if reused else 'some'} for {args.n} warm runs"
        )


if __name__ == "__main__":
    main()
