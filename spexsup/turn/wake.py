"""Start one turn now: admit, launch and confirm it, and tell the truth about it.

`start` is what `turn.front.wake` calls for a request that is not queued,
and what the dequeuer calls for one that was.

A lock-class startup failure is retried in a new attempt of the same turn
(RETRY_BACKOFF); every other end is settled here or left to the exit
reporter, whichever records first (the ledger's compare-and-swap).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any

from spexsup import config, states
from spexsup.adapters.harness import Harness
from spexsup.adapters.home import TmuxTimeout
from spexsup.adapters.watch import DirWatch
from spexsup.core.sessions import Session, validate_window
from spexsup.core.spex import Spex
from spexsup.errors import Failed, Refused, TurnStopped, clip
from spexsup.pane import marker, report, turndir
from spexsup.pane.marker import Stage
from spexsup.state import ledger
from spexsup.turn import keys
from spexsup.turn.admit import Verdict, admit
from spexsup.turn.confirm import Startup, confirm_startup, failure_message
from spexsup.turn.launch import claim_fence, kill_turn, launch, turn_state
from spexsup.turn.reconcile import reconcile
from spexsup.turn.request import NO_HOOKS, Hooks, WakeRequest
from spexsup.turn.target import taken

RETRY_BACKOFF = (0.25, 0.5, 1.0, 2.0)
assert len(RETRY_BACKOFF) == report.MAX_RETRIES


def start(
    spex: Spex,
    request: WakeRequest,
    hooks: Hooks = NO_HOOKS,
    settings: config.Config | None = None,
) -> Verdict:
    """Start a turn now and report what is true about it within the window
    (`turn.front.wake` decides between this and the queue; the dequeuer
    launches a queued request here). `settings`: config.toml as the caller
    read it (read here otherwise, before admission: a broken config file
    changes nothing).

    With `request.key` (spexsup.turn.keys), a wake whose key another wake
    claimed first starts nothing and answers with that wake's turn
    (`repeat_verdict`), waiting for its verdict if it is still confirming.

    Refusals raise `Refused` (exit 3) and change nothing; so does a wake that
    loses to a stop between admission and launch, and (unless `force`) one
    whose pane runs something other than an idle shell. A failed startup leaves no
    process of the turn behind and the pane back at a shell. `hooks.gate` (a
    fan-out's concurrency limit) is held around admission and launch only,
    so many turns can confirm at once.

    Interrupted (SIGINT, SIGTERM) before the launch, the turn is aborted and
    fenced; after it, the turn keeps running and the exception carries a
    note saying so (its end is still recorded by its wrapper). A gate that
    refuses the launch (an aborted wave) ends the admitted turn `aborted`
    the same way. `hooks.on_admitted` hears the turn id once it exists; a
    fan-out leg's turn is linked to its `request.wave` at admission (see
    `admit`).

    Staggered (the plan's `stagger`: the request's, else config.toml's),
    each launch first waits for its slot among launches of its harness
    (`spexsup.adapters.stagger`), inside the gate, with the turn `starting`; the
    window starts after it. A stop while it waits ends the wake at once
    (refused, nothing launched), and so does `hooks.check_abort` (called as
    it waits; a fan-out's abort raises there).
    """
    validate_window(request.window)
    if settings is None:
        settings = config.load(spex.home)
    key, name = request.key, request.name
    if key is None:
        return _start(spex, request, hooks, settings)
    mark = keys.fingerprint(request.prompt, request.fresh, tuple(request.limits))
    for _ in range(KEY_ATTEMPTS):
        if keys.lookup(spex.store.db, key, name, mark) is None:
            try:
                verdict = _start(spex, request, hooks, settings)
                return verdict._replace(key=key)
            except keys.Repeat:
                pass
        answer = repeat_verdict(spex, name, key)
        if answer is not None:
            return answer
        # The wake that claimed the key launched nothing (it gave the key
        # back): this one may start the turn.
    raise Failed(f"key {clip(key)!r} was claimed and given back {KEY_ATTEMPTS} times", hint="retry")


# How often a keyed wake tries again when the wake that held its key let it go.
KEY_ATTEMPTS = 5
# The longest a repeat waits for the first wake's verdict (its window, retries).
REPEAT_WAIT = 600.0


def repeat_verdict(spex: Spex, name: str, key: str, *, wait: float = REPEAT_WAIT) -> Verdict | None:
    """The answer to a repeated key: the first wake's verdict, with its turn
    (or queue entry) as it is now (`state`); None if the key is no longer
    claimed (its wake launched nothing, so a retry may start the turn).

    A turn still confirming is waited for (woken by the store's commits; a
    reader's reconcile settles a turn whose launcher died). A turn a stop
    aborted while it started is the stop's, as for the first wake: refused.
    """
    started = time.monotonic()
    checked = 0.0
    with DirWatch([spex.home], names=STORE_FILES) as watch:
        while True:
            row = spex.store.db.execute(
                "SELECT k.turn AS keyed, k.queued, t.state, t.verdict, t.rc, t.pid, t.error,"
                " t.flags, t.waiting_until, (SELECT count(*) FROM queue q, queue mine"
                " WHERE mine.id = k.queued AND q.session = mine.session AND q.seq <= mine.seq)"
                " AS position FROM wake_keys k LEFT JOIN turns t ON t.id = k.turn"
                " WHERE k.key = ?",
                (key,),
            ).fetchone()
            if row is None:
                return None
            waited = time.monotonic() - started
            if row["queued"] is not None or row["verdict"] is not None:
                break
            if row["state"] != states.STARTING:
                break
            if waited > wait:
                raise Failed(
                    f"{name}: key {clip(key)!r} names turn {row['keyed']}, still starting"
                    f" after {wait:g} s",
                    hint=f"spex show {name}",
                )
            if waited - checked >= 1.0:
                checked = waited
                reconcile(spex, [name])  # its launcher may have died
            watch.wait(0.5)
    elapsed = int((time.monotonic() - started) * 1000)
    return _answer(name, row)._replace(key=key, repeat=True, elapsed_ms=elapsed)


def _answer(name: str, row: Any) -> Verdict:
    """The first wake's verdict and what its turn (or queue entry) is now."""
    if row["queued"] is not None:
        if row["keyed"] is None:
            return Verdict(
                name, None, states.Verdict.QUEUED, queued=row["queued"],
                position=row["position"], state="queued",
            )  # fmt: skip
        return Verdict(
            name, row["keyed"], states.Verdict.QUEUED, row["rc"], row["pid"],
            queued=row["queued"], state=row["state"],
        )  # fmt: skip
    verdict = row["verdict"]
    if verdict is None:
        if row["state"] == states.ABORTED:
            raise TurnStopped(name, row["keyed"], "while it started")
        ran = {states.RUNNING: states.Verdict.CONFIRMED, states.COMPLETE: states.Verdict.COMPLETED}
        verdict = ran.get(row["state"], states.Verdict.FAILED)
    return Verdict(
        name, row["keyed"], verdict, row["rc"], row["pid"],
        row["error"] if verdict == states.Verdict.FAILED else None,
        flags=json.loads(row["flags"] or "[]"), waiting_until=row["waiting_until"],
        state=row["state"],
    )  # fmt: skip


STORE_FILES = frozenset({"state.db", "state.db-wal"})


def _start(spex: Spex, request: WakeRequest, hooks: Hooks, settings: config.Config) -> Verdict:
    """`start` for one attempt at the key (or none): admit, launch, confirm,
    retry a lock-class failure, settle."""
    started = time.monotonic()
    name = request.name
    gate = hooks.gate or nullcontext()
    # The target, once: held (its ticket) and reconciled before admission.
    with taken(spex, name, "wake"):
        with gate:
            session, turn, directory, adapter, plan = admit(
                spex, request, settings, tree_start=hooks.tree_start
            )
        if hooks.on_admitted is not None:
            hooks.on_admitted(turn)
        attempts = 0
        launched_once = False
        try:
            while True:
                attempts += 1
                with DirWatch([directory]) as watch:
                    with gate:
                        if plan.stagger:
                            _await_slot(
                                spex, name, turn, adapter.name, plan.stagger, hooks.check_abort
                            )
                        # A retry replaces our own previous attempt's shell.
                        mine = request.force or attempts > 1
                        pane_pid = launch(spex, session, turn, directory, force=mine)
                    launched_once = True
                    # The window measures the harness's startup, not our own
                    # admission (which may queue behind other writers).
                    launched = time.monotonic()
                    result = confirm_startup(directory, plan.window, launched, watch, pane_pid)
                if not _retryable(adapter, directory, result, attempts):
                    break
                if not _rotate_attempt(spex, name, turn, directory):
                    break  # a reader recorded the end while we were not running
                time.sleep(RETRY_BACKOFF[attempts - 1])
            verdict = _settle(spex, session, turn, directory, adapter, result)
        except Exception as e:
            if not launched_once:
                why = str(e) or f"not launched ({type(e).__name__})"
                _abort_unlaunched(spex, session, turn, why)
            raise
        except BaseException as interrupt:
            # Interrupted inside the tmux call that launched it, the wrapper
            # may already run: its marker says so, and then it is launched.
            if launched_once or marker.read(directory).stage is not Stage.NONE:
                interrupt.add_note(f"{name}: turn {turn} keeps running (spex wait {name})")
            else:
                try:
                    _abort_unlaunched(
                        spex, session, turn, "spex wake was interrupted before launch"
                    )
                    interrupt.add_note(f"{name}: turn {turn} aborted before it started")
                except Failed as e:  # the signal still decides the exit
                    interrupt.add_note(e.line())
            raise
    # The turn's attempts: this wake's launches and any model it fell back to.
    row = spex.store.db.execute("SELECT attempts FROM turns WHERE id = ?", (turn,)).fetchone()
    attempts = max(attempts, int(row[0] or 1)) if row is not None else attempts
    return verdict._replace(attempts=attempts, elapsed_ms=int((time.monotonic() - started) * 1000))


def _await_slot(
    spex: Spex,
    name: str,
    turn: str,
    harness: str,
    spacing: float,
    check_abort: Callable[[], None] | None,
) -> None:
    """Wait for this launch's start among launches of `harness`: its slot
    (`stagger.reserve`), and `spacing` after the moment the launch before it
    really started its harness (the wrapper's `started`), waited for at most
    PREDECESSOR_WAIT past that launch's slot (it may never start: stopped,
    refused, its launcher dead).

    Woken by the store's commits and the predecessor's files (and the coarse
    poll), so a stop that aborts the turn meanwhile ends the wait at once
    (TurnStopped), as does whatever `check_abort` raises. A stop after the
    wait is launch's fence's to refuse.
    """
    directory = turndir.path(spex.home, name, turn)
    from spexsup.adapters import stagger  # only a staggered harness's turns pay for it

    turndir.write_stagger(directory, spacing)
    slot = stagger.reserve(spex.home, harness, spacing, f"{name}/{turn}")
    before = None
    if slot.before is not None and slot.before_at is not None:
        path = turndir.root(spex.home) / slot.before
        if path != directory and path.is_dir():
            before = path
    until = slot.at
    watch: DirWatch | None = None
    with ExitStack() as stack:
        while True:
            if turn_state(spex, turn) != states.STARTING:
                raise TurnStopped(name, turn)
            if check_abort is not None:
                check_abort()
            if before is not None:
                assert slot.before_at is not None
                since = _harness_started(spex, before)
                if since is not None:
                    # The wall clock, as the wrapper wrote it: a step of it
                    # never makes this launch wait more than `spacing`.
                    wait = min(spacing, since + spacing - time.time())
                    until = max(until, stagger.now() + wait)
                    before = None
                elif stagger.left(slot.before_at + PREDECESSOR_WAIT) <= 0:
                    before = None  # it is not going to start: our slot is enough
            left = stagger.left(until)
            if before is None and left <= 0:
                return
            if watch is None:  # only a launch that waits pays for it
                watched = [spex.home] if before is None else [spex.home, before]
                names = STORE_FILES | {turndir.STARTED, turndir.OUTCOME}
                watch = stack.enter_context(DirWatch(watched, names=names))
                continue  # what changed before it watched
            watch.wait(left if left > 0 else COARSE_WAIT)


# How long past its own slot a launch's predecessor may take to start its
# harness (a login shell's environment, a worktree's snapshot) before the
# launch stops waiting for it.
PREDECESSOR_WAIT = 10.0
# Waiting for the predecessor's `started` with no slot time left to wait:
# woken by its files, and at least this often.
COARSE_WAIT = 0.5


def _harness_started(spex: Spex, directory: Path) -> float | None:
    """When the harness of the turn in `directory` started (epoch seconds),
    or None while it has not; a turn that ended, or got as far as its end,
    without (or whose directory is gone) counts as started long ago (0)."""
    try:
        return int((directory / turndir.STARTED).read_text()) / 1e6
    except (OSError, ValueError):
        pass
    if not directory.is_dir() or marker.read(directory).stage in (Stage.REPORTING, Stage.EXIT):
        return 0.0
    if turn_state(spex, directory.name) not in (states.STARTING, states.RUNNING):
        return 0.0
    return None


def _abort_unlaunched(spex: Spex, session: Session, turn: str, why: str) -> None:
    """End a turn that never (provably) launched: abort it, then fence and kill,
    in case the tmux call was already on its way when we were interrupted."""
    with spex.store.tx() as db:
        ledger.abort_current(
            db,
            session.name,
            turn,
            why,
            only_starting=True,
            session_after=states.session_state_after(states.ABORTED),
        )
        ledger.release_key(db, turn)  # it never ran: a retry with its key may start it

    try:
        kill_turn(spex, session, turn, grace=0.5)
    except TmuxTimeout as e:
        # The turn is recorded aborted; what a wedged server still runs, a
        # reader finds (its reporter's end is stale) and spex stop ends.
        raise Failed(
            f"{session.name}: turn {turn} aborted, but {e.message}",
            hint=f"once tmux answers: spex stop {session.name}",
        ) from None


def _retryable(adapter: Harness, directory: Path, result: Startup, attempts: int) -> bool:
    """A lock-class startup failure is retried up to 4 times, but only when
    nothing ran (see report.worth_retrying)."""
    if result.verdict != states.Verdict.FAILED or result.rc is None or result.rc == 0:
        return False
    if attempts > len(RETRY_BACKOFF):
        return False
    return report.worth_retrying(directory, adapter)


def _rotate_attempt(spex: Spex, name: str, turn: str, directory: Path) -> bool:
    """Keep attempt N's marker and output beside the turn for the next attempt
    (`attempt-N.outcome`, `attempt-N.output.log`).

    The failed attempt was never published (its reporter deferred to us), so
    the turn is still `starting`. If it is not, either a stop won (Refused)
    or a reader recorded the deferred end because we took too long (a
    suspended wake; see report.DEFER_BOUND): False, there is nothing to retry.
    """
    try:
        claim_fence(spex, name, turn)
        with spex.store.tx() as db:
            failed = ledger.retry_attempt(db, turn)
            if failed is None:
                raise TurnStopped(name, turn)
    except Refused:
        if turn_state(spex, turn) in (None, states.TurnState.ABORTED):
            raise
        return False
    for file in (turndir.OUTCOME, turndir.OUTPUT):
        src = directory / file
        if src.exists():
            src.rename(directory / f"attempt-{failed}.{file}")
    return True


def _settle(
    spex: Spex, session: Session, turn: str, directory: Path, adapter: Harness, result: Startup
) -> Verdict:
    """Record the verdict; make sure a failed startup leaves nothing running.

    A turn a stop aborted while we confirmed it is the stop's: refused.
    """
    m = result.marker
    name = session.name
    error = result.error
    rc = result.rc
    if turn_state(spex, turn) == states.TurnState.ABORTED:
        if result.verdict == states.Verdict.FAILED and rc is None:
            kill_turn(spex, session, turn, grace=0.5)
        report.remember_conversation(spex.store, name, directory, adapter)
        raise TurnStopped(name, turn, "while it started")
    verdict = result.verdict
    flags: list[str] = []
    if rc is not None:
        # The wrapper's reporter may have deferred to us (a failure we might
        # have retried), failed, or be slow: the CAS makes recording twice safe.
        report.record_exit(spex.store, name, turn, rc, directory, adapter=adapter, final=m)
        ended = spex.store.db.execute(
            "SELECT state, error, flags, cause FROM turns WHERE id = ?", (turn,)
        ).fetchone()
        flags = json.loads(ended["flags"] or "[]") if ended else []
        if ended is not None and ended["cause"]:
            # Timed out, strict, an error opencode exited 0 after, a usage limit.
            verdict, error = states.Verdict.FAILED, ended["error"]
        elif rc != 0:
            error = failure_message(adapter, directory, rc, m.cas)
    elif result.verdict == states.Verdict.FAILED:
        _abandon(spex, session, turn, directory, error or "failed")
    else:
        report.remember_conversation(spex.store, name, directory, adapter)
    with spex.store.tx() as db:
        ledger.record_verdict(db, turn, verdict, error=error, pid=result.pid)
        if verdict == states.Verdict.CONFIRMED:
            ledger.mark_running(db, name, turn, pid=result.pid)
    waiting_until = None
    if verdict == states.Verdict.CONFIRMED:
        row = spex.store.db.execute(
            "SELECT waiting_until FROM turns WHERE id = ?", (turn,)
        ).fetchone()
        waiting_until = row["waiting_until"] if row else None
    return Verdict(
        name, turn, verdict, rc, result.pid, error, flags=flags, waiting_until=waiting_until
    )


def _abandon(spex: Spex, session: Session, turn: str, directory: Path, error: str) -> None:
    """End a turn whose startup failed without an exit: record first, then kill."""
    report.record_without_exit(
        spex.store, session.name, turn, directory, state=states.FAILED, error=error, launched=True
    )
    kill_turn(spex, session, turn, grace=0.5)
