#!/usr/bin/env python3
"""A maintenance command for an operation that wedges. In $DIR: creates
`ready` and blocks on the fifo `go1` (meanwhile the test wedges the store or
tmux); then asks for `stop $SESSION`.

Default: waits for the reply, asks for `resume $SESSION`, writes {outcome,
code, elapsed} of the stop and the resume's code (`after`) to `reply`,
blocks on the fifo `go2` and exits 0.
`--hold`: sends the request, writes `sent`, and sleeps.
`--close-token`: the same, but after `sent` blocks on `go2`, then closes
fd 5 without waiting for the reply, writes `closed`, and sleeps.
"""

import json
import os
import sys
import time
from pathlib import Path

from spexsup.adapters.maint_client import request
from spexsup.adapters.procs import own_identity

d = Path(os.environ["DIR"])
session = os.environ["SESSION"]
(d / "ready").touch()
(d / "go1").read_text()
if sys.argv[1:] in (["--close-token"], ["--hold"]):
    pid, token = own_identity()
    os.read(5, 1)
    frame = {
        "v": 1,
        "id": "w",
        "op": "stop",
        "session": session,
        "force": False,
        "client": {"pid": pid, "start_token": token},
    }
    os.write(3, json.dumps(frame).encode() + b"\n")
    (d / "sent").touch()
    if sys.argv[1] == "--close-token":
        (d / "go2").read_text()
        os.close(5)
        (d / "closed").touch()
    time.sleep(600)
started = time.monotonic()
reply = request("stop", session)
elapsed = time.monotonic() - started
after = request("resume", session)  # while the stop still runs
seen = {"outcome": reply.outcome, "code": reply.code, "elapsed": elapsed, "after": after.code}
(d / "reply.tmp").write_text(json.dumps(seen))
(d / "reply.tmp").rename(d / "reply")
(d / "go2").read_text()
