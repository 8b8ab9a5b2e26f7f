#!/usr/bin/env python3
"""Takes the token, closes the response pipe (fd 4), sends `stop $SESSION`,
and lives on: the broker cannot answer."""

import json
import os
import time

from spexsup.adapters.procs import own_identity

pid, token = own_identity()
os.read(5, 1)
os.close(4)
frame = {"v": 1, "id": "c", "op": "stop", "session": os.environ["SESSION"], "force": False}
os.write(3, json.dumps({**frame, "client": {"pid": pid, "start_token": token}}).encode() + b"\n")
time.sleep(33)
