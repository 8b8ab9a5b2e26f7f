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
ERROR = "error"
ABORTED = "aborted"
LOST = "lost"
INTERRUPTED = "interrupted"
TIMED_OUT = "timed-out"

ACTIVE = (STARTING, RUNNING)
ENDS = (COMPLETE, ERROR, ABORTED, LOST, INTERRUPTED, TIMED_OUT)

# A session: `creating` (a worktree session being made), `idle`, `running`
# (its current turn is active), `error` (its last turn did not complete),
# `stopped` (by spex stop, until resumed), `removing` (spex rm under way).
CREATING = "creating"
IDLE = "idle"
BUSY = "running"
FAILED = "error"
STOPPED = "stopped"
REMOVING = "removing"
SESSION_STATES = (CREATING, IDLE, BUSY, FAILED, STOPPED, REMOVING)


def session_state_after(turn_state: str) -> str:
    """What a session becomes when its current turn ends in `turn_state`."""
    return IDLE if turn_state == COMPLETE else FAILED
