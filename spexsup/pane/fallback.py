"""The wrapper's model fallback (`--fallback-model A,B`), run in the pane:

    python -m spexsup.pane.fallback next TURN_DIR RC   -> exit 0: run the harness again

After the harness exited, before the turn ends: when the attempt failed with
a cause another model may not have (`usage-limit`, `rate-limited`,
`overloaded`, `model-not-found`) before doing any work (no answer), and a
model is left in the turn's `fallback` file, it records the attempt on the
turn (its model, cause, error and output, kept as `attempt-N.output.log`),
writes the argv of the same turn on the next model (resuming the
conversation where the attempt left one, else a new one) and prints the
line the pane shows. Any other case exits 1: the turn ends as it is.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from spexsup.pane import turndir

NEXT = 0
NO = 1
GONE = 3
# The ends another model may not meet: the next one is tried.
FALLS_BACK = ("usage-limit", "rate-limited", "overloaded", "model-not-found")


def next_model(turn_dir: Path, rc: int) -> int:
    from spexsup.adapters import outcome, registry
    from spexsup.pane import report
    from spexsup.state import events, ledger
    from spexsup.state.store import Store

    try:
        chain = list(json.loads((turn_dir / turndir.FALLBACK).read_text())["models"])
    except (OSError, ValueError, KeyError, TypeError):
        return NO
    if not chain or (turn_dir / turndir.TIMED_OUT).exists():
        return NO
    home, session, turn = turn_dir.parent.parent.parent, turn_dir.parent.name, turn_dir.name
    meta = turndir.meta(turn_dir)
    name = str(meta.get("harness") or "")
    try:
        adapter = registry.load_registry(home).get(name)
    except Exception:  # a broken harnesses.toml: the turn ends as it is
        return NO
    store = Store(home, (events,))  # its event is recorded; no hook runs in the pane
    row = store.db.execute(
        "SELECT command, harness_session_id, binary FROM sessions WHERE name = ?", (session,)
    ).fetchone()
    if row is not None and row["command"]:
        adapter = adapter._replace(args=tuple(json.loads(row["command"])))
    if row is not None and row["binary"]:
        adapter = adapter.pinned(row["binary"])
    judged = report.judge(home, turn_dir, rc, adapter)
    if judged.cause not in FALLS_BACK:
        return NO
    found = outcome.read(turn_dir / turndir.OUTPUT, adapter.outcome)
    if found.answer:
        return NO  # it answered: its work stands, whatever came after
    conversation = report.conversation_of(store, turn_dir, adapter)
    if conversation is None and meta.get("resumed"):
        conversation = str(meta["resumed"])
    model, rest = chain[0], chain[1:]
    prompt = (turn_dir / turndir.PROMPT).read_bytes()
    if conversation and adapter.resume:
        argv, on_stdin = adapter.argv(prompt, conversation, None, model)
    else:
        import uuid

        conversation = str(uuid.uuid4()) if adapter.assign_id == "uuid" else None
        argv, on_stdin = adapter.argv(prompt, None, conversation, model)
    # This attempt's number: the turn's launches (a wake's lock-class retries)
    # and the fallbacks before it; its output is kept under it.
    row = store.db.execute("SELECT attempts FROM turns WHERE id = ?", (turn,)).fetchone()
    count = int(row[0] or 1) if row is not None else 1
    kept = turndir.kept_output(count)
    attempt = {
        "attempt": count,
        "model": meta.get("model"),
        "cause": judged.cause,
        "error": judged.error,
        "rc": rc,
        "ended_at": time.time(),
        "output": kept,
    }
    with store.tx() as db:
        if not ledger.fell_back(db, session, turn, attempt, model, conversation):
            return GONE  # stopped meanwhile
    turndir.keep_output(turn_dir, count)
    turndir.rewrite_argv(turn_dir, argv, on_stdin=on_stdin)
    # The attempts so far, for the reporter's usage rows (`report.run_outputs`).
    chain_file = json.loads((turn_dir / turndir.FALLBACK).read_text())
    done = [
        *chain_file.get("attempts", []),
        {"output": kept, "cause": judged.cause, "model": meta.get("model")},
    ]
    turndir.write_fallback(turn_dir, rest, done)
    meta.update(model=model, resumed=conversation if adapter.resume else meta.get("resumed"))
    turndir.write_meta(turn_dir, meta)
    was = attempt["model"] or "its default model"
    print(f"[spex] {was}: {judged.cause} ({judged.error}); falling back to {model}")
    return NEXT


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "next" or not argv[2].lstrip("-").isdigit():
        print("spex: usage: python -m spexsup.pane.fallback next TURN_DIR RC", file=sys.stderr)
        return 2
    try:
        return next_model(Path(argv[1]), int(argv[2]))
    except Exception as e:  # the turn then ends as it is, never a crash in the pane
        print(f"spex: model fallback: {e}", file=sys.stderr)
        return NO


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
