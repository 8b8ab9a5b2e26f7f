"""The states a turn and a session can be in, the other closed vocabularies a
reader tests (verdicts, causes, legs, waves, events), and the sets of them.

Each vocabulary is a `StrEnum`: its members are the very strings SQL, JSON
and the turn directory's markers hold, so a member compares equal to, and
serializes as, its word. No other module compares against a state word
spelled as a literal (tests/test_states.py); the module-level names below
are the members under their older names.

Imports nothing of spexsup: every layer may use these names (`ledger` is the
only module that writes turn and session states).
"""

from __future__ import annotations

from enum import StrEnum


class TurnState(StrEnum):
    """A turn: admitted `starting` (its launch is being confirmed), `running`,
    then one end state."""

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


class SessionState(StrEnum):
    """A session: `creating` (a worktree session being made), `idle`, `running`
    (its current turn is active), `failed` (its last turn failed), `stopped`
    (by spex stop, until resumed), `removing` (spex rm under way). The rule
    (DESIGN §23): stopped, creating and removing whatever its turns; else
    running while its last turn is active; else `failed` when that turn ended
    failed, timed-out, lost or interrupted; else `idle` (no turn yet, or its
    last turn complete, skipped or aborted)."""

    CREATING = "creating"
    IDLE = "idle"
    RUNNING = "running"
    FAILED = "failed"
    STOPPED = "stopped"
    REMOVING = "removing"


class Verdict(StrEnum):
    """What a wake (a launch, a wave's leg, a schedule's firing) answered:
    `confirmed` (running past its window), `completed` or `failed` in it,
    `refused`, `queued`, `skipped` (never launched: `--after`, a budget, a
    busy session), `aborted` (its wave was aborted first); `unconfirmed`: a
    leg whose launch was not confirmed. Not `turn.admit.Verdict`, the value
    that carries one of these words."""

    CONFIRMED = "confirmed"
    COMPLETED = "completed"
    FAILED = "failed"
    REFUSED = "refused"
    QUEUED = "queued"
    SKIPPED = "skipped"
    ABORTED = "aborted"
    UNCONFIRMED = "unconfirmed"


class Cause(StrEnum):
    """What a failed (or skipped) end was (`turns.cause`, DESIGN "Causes")."""

    USAGE_LIMIT = "usage-limit"
    RATE_LIMITED = "rate-limited"
    OVERLOADED = "overloaded"
    MODEL_NOT_FOUND = "model-not-found"
    CONVERSATION_GONE = "conversation-gone"
    AGENT_ERROR = "agent-error"
    TIMED_OUT = "timed-out"
    STRICT = "strict"
    NOT_FOUND = "not-found"
    NO_LOGIN_SHELL = "no-login-shell"
    AFTER = "after"
    BUDGET = "budget"
    SANDBOX = "sandbox"
    VERIFY = "verify"
    VERIFY_TIMEOUT = "verify-timeout"


class Check(StrEnum):
    """A turn's verification (`--verify CMD`, DESIGN §16): how its latest check
    stands. A turn verifying is still `running`; a passed check adds the flag
    VERIFIED to a complete turn, a failed one ends it `failed` with cause
    `verify` or `verify-timeout`."""

    VERIFYING = "verifying"
    VERIFIED = "verified"
    VERIFY_FAILED = "verify-failed"
    VERIFY_TIMED_OUT = "verify-timed-out"


class Flag(StrEnum):
    """A turn's flags, beside its state (some carry a value after a colon:
    `denied:TOOL`, `denied-net:HOST`, `agent-error:…`, `output-lost:N`)."""

    VERIFIED = "verified"
    MAX_TURNS = "max-turns"
    NO_ANSWER = "no-answer"
    ASKED_QUESTION = "asked-question"
    SANDBOXED = "sandboxed"
    # Not a state: a turn still `running` whose wrapper is gone (its pane
    # closed, its tmux server killed) while processes carrying its
    # SPEXSUP_TURN run on (its `survivors`). Only once none is left is it `lost`.
    ORPHANED = "orphaned"
    # Its harness printed more than its output.log could keep (a full disk):
    # `output-lost:<bytes>`, or bare when how much is unknown.
    OUTPUT_LOST = "output-lost"


class LegStatus(StrEnum):
    """Where a wave's launcher is with a leg (`leg.status`): `pending` (not
    yet launched), `launching`, `done` (its verdict is in), `aborted` (the
    wave was aborted before it launched)."""

    PENDING = "pending"
    LAUNCHING = "launching"
    DONE = "done"
    ABORTED = "aborted"


class LegResult(StrEnum):
    """What a leg is counted as by `wavedoc.counts` (the `wave-ended` event,
    SPEXSUP_WAVE_*): not launched yet, queued, running, ok, failed, aborted."""

    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    ABORTED = "aborted"


class WaveState(StrEnum):
    """A wave: `launching` its legs, then `running` until the legs add up to
    `complete`, `partial` or `failed`; or `aborted`."""

    LAUNCHING = "launching"
    RUNNING = "running"
    COMPLETE = "complete"
    PARTIAL = "partial"
    FAILED = "failed"
    ABORTED = "aborted"


class EventKind(StrEnum):
    """An event's kind (DESIGN §8), of a turn, a session, or neither."""

    LAUNCHED = "launched"
    CONFIRMED = "confirmed"
    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"
    LOST = "lost"
    INTERRUPTED = "interrupted"
    TIMED_OUT = "timed-out"
    SKIPPED = "skipped"
    FELL_BACK = "fell-back"
    VERIFYING = "verifying"
    VERIFIED = "verified"
    ORPHANED = "orphaned"
    CREATED = "created"
    REMOVED = "removed"
    STOPPED = "stopped"
    RESUMED = "resumed"
    PANE_RECREATED = "pane-recreated"
    CONVERSATION_GONE = "conversation-gone"
    EDITED = "edited"
    QUEUED = "queued"
    DEQUEUED = "dequeued"
    SCHEDULE_ADDED = "schedule-added"
    SCHEDULE_REMOVED = "schedule-removed"
    SCHEDULE_FIRED = "schedule-fired"
    WAVE_STARTED = "wave-started"
    WAVE_ENDED = "wave-ended"
    LEASE_ACQUIRED = "lease-acquired"
    LEASE_RELEASED = "lease-released"
    LEASE_RECOVERED = "lease-recovered"


# The older names of the members, and the sets readers test.
STARTING = TurnState.STARTING
RUNNING = TurnState.RUNNING
COMPLETE = TurnState.COMPLETE
FAILED = TurnState.FAILED
ABORTED = TurnState.ABORTED
LOST = TurnState.LOST
INTERRUPTED = TurnState.INTERRUPTED
TIMED_OUT = TurnState.TIMED_OUT
SKIPPED = TurnState.SKIPPED

ACTIVE = (STARTING, RUNNING)
ENDS = (COMPLETE, FAILED, ABORTED, LOST, INTERRUPTED, TIMED_OUT, SKIPPED)
ORPHANED = Flag.ORPHANED

CREATING = SessionState.CREATING
IDLE = SessionState.IDLE
BUSY = SessionState.RUNNING
STOPPED = SessionState.STOPPED
REMOVING = SessionState.REMOVING
SESSION_STATES = tuple(SessionState)


# The ends of a turn that leave its session `idle`: done, never launched
# (`--after`, a budget), or ended on purpose (a stop, an interrupted wake).
IDLE_ENDS = (COMPLETE, SKIPPED, ABORTED)

# The verdicts of a launch that got under way.
SUCCESS = (Verdict.CONFIRMED, Verdict.COMPLETED)


def session_state_after(turn_state: str | None) -> SessionState:
    """What a session that is not stopped is, given its last turn's state
    (None: no turn yet)."""
    if turn_state in ACTIVE:
        return BUSY
    return IDLE if turn_state is None or turn_state in IDLE_ENDS else SessionState.FAILED


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


VERIFYING = Check.VERIFYING
VERIFIED = Check.VERIFIED
VERIFY_FAILED = Check.VERIFY_FAILED
VERIFY_TIMED_OUT = Check.VERIFY_TIMED_OUT
VERIFICATIONS = tuple(Check)
VERIFY = Cause.VERIFY
VERIFY_TIMEOUT = Cause.VERIFY_TIMEOUT
OUTPUT_LOST = Flag.OUTPUT_LOST
