#!/usr/bin/env python3
"""A maintenance command whose broker fds (3, 4, 5) outlive it, then exits 0.

Default: a double fork with setsid; the grandchild keeps the fds, writes its
pid to $DIR/pid, and ignores SIGTERM, writing the lease's state as it was at
that moment (and the time) to $DIR/term, so only SIGKILL ends it.

`--in-flight`: no process keeps them: they are sent (SCM_RIGHTS) to the
datagram socket $SOCK, whose owner never receives them.
"""

import array
import json
import os
import signal
import socket
import sqlite3
import sys
import time
from pathlib import Path

if sys.argv[1:] == ["--in-flight"]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        fds = array.array("i", [3, 4, 5])
        s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)], 0, os.environ["SOCK"])
    sys.exit(0)

d = Path(os.environ["DIR"])
ready_r, ready_w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.close(ready_r)

        def on_term(signum: int, frame: object) -> None:
            db = sqlite3.connect(Path(os.environ["SPEXSUP_HOME"]) / "state.db")
            state, epoch = db.execute("SELECT state, epoch FROM lease WHERE id = 1").fetchone()
            db.close()
            seen = {"state": state, "epoch": epoch, "at": time.time()}
            (d / "term.tmp").write_text(json.dumps(seen))
            (d / "term.tmp").rename(d / "term")

        signal.signal(signal.SIGTERM, on_term)
        (d / "pid.tmp").write_text(str(os.getpid()))
        (d / "pid.tmp").rename(d / "pid")
        os.write(ready_w, b"!")
        while True:
            signal.pause()
    os._exit(0)
os.close(ready_w)
os.wait()
os.read(ready_r, 1)  # the grandchild is set up
