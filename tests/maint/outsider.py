#!/usr/bin/env python3
"""A process of the same user outside the maintenance command: opens the
command's broker pipes through /proc/<pid>/fd/3 and fd/4, writes one frame
without holding the turn token, and writes the reply line to $RESULT.

argv: COMMAND_PID SESSION [forge]; with `forge`, the frame claims to come
from the command itself (its pid and start token) rather than from us."""

import json
import os
import sys
from pathlib import Path

from spexsup.adapters.procs import own_identity, start_token

pid, session = int(sys.argv[1]), sys.argv[2]
client = {"pid": pid, "start_token": start_token(pid)} if sys.argv[3:] == ["forge"] else None
if client is None:
    me, token = own_identity()
    client = {"pid": me, "start_token": token}
requests = os.open(f"/proc/{pid}/fd/3", os.O_WRONLY)
replies = os.open(f"/proc/{pid}/fd/4", os.O_RDONLY)
frame = {"v": 1, "id": "outsider", "op": "stop", "session": session, "force": False}
os.write(requests, json.dumps({**frame, "client": client}).encode() + b"\n")
line = b""
while not line.endswith(b"\n"):
    line += os.read(replies, 1)
Path(os.environ["RESULT"]).write_bytes(line)
