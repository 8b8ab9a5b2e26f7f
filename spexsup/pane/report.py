"""The exit reporter: record a turn's end as a compare-and-swap.

Runs inside the pane on every turn end (`spex internal turn-exit`), so it
imports only the standard library, the store and the harness table: no
psutil, no tmux, no CLI. The end is recorded only if the turn is still its
session's current, unfinished turn; an abort (`spex stop`) wins, and a stale
or repeated report changes nothing.
"""

from __future__ import annotations

import enum
import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import faults
from spexsup.adapters import dequeuer
from spexsup.pane import judgement, marker, turndir
from spexsup.pane.judgement import Judgement
from spexsup.pane.spending import spending
from spexsup.record import Record
from spexsup.state import ledger
from spexsup.state.store import Store
from spexsup.states import (
    ACTIVE,
    COMPLETE,
    FAILED,
    VERIFIED,
    VERIFY_FAILED,
    VERIFY_TIMED_OUT,
    Cause,
    TurnState,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from spexsup.adapters import outcome as outcome_mod
    from spexsup.adapters.harness import Harness
    from spexsup.pane import check as verify_mod

RECORDED = 0
STALE = 3
# The reporter's failure report was left to the live `spex wake` that is
# still confirming the turn: it may retry the attempt, so the failure must
# not be published first.
DEFERRED = 4


# Conversation ids show early (claude's init event) or late: scan both ends,
# line by line, each line cut to a bounded length, with a time limit on the
# user-supplied pattern.
_SCAN_BYTES = 1 << 20
_LINE_BYTES = 1 << 16
PATTERN_TIMEOUT = 0.25


def _scan_text(turn_dir: Path) -> str:
    with (turn_dir / turndir.OUTPUT).open("rb") as f:
        head = f.read(_SCAN_BYTES)
        f.seek(0, 2)
        size = f.tell()
        tail = b""
        if size > _SCAN_BYTES:
            f.seek(max(_SCAN_BYTES, size - _SCAN_BYTES))
            tail = f.read()
    lines = (head + b"\n" + tail).split(b"\n")
    return "\n".join(ln[:_LINE_BYTES].decode("utf-8", "replace") for ln in lines)


class PatternTimeout(Exception):
    pass


def find_conversation_id(turn_dir: Path, pattern: str | None) -> str | None:
    """The harness's conversation id in the turn's output (the last match), or None.

    Raises PatternTimeout when the pattern takes longer than PATTERN_TIMEOUT.
    """
    if not pattern:
        return None
    try:
        text = _scan_text(turn_dir)
    except OSError:
        return None
    import regex

    try:
        found = regex.findall(pattern, text, timeout=PATTERN_TIMEOUT)
    except TimeoutError:
        raise PatternTimeout(pattern) from None
    except regex.error:
        return None
    return str(found[-1]) if found else None


def id_pattern(home: Path, turn_dir: Path) -> tuple[str, str | None]:
    """The harness a turn ran and its id pattern, read from harnesses.toml now
    (not copied at prepare time, so fixing the file fixes every later read)."""
    name = turndir.meta(turn_dir).get("harness", "")
    if not name or name == "command":
        return name, None
    from spexsup.adapters import registry  # only when there is a pattern to look up

    try:
        return name, registry.load_registry(home).get(name).id_pattern
    except Exception:  # a broken harnesses.toml: spex doctor names it
        return name, None


def conversation_of(store: Store, turn_dir: Path, adapter: Harness | None = None) -> str | None:
    """The conversation id a turn printed; a pattern that times out is noted
    once for `spex doctor`, and the turn just has no id."""
    if adapter is not None:
        name, pattern = adapter.name, adapter.id_pattern
    else:
        name, pattern = id_pattern(store.home, turn_dir)
    try:
        found = find_conversation_id(turn_dir, pattern)
        if found is None and name in ("opencode", "pi"):
            # Nothing in the stream: the CLI's own session store may have it.
            from spexsup.adapters import convstore

            meta = turndir.meta(turn_dir)
            found = convstore.lookup(name, meta.get("cwd"), meta.get("started"))
        return found
    except PatternTimeout:
        with store.tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO notices (key, message, at) VALUES (?, ?, ?)",
                (
                    f"id_pattern:{name}",
                    f"harness {name}: id_pattern {pattern!r} took over"
                    f" {PATTERN_TIMEOUT}s on a turn's output and was abandoned",
                    time.time(),
                ),
            )
        return None


def remember_conversation(
    store: Store, session: str, turn_dir: Path, adapter: Harness | None = None
) -> None:
    """Store the conversation id a running turn has printed so far, if any."""
    conversation = conversation_of(store, turn_dir, adapter)
    if conversation:
        with store.tx() as db:
            ledger.set_conversation(db, session, conversation)


def end_state(rc: int) -> str:
    return COMPLETE if rc == 0 else FAILED


def judge(
    home: Path,
    turn_dir: Path,
    rc: int,
    adapter: Harness | None = None,
    *,
    verify: bool = True,
) -> Judgement:
    """Read the turn's end from its files: the watchdog's `timed-out`, the
    outcome flags of its structured output, strict mode, a usage-limit
    message, and (with `verify`) how its check ended (`pane.verify`).

    A sandboxed turn (DESIGN §19) whose sandbox could not be proven failed
    with cause `sandbox`; one that ran in it carries the flag `sandboxed`
    and what the sandbox denied it (`denied-net:HOST`), which strict mode
    fails.

    Bounded (see `outcome`): the flags are read from the end of the output.
    """
    from spexsup.adapters import sandbox as sandboxes

    failed = sandboxes.failure(turn_dir)
    if failed is not None:
        return Judgement(FAILED, cause=Cause.SANDBOX, error=failed)
    verdict = _judge(home, turn_dir, rc, adapter, verify=verify)
    held = sandboxes.flags(turn_dir)
    verdict.flags = [*verdict.flags, *held]
    refused = [f for f in held if f.startswith("denied-")]
    if refused and verdict.state == COMPLETE and turndir.meta(turn_dir).get("strict"):
        verdict.state, verdict.cause = FAILED, "strict"
        verdict.error = f"strict: the sandbox denied {', '.join(refused)}"
    return verdict


def _judge(
    home: Path,
    turn_dir: Path,
    rc: int,
    adapter: Harness | None,
    *,
    verify: bool,
) -> Judgement:
    from spexsup.adapters import outcome

    meta = turndir.meta(turn_dir)
    name = adapter.name if adapter is not None else str(meta.get("harness") or "")
    if rc == 126 and (turn_dir / turndir.NO_LOGIN_SHELL).exists():
        return Judgement(
            FAILED,
            cause=Cause.NO_LOGIN_SHELL,
            error="no login shell could be resolved - turn NOT started"
            " (check $SHELL and its rc files; or login_shell = false in config.toml)",
        )
    if rc == 127 and (turn_dir / turndir.NOT_FOUND).exists():
        try:
            first = (
                (turn_dir / turndir.ARGV).read_bytes().split(b"\0", 1)[0].decode(errors="replace")
            )
        except OSError:
            first = ""
        if "/" in first:  # a path, or a pinned binary (see sessions.check_binary) gone since
            return Judgement(FAILED, cause=Cause.NOT_FOUND, error=f"{first} not found")
        where = "the login PATH" if (turn_dir / turndir.LOGIN).exists() else "PATH"
        binary = name if name and name != "command" else "the harness"
        return Judgement(FAILED, cause=Cause.NOT_FOUND, error=f"{binary} not found on {where}")
    from spexsup.pane import budget

    over = budget.over(turn_dir)
    if over is not None:
        return Judgement(FAILED, cause=Cause.BUDGET, error=over)
    if rc == 124 and (turn_dir / turndir.TIMED_OUT).exists():
        from spexsup.durations import span

        limit = meta.get("timeout")
        spent = f" ({span(limit)})" if isinstance(limit, int | float) else ""
        said = f"ran past its time limit{spent}"
        ended = Judgement(TurnState.TIMED_OUT, cause=Cause.TIMED_OUT, error=said)
        ended.survivors = turndir.survivors(turn_dir)
        if ended.survivors:
            pids = ", ".join(map(str, ended.survivors))
            ended.error = f"{ended.error}; process(es) {pids} survived SIGKILL"
        return ended
    parser = adapter.outcome if adapter is not None else meta.get("outcome")
    found = outcome.read(turn_dir / turndir.OUTPUT, parser if isinstance(parser, str) else None)
    verdict = Judgement(end_state(rc), found.flags)
    verdict.outcome = found
    if rc == 0 and not found.fails:
        if found.flags and meta.get("strict"):
            verdict.state, verdict.cause = FAILED, "strict"
            verdict.error = f"strict: {outcome.describe(found.flags)}"
        elif verify:
            judgement.verified(turn_dir, verdict, meta)
        return verdict
    # A failed end: name its cause and the agent's own line for it, from
    # one read of the output's end.
    adapter = _adapter(home, name, adapter)
    tail = turndir.output_end(turn_dir)
    limit = _usage_limit(turn_dir, adapter, tail)
    if limit is not None:
        verdict.state, verdict.cause = FAILED, "usage-limit"
        verdict.error = f"{name or 'the harness'} hit its usage limit ({limit.when()})"
        verdict.limit_reset = limit.reset
        return verdict
    resumed = meta.get("resumed")
    if resumed and adapter is not None and any(re.search(p, tail) for p in adapter.gone):
        verdict.state, verdict.cause = FAILED, "conversation-gone"
        verdict.gone = str(resumed)
        verdict.error = (
            f"conversation {resumed} is gone; the next wake starts a new one (or --fresh)"
        )
        return verdict
    fatal = _fatal(tail, adapter)
    if fatal is not None and fatal[1] is not None:
        # The harness's own words for it beat its generic error event.
        verdict.state, verdict.cause = FAILED, fatal[1]
        verdict.error = fatal[2] or f"{fatal[0]}: {found.error or 'exited rc=' + str(rc)}"
    elif found.fails:
        verdict.state, verdict.cause = FAILED, outcome.classify(found)
        line = found.error or outcome.describe(found.flags)
        verdict.error = f"{fatal[0]}: {line}" if fatal else line
    return verdict


def _harness_name(turn_dir: Path) -> str:
    return str(turndir.meta(turn_dir).get("harness") or "")


def _adapter(home: Path, name: str, adapter: Harness | None) -> Harness | None:
    """The turn's adapter, loaded from the harness files when not given."""
    if adapter is not None or not name or name == "command":
        return adapter
    from spexsup.adapters import registry

    try:
        return registry.load_registry(home).get(name)
    except Exception:  # a broken harnesses.toml: spex doctor names it
        return None


def _fatal(text: str, adapter: Harness | None) -> tuple[str, str | None, str | None] | None:
    """What a harness's fatal pattern names for this output: its words
    (`claude is not logged in`), its category and the message it matched."""
    if adapter is None:
        return None
    for fatal in adapter.fatal:
        m = re.search(fatal.pattern, text)
        if m:
            return fatal.cause, fatal.category, m.groupdict().get("message")
    return None


def _usage_limit(
    turn_dir: Path, adapter: Harness | None, text: str
) -> outcome_mod.UsageLimit | None:
    from spexsup.adapters import outcome

    if adapter is None:
        return None
    limits = tuple((lim.pattern, lim.reset) for lim in adapter.limited)
    return outcome.find_limit(turn_dir / turndir.OUTPUT, limits, time.time(), text=text)


def write_ended(store: Store, turn: str, turn_dir: Path, rc: int) -> None:
    """Leave `ended` in the turn dir: how the turn ended as a person reads it
    (`2 tool permissions denied: Write, Bash`, a failure's message, `stopped
    by spex stop`), for the end line the wrapper prints in the pane. Whoever
    recorded the end (this reporter, the wake, a stop), the row has it."""
    from spexsup.adapters import outcome
    from spexsup.pane import pretty
    from spexsup.pane.lines import shorter

    row = store.db.execute("SELECT state, error, flags FROM turns WHERE id = ?", (turn,)).fetchone()
    if row is None:
        return
    flags = json.loads(row["flags"] or "[]")
    if row["state"] == TurnState.COMPLETE:
        text = outcome.describe(flags)
    elif row["state"] in ACTIVE:
        # Deferred to the wake still confirming it, which records what we
        # judge unless it retries the attempt (the pane then shows the next).
        found = judge(store.home, turn_dir, rc)
        text = found.error or outcome.describe(found.flags) or turndir.last_line(turn_dir) or ""
    else:
        text = row["error"] or row["state"]
        if row["state"] == TurnState.ABORTED and not row["error"]:
            text = "stopped"
    text = shorter(" ".join(pretty.printable(text).split()), 300)
    turndir.write_ended(turn_dir, text)


# A launcher retries a lock-class startup failure this many times (see
# turn.wake.RETRY_BACKOFF); past that, or for any other end, nothing defers to it.
MAX_RETRIES = 4
# The output of an attempt worth retrying is a lock message, nothing more.
RETRYABLE_OUTPUT_MAX = 4096
# How long a reader leaves a deferred end to a launcher that is alive: one
# that is suspended (Ctrl-Z, SIGSTOP) or starved must not hold it hostage.
DEFER_BOUND = 5.0


def worth_retrying(turn_dir: Path, adapter: Harness | None) -> bool:
    """Would a launcher retry this failed attempt? Only when nothing ran: no
    conversation id, and every line of output is a retryable (lock) message
    of the harness (one that edited files and then hit a lock must not run
    the same prompt again)."""

    if adapter is None or not adapter.retryable:
        return False
    try:
        if (turn_dir / turndir.OUTPUT).stat().st_size > RETRYABLE_OUTPUT_MAX:
            return False
    except OSError:
        return False
    text = turndir.output_end(turn_dir, RETRYABLE_OUTPUT_MAX)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not all(any(re.search(p, ln) for p in adapter.retryable) for ln in lines):
        return False
    return find_conversation_id(turn_dir, adapter.id_pattern) is None


# --- usage (issue 26) -------------------------------------------------------------

# A usage-limit wait keeps each attempt's output as limited-N.output.log.
LIMITED_MAX = 16


def run_outputs(turn_dir: Path) -> list[tuple[int, Path, str | None]]:
    """Every run of the harness in the turn, in order: (attempt, its output,
    how it ended when that is known here). The runs a usage-limit wait ended
    (`limited-N.output.log`, cause `usage-limit`) and those a model fallback
    ended (`attempt-N.output.log`, their causes in the `fallback` file), in
    the order they ended, come before the last one (`output.log`). A wake's
    retried attempts are not here: they ran nothing."""
    ended: list[tuple[float, Path, str | None]] = []
    for n in range(1, LIMITED_MAX + 1):
        path = turn_dir / f"limited-{n}.output.log"
        if not path.exists():
            break
        ended.append((_mtime(path), path, "usage-limit"))
    try:
        fell = json.loads((turn_dir / turndir.FALLBACK).read_text()).get("attempts") or []
    except (OSError, ValueError, AttributeError):
        fell = []
    for attempt in fell:
        path = turn_dir / str(attempt.get("output"))
        if path.exists() and path.parent == turn_dir:
            ended.append((_mtime(path), path, attempt.get("cause")))
    ended.sort(key=lambda run: run[0])
    runs = [(n, path, cause) for n, (_, path, cause) in enumerate(ended, start=1)]
    runs.append((len(runs) + 1, turn_dir / turndir.OUTPUT, None))
    return runs


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def record_verification(
    db: Any, session: str, turn: str, turn_dir: Path | None, checked: verify_mod.Result
) -> None:
    """The wrapper's check's row, ended as `checked` says, with the turn's end."""
    from spexsup.pane import check as verify

    if turn_dir is None:
        return
    if checked.timed_out:
        state = VERIFY_TIMED_OUT
    else:
        state = VERIFIED if checked.rc == 0 else VERIFY_FAILED
    ledger.verification_ended(
        db,
        session,
        turn,
        state=state,
        rc=checked.rc,
        tail=verify.tail(turn_dir / verify.LOG) or None,
        command=verify.command(turn_dir),
        started_at=verify.started_at(turn_dir),
    )


# A stop that could not record its abort first (another process held the write
# lock) leaves it here, so whoever records the end records the abort.


def _stop_request(turn_dir: Path | None) -> str | None:
    if turn_dir is None:
        return None
    try:
        return (turn_dir / turndir.STOP_REQUEST).read_text().strip() or "stopped"
    except OSError:
        return None


def _launcher_alive(pid: int | None, token: str | None) -> bool:
    from spexsup.adapters.procs import Liveness, identity_liveness

    return pid is not None and identity_liveness(pid, token) is Liveness.ALIVE


class By(enum.Enum):
    """Who records a turn's end. Its wrapper's exit REPORTER, in the pane: it
    may defer a failure to the live launcher that would retry it, records the
    usage even after a stop recorded the end, and is the tests' fault point
    before the next queued prompt (spexsup.faults). A READER (a launcher, a
    waiter, reconcile) records what the markers and processes say."""

    REPORTER = "reporter"
    READER = "reader"


class End(Record):
    """What its recorder knows of a turn's end before it is judged: the rc
    (None: the turn never reported one), or the end's state and error when
    the recorder decided them; whether the turn provably launched (its
    `launched` event is recorded first if no one has yet); the end's flags
    when no rc is read (a lost turn that was `orphaned`; with an rc, the
    output's); the wrapper's final marker, whose run time and lost output
    the end keeps."""

    rc: int | None
    state: str | None = None
    error: str | None = None
    launched: bool = False
    flags: Sequence[str] | None = None
    final: marker.Marker | None = None


def record_exit(
    store: Store,
    session: str,
    turn: str,
    rc: int | None,
    turn_dir: Path | None = None,
    *,
    error: str | None = None,
    adapter: Harness | None = None,
    final: marker.Marker | None = None,
) -> int:
    """CAS the end of a turn that exited with `rc`, as a reader read it (its
    marker): RECORDED if this call recorded it, STALE if it was a no-op."""
    # An rc means its wrapper ran: the turn launched.
    end = End(rc, error=error, launched=rc is not None, final=final)
    return _record(store, session, turn, turn_dir, end, By.READER, adapter)


def record_reported_exit(
    store: Store, session: str, turn: str, rc: int, turn_dir: Path, final: marker.Marker | None
) -> int:
    """The wrapper's exit reporter's CAS of the turn's end: RECORDED, STALE,
    or DEFERRED when the turn is still `starting` under a live launcher that
    would retry the failure (`worth_retrying`); any other end is recorded
    here, so a suspended launcher holds nothing hostage (readers take a
    deferred one over after DEFER_BOUND, see turn.reconcile)."""
    end = End(rc, launched=True, final=final)
    return _record(store, session, turn, turn_dir, end, By.REPORTER, None)


def record_without_exit(
    store: Store,
    session: str,
    turn: str,
    turn_dir: Path | None,
    *,
    state: str,
    error: str,
    launched: bool = False,
    flags: Sequence[str] | None = None,
) -> int:
    """CAS the end of a turn that never reported an rc (lost, interrupted by a
    reboot, abandoned at startup) as `state` with `error`: RECORDED or STALE.
    `launched`: the turn provably launched."""
    end = End(None, state=state, error=error, launched=launched, flags=flags)
    return _record(store, session, turn, turn_dir, end, By.READER, None)


class _Judged(Record):
    """An end as it will be recorded: the judgement (None: no rc to judge), its
    state, error and flags, the conversation it leaves, the usage of its runs,
    the stop it honors."""

    found: Judgement | None
    state: str
    error: str | None
    flags: Sequence[str] | None
    conversation: str | None
    spent: tuple[str | None, list[dict[str, Any]]] | None
    stop_request: str | None


def _judged(store: Store, turn_dir: Path | None, end: End, adapter: Harness | None) -> _Judged:
    """Judge the end from the turn dir (before the transaction: it reads files)."""
    rc, state, error = end.rc, end.state, end.error
    conversation = conversation_of(store, turn_dir, adapter) if turn_dir else None
    found = None
    stop_request = _stop_request(turn_dir)
    if stop_request is not None:
        state, error = TurnState.ABORTED, stop_request
    if state is None and rc is not None and turn_dir is not None:
        found = judge(store.home, turn_dir, rc, adapter)
        state = found.state
        error = error or found.error
        if found.cause == Cause.CONVERSATION_GONE:
            conversation = None  # what it printed is no conversation to resume
    state = state or end_state(rc if rc is not None else 1)
    lost = marker.lost_flag(end.final)
    kept = list(found.flags) if found is not None else end.flags
    if lost is not None:
        kept = [*(kept or ()), lost]
    if error is None and rc and turn_dir is not None:
        error = turndir.last_line(turn_dir)
    spent = None
    if turn_dir is not None and (rc is not None or (turn_dir / turndir.OUTPUT).exists()):
        # What the harness spent, recorded with the end (or, after a stop
        # recorded the end first, by the turn's own reporter).
        spent = spending(
            turn_dir,
            adapter,
            conversation,
            run_outputs(turn_dir),
            last=found.outcome if found is not None else None,
            cause=found.cause if found is not None else None,
        )
    return _Judged(found, state, error, kept, conversation, spent, stop_request)


def _turn_end(judged: _Judged, end: End) -> ledger.TurnEnd:
    """The end as the ledger records it: the judgement's facts (none
    without an rc to judge) and the reporter's."""
    found = judged.found
    return ledger.TurnEnd(
        judged.state,
        end.rc,
        judged.error,
        judged.flags,
        cause=found.cause if found is not None else None,
        limit_reset=found.limit_reset if found is not None else None,
        survivors=found.survivors if found is not None else (),
        ran=end.final.ran if end.final is not None else None,
        launched=end.launched,
        conversation=judged.conversation,
        stopped=judged.stop_request is not None,
    )


def _defers(store: Store, row: Any, turn_dir: Path | None, rc: int | None) -> bool:
    """Is this reported failure the live launcher's to retry? Only a turn
    still `starting`, within its retries, whose attempt ran nothing."""
    if not rc or turn_dir is None or row["state"] != TurnState.STARTING:
        return False
    if (row["attempts"] or 1) > MAX_RETRIES:
        return False
    if not worth_retrying(turn_dir, _adapter(store.home, _harness_name(turn_dir), None)):
        return False
    return _launcher_alive(row["launcher_pid"], row["launcher_token"])


def _record(
    store: Store,
    session: str,
    turn: str,
    turn_dir: Path | None,
    end: End,
    by: By,
    adapter: Harness | None,
) -> int:
    """CAS the turn's end; RECORDED if this call recorded it, STALE if it was a
    no-op, DEFERRED (only `by` the reporter) if it was left to the launcher."""
    # The reporter starts the next queued prompt's launcher before it records
    # the end (told to wait for it), so the launch need not wait for the
    # reporter's own exit (dequeuer.start_early).
    early = dequeuer.start_early(store.db, store.home, session, turn) if by is By.REPORTER else None
    judged = _judged(store, turn_dir, end, adapter)
    found, spent, lost = judged.found, judged.spent, marker.lost_flag(end.final)
    ran = end.final.ran if end.final is not None else None
    with store.tx() as db:
        row = ledger.current_turn(db, session, turn)
        if row is None or row["state"] not in ACTIVE:
            if row is not None and judged.conversation:
                # An aborted turn's conversation still exists: keep its id.
                ledger.set_conversation(db, session, judged.conversation)
            if by is By.REPORTER and spent is not None:
                ledger.record_usage(db, session, turn, harness=spent[0], runs=spent[1])
            if end.final is not None:  # a stop recorded the end: the run is the wrapper's to say
                ledger.record_run(db, turn, ran, lost)
            return STALE
        if (
            by is By.REPORTER
            and judged.stop_request is None
            and _defers(store, row, turn_dir, end.rc)
        ):
            return DEFERRED
        extra: dict[str, Any] = {}
        if found is not None:
            # `reason` repeats the event's `cause` for the hooks and scripts
            # that read it before 2026-12 (one release).
            extra = {"flags": judged.flags, "reason": found.cause}
            if found.verification is not None:
                extra["verify_rc"] = found.verification.rc
            if found.survivors:
                extra["survivors"] = found.survivors
        if found is not None and found.verification is not None:
            record_verification(db, session, turn, turn_dir, found.verification)
        ledger.record_end(db, session, turn, _turn_end(judged, end), extra)
        if found is not None and found.cause == Cause.CONVERSATION_GONE:
            # Resuming it can only fail the same way again: the next wake
            # (and a --retry-failed) starts a new conversation.
            ledger.forget_conversation(db, session, turn, found.gone)
        if spent is not None:
            ledger.record_usage(db, session, turn, harness=spent[0], runs=spent[1])
    # Whoever records an end starts the session's next queued prompt (see
    # turn.queue), in a detached process: the pane's hand-back never waits.
    if by is By.REPORTER:
        faults.at(faults.Fault.REPORTER_DIES_BEFORE_DEQUEUE)  # the next reader launches it
    # Any session's: a prompt queued `--after` this turn may go now.
    dequeuer.start_waiting(store.db, store.home, early)
    return RECORDED
