"""A tiny coding-agent simulator, the `demo` harness: try spex with no agent installed.

    python -m spexsup.adapters.demo_agent [--resume ID] PROMPT

Prints its conversation id, a few progress lines with short delays, and a
final answer. A prompt with the word `fail` in it (`please fail`, not
`fix what fails`) exits 1 at startup; `--resume ID`
continues a conversation kept under `$SPEXSUP_HOME/demo-agent/`.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path

STEP_DELAY = float(os.environ.get("SPEXSUP_DEMO_DELAY", "0.8"))


def conversations() -> Path:
    base = Path(os.environ.get("SPEXSUP_HOME") or Path.home() / ".local/state/spexsup")
    path = base / "demo-agent"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def asked_to_fail(prompt: str) -> bool:
    """The word `fail` itself: "run the checks and fix what fails" is a task."""
    import re

    return re.search(r"\bfail\b", prompt, re.IGNORECASE) is not None


def main(argv: list[str]) -> int:
    resume = None
    if len(argv) >= 2 and argv[0] == "--resume":
        resume, argv = argv[1], argv[2:]
    if len(argv) != 1:
        print("usage: demo_agent [--resume ID] PROMPT", file=sys.stderr)
        return 2
    prompt = argv[0]
    if asked_to_fail(prompt):
        print("demo-agent: cannot start: the prompt asked me to fail", flush=True)
        return 1
    store = conversations()
    if resume:
        path = store / f"{resume}.json"
        if not path.exists():
            print(f"demo-agent: no conversation found with id {resume}", flush=True)
            return 1
        history = json.loads(path.read_text())
        conversation = resume
    else:
        conversation, history = f"demo-{secrets.token_hex(4)}", []
    history.append(prompt)
    print(f"conversation: {conversation} (turn {len(history)})", flush=True)
    for step in ("reading the task", "thinking", "writing the answer"):
        time.sleep(STEP_DELAY)
        print(f"... {step}", flush=True)
    summary = prompt if len(prompt) <= 60 else prompt[:57] + "..."
    print(f"answer: done with {summary!r} ({len(history)} prompts so far)", flush=True)
    tmp = store / f".{conversation}.tmp"
    tmp.write_text(json.dumps(history))
    tmp.replace(store / f"{conversation}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
