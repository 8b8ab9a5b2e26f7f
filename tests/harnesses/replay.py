#!/usr/bin/env python3
"""Replay what a real agent CLI printed (tests/fixtures/real/<cli>/<scenario>.*):
its stdout, its stderr, its exit code. The prompt on stdin is read and dropped."""

import sys
from pathlib import Path

base = Path(sys.argv[1])
sys.stdin.buffer.read()
sys.stdout.buffer.write(base.with_suffix(".out").read_bytes())
sys.stdout.flush()
sys.stderr.buffer.write(base.with_suffix(".err").read_bytes())
sys.stderr.flush()
sys.exit(int(base.with_suffix(".rc").read_text()))
