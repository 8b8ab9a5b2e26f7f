"""The states a turn and a session can be in, and the sets readers test.

Imports nothing: every layer may use these names (`ledger` is the only
module that writes them).
"""

from __future__ import annotations

# A turn: admitted `starting` (its launch is being confirmed), `running`,
# then one end state.
STARTING = "starting"
RUNNING = "running"
COMPLETE = "complete"
FAILED = "failed"  # the one word for a non-complete end, of a turn and a session
ABORTED = "aborted"
LOST = "lost"
INTERRUPTED = "interrupted"
TIMED_OUT = "timed-out"
# Never launched: its `--after` condition failed (cause `after`).
SKIPPED = "skipped"

ACTIVE = (STARTING, RUNNING)
ENDS = (COMPLETE, FAILED, ABORTED, LOST, INTERRUPTED, TIMED_OUT, SKIPPED)
# A flag, not a state: a turn still `running` whose wrapper is gone (its
# pane closed, its tmux server killed) while processes carrying its
# SPEXSUP_TURN run on (its `survivors`). Only once none is left is it `lost`.
ORPHANED = "orphaned"

# A session: `creating` (a worktree session being made), `idle`, `running`
# (its current turn is active), `failed` (its last turn failed), `stopped`
# (by spex stop, until resumed), `removing` (spex rm under way). The rule
# (DESIGN §23): stopped, creating and removing whatever its turns; else
# running while its last turn is active; else `failed` when that turn ended
# failed, timed-out, lost or interrupted; else `idle` (no turn yet, or its
# last turn complete, skipped or aborted).
CREATING = "creating"
IDLE = "idle"
BUSY = "running"
STOPPED = "stopped"
REMOVING = "removing"
SESSION_STATES = (CREATING, IDLE, BUSY, FAILED, STOPPED, REMOVING)


# The ends of a turn that leave its session `idle`: done, never launched
# (`--after`, a budget), or ended on purpose (a stop, an interrupted wake).
IDLE_ENDS = (COMPLETE, SKIPPED, ABORTED)


def session_state_after(turn_state: str | None) -> str:
    """What a session that is not stopped is, given its last turn's state
    (None: no turn yet)."""
    if turn_state in ACTIVE:
        return BUSY
    return IDLE if turn_state is None or turn_state in IDLE_ENDS else FAILED


# Until 2026-12 the failed end and the failed session were both `error`. For
# one release spex still reads the old word wherever a user gives a state
# (`spex ls --state error`), and a JSON document whose state is `failed` also
# carries `legacy_state: "error"` for scripts that test the old value.
LEGACY = {"error": FAILED}


def read_state(word: str) -> str:
    """A state as a user wrote it, the old word `error` read as `failed`."""
    return LEGACY.get(word, word)


def legacy_of(state: str | None) -> str | None:
    """The old word for `state` (`error` for `failed`), None if it was not renamed."""
    return "error" if state == FAILED else None


# A turn's verification (`--verify CMD`, DESIGN §16): how its latest check
# stands. A turn verifying is still `running`; a passed check adds the flag
# VERIFIED to a complete turn, a failed one ends it `failed` with cause
# VERIFY or VERIFY_TIMEOUT.
VERIFYING = "verifying"
VERIFIED = "verified"
VERIFY_FAILED = "verify-failed"
VERIFY_TIMED_OUT = "verify-timed-out"
VERIFICATIONS = (VERIFYING, VERIFIED, VERIFY_FAILED, VERIFY_TIMED_OUT)
VERIFY = "verify"
VERIFY_TIMEOUT = "verify-timeout"

# The flag of a turn whose harness printed more than its output.log could
# keep (a full disk): `output-lost:<bytes>`, or bare when how much is unknown.
OUTPUT_LOST = "output-lost"
