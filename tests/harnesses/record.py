#!/usr/bin/env python3
"""Writes the prompt it received (last argv element, else stdin) to $RECORD_TO."""

import os
import sys
from pathlib import Path

data = os.fsencode(sys.argv[-1]) if len(sys.argv) > 1 else sys.stdin.buffer.read()
path = Path(os.environ["RECORD_TO"])
tmp = path.with_suffix(".tmp")
tmp.write_bytes(data)
tmp.replace(path)
keys = ("SPEXSUP_SESSION", "SPEXSUP_TURN", "SPEXSUP_TURN_DIR", "SPEXSUP_PROMPT_FILE")
lines = [f"{key}={os.environ.get(key, '')}" for key in keys]
lines.append(f"via={'argv' if len(sys.argv) > 1 else 'stdin'}")
path.with_name(path.name + ".env").write_text("\n".join(lines) + "\n")
