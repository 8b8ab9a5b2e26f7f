#!/usr/bin/env python3
"""Operator script for tests: sends raw frames from $FRAMES (a JSON list of
strings, each one frame's bytes as latin-1) over the broker fds, honouring the
turn token, and writes each response line to $RESULTS as a JSON list."""

import json
import os
from pathlib import Path

frames = json.loads(Path(os.environ["FRAMES"]).read_text())
replies = []
for text in frames:
    token = os.read(5, 1)
    os.write(3, text.encode("latin-1"))
    line = b""
    while not line.endswith(b"\n"):
        line += os.read(4, 1)
    os.write(5, token)
    replies.append(json.loads(line))
Path(os.environ["RESULTS"]).write_text(json.dumps(replies))
