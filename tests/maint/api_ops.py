#!/usr/bin/env python3
"""Operator script using the Python API: stop then resume $SESSION."""

import json
import os
from pathlib import Path

from spexsup.adapters.maint_client import request

session = os.environ["SESSION"]
replies = [request("stop", session).__dict__, request("resume", session).__dict__]
Path(os.environ["RESULTS"]).write_text(json.dumps(replies))
