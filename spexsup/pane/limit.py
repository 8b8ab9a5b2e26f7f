"""The wrapper's usage-limit helper (`--on-limit wait`), run in the pane:

    python -m spexsup.pane.limit plan TURN_DIR    -> "RESET_EPOCH WAKE_EPOCH", exit 0
    python -m spexsup.pane.limit still TURN_DIR   -> exit 0 if the turn may go on

`plan` runs after the harness exited: when its output ends with a usage-limit
message (the harness table's `limited` patterns) naming a reset within the
turn's longest wait, and the conversation id is known, it writes the argv
that *resumes that conversation* (never a fresh one) into the turn dir,
records the reset time on the turn (so `spex ls`/`show` can say what it
waits for) and prints when to run again. Any other case exits 1: the turn
ends as it is. `still` says whether the turn is still its session's current,
running turn after the wait (a `spex stop` during the wait ends it).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from spexsup.pane import turndir
from spexsup.states import ACTIVE

PLAN = 0
NO_WAIT = 1
GONE = 3


def _turn(turn_dir: Path) -> tuple[Path, str, str]:
    home = turn_dir.parent.parent.parent
    return home, turn_dir.parent.name, turn_dir.name


def still(turn_dir: Path) -> int:
    from spexsup.state import events, ledger
    from spexsup.state.store import Store

    home, session, turn = _turn(turn_dir)
    if (turn_dir / turndir.TIMED_OUT).exists():
        return GONE
    store = Store(home, (events,))  # records no event: no hook to run
    row = store.db.execute(
        "SELECT t.state FROM sessions s JOIN turns t ON t.id = s.current_turn"
        " WHERE s.name = ? AND t.id = ?",
        (session, turn),
    ).fetchone()
    if row is None or row["state"] not in ACTIVE:
        return GONE
    with store.tx() as db:
        ledger.end_limit_wait(db, turn)
    return PLAN


def plan(turn_dir: Path, now: float | None = None) -> int:
    from spexsup.adapters import outcome, registry
    from spexsup.pane import report
    from spexsup.state import events, ledger
    from spexsup.state.store import Store

    now = time.time() if now is None else now
    try:
        longest, margin = (float(x) for x in (turn_dir / turndir.ON_LIMIT).read_text().split())
    except (OSError, ValueError):
        return NO_WAIT
    home, session, turn = _turn(turn_dir)
    name = str(turndir.meta(turn_dir).get("harness") or "")
    if not name or name == "command":
        return NO_WAIT
    try:
        adapter = registry.load_registry(home).get(name)
    except Exception:  # a broken harnesses.toml: the turn ends as it is
        return NO_WAIT
    limits = tuple((lim.pattern, lim.reset) for lim in adapter.limited)
    found = outcome.find_limit(turn_dir / turndir.OUTPUT, limits, now)
    if found is None:
        return NO_WAIT
    say = f"[spex] {name} hit its usage limit ({found.when()})"
    if found.reset is None:
        print(f"{say}: no reset time to wait for", file=sys.stderr)
        return NO_WAIT
    if found.reset - now > longest:
        print(f"{say}: later than --on-limit allows ({longest / 3600:g} h)", file=sys.stderr)
        return NO_WAIT
    store = Store(home, (events,))  # records no event: no hook to run
    if still(turn_dir) != PLAN:
        return GONE
    wake = found.reset + margin
    row = store.db.execute(
        "SELECT harness, command, harness_session_id, binary FROM sessions WHERE name = ?",
        (session,),
    ).fetchone()
    if row and row["harness"] == name and row["command"]:
        # A named harness's own arguments (sessions.Session.from_row): the
        # run after the wait gets them as the first run did.
        adapter = adapter._replace(args=tuple(json.loads(row["command"])))
    if row is not None and row["binary"]:
        adapter = adapter.pinned(row["binary"])
    conversation = report.conversation_of(store, turn_dir, adapter) or (
        row["harness_session_id"] if row else None
    )
    if not conversation or adapter.resume is None:
        print(f"{say}: no conversation id to resume, not waiting", file=sys.stderr)
        return NO_WAIT
    prompt = (turn_dir / turndir.PROMPT).read_bytes()
    argv, on_stdin = adapter.argv(prompt, conversation)
    turndir.rewrite_argv(turn_dir, argv, on_stdin=on_stdin)
    with store.tx() as db:
        ledger.wait_for_limit(db, turn, reset=found.reset, until=wake, conversation=conversation)
        ledger.set_conversation(db, session, conversation)
    print(f"{int(found.reset)} {int(wake + 0.999)}")
    print(
        f"{say}: waiting until {time.strftime('%H:%M:%S', time.localtime(wake))},"
        f" then resuming conversation {conversation}",
        file=sys.stderr,
    )
    return PLAN


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("plan", "still"):
        print("spex: usage: python -m spexsup.pane.limit plan|still TURN_DIR", file=sys.stderr)
        return 2
    directory = Path(argv[1])
    try:
        return plan(directory) if argv[0] == "plan" else still(directory)
    except Exception as e:  # the turn then ends as it is, never a crash in the pane
        print(f"spex: usage-limit wait: {e}", file=sys.stderr)
        return NO_WAIT if argv[0] == "plan" else GONE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
