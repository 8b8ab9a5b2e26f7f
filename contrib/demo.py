#!/usr/bin/env python3
"""`make demo`: real turns on the bundled demo agent, no agent CLI needed.

Creates three demo sessions on spex's private tmux server, wakes them (one is
asked to fail, to show an honest `failed` verdict), waits, prints a log,
resumes a conversation, and fans one prompt out to all three as a wave.
Every step is a real `spex` command, printed first.
Attach to any session afterwards with `spex attach demo-1`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from spexsup.adapters.demo_agent import asked_to_fail

SPEX = shutil.which("spex", path=str(Path(sys.executable).parent)) or "spex"
SESSIONS = {
    "demo-1": "refactor the parser",
    "demo-2": "write tests for the lexer",
    "demo-3": "please fail: pretend the credentials are missing",
}


def spex(*args: str, check: bool = True) -> int:
    # Shell-quoted: every printed command can be pasted as it is.
    print(f"\n$ spex {shlex.join(args)}", flush=True)
    rc = subprocess.run([SPEX, *args], check=False).returncode
    if check and rc not in (0,):
        raise SystemExit(f"demo: spex {args[0]} exited {rc}")
    return rc


def main() -> int:
    home = os.environ.get("SPEXSUP_HOME")
    print(f"spex demo (state: {home or 'default SPEXSUP_HOME'})")
    # The demo makes its state home (a SPEXSUP_HOME not made yet is refused as a typo).
    listed = subprocess.run(
        [SPEX, "--create", "ls", "--json"], capture_output=True, text=True, check=True
    )
    existing = {row["name"]: row for row in json.loads(listed.stdout)}
    for name in SESSIONS:
        if name not in existing:
            spex("new", name, "--harness", "demo", "--cwd", str(Path.cwd()))
        elif existing[name]["state"] == "running":
            spex("wait", name, check=False)
        elif existing[name]["state"] == "stopped":
            spex("resume", name, "--force")
    for name, prompt in SESSIONS.items():
        rc = spex("wake", name, prompt, check=False)
        expected = 1 if asked_to_fail(prompt) else 0
        if rc != expected:
            raise SystemExit(f"demo: wake {name} exited {rc}, expected {expected}")
    spex("ls")
    spex("wait", "demo-1", "demo-2")
    spex("log", "demo-1")
    spex("wake", "demo-1", "now document it", "--json")
    spex("wait", "demo-1")
    spex("log", "demo-1")
    spex("show", "demo-1")
    spex("fanout", "--match", "demo-*", "-m", "summarise what you did", "--wait")
    spex("waves")
    print("\nAttach to a session with: spex attach demo-1   (detach: C-a d)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
