"""Fan-out waves: one prompt to many sessions, a verdict per session (DESIGN §6).

`fanout` launches a wave: legs launch through a gate of `max_concurrent`
slots (admission and launch only) and confirm concurrently, so a wave takes
about one window, not one per leg. An abort (SIGINT/SIGTERM while launching)
marks the wave and its unstarted legs `aborted`; a reader that finds a wave
still `launching` whose launcher is dead shows it `aborted`. The document
and its settlement live in `spexsup.core.wavedoc`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from spexsup import states, usage
from spexsup.adapters.group import Group
from spexsup.adapters.mainwait import results
from spexsup.adapters.procs import own_identity
from spexsup.core import sessions
from spexsup.core.spex import Spex
from spexsup.core.wavedoc import (
    PROMPT_HEAD,
    SCHEMA_VERSION,
    TURN_ACTIVE,
    Change,
    Doc,
    Listener,
    leg_outcome,
    merge_turns,
    mutate,
    new_wave_id,
    over_budget,
    overall,
    record_event,
    settled_for_good,
    tally,
    validate_wave_id,
    waves_dir,
)
from spexsup.errors import Invalid, Refused, SpexError
from spexsup.ids import recorded_options
from spexsup.pane import turndir
from spexsup.pane.snapshot import SharedStarts
from spexsup.paths import ensure_private_dir, write_atomic
from spexsup.record import Record
from spexsup.state import events
from spexsup.turn import keys
from spexsup.turn.admit import Verdict
from spexsup.turn.front import wake
from spexsup.turn.reconcile import reconcile
from spexsup.turn.request import Hooks, QueuePolicy, WakeRequest
from spexsup.turn.request import Wave as LegWave

DEFAULT_MAX_CONCURRENT = 16


class Pacing(Record):
    """When a wave's legs launch: at most `max_running` of them running at
    once (the others `queued`, launched as legs end), and each only once
    session `after`'s current turn has ended (complete, or any end with
    `after_any`; else the leg ends `skipped`)."""

    max_running: int | None = None
    after: str | None = None
    after_any: bool = False
    # USD: no leg launches once the wave's known spend has reached it.
    budget: float | None = None

    @property
    def queues(self) -> bool:
        return self.max_running is not None or self.after is not None


NO_PACING = Pacing()


def select_sessions(
    spex: Spex, names: Sequence[str], *, all_: bool = False, match: str | None = None
) -> list[str]:
    """The wave's targets: the names given (unknown ones become refused legs),
    or every session, or those matching a glob."""
    from spexsup.core import sessions

    # unknown, as an unknown session is (exit 3)
    return sessions.select(spex, names, all_=all_, match=match, none="no sessions to wake")


def refresh(spex: Spex, wave: str) -> Doc:
    """A wave's document, brought up to date: its legs' turns reconciled and merged."""
    validate_wave_id(wave)
    row = spex.store.db.execute("SELECT doc FROM waves WHERE id = ?", (wave,)).fetchone()
    if row is None:
        raise Refused(f"no wave {wave!r}", hint="see spex wave ls")
    doc: Doc = json.loads(row["doc"])
    if settled_for_good(doc):
        return doc
    active = [
        leg["session"]
        for leg in doc["legs"]
        if leg["turn"] is not None and leg.get("turn_state") in TURN_ACTIVE
    ]
    if active:
        reconcile(spex, active)
    return mutate(spex, wave)


load = refresh


def story(spex: Spex, doc: Doc) -> Doc | None:
    """A retried wave's combined view (DESIGN §31): each leg's last attempt
    across the retries that followed it (`retried_by`, and theirs, in the
    order they were made), with the wave it ran in and how many waves tried
    it; the state and counts those last attempts add up to. None for a wave
    never retried. A retry that is gone (`spex gc`) is passed over."""
    if not doc.get("retried_by"):
        return None
    later: list[Doc] = []
    todo, seen = list(doc["retried_by"]), {doc["id"]}
    while todo:
        wave = todo.pop(0)
        if wave in seen:
            continue
        seen.add(wave)
        try:
            retry = refresh(spex, wave)
        except SpexError:
            continue
        later.append(retry)
        todo += retry.get("retried_by") or []
    later.sort(key=lambda d: float(d["created_at"]))
    last = {leg["session"]: {**leg, "wave": doc["id"], "attempts": 1} for leg in doc["legs"]}
    for retry in later:
        for leg in retry["legs"]:
            before = last.get(leg["session"])
            if before is not None:
                last[leg["session"]] = {
                    **leg,
                    "wave": retry["id"],
                    "attempts": before["attempts"] + 1,
                }
    legs = list(last.values())
    combined: Doc = {"waves": [doc["id"], *(d["id"] for d in later)], "legs": legs}
    running = doc["state"] == states.WaveState.LAUNCHING or any(
        d["state"] == states.WaveState.LAUNCHING for d in later
    )
    combined["state"] = states.WaveState.RUNNING if running else overall(combined)
    combined["counts"] = tally(combined)
    return combined


def list_waves(spex: Spex) -> list[Doc]:
    """Every wave, newest first: those no write can change as stored, one
    query for all (see `settled_for_good`), the others refreshed."""
    rows = spex.store.db.execute("SELECT id, doc FROM waves ORDER BY created_at DESC")
    docs = [json.loads(row["doc"]) for row in rows]
    return [doc if settled_for_good(doc) else refresh(spex, doc["id"]) for doc in docs]


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
        # config.toml sets a running limit for the home: legs may queue.
        self.home_limit = False
        self._writes: Group[Change | None, Doc] = Group(self._write)
        # Changes for the next write, whose callers do not wait for it (`note`).
        self._noted: list[Change] = []
        self._local = threading.local()
        self._local.spex = spex
        # Each work tree's state at the start, recorded once for every leg
        # there (a hundred wrappers snapshotting one tree at once spent more
        # CPU than the rest of their turns' starts).
        self.tree_starts = SharedStarts(self.id)

    def _spex(self) -> Spex:
        """This thread's handle: a SQLite connection belongs to its thread."""
        spex = getattr(self._local, "spex", None)
        if spex is None:
            spex = self._local.spex = self.spex.sibling()
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
        key: str | None = None,
        pacing: Pacing = NO_PACING,
    ) -> Wave:
        wave = new_wave_id()
        directory = waves_dir(spex)
        prompt_file = directory / f"{wave}.prompt"
        write_atomic(prompt_file, prompt)
        pid, token = own_identity()
        now = time.time()
        # A retry says what it retries: the wave, and its legs (DESIGN §31).
        started: Doc = {"legs": len(names)}
        if retry_of is not None:
            started.update(retry_of=retry_of, sessions=list(names))
        doc: Doc = {
            "schema_version": SCHEMA_VERSION,
            "id": wave,
            "state": states.WaveState.LAUNCHING,
            "created_at": now,
            "ended_at": None,
            "cwd": str(Path.cwd()),
            "prompt_file": str(prompt_file),
            "prompt_bytes": len(prompt),
            "prompt_head": prompt.decode("utf-8", "replace")[:PROMPT_HEAD],
            "launcher": {"pid": pid, "start_token": token},
            "retry_of": retry_of,
            "retried_by": [],
            "turn_options": (
                options if options is not None else WakeRequest("", b"").turn_options()
            ),
            "detached_at": None,
            "key": key,
            "pacing": pacing._asdict() if pacing.queues or pacing.budget else None,
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
            "history": [{"at": now, "event": "wave-started", **started}],
        }
        self = cls(spex, doc)
        text = json.dumps(doc)
        with spex.store.tx() as db:
            db.execute(
                "INSERT INTO waves (id, state, created_at, doc) VALUES (?, ?, ?, ?)",
                (wave, states.WaveState.LAUNCHING, now, text),
            )
            write_atomic(directory / f"{wave}.json", text.encode() + b"\n")
            events.record(db, states.EventKind.WAVE_STARTED, wave=wave, **started)
        return self

    def update(self, change: Change | None = None) -> Doc:
        """Read-merge-write `change`, keep the result, notify the listeners.

        Changes that legs make while another's write is under way go into
        the next write together, in the order they came (`group.Group`): a
        write costs as much as the wave has legs, so one per change made a
        wave's writes grow with the square of its legs. Each caller returns
        once a commit holding its change is done."""
        return self._writes.run(change)

    def note(self, change: Change) -> None:
        """Have the next write make `change` too, without waiting for it:
        for what the store holds already, which a crash does not lose."""
        with self.lock:
            self._noted.append(change)

    def _write(self, changes: Sequence[Change | None]) -> list[Doc]:
        with self.lock:
            noted, self._noted = self._noted, []

        def change(doc: Doc) -> None:
            for each in (*noted, *changes):
                if each is not None:
                    each(doc)

        doc = mutate(self._spex(), self.id, change)
        with self.lock:
            self.doc = doc
        for listen in self.listeners:
            listen(doc)
        return [doc] * len(changes)

    def abort(self) -> None:
        """Mark the wave and its unstarted legs aborted; abort wins over later writes."""
        self.aborted.set()

        def change(doc: Doc) -> None:
            if doc["state"] == states.WaveState.LAUNCHING:
                doc["state"] = "aborted"
            for leg in doc["legs"]:
                if leg["status"] == states.LegStatus.PENDING:
                    leg["status"] = states.LegStatus.ABORTED
                    leg["verdict"] = "aborted"

        self.update(change)

    def record_turns(self) -> None:
        """Before a hard exit: write down the turn of every leg admitted so far
        (found by the launcher's identity) and abort the rest, on a connection
        of its own that gives up after 2 s rather than hold the exit."""
        spex = Spex.open(self.spex.home, self.spex.tmux)
        spex.store.db.execute("PRAGMA busy_timeout = 2000")

        def change(doc: Doc) -> None:
            merge_turns(spex.store.db, doc)
            for leg in doc["legs"]:
                if (
                    leg["status"] in (states.LegStatus.PENDING, states.LegStatus.LAUNCHING)
                    and leg["turn"] is None
                ):
                    leg["status"] = states.LegStatus.ABORTED
                    leg["verdict"] = "aborted"
                    leg["error"] = "the fan-out exited before this leg launched"
            if doc["state"] == states.WaveState.LAUNCHING:
                doc["state"] = states.WaveState.ABORTED

        mutate(spex, self.id, change)

    def detach(self) -> Doc:
        """The waiter stopped waiting: the turns run on, nothing was aborted."""

        def change(doc: Doc) -> None:
            doc["detached_at"] = time.time()
            record_event(doc, "wait-detached")

        return self.update(change)

    def run_leg(
        self,
        session: str,
        request: WakeRequest,
        gate: threading.Semaphore,
        pacing: Pacing = NO_PACING,
    ) -> None:
        """Wake one leg through the gate, `request` (the wave's) made the
        leg's: its session, its wave, its queue policy and pacing, and with
        a key, the leg's own key (`keys.leg_key`): a leg whose key a wake
        already used starts nothing and takes that wake's turn and verdict
        (`repeat`). Under a running
        limit (the wave's or the home's) or `--after`, a leg that cannot
        launch now is queued (verdict `queued`) and launched by whoever
        records the end it waits for (see `spexsup.turn.queue`)."""
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

        def check_abort() -> None:  # while the leg waits for its staggered start
            if self.aborted.is_set():
                raise _AbortedLeg

        def started(doc: Doc) -> None:
            nonlocal claimed
            leg = _leg(doc, session)
            if leg["status"] == states.LegStatus.PENDING:  # an abort may have got here first
                leg["status"] = states.LegStatus.LAUNCHING
                claimed = True

        self.update(started)
        if not claimed:
            return

        def admitted(turn: str) -> None:
            # With the next write, not before the launch: admission linked
            # the turn to the wave in its transaction, and a reader's merge
            # finds a launching leg's turn by its launcher (`merge_turns`),
            # so a crash before that write loses nothing. Waiting for a
            # write of the whole document here held up every leg's launch
            # (at 1 000 legs a write is 13 ms, and half the fan-out's CPU).
            def change(doc: Doc) -> None:
                _leg(doc, session)["turn"] = turn

            self.note(change)

        result: Doc
        leg = request._replace(
            name=session,
            key=None if request.key is None else keys.leg_key(request.key, session),
            wave=LegWave(self.id, pacing.max_running, pacing.budget),
            # Under a running limit or `--after`, a leg may wait in the queue.
            queue=QueuePolicy.AT_LIMIT if pacing.queues or self.home_limit else QueuePolicy.NEVER,
            after=pacing.after,
            after_any=pacing.after_any,
        )
        over = None if pacing.budget is None else over_budget(spex, self.id, pacing.budget)
        try:
            if over is not None:
                v = Verdict(session, None, "skipped", error=over)
            else:
                v = wake(spex, leg, Hooks(Slot(), admitted, check_abort, self.tree_starts.doc))
            result = {
                "turn": v.turn,
                "verdict": v.verdict,
                "rc": v.rc,
                "error": v.error,
                "flags": v.flags,
            }
            if v.verdict == states.Verdict.QUEUED:
                result.update(queued=v.queued, position=v.position, waits=v.waits)
            if v.verdict == states.Verdict.SKIPPED and v.turn is None:
                result["cause"] = "budget"
            if v.repeat:
                # The turn is the first wave's (its wave_turns row): this
                # leg follows it.
                result["repeat"] = True
        except _AbortedLeg as e:
            result = {
                "verdict": states.Verdict.ABORTED,
                "status": states.LegStatus.ABORTED,
                "error": str(e),
            }
        except Refused as e:
            result = {"verdict": states.Verdict.REFUSED, "error": e.line()}
        except SpexError as e:
            result = {"verdict": states.Verdict.FAILED, "error": e.line()}

        def finished(doc: Doc) -> None:
            _leg(doc, session).update({"status": states.LegStatus.DONE, **result})

        self.update(finished)

    def launch(self, request: WakeRequest, max_concurrent: int, pacing: Pacing = NO_PACING) -> None:
        """Launch every leg; return when each has its verdict (or was aborted).
        `request`: what every leg asks (`fresh`: every leg starts a new
        conversation, as `wake --fresh`; a key: each leg wakes under its own
        key); `pacing`: see `run_leg`."""
        from spexsup import config

        self.home_limit = config.load(self.spex.home).max_running is not None
        gate = threading.Semaphore(max_concurrent)
        names = [leg["session"] for leg in self.doc["legs"]]
        # One thread per leg: the gate bounds launches, confirmations overlap.
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            futures = [pool.submit(self.run_leg, n, request, gate, pacing) for n in names]
            results(futures)  # in the main thread: a signal must get through

        def launched(doc: Doc) -> None:
            if doc["state"] == states.WaveState.LAUNCHING:
                doc["state"] = "running"  # settled into its real state by `mutate`

        self.update(launched)

    def running_legs(self) -> list[Doc]:
        return [leg for leg in self.doc["legs"] if leg_outcome(leg) == states.LegResult.RUNNING]

    def queued_legs(self) -> list[Doc]:
        return [leg for leg in self.doc["legs"] if leg_outcome(leg) == states.LegResult.QUEUED]

    def wait_turns(self, on_refresh: Listener | None = None) -> None:
        """`--wait`: until every launched turn has ended, recording each end as it
        comes (event-driven on the turns' markers). `on_refresh` hears the
        document after every wake-up, at least once a second (live progress)."""
        from spexsup.adapters.watch import DirWatch  # watchdog: only a wave that waits pays

        spex = self._spex()
        with DirWatch([]) as watch:
            watched: set[str] = set()
            while True:
                self.doc = refresh(spex, self.id)
                if on_refresh is not None:
                    on_refresh(self.doc)
                running, queued = self.running_legs(), self.queued_legs()
                if not running and not queued:
                    return
                if queued and "queue" not in watched:
                    # A queued leg's launch takes its prompt file from here.
                    watch.add(ensure_private_dir(spex.home / "queue", under=spex.home))
                    watched.add("queue")
                for leg in running:
                    if leg["turn"] not in watched:
                        watch.add(turndir.path(spex.home, leg["session"], leg["turn"]))
                        watched.add(leg["turn"])
                # A queued leg whose launcher died is launched by a reader's
                # reconcile (in `refresh`): look again now and then.
                watch.wait(1.0 if on_refresh is not None else 30.0 if queued else 3600)


def _leg(doc: Doc, session: str) -> Doc:
    for leg in doc["legs"]:
        if leg["session"] == session:
            return leg  # type: ignore[no-any-return]
    raise KeyError(session)


def fanout(
    spex: Spex,
    names: Sequence[str],
    request: WakeRequest,
    *,
    max_concurrent: int = DEFAULT_MAX_CONCURRENT,
    retry_of: str | None = None,
    on_complete: str | None = None,
    on_create: Callable[[Wave], None] | None = None,
    pacing: Pacing = NO_PACING,
) -> Wave:
    """Create a wave over `names` and launch it (see `Wave.launch`):
    `request` (its name unused) is what every leg asks, its rules (a time
    limit, strict mode…) applying to every leg's turn as to a wake's; the
    wave's document records them (`turn_options`). With a key, leg SESSION
    wakes with key `KEY/SESSION` (idempotent: a retried fan-out with the
    same key starts no leg twice). `pacing`: a running limit for the wave's
    legs, a turn they wait for (see `Pacing`)."""
    if not 1 <= max_concurrent <= 1024:
        raise Invalid(f"invalid --max-concurrent {max_concurrent}", hint="between 1 and 1024")
    if pacing.max_running is not None and not 1 <= pacing.max_running <= 1024:
        raise Invalid(f"invalid --max-running {pacing.max_running}", hint="between 1 and 1024")
    if pacing.budget is not None and usage.amount(pacing.budget) is None:
        raise Invalid(f"invalid --budget {pacing.budget!r}", hint=usage.AMOUNT_RULE)
    if pacing.after is not None:
        other = sessions.get(spex, pacing.after)
        if other.current_turn is None:
            raise Refused(
                f"session {pacing.after!r} has no turn to wait for",
                hint=f"spex show {pacing.after}",
            )
    sessions.validate_window(request.window)
    if on_complete is not None and not on_complete.strip():
        raise Invalid("--on-complete needs a command")
    wave = Wave.create(
        spex,
        names,
        request.prompt,
        retry_of=retry_of,
        on_complete=on_complete,
        options=request.turn_options(),
        key=request.key,
        pacing=pacing,
    )
    if retry_of is not None:

        def link(doc: Doc) -> None:
            doc["retried_by"].append(wave.id)

        mutate(spex, retry_of, link)
    if on_create is not None:
        on_create(wave)
    wave.launch(request, max_concurrent, pacing)
    return wave


def retry_plan(spex: Spex, wave: str, only: Sequence[str] = ()) -> tuple[list[str], bytes, Doc]:
    """The sessions of `wave` that did not succeed, its prompt, and the
    per-turn options it ran under (`recorded_options`): launch
    failures, legs never launched, and turns that ended other than `complete`
    (error, aborted, lost, interrupted, timed-out). `only` narrows it to some
    of the wave's sessions. Refused while the wave is still launching."""
    doc = refresh(spex, wave)
    if doc["state"] == states.WaveState.LAUNCHING:
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
        if leg_outcome(leg) in (states.LegResult.FAILED, states.LegResult.ABORTED)
        and (not only or name in only)
    ]
    try:
        prompt = Path(doc["prompt_file"]).read_bytes()
    except OSError as e:
        raise Refused(f"the prompt of wave {wave} is gone: {e.strerror}") from None
    return failed, prompt, recorded_options(doc)
