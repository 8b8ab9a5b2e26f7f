"""Reconciliation: settle turns whose wrapper is gone, and what follows their end.

Any reader runs it before it reports a session: a turn whose wrapper
vanished without a final marker, or whose launcher died before it started
one, is recorded lost (or by its kept marker); a deferred end past its bound
is taken over; the waves its turns are legs of move on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spexsup import states
from spexsup.adapters import dequeuer
from spexsup.adapters.procs import (
    Liveness,
    boot_id,
    identity_liveness,
)
from spexsup.core.sessions import get
from spexsup.core.spex import Spex
from spexsup.errors import warn
from spexsup.pane import marker, turndir
from spexsup.pane.marker import Marker, Stage
from spexsup.paths import (
    disk_full,
    no_space,
)
from spexsup.state.store import WAVE_HOOK_UNSTARTED
from spexsup.states import ORPHANED, RUNNING

# The ledger is imported where a turn is settled: a reader with nothing to
# settle (most `ls` and `show`) never loads it (issue 40).


def _unlaunched(spex: Spex, row: Any, directory: Path) -> Liveness:
    """Did a turn with no marker (and no launcher left) start a wrapper?

    ALIVE: the pane is tagged with the turn and runs its wrapper (about to
    write its marker). DEAD: provably never will, because the pane is fenced
    against the turn's attempt first, so a tmux call of the dead launcher
    still in flight can no longer land. UNPROVEN: tmux could not tell.
    """
    session = get(spex, row["session"])
    owner = session.owner(spex.home)
    if row["fence"] is not None:
        spex.tmux.fence(session.name, owner, int(row["fence"]))
    census = spex.tmux.census()
    if census.liveness is Liveness.UNPROVEN:
        return Liveness.UNPROVEN
    pane = census.panes.get(session.name)
    if pane is None or pane.owner != owner or pane.turn != row["id"] or pane.pane_dead:
        return Liveness.DEAD
    return turndir.wrapper_liveness(pane.pane_pid, directory)


# The sessions' current turns not ended, found from the unfinished turns'
# partial index (`turns_active`): every reader runs this, and going from the
# sessions looked up each one's current turn (3.5 ms for 1 000 sessions).
UNFINISHED = (
    "SELECT t.id, t.session, t.state, t.launcher_pid, t.launcher_token, t.fence,"
    " t.boot_id, t.flags, t.survivors FROM turns t"
    " JOIN sessions s ON s.name = t.session AND s.current_turn = t.id"
    " WHERE t.state IN ('starting', 'running')"
)


def reconcile(spex: Spex, names: Sequence[str] | None = None) -> float | None:
    """Settle current unfinished turns from their markers and process liveness.

    A turn still `starting` under a live launcher is the launcher's to settle
    (it may retry a failed attempt), so it is left alone, but an end its
    reporter deferred to it is taken over once DEFER_BOUND has passed since
    the final marker: a suspended or starved launcher must not hold it
    hostage. Returns when the next such
    end falls due (a clock time), for a waiter's timer. Otherwise: a
    wrapper that is provably gone without a final marker makes the turn
    `lost`; an exit the reporter did not record is recorded; a turn whose
    launcher died after a good start moves on to `running`; a probe that
    proves nothing leaves the turn alone. A wrapper gone while processes
    carrying the turn's SPEXSUP_TURN run on (an agent that ignores the
    hangup) leaves the turn running, `orphaned` (see `_orphaned`).
    """
    if names is None:
        rows = spex.store.db.execute(UNFINISHED).fetchall()
    else:
        # Only the sessions asked about: each leg of a wave reconciles its own
        # before admission, and reading every running turn of the home each
        # time made a wave's reads grow with the square of its legs.
        rows = spex.store.db.execute(
            UNFINISHED + " AND t.session IN (SELECT value FROM json_each(?))",
            (json.dumps(list(names)),),
        ).fetchall()
    # Hooks whose claimer died before starting them are a reader's to start.
    spex.resume_hooks()
    boot = boot_id() if rows else ""
    due: float | None = None
    for row in rows:
        name, turn = row["session"], row["id"]
        if row["boot_id"] and boot and row["boot_id"] != boot:
            # Nothing of an earlier boot runs now; pids and start tokens of
            # then mean nothing. The conversation is kept for `up --revive`.
            from spexsup.pane import report  # (a reader of ended turns only pays for it here)

            directory = turndir.path(spex.home, name, turn)
            report.record_without_exit(
                spex.store,
                name,
                turn,
                directory,
                state=states.TurnState.INTERRUPTED,
                error="machine rebooted",
                launched=row["state"] == states.TurnState.RUNNING,
            )
            continue
        launcher = identity_liveness(row["launcher_pid"], row["launcher_token"])
        directory = turndir.path(spex.home, name, turn)
        if row["state"] == states.TurnState.STARTING and launcher is not Liveness.DEAD:
            deferred = _deferred_until(directory)
            if deferred is None:
                continue
            if time.time() < deferred:
                due = deferred if due is None else min(due, deferred)
                continue
        try:
            _settle_current(spex, row, directory)
        except Exception as e:
            if not disk_full(e):
                raise
            # Reads go on with the state as last recorded; a waiter tries again.
            warn(f"{no_space(spex.home)}: turn {turn} of {name} is not settled")
            retry = time.time() + DISK_FULL_RETRY
            due = retry if due is None else min(due, retry)
    _settle_waves(spex, [row["id"] for row in rows])
    # A prompt queued for a free session whose end's recorder died (or came
    # before the prompt did): a dequeuer launches it, once (see turn.queue).
    for name in dequeuer.waiting(spex.store.db, None if names is None else tuple(names), spex.home):
        dequeuer.start_once(spex.home, name)
    return due


def _settle_waves(spex: Spex, settled: Sequence[str]) -> None:
    """Move on the waves whose legs' ends a reader recorded here (their
    reporter would have, had it lived), and start an on-complete command
    whose claimer died before starting it (`wavedoc.resume`): no wave waits
    for its reader. Two queries; waves is imported only when one answers."""
    db = spex.store.db
    ended: list[str] = []
    if settled:
        marks = ",".join("?" * len(settled))
        ended = [
            r["turn"]
            for r in db.execute(
                "SELECT wt.turn FROM wave_turns wt JOIN turns t ON t.id = wt.turn"
                f" WHERE wt.turn IN ({marks}) AND t.state NOT IN ('starting', 'running')",
                list(settled),
            )
        ]
    waiting = db.execute(f"SELECT 1 FROM waves WHERE {WAVE_HOOK_UNSTARTED} LIMIT 1").fetchone()
    if not ended and waiting is None:
        return
    from spexsup.core import wavedoc

    if ended:
        wavedoc.settle_turn_ends(spex, ended)
    if waiting is not None:
        wavedoc.resume(spex)


# How soon a waiter tries again to record an end a full disk kept it from.
DISK_FULL_RETRY = 2.0


def _settle_current(spex: Spex, row: Any, directory: Path) -> None:
    """Record what the markers and processes say of one unfinished turn (see reconcile)."""
    from spexsup.pane import report  # (not for a home whose turns all ended)
    from spexsup.state import ledger

    name, turn = row["session"], row["id"]
    m = marker.read(directory)
    if m.stage is Stage.EXIT:
        report.record_exit(spex.store, name, turn, m.rc, directory, final=m)
    elif m.stage in marker.LIVE or m.stage is Stage.REPORTING:
        assert m.pid is not None
        wrapper = m.pid
        alive = turndir.wrapper_liveness(wrapper, directory)
        # Only a `starting` row has anything to move on: a reader of running
        # turns (ls, wait, a wave's refresh) takes no write lock for them.
        starting = row["state"] == states.TurnState.STARTING
        if alive is Liveness.ALIVE and m.stage is not Stage.REPORTING and starting:
            with spex.store.tx() as db:
                why = "the spex wake that started it died; the turn runs on"
                ledger.mark_running(db, name, turn, pid=m.pid, note=why)
        if alive is not Liveness.DEAD:
            return
        # Its last markers may be in the pane, where the wrapper kept what a
        # full disk had no room for.
        kept = _kept_marker(spex, name, turn)
        if kept is not None and kept.stage is Stage.EXIT:
            report.record_exit(spex.store, name, turn, kept.rc, directory, final=kept)
            return
        if kept is not None and kept.stage is Stage.REPORTING:
            m = kept._replace(pid=m.pid)
        if m.stage is Stage.REPORTING:
            why = f"the turn's process (pid {m.pid}) died while recording its end (rc={m.rc})"
            report.record_exit(spex.store, name, turn, m.rc, directory, error=why, final=m)
        else:
            if m.stage is Stage.VERIFYING:
                _end_check(turn, directory)
            elif _orphaned(spex, row, wrapper):
                return
            why = (
                f"the turn's process (pid {m.pid}) is gone and never recorded how it ended"
                " (its pane was closed, the tmux server died, or the machine restarted)"
            )
            ran_on = orphan_pids(row)
            if ran_on:
                why += f"; its agent ran on without it (pid {_pids(ran_on)}) until it ended"
            report.record_without_exit(
                spex.store,
                name,
                turn,
                directory,
                state=states.TurnState.LOST,
                error=why,
                launched=True,
                flags=[ORPHANED] if ran_on else None,
            )
    elif m.stage is Stage.INVALID:
        why = f"the turn's record is unreadable ({m.text!r})"
        report.record_without_exit(
            spex.store, name, turn, directory, state=states.TurnState.LOST, error=why
        )
    elif _unlaunched(spex, row, directory) is Liveness.DEAD:
        why = "the spex wake that started it died before the turn confirmed its start"
        report.record_without_exit(
            spex.store, name, turn, directory, state=states.TurnState.LOST, error=why
        )


def _orphaned(spex: Spex, row: Any, wrapper: int) -> bool:
    """Does the turn run on without its wrapper (pid `wrapper`, gone)? An
    agent that ignores SIGHUP outlives its pane and its tmux server: while
    any process carrying the turn's SPEXSUP_TURN lives, the turn is not
    lost but `running`, flagged `orphaned`, those pids its `survivors` (a
    stop finds them by the same tag; a wake is refused meanwhile).

    Scanning every process's environment is the rare path, taken once when
    the wrapper is found gone and again only when every survivor recorded
    is: each later reader re-checks the recorded pids alone (two reads of
    /proc each), and writes only when they changed. A survivor whose
    liveness cannot be proven counts as alive."""
    from spexsup.adapters.procs import tagged_liveness, turn_processes
    from spexsup.state import ledger

    name, turn = row["session"], row["id"]
    recorded = orphan_pids(row)
    left = [pid for pid in recorded if tagged_liveness(pid, turn) is not Liveness.DEAD]
    if not left:
        left = sorted(p.pid for p in turn_processes(turn, None))
    if not left:
        return False
    if row["state"] == RUNNING and left == recorded:
        return True
    with spex.store.tx() as db:
        why = "the spex wake that started it died; the turn runs on"
        ledger.mark_running(db, name, turn, pid=wrapper, note=why)
        ledger.mark_orphaned(db, name, turn, wrapper=wrapper, survivors=left)
    return True


def orphan_pids(row: Any) -> list[int]:
    """The survivors recorded of an `orphaned` turn (none of any other), from
    its row's `flags` and `survivors`."""
    if ORPHANED not in json.loads(row["flags"] or "[]"):
        return []
    return [int(pid) for pid in json.loads(row["survivors"] or "[]")]


def _pids(pids: Sequence[int]) -> str:
    return ", ".join(map(str, pids))


def _end_check(turn: str, directory: Path) -> None:
    """End the check of a turn whose wrapper died while it ran. A harness
    ends with its pane (the hangup of its wrapper's or the tmux server's
    end); the check runs in a process session of its own, which no hangup
    reaches, and its watchdog died with the wrapper: it would run on,
    unbounded. Its processes carry the turn's `SPEXSUP_TURN`."""
    from spexsup.adapters.procs import reap, turn_processes
    from spexsup.pane import check

    reap(lambda: turn_processes(turn, None), check.grace(directory))


def _kept_marker(spex: Spex, name: str, turn: str) -> Marker | None:
    """The marker the wrapper kept in the pane for `turn` (a full disk), if any."""
    kept_turn, _, text = spex.tmux.kept_outcome(name).partition(" ")
    if kept_turn != turn:
        return None
    kept = marker.parse(text.encode())
    return None if kept.stage is Stage.INVALID else kept


def _deferred_until(directory: Path) -> float | None:
    """When a final marker (an end the reporter may have deferred to the
    launcher) becomes any reader's to record; None while there is none."""
    from spexsup.pane import report

    if marker.read(directory).stage is not Stage.EXIT:
        return None
    try:
        return (directory / turndir.OUTCOME).stat().st_mtime + report.DEFER_BOUND
    except OSError:  # rotated away for a retry meanwhile
        return None
