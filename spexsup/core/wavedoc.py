"""A fan-out wave's document: its one owner (DESIGN §6).

A wave's document (`<home>/waves/<id>.json`, mirrored in SQLite) is the
record: id, times, the prompt (its file and first 200 characters), the cwd,
one leg per session with its launch verdict *and* its turn's end, and a
history of `wave-started`, `leg-ended` and `wave-ended` events, and the
per-turn options every leg ran under, which `--retry-failed` applies again.
Its `counts` are the legs by outcome (`tally`), as every text says them
(`count_line`: `15 legs: 5 complete · 8 failed · 2 skipped · 0 running`).

Every writer read-merge-writes (`mutate`): it re-reads the document under the
store's write transaction, applies its change, merges the turns' ends from
the turns table, settles the wave's state, and writes SQLite and the file
before committing. So a `retried_by` link added by another process survives,
and whoever records a leg's end (its reporter, a reconciling reader, a stop)
moves the wave on (`settle_turn_end`): `running` until every launched turn
has ended, then `complete` (every turn ended `complete`), `partial` or
`failed`. An abort marks the wave and its unstarted legs `aborted`; abort
wins over any later state. `--on-complete CMD` runs once, claimed in the
same transaction that makes the state final.

Below the turn wing: the turn wing settles waves, and `spexsup.conductors.waves`
launches them.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spexsup import faults, ids, states
from spexsup.adapters.procs import Liveness, identity_liveness, own_identity
from spexsup.core.spex import Spex
from spexsup.errors import Invalid, Refused
from spexsup.paths import ensure_private_dir, write_atomic
from spexsup.state import events
from spexsup.state.store import WAVE_HOOK_UNSTARTED
from spexsup.states import LegResult, LegStatus, Verdict, WaveState

SCHEMA_VERSION = 1
SUCCESS = states.SUCCESS
FINAL = (WaveState.COMPLETE, WaveState.PARTIAL, WaveState.FAILED, WaveState.ABORTED)
TURN_ACTIVE = (None, *states.ACTIVE)
PROMPT_HEAD = 200
WAVE_ID_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-TZ"
# Never handed to --on-complete: it is not part of any turn.
TURN_ENV = ("SPEXSUP_SESSION", "SPEXSUP_TURN", "SPEXSUP_TURN_DIR", "SPEXSUP_PROMPT_FILE")

Doc = dict[str, Any]
Change = Callable[[Doc], None]
Listener = Callable[[Doc], None]


def new_wave_id() -> str:
    return ids.new_id("w")


def validate_wave_id(wave: str) -> str:
    if not (1 <= len(wave) <= 64) or any(c not in WAVE_ID_CHARS for c in wave):
        raise Invalid(f"invalid wave id {wave!r}", hint="see spex wave ls")
    return wave


def waves_dir(spex: Spex) -> Path:
    return ensure_private_dir(spex.home / "waves", under=spex.home)


# The sets the two outcome readers test, made once: a 1 000-leg wave reads
# every leg's outcome twice on each of its hundreds of writes (issue 40).
_UNLAUNCHED = frozenset({LegStatus.PENDING, LegStatus.LAUNCHING})
_SUCCEEDED = frozenset(SUCCESS)
_TURN_ACTIVE = frozenset(TURN_ACTIVE)
_TURN_ENDS = frozenset(states.ENDS)
_LAUNCHED_VERDICTS = frozenset({*SUCCESS, Verdict.UNCONFIRMED, Verdict.QUEUED})


def leg_outcome(leg: Doc) -> str:
    """pending (not launched yet), queued (waiting for a running limit or an
    `--after` turn), aborted (never launched), running, ok or failed."""
    if leg["status"] in _UNLAUNCHED:
        return LegResult.PENDING
    verdict = leg["verdict"]
    if verdict == Verdict.ABORTED:
        return LegResult.ABORTED
    if verdict == Verdict.QUEUED:
        if leg["turn"] is None:
            return LegResult.QUEUED
        # Launched by whoever dequeued it: its turn tells the rest.
    elif verdict not in _SUCCEEDED:
        return LegResult.FAILED
    turn_state = leg.get("turn_state")
    if turn_state in _TURN_ACTIVE:
        return LegResult.RUNNING
    return LegResult.OK if turn_state == states.TurnState.COMPLETE else LegResult.FAILED


def launched(leg: Doc) -> bool:
    """Did the leg's turn run? Confirmed or completed in its window, or with
    an exit of its own (a turn that started and failed inside its window was
    launched), or dequeued into a turn that got past its start."""
    if leg.get("turn") is None:
        return False
    if leg.get("verdict") in (*SUCCESS, Verdict.UNCONFIRMED) or leg.get("rc") is not None:
        return True
    return leg.get("verdict") == Verdict.QUEUED and leg.get("turn_state") not in (
        *TURN_ACTIVE,
        states.SKIPPED,
        states.ABORTED,
    )


def counts(doc: Doc) -> dict[str, int]:
    """The legs by `leg_outcome` and how many launched: the shape of the
    `wave-ended` event and `--on-complete`'s SPEXSUP_WAVE_* (kept for scripts);
    what a person reads is `count_line`, what JSON adds is `tally`."""
    outcomes = [leg_outcome(leg) for leg in doc["legs"]]
    tally = {k.value: outcomes.count(k) for k in LegResult}
    return {"legs": len(outcomes), "launched": sum(map(launched, doc["legs"])), **tally}


# A leg's outcome, the one word it is counted by: the four every count line
# names, in this order, then the others, named only when some leg has them.
NAMED_OUTCOMES = (states.COMPLETE, states.FAILED, states.SKIPPED, states.RUNNING)
OTHER_OUTCOMES = (
    LegResult.QUEUED,  # waiting for a running limit or an `--after` turn
    LegResult.PENDING,  # not launched yet (the fan-out is launching it)
    states.ABORTED,
    states.LOST,
    states.INTERRUPTED,
    states.TIMED_OUT,
)
OUTCOMES = NAMED_OUTCOMES + OTHER_OUTCOMES


def outcome(leg: Doc) -> str:
    """The leg's outcome (one of OUTCOMES): its turn's end state once it
    ended; `running` while a launched turn runs; otherwise what became of
    the launch: `queued`, `pending`, `aborted` (the wave was aborted first),
    `skipped` (`--after`, `--budget`), `failed` (it failed to launch or was
    refused). A fleet wave's legs, as recorded, read alike."""
    if leg.get("status") in _UNLAUNCHED:
        return LegResult.PENDING
    verdict = leg.get("verdict")
    if verdict == Verdict.ABORTED:
        return states.ABORTED
    turn_state = leg.get("turn_state")
    if turn_state in _TURN_ENDS:
        return str(turn_state)
    if verdict == Verdict.QUEUED and leg.get("turn") is None:
        return LegResult.QUEUED
    if verdict in _LAUNCHED_VERDICTS and leg.get("turn") is not None:
        return states.RUNNING
    return states.SKIPPED if verdict == states.SKIPPED else states.FAILED


def tally(doc: Doc) -> dict[str, int]:
    """`{"legs": N, "complete": A, "failed": B, …}`: every outcome, zeros
    too (a wave's JSON `counts`)."""
    outcomes = [outcome(leg) for leg in doc["legs"]]
    return {"legs": len(outcomes), **{k: outcomes.count(k) for k in OUTCOMES}}


def count_line(doc: Doc, *, hosts: int | None = None) -> str:
    """`15 legs: 5 complete · 8 failed · 2 skipped · 0 running`, then any
    other outcome some leg has (`· 1 lost`): how every text counts a wave's
    legs (fan-out, `spex wave`, the web page). `hosts`: a fleet wave's,
    `3 legs on 2 hosts: …`."""
    t = tally(doc)
    n = t["legs"]
    head = f"{n} leg{'s' * (n != 1)}"
    if hosts is not None:
        head += f" on {hosts} host{'s' * (hosts != 1)}"
    parts = [f"{t[k]} {k}" for k in NAMED_OUTCOMES]
    parts += [f"{t[k]} {k}" for k in OTHER_OUTCOMES if t[k]]
    return f"{head}: {' · '.join(parts)}"


def overall(doc: Doc, outcomes: Sequence[str] | None = None) -> str:
    """The state the legs add up to, once launching is over; `outcomes`:
    each leg's `leg_outcome`, when the caller has them."""
    if outcomes is None:
        outcomes = [leg_outcome(leg) for leg in doc["legs"]]
    if any(o in (LegResult.PENDING, LegResult.QUEUED, LegResult.RUNNING) for o in outcomes):
        return WaveState.RUNNING
    ok = outcomes.count(LegResult.OK)
    if ok == len(outcomes):
        return WaveState.COMPLETE
    return WaveState.FAILED if ok == 0 else WaveState.PARTIAL


def succeeded(doc: Doc) -> bool:
    """Exit 0 for the wave so far: every leg launched and no turn ended badly."""
    c = counts(doc)
    return c["failed"] == 0 and c["aborted"] == 0 and c["pending"] == 0


def record_event(doc: Doc, event: str, **fields: Any) -> None:
    doc["history"].append({"at": time.time(), "event": event, **fields})


def merge_turns(db: sqlite3.Connection, doc: Doc) -> None:
    """Copy each leg's turn end from the turns table; find the turn of a leg whose
    launcher died between admission and writing it down (by the launcher's identity).

    Two queries for the whole wave, not two per leg: a hundred-leg wave
    merges on every write of its document."""
    launcher = doc["launcher"]
    unlinked = [
        leg["session"]
        for leg in doc["legs"]
        if leg["turn"] is None and leg["status"] in (LegStatus.LAUNCHING, LegStatus.ABORTED)
    ]
    found: dict[str, str] = {}
    if unlinked:
        # Oldest first: each session's latest turn is the one kept.
        for row in db.execute(
            "SELECT session, id FROM turns WHERE session IN (SELECT value FROM json_each(?))"
            " AND launcher_pid = ? AND launcher_token = ? AND started_at >= ?"
            " ORDER BY started_at",
            (json.dumps(unlinked), launcher["pid"], launcher["start_token"], doc["created_at"]),
        ):
            found[row["session"]] = row["id"]
    for leg in doc["legs"]:
        if leg["turn"] is None and leg["session"] in found:
            leg["turn"] = found[leg["session"]]
        if leg["turn"] is None and leg["verdict"] == Verdict.QUEUED:
            _dequeued(db, doc["id"], leg)
    active = [
        leg
        for leg in doc["legs"]
        if leg["turn"] is not None and leg.get("turn_state") in TURN_ACTIVE
    ]
    if not active:
        return
    # Only the turns whose state or model moved since the document last
    # looked: a 1 000-leg wave writes its document hundreds of times, and a
    # row for each of its running legs on each write was most of a write.
    seen = [[leg["turn"], leg.get("turn_state"), _fallbacks_text(leg)] for leg in active]
    legs = {leg["turn"]: leg for leg in active}
    for row in db.execute(
        "SELECT t.id, t.state, t.rc, t.error, t.flags, t.cause, t.model, t.fallbacks"
        " FROM json_each(?) AS j JOIN turns AS t ON t.id = json_extract(j.value, '$[0]')"
        " WHERE t.state IS NOT json_extract(j.value, '$[1]')"
        " OR (t.fallbacks != '' AND t.fallbacks IS NOT json_extract(j.value, '$[2]'))",
        (json.dumps(seen),),
    ):
        leg = legs[row["id"]]
        if row["fallbacks"] and row["fallbacks"] != _fallbacks_text(leg):
            # An attempt failed on its model: the leg says which one it runs now.
            leg["model"], leg["fallbacks"] = row["model"], json.loads(row["fallbacks"])
        if row["state"] == leg.get("turn_state"):
            continue
        leg["model"] = row["model"]
        leg["turn_state"] = row["state"]
        if row["state"] == states.TurnState.COMPLETE and leg["verdict"] == Verdict.QUEUED:
            # Its launcher has not written its word yet (it may be still
            # confirming when the end is recorded): the end proves the start.
            # The launcher's own verdict replaces this one when it comes.
            leg["verdict"] = Verdict.CONFIRMED
        if row["state"] not in TURN_ACTIVE:
            leg["rc"] = row["rc"]
            leg["flags"] = json.loads(row["flags"]) if row["flags"] else []
            leg["cause"] = row["cause"]
            if row["state"] != states.TurnState.COMPLETE and row["error"]:
                leg["turn_error"] = row["error"]


def _fallbacks_text(leg: Doc) -> str:
    """The models a leg fell back to as the turns table spells them (JSON)."""
    fallbacks = leg.get("fallbacks")
    return "null" if fallbacks is None else json.dumps(fallbacks)


def over_budget(spex: Spex, wave: str, budget: float) -> str | None:
    """Why a leg of `wave` may not launch under its `--budget` (USD): its
    known spend (every ended leg's every attempt) has reached it. What is
    unknown never counts as zero, nor against the budget: a wave whose
    costs are unknown is never stopped by it (its document says so)."""
    from spexsup import config, usage

    spent = usage.total(
        spex.store.db, config.load(spex.home).pricing, where="wave = ?", params=(wave,)
    )
    if spent.amount is None or spent.amount < budget:
        return None
    floor = "" if spent.exact else " at least (some costs are unknown)"
    return (
        f"budget: wave {wave} spent {usage.money(spent.amount)}{floor} of its {usage.money(budget)}"
    )


def ended(spex: Spex, db: sqlite3.Connection, doc: Doc) -> Doc:
    """The `wave-ended` event's payload: the wave, its state, its legs by
    `counts` (the old keys, as `--on-complete` has them) and by `outcomes`
    (`tally`'s), the wave it retried, and what every leg's every attempt
    spent (`usage`, `cost`: null when its harnesses report none), as
    `spex wave --json` says it (DESIGN §31)."""
    from spexsup import config, usage

    pricing = config.load(spex.home).pricing
    _, whole = usage.wave_spend(db, doc["id"], pricing, doc["legs"])
    spent = whole.rows > 0
    return {
        "wave": doc["id"],
        "state": doc["state"],
        "counts": counts(doc),
        "outcomes": tally(doc),
        "retry_of": doc.get("retry_of"),
        "usage": whole.usage_json() if spent else None,
        "cost": whole.cost_json() if spent else None,
    }


def _dequeued(db: sqlite3.Connection, wave: str, leg: Doc) -> None:
    """A queued leg's turn, once a launcher took its prompt (linked to the
    wave in the same transaction); a prompt gone with no turn (removed, or
    not admitted) fails the leg."""
    row = db.execute(
        "SELECT t.id FROM wave_turns w JOIN turns t ON t.id = w.turn"
        " WHERE w.wave = ? AND t.session = ?",
        (wave, leg["session"]),
    ).fetchone()
    if row is not None:
        leg["turn"] = row["id"]
    elif db.execute("SELECT 1 FROM queue WHERE id = ?", (leg.get("queued"),)).fetchone() is None:
        leg["verdict"] = Verdict.FAILED
        leg["error"] = leg["error"] or "its queued prompt was removed before it launched"


def _settle(doc: Doc) -> bool:
    """Leg and wave events, the state, and the on-complete claim; True if this
    call claimed the on-complete command (the caller runs it after commit)."""
    launcher = doc["launcher"]
    if doc["state"] == WaveState.LAUNCHING and (
        identity_liveness(launcher["pid"], launcher["start_token"]) is Liveness.DEAD
    ):
        for leg in doc["legs"]:
            if leg["status"] == LegStatus.LAUNCHING and leg["turn"] is not None:
                # Its turn may well run: say so, and let its end be merged.
                leg["status"] = LegStatus.DONE
                leg["verdict"] = Verdict.UNCONFIRMED
                leg["error"] = "the launcher died before confirming this leg"
            elif leg["status"] in (LegStatus.PENDING, LegStatus.LAUNCHING):
                leg["status"] = LegStatus.ABORTED
                leg["verdict"] = leg["verdict"] or Verdict.ABORTED
                leg["error"] = leg["error"] or "the launcher died before this leg finished"
        doc["state"] = WaveState.ABORTED
    # Each leg's outcome once: the state is what they add up to (a
    # 1 000-leg wave settles its document on every write).
    outcomes = [leg_outcome(leg) for leg in doc["legs"]]
    for leg, outcome in zip(doc["legs"], outcomes, strict=True):
        if (
            outcome in (LegResult.OK, LegResult.FAILED, LegResult.ABORTED)
            and leg.get("ended_at") is None
        ):
            leg["ended_at"] = time.time()
            record_event(
                doc,
                "leg-ended",
                session=leg["session"],
                turn=leg["turn"],
                outcome=outcome,
                verdict=leg["verdict"],
                turn_state=leg.get("turn_state"),
                rc=leg["rc"],
            )
    if doc["state"] not in (WaveState.LAUNCHING, WaveState.ABORTED):
        doc["state"] = overall(doc, outcomes)
    doc["counts"] = tally(doc)
    if doc["state"] in FINAL and doc["ended_at"] is None:
        doc["ended_at"] = time.time()
        record_event(doc, "wave-ended", state=doc["state"], **counts(doc))
    hook = doc.get("on_complete")
    if doc["state"] not in FINAL or not hook or not _claimable(hook):
        return False
    pid, token = own_identity()
    hook.update(claimed_at=time.time(), claimer={"pid": pid, "start_token": token})
    hook["started_at"] = None
    return True


def settled_for_good(doc: Doc) -> bool:
    """Whether no write can change this stored document: the wave ended, each
    leg's end is recorded and its turn's with it (none to find, link or
    merge), its on-complete started or none. A reader takes it as it is,
    without the write lock: `spex wave ls` read-merge-wrote every wave ever
    made (a transaction, two parses and an encoding each, 0.6 ms a wave),
    and waited behind any writer."""
    if doc["ended_at"] is None or "counts" not in doc:
        return False  # running, or written before `counts` was kept
    hook = doc.get("on_complete")
    if hook and (hook["claimed_at"] is None or hook.get("started_at", 0) is None):
        return False  # its claim may be a dead claimer's, for a reader to take over
    return all(
        leg.get("ended_at") is not None
        and leg.get("turn_state") not in _TURN_ACTIVE
        and (leg["turn"] is not None or leg["status"] == LegStatus.DONE)
        and (leg["turn"] is not None or leg["verdict"] != Verdict.QUEUED)
        for leg in doc["legs"]
    )


# How long a claimed on-complete command may wait for its claimer to start it
# before any reader of the wave does.
ON_COMPLETE_STALE = 10.0


def _claimable(hook: dict[str, Any]) -> bool:
    """Unclaimed, or claimed by a process that died (or waited ON_COMPLETE_STALE)
    before it started the command. A document from before `started_at` was
    kept counts as started once claimed."""
    if hook["claimed_at"] is None:
        return True
    if "started_at" not in hook or hook["started_at"] is not None:
        return False
    claimer = hook.get("claimer") or {}
    pid = claimer.get("pid")
    return (
        time.time() - hook["claimed_at"] >= ON_COMPLETE_STALE
        or not isinstance(pid, int)
        or identity_liveness(pid, claimer.get("start_token")) is Liveness.DEAD
    )


def mutate(spex: Spex, wave: str, change: Change | None = None) -> Doc:
    """Read the wave's document under the write transaction, apply `change`,
    merge its turns' ends, settle it, and write SQLite and the file (the file
    inside the transaction, so files land in commit order). Unchanged
    documents are not rewritten. Runs the claimed on-complete command."""
    with spex.store.tx() as db:
        row = db.execute("SELECT doc FROM waves WHERE id = ?", (wave,)).fetchone()
        if row is None:
            raise Refused(f"no wave {wave!r}", hint="see spex wave ls")
        doc: Doc = json.loads(row["doc"])
        was_over = doc["ended_at"] is not None
        if change is not None:
            change(doc)
        merge_turns(db, doc)
        claimed = _settle(doc)
        if doc["ended_at"] is not None and not was_over:
            events.record(db, states.EventKind.WAVE_ENDED, **ended(spex, db, doc))
        text = json.dumps(doc)
        if text != row["doc"]:
            db.execute(
                "UPDATE waves SET state = ?, ended_at = ?, doc = ? WHERE id = ?",
                (doc["state"], doc["ended_at"], text, wave),
            )
            # The file holds the same text as the row: an indented copy
            # would take json's pure-Python encoder, a wave's costliest step
            # (a write per few legs, each as long as the wave).
            path = waves_dir(spex) / f"{wave}.json"
            write_atomic(path, text.encode() + b"\n", durable=claimed)
    if claimed:
        faults.at(faults.Fault.AFTER_HOOK_CLAIM)
        return _start_on_complete(spex, wave) or doc
    return doc


def _start_on_complete(spex: Spex, wave: str) -> Doc | None:
    """Take the on-complete command this process claimed (`started_at`, in a
    transaction of its own, so a reader that took the claim over meanwhile
    and this process never both run it), then run it."""
    pid, token = own_identity()
    taken = False

    def take(doc: Doc) -> None:
        nonlocal taken
        hook = doc["on_complete"]
        if hook.get("started_at") is None and hook.get("claimer") == {
            "pid": pid,
            "start_token": token,
        }:
            hook["started_at"] = time.time()
            taken = True

    doc = mutate(spex, wave, take)
    if taken:
        run_on_complete(spex, doc)
    return doc


def run_on_complete(spex: Spex, doc: Doc) -> None:
    """Start `--on-complete CMD` (sh -c) detached, the wave and its counts in its
    environment, its output in `waves/<id>.on-complete.log`."""
    env = {k: v for k, v in os.environ.items() if k not in TURN_ENV}
    env.update(
        SPEXSUP_HOME=str(spex.home),
        SPEXSUP_WAVE=doc["id"],
        SPEXSUP_WAVE_STATE=doc["state"],
        SPEXSUP_WAVE_DOC=str(waves_dir(spex) / f"{doc['id']}.json"),
    )
    for key, value in counts(doc).items():
        env[f"SPEXSUP_WAVE_{key.upper()}"] = str(value)
    log = waves_dir(spex) / f"{doc['id']}.on-complete.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        subprocess.Popen(
            ["/bin/sh", "-c", doc["on_complete"]["command"]],
            cwd=doc["cwd"] if Path(doc["cwd"]).is_dir() else None,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
        )
    except OSError as e:
        os.write(fd, f"spex: could not run the on-complete command: {e}\n".encode())
    finally:
        os.close(fd)


def settle_turn_end(spex: Spex, turn: str) -> None:
    """Whoever records a turn's end (its reporter, a reconciling reader, a
    stop) moves the wave it is a leg of on, and may so run its on-complete."""
    settle_turn_ends(spex, [turn])


def settle_turn_ends(spex: Spex, turns: Sequence[str]) -> None:
    """`settle_turn_end` of each turn, each wave written once."""
    rows = spex.store.db.execute(
        "SELECT DISTINCT wave FROM wave_turns WHERE turn IN (SELECT value FROM json_each(?))"
        " ORDER BY wave",
        (json.dumps(list(turns)),),
    ).fetchall()
    for row in rows:
        mutate(spex, row["wave"])


# The waves `resume` takes over, found by their partial index (store.py).
UNSTARTED_HOOKS = f"SELECT id FROM waves WHERE {WAVE_HOOK_UNSTARTED}"


def resume(spex: Spex) -> None:
    """A reconciling reader's part: ended waves whose on-complete command was
    claimed but never started (its claimer died in between) get it started
    now, exactly once (see `_claimable`). One query when none waits."""
    rows = spex.store.db.execute(UNSTARTED_HOOKS).fetchall()
    for row in rows:
        mutate(spex, row["id"])
