"""Fan-out waves: one prompt to many sessions, a verdict per session (DESIGN §6).

A wave's document (`<home>/waves/<id>.json`, mirrored in SQLite) is the
record: id, times, the prompt (its file and first 200 characters), the cwd,
one leg per session with its launch verdict *and* its turn's end, and a
history of `wave-started`, `leg-ended` and `wave-ended` events, and the
per-turn options every leg ran under (`turn_options`: window, timeout,
strict, on_limit), which `--retry-failed` applies again. Legs launch
through a gate of `max_concurrent` slots (admission and launch only) and
confirm concurrently, so a wave takes about one window, not one per leg.

Every writer read-merge-writes: it re-reads the document under the store's
write transaction, applies its change, merges the turns' ends from the
turns table, settles the wave's state, and writes SQLite and the file before
committing. So a `retried_by` link added by another process survives, and
any reader (`spex wave`, the exit reporter of a leg's turn) moves the wave
on when its turns end: `running` until every launched turn has ended, then
`complete` (every turn ended `complete`), `partial` or `failed`.

An abort (SIGINT/SIGTERM while launching) marks the wave and its unstarted
legs `aborted`; abort wins over any later state. A reader that finds a wave
still `launching` whose launcher is dead shows it `aborted`. `--on-complete
CMD` runs once, claimed in the same transaction that makes the state final.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from spexsup import events, ids, sessions, turns
from spexsup.errors import Invalid, Refused, SpexError
from spexsup.mainwait import results
from spexsup.pane import turndir
from spexsup.paths import ensure_private_dir, write_atomic
from spexsup.procs import Liveness, identity_liveness, own_identity
from spexsup.spex import Spex

SCHEMA_VERSION = 1
DEFAULT_MAX_CONCURRENT = 16
SUCCESS = ("confirmed", "completed")
FINAL = ("complete", "partial", "failed", "aborted")
TURN_ACTIVE = (None, "starting", "running")
PROMPT_HEAD = 200
WAVE_ID_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-TZ"
# Never handed to --on-complete: it is not part of any turn.
TURN_ENV = ("SPEXSUP_SESSION", "SPEXSUP_TURN", "SPEXSUP_TURN_DIR", "SPEXSUP_PROMPT_FILE")

Doc = dict[str, Any]
Change = Callable[[Doc], None]
Listener = Callable[[Doc], None]
TURN_OPTIONS = ("window", "timeout", "strict", "on_limit")


def turn_options(window: float | None, limits: turns.Limits | None) -> Doc:
    """The per-turn options a wave's legs run under, as its document records
    them: `window` and `timeout` in seconds, `strict`, `on_limit` (`wait[:H]`);
    None (False for strict) where not given, so the session's and then the
    harness's own apply."""
    limits = limits or turns.Limits()
    return {
        "window": window,
        "timeout": limits.timeout,
        "strict": limits.strict,
        "on_limit": limits.on_limit,
    }


def recorded_options(doc: Doc) -> Doc:
    """A wave's recorded per-turn options (a wave from before they were
    recorded ran under none)."""
    found = doc.get("turn_options") or {}
    return {k: found.get(k, False if k == "strict" else None) for k in TURN_OPTIONS}


def new_wave_id() -> str:
    return ids.new_id("w")


def validate_wave_id(wave: str) -> str:
    if not (1 <= len(wave) <= 64) or any(c not in WAVE_ID_CHARS for c in wave):
        raise Invalid(f"invalid wave id {wave!r}", hint="see spex waves")
    return wave


def waves_dir(spex: Spex) -> Path:
    return ensure_private_dir(spex.home / "waves", under=spex.home)


def select_sessions(
    spex: Spex, names: Sequence[str], *, all_: bool = False, match: str | None = None
) -> list[str]:
    """The wave's targets: the names given (unknown ones become refused legs),
    or every session, or those matching a glob."""
    if sum((bool(names), all_, match is not None)) != 1:
        raise Invalid("name the sessions, or give --all, or --match GLOB (exactly one)")
    if names:
        for n in names:
            sessions.validate_name(n)
        return list(dict.fromkeys(names))
    rows = spex.store.db.execute("SELECT name FROM sessions ORDER BY name").fetchall()
    chosen = [r["name"] for r in rows if match is None or fnmatch.fnmatchcase(r["name"], match)]
    if not chosen:
        raise Invalid(
            "no sessions to wake" + (f" match {match!r}" if match else ""), hint="see spex ls"
        )
    return chosen


# --- outcomes ---------------------------------------------------------------


def leg_outcome(leg: Doc) -> str:
    """pending (not launched yet), aborted (never launched), running, ok or failed."""
    if leg["status"] in ("pending", "launching"):
        return "pending"
    if leg["verdict"] == "aborted":
        return "aborted"
    if leg["verdict"] not in SUCCESS:
        return "failed"
    if leg.get("turn_state") in TURN_ACTIVE:
        return "running"
    return "ok" if leg["turn_state"] == "complete" else "failed"


def counts(doc: Doc) -> dict[str, int]:
    outcomes = [leg_outcome(leg) for leg in doc["legs"]]
    tally = {k: outcomes.count(k) for k in ("pending", "running", "ok", "failed", "aborted")}
    launched = sum(1 for leg in doc["legs"] if leg["verdict"] in SUCCESS)
    return {"legs": len(outcomes), "launched": launched, **tally}


def overall(doc: Doc) -> str:
    """The state the legs add up to, once launching is over."""
    c = counts(doc)
    if c["pending"] or c["running"]:
        return "running"
    if c["ok"] == c["legs"]:
        return "complete"
    return "failed" if c["ok"] == 0 else "partial"


def succeeded(doc: Doc) -> bool:
    """Exit 0 for the wave so far: every leg launched and no turn ended badly."""
    c = counts(doc)
    return c["failed"] == 0 and c["aborted"] == 0 and c["pending"] == 0


def _event(doc: Doc, event: str, **fields: Any) -> None:
    doc["history"].append({"at": time.time(), "event": event, **fields})


# --- the read-merge-write ---------------------------------------------------


def _merge_turns(db: sqlite3.Connection, doc: Doc) -> None:
    """Copy each leg's turn end from the turns table; find the turn of a leg whose
    launcher died between admission and writing it down (by the launcher's identity)."""
    launcher = doc["launcher"]
    for leg in doc["legs"]:
        if leg["turn"] is None and leg["status"] in ("launching", "aborted"):
            row = db.execute(
                "SELECT id FROM turns WHERE session = ? AND launcher_pid = ?"
                " AND launcher_token = ? AND started_at >= ? ORDER BY started_at DESC LIMIT 1",
                (leg["session"], launcher["pid"], launcher["start_token"], doc["created_at"]),
            ).fetchone()
            if row is not None:
                leg["turn"] = row["id"]
        if leg["turn"] is None or leg.get("turn_state") not in TURN_ACTIVE:
            continue
        row = db.execute(
            "SELECT state, rc, error, flags, cause FROM turns WHERE id = ?", (leg["turn"],)
        ).fetchone()
        if row is None or row["state"] == leg.get("turn_state"):
            continue
        leg["turn_state"] = row["state"]
        if row["state"] not in TURN_ACTIVE:
            leg["rc"] = row["rc"]
            leg["flags"] = json.loads(row["flags"]) if row["flags"] else []
            leg["cause"] = row["cause"]
            if row["state"] != "complete" and row["error"]:
                leg["turn_error"] = row["error"]


def _settle(doc: Doc) -> bool:
    """Leg and wave events, the state, and the on-complete claim; True if this
    call claimed the on-complete command (the caller runs it after commit)."""
    launcher = doc["launcher"]
    if doc["state"] == "launching" and (
        identity_liveness(launcher["pid"], launcher["start_token"]) is Liveness.DEAD
    ):
        for leg in doc["legs"]:
            if leg["status"] == "launching" and leg["turn"] is not None:
                # Its turn may well run: say so, and let its end be merged.
                leg["status"] = "done"
                leg["verdict"] = "unconfirmed"
                leg["error"] = "the launcher died before confirming this leg"
            elif leg["status"] in ("pending", "launching"):
                leg["status"] = "aborted"
                leg["verdict"] = leg["verdict"] or "aborted"
                leg["error"] = leg["error"] or "the launcher died before this leg finished"
        doc["state"] = "aborted"
    for leg in doc["legs"]:
        outcome = leg_outcome(leg)
        if outcome in ("ok", "failed", "aborted") and leg.get("ended_at") is None:
            leg["ended_at"] = time.time()
            _event(
                doc,
                "leg-ended",
                session=leg["session"],
                turn=leg["turn"],
                outcome=outcome,
                verdict=leg["verdict"],
                turn_state=leg.get("turn_state"),
                rc=leg["rc"],
            )
    if doc["state"] not in ("launching", "aborted"):
        doc["state"] = overall(doc)
    if doc["state"] in FINAL and doc["ended_at"] is None:
        doc["ended_at"] = time.time()
        _event(doc, "wave-ended", state=doc["state"], **counts(doc))
    hook = doc.get("on_complete")
    if doc["state"] not in FINAL or not hook or not _claimable(hook):
        return False
    pid, token = own_identity()
    hook.update(claimed_at=time.time(), claimer={"pid": pid, "start_token": token})
    hook["started_at"] = None
    return True


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
            raise Refused(f"no wave {wave!r}", hint="see spex waves")
        doc: Doc = json.loads(row["doc"])
        was_over = doc["ended_at"] is not None
        if change is not None:
            change(doc)
        _merge_turns(db, doc)
        claimed = _settle(doc)
        if doc["ended_at"] is not None and not was_over:
            events.record(db, "wave-ended", cause=doc["state"], wave=wave, counts=counts(doc))
        text = json.dumps(doc)
        if text != row["doc"]:
            db.execute(
                "UPDATE waves SET state = ?, ended_at = ?, doc = ? WHERE id = ?",
                (doc["state"], doc["ended_at"], text, wave),
            )
            path = waves_dir(spex) / f"{wave}.json"
            write_atomic(path, json.dumps(doc, indent=2).encode(), durable=claimed)
    if claimed:
        from spexsup.hooks import fault_after_claim

        fault_after_claim()
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


def refresh(spex: Spex, wave: str) -> Doc:
    """A wave's document, brought up to date: its legs' turns reconciled and merged."""
    validate_wave_id(wave)
    row = spex.store.db.execute("SELECT doc FROM waves WHERE id = ?", (wave,)).fetchone()
    if row is None:
        raise Refused(f"no wave {wave!r}", hint="see spex waves")
    doc: Doc = json.loads(row["doc"])
    active = [
        leg["session"]
        for leg in doc["legs"]
        if leg["turn"] is not None and leg.get("turn_state") in TURN_ACTIVE
    ]
    if active:
        turns.reconcile(spex, active)
    return mutate(spex, wave)


load = refresh


def list_waves(spex: Spex) -> list[Doc]:
    rows = spex.store.db.execute("SELECT id FROM waves ORDER BY created_at DESC").fetchall()
    return [refresh(spex, r["id"]) for r in rows]


def settle_turn_end(spex: Spex, turn: str) -> None:
    """Whoever records a turn's end (its reporter, a reconciling reader, a
    stop) moves the wave it is a leg of on, and may so run its on-complete."""
    row = spex.store.db.execute("SELECT wave FROM wave_turns WHERE turn = ?", (turn,)).fetchone()
    if row is not None:
        mutate(spex, row["wave"])


def resume(spex: Spex) -> None:
    """A reconciling reader's part: ended waves whose on-complete command was
    claimed but never started (its claimer died in between) get it started
    now, exactly once (see `_claimable`). One query when none waits."""
    rows = spex.store.db.execute(
        "SELECT id FROM waves WHERE ended_at IS NOT NULL"
        " AND json_extract(doc, '$.on_complete.claimed_at') IS NOT NULL"
        " AND json_type(doc, '$.on_complete.started_at') = 'null'"
    ).fetchall()
    for row in rows:
        mutate(spex, row["id"])


# --- launching ----------------------------------------------------------------


class _AbortedLeg(Exception):
    """The wave was aborted before this leg got a launch slot."""

    def __init__(self) -> None:
        super().__init__("the wave was aborted before this leg launched")


class Wave:
    """One wave being launched by this process. Thread-safe: legs report from
    worker threads, each with its own connection; every change is a
    read-merge-write of the stored document (see `mutate`)."""

    def __init__(self, spex: Spex, doc: Doc) -> None:
        self.spex = spex
        self.doc = doc
        self.lock = threading.Lock()
        self.aborted = threading.Event()
        self.listeners: list[Listener] = []
        self._local = threading.local()
        self._local.spex = spex

    def _spex(self) -> Spex:
        """This thread's handle: a SQLite connection belongs to its thread."""
        spex = getattr(self._local, "spex", None)
        if spex is None:
            spex = self._local.spex = Spex.open(self.spex.home, self.spex.tmux)
        return spex

    @property
    def id(self) -> str:
        return str(self.doc["id"])

    @classmethod
    def create(
        cls,
        spex: Spex,
        names: Sequence[str],
        prompt: bytes,
        *,
        retry_of: str | None = None,
        on_complete: str | None = None,
        options: Doc | None = None,
    ) -> Wave:
        wave = new_wave_id()
        directory = waves_dir(spex)
        prompt_file = directory / f"{wave}.prompt"
        write_atomic(prompt_file, prompt)
        pid, token = own_identity()
        now = time.time()
        doc: Doc = {
            "schema_version": SCHEMA_VERSION,
            "id": wave,
            "state": "launching",
            "created_at": now,
            "ended_at": None,
            "cwd": str(Path.cwd()),
            "prompt_file": str(prompt_file),
            "prompt_bytes": len(prompt),
            "prompt_head": prompt.decode("utf-8", "replace")[:PROMPT_HEAD],
            "launcher": {"pid": pid, "start_token": token},
            "retry_of": retry_of,
            "retried_by": [],
            "turn_options": options if options is not None else turn_options(None, None),
            "detached_at": None,
            "on_complete": (
                {"command": on_complete, "claimed_at": None, "claimer": None, "started_at": None}
                if on_complete is not None
                else None
            ),
            "legs": [
                {
                    "session": n,
                    "status": "pending",
                    "turn": None,
                    "verdict": None,
                    "rc": None,
                    "error": None,
                    "turn_state": None,
                    "turn_error": None,
                    "ended_at": None,
                }
                for n in names
            ],
            "history": [{"at": now, "event": "wave-started", "legs": len(names)}],
        }
        self = cls(spex, doc)
        with spex.store.tx() as db:
            db.execute(
                "INSERT INTO waves (id, state, created_at, doc) VALUES (?, ?, ?, ?)",
                (wave, "launching", now, json.dumps(doc)),
            )
            write_atomic(directory / f"{wave}.json", json.dumps(doc, indent=2).encode())
            events.record(db, "wave-started", wave=wave, legs=len(names))
        return self

    def update(self, change: Change | None = None) -> Doc:
        """Read-merge-write `change`, keep the result, notify the listeners."""
        doc = mutate(self._spex(), self.id, change)
        with self.lock:
            self.doc = doc
        for listen in self.listeners:
            listen(doc)
        return doc

    def abort(self) -> None:
        """Mark the wave and its unstarted legs aborted; abort wins over later writes."""
        self.aborted.set()

        def change(doc: Doc) -> None:
            if doc["state"] == "launching":
                doc["state"] = "aborted"
            for leg in doc["legs"]:
                if leg["status"] == "pending":
                    leg["status"] = "aborted"
                    leg["verdict"] = "aborted"

        self.update(change)

    def record_turns(self) -> None:
        """Before a hard exit: write down the turn of every leg admitted so far
        (found by the launcher's identity) and abort the rest, on a connection
        of its own that gives up after 2 s rather than hold the exit."""
        spex = Spex.open(self.spex.home, self.spex.tmux)
        spex.store.db.execute("PRAGMA busy_timeout = 2000")

        def change(doc: Doc) -> None:
            _merge_turns(spex.store.db, doc)
            for leg in doc["legs"]:
                if leg["status"] in ("pending", "launching") and leg["turn"] is None:
                    leg["status"] = "aborted"
                    leg["verdict"] = "aborted"
                    leg["error"] = "the fan-out exited before this leg launched"
            if doc["state"] == "launching":
                doc["state"] = "aborted"

        mutate(spex, self.id, change)

    def detach(self) -> Doc:
        """The waiter stopped waiting: the turns run on, nothing was aborted."""

        def change(doc: Doc) -> None:
            doc["detached_at"] = time.time()
            _event(doc, "wait-detached")

        return self.update(change)

    def run_leg(
        self,
        session: str,
        prompt: bytes,
        window: float | None,
        gate: threading.Semaphore,
        fresh: bool = False,
        limits: turns.Limits | None = None,
    ) -> None:
        spex = self._spex()

        class Slot:
            """The gate, plus a last look at the abort flag once a slot is ours."""

            def __enter__(slot) -> None:
                gate.acquire()
                if self.aborted.is_set():
                    gate.release()
                    raise _AbortedLeg

            def __exit__(slot, *exc: object) -> None:
                gate.release()

        claimed = False

        def started(doc: Doc) -> None:
            nonlocal claimed
            leg = _leg(doc, session)
            if leg["status"] == "pending":  # an abort may have got here first
                leg["status"] = "launching"
                claimed = True

        self.update(started)
        if not claimed:
            return

        def admitted(turn: str) -> None:
            # Written down before the launch, so no leg is left without its turn.
            def change(doc: Doc) -> None:
                _leg(doc, session)["turn"] = turn

            with spex.store.tx() as db:
                db.execute("INSERT INTO wave_turns (turn, wave) VALUES (?, ?)", (turn, self.id))
            self.update(change)

        result: Doc
        try:
            v = turns.wake(
                spex,
                session,
                prompt,
                window=window,
                fresh=fresh,
                gate=Slot(),
                on_admitted=admitted,
                limits=limits,
            )
            result = {
                "turn": v.turn,
                "verdict": v.verdict,
                "rc": v.rc,
                "error": v.error,
                "flags": v.flags,
            }
        except _AbortedLeg as e:
            result = {"verdict": "aborted", "status": "aborted", "error": str(e)}
        except Refused as e:
            result = {"verdict": "refused", "error": e.line()}
        except SpexError as e:
            result = {"verdict": "failed", "error": e.line()}

        def finished(doc: Doc) -> None:
            _leg(doc, session).update({"status": "done", **result})

        self.update(finished)

    def launch(
        self,
        prompt: bytes,
        window: float | None,
        max_concurrent: int,
        fresh: bool = False,
        limits: turns.Limits | None = None,
    ) -> None:
        """Launch every leg; return when each has its verdict (or was aborted).
        `fresh`: every leg starts a new conversation (as `wake --fresh`)."""
        gate = threading.Semaphore(max_concurrent)
        names = [leg["session"] for leg in self.doc["legs"]]
        # One thread per leg: the gate bounds launches, confirmations overlap.
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            futures = [
                pool.submit(self.run_leg, n, prompt, window, gate, fresh, limits) for n in names
            ]
            results(futures)  # in the main thread: a signal must get through

        def launched(doc: Doc) -> None:
            if doc["state"] == "launching":
                doc["state"] = "running"  # settled into its real state by `mutate`

        self.update(launched)

    def running_legs(self) -> list[Doc]:
        return [leg for leg in self.doc["legs"] if leg_outcome(leg) == "running"]

    def wait_turns(self, on_refresh: Listener | None = None) -> None:
        """`--wait`: until every launched turn has ended, recording each end as it
        comes (event-driven on the turns' markers). `on_refresh` hears the
        document after every wake-up, at least once a second (live progress)."""
        from spexsup.watch import DirWatch

        spex = self._spex()
        with DirWatch([]) as watch:
            watched: set[str] = set()
            while True:
                self.doc = refresh(spex, self.id)
                if on_refresh is not None:
                    on_refresh(self.doc)
                running = self.running_legs()
                if not running:
                    return
                for leg in running:
                    if leg["turn"] not in watched:
                        watch.add(turndir.path(spex.home, leg["session"], leg["turn"]))
                        watched.add(leg["turn"])
                watch.wait(3600 if on_refresh is None else 1.0)


def _leg(doc: Doc, session: str) -> Doc:
    for leg in doc["legs"]:
        if leg["session"] == session:
            return leg  # type: ignore[no-any-return]
    raise KeyError(session)


def fanout(
    spex: Spex,
    names: Sequence[str],
    prompt: bytes,
    *,
    window: float | None = None,
    max_concurrent: int = DEFAULT_MAX_CONCURRENT,
    retry_of: str | None = None,
    on_complete: str | None = None,
    on_create: Callable[[Wave], None] | None = None,
    fresh: bool = False,
    limits: turns.Limits | None = None,
) -> Wave:
    """Create a wave over `names` and launch it (see `Wave.launch`); `limits`
    (a time limit, strict mode) apply to every leg's turn as to a wake's."""
    if not 1 <= max_concurrent <= 1024:
        raise Invalid(f"invalid --max-concurrent {max_concurrent}", hint="between 1 and 1024")
    sessions.validate_window(window)
    if on_complete is not None and not on_complete.strip():
        raise Invalid("--on-complete needs a command")
    wave = Wave.create(
        spex,
        names,
        prompt,
        retry_of=retry_of,
        on_complete=on_complete,
        options=turn_options(window, limits),
    )
    if retry_of is not None:

        def link(doc: Doc) -> None:
            doc["retried_by"].append(wave.id)

        mutate(spex, retry_of, link)
    if on_create is not None:
        on_create(wave)
    wave.launch(prompt, window, max_concurrent, fresh, limits)
    return wave


def retry_plan(spex: Spex, wave: str, only: Sequence[str] = ()) -> tuple[list[str], bytes, Doc]:
    """The sessions of `wave` that did not succeed, its prompt, and the
    per-turn options it ran under (`recorded_options`): launch
    failures, legs never launched, and turns that ended other than `complete`
    (error, aborted, lost, interrupted, timed-out). `only` narrows it to some
    of the wave's sessions. Refused while the wave is still launching."""
    doc = refresh(spex, wave)
    if doc["state"] == "launching":
        raise Refused(f"wave {wave} is still launching", hint=f"spex wave {wave}")
    legs = {leg["session"]: leg for leg in doc["legs"]}
    strangers = [n for n in only if n not in legs]
    if strangers:
        raise Invalid(
            f"wave {wave} has no leg for {', '.join(strangers)}", hint=f"spex wave {wave}"
        )
    failed = [
        name
        for name, leg in legs.items()
        if leg_outcome(leg) in ("failed", "aborted") and (not only or name in only)
    ]
    try:
        prompt = Path(doc["prompt_file"]).read_bytes()
    except OSError as e:
        raise Refused(f"the prompt of wave {wave} is gone: {e.strerror}") from None
    return failed, prompt, recorded_options(doc)
