"""Fan-out waves: one prompt to many sessions, a verdict per session (DESIGN §6).

A wave's document (`<home>/waves/<id>.json`, written atomically whenever it
changes, mirrored in SQLite) is the record: id, times, the prompt's file,
and one leg per session with its turn, verdict, rc and error. Legs launch
through a gate of `max_concurrent` slots (admission and launch only) and
confirm concurrently, so a wave takes about one window, not one per leg.

An abort (SIGINT/SIGTERM) marks the wave and its unstarted legs `aborted`;
abort wins over any later write. Legs mid-confirmation finish. A reader that
finds a wave still `launching` whose launcher is dead shows it `aborted`.
"""

from __future__ import annotations

import fnmatch
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from spexsup import control, ids, sessions, turns
from spexsup.errors import Invalid, Refused, SpexError
from spexsup.paths import ensure_private_dir, write_atomic
from spexsup.procs import Liveness, identity_liveness, own_identity
from spexsup.spex import Spex

DEFAULT_MAX_CONCURRENT = 16
SUCCESS = ("confirmed", "completed")
WAVE_ID_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-TZ"

Doc = dict[str, Any]
Listener = Callable[[Doc], None]


def new_wave_id() -> str:
    return ids.new_id("w")


def validate_wave_id(wave: str) -> str:
    if not (1 <= len(wave) <= 64) or any(c not in WAVE_ID_CHARS for c in wave):
        raise Invalid(f"invalid wave id {wave!r}", hint="see spex waves")
    return wave


def waves_dir(spex: Spex) -> Path:
    return ensure_private_dir(spex.home / "waves")


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


def overall(legs: Sequence[Doc]) -> str:
    ok = sum(1 for leg in legs if leg["verdict"] in SUCCESS and leg.get("turn_state") != "error")
    if ok == len(legs):
        return "complete"
    return "failed" if ok == 0 else "partial"


class Wave:
    """One wave being launched by this process. Thread-safe: legs report from
    worker threads; every change is persisted (SQLite, then the document)."""

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
        cls, spex: Spex, names: Sequence[str], prompt: bytes, *, retry_of: str | None = None
    ) -> Wave:
        wave = new_wave_id()
        directory = waves_dir(spex)
        prompt_file = directory / f"{wave}.prompt"
        write_atomic(prompt_file, prompt)
        pid, token = own_identity()
        doc: Doc = {
            "schema_version": ids.SCHEMA_VERSION,
            "id": wave,
            "state": "launching",
            "created_at": time.time(),
            "ended_at": None,
            "prompt_file": str(prompt_file),
            "prompt_bytes": len(prompt),
            "launcher": {"pid": pid, "start_token": token},
            "retry_of": retry_of,
            "retried_by": [],
            "legs": [
                {
                    "session": n,
                    "status": "pending",
                    "turn": None,
                    "verdict": None,
                    "rc": None,
                    "error": None,
                    "turn_state": None,
                }
                for n in names
            ],
        }
        self = cls(spex, doc)
        with spex.store.tx() as db:
            db.execute(
                "INSERT INTO waves (id, state, created_at, doc) VALUES (?, ?, ?, ?)",
                (wave, "launching", doc["created_at"], json.dumps(doc)),
            )
        self._write(durable=True)
        return self

    def _write(self, *, durable: bool = False) -> None:
        data = json.dumps(self.doc, indent=2).encode()
        write_atomic(waves_dir(self.spex) / f"{self.id}.json", data, durable=durable)

    def update(self, change: Callable[[Doc], None], *, durable: bool = False) -> None:
        """Apply `change` to the document under the lock, persist, notify."""
        with self.lock:
            change(self.doc)
            snapshot = json.loads(json.dumps(self.doc))
            save(self._spex(), snapshot)
            self._write(durable=durable)
        for listen in self.listeners:
            listen(snapshot)

    def abort(self) -> None:
        """Mark the wave and its unstarted legs aborted; abort wins over later writes."""
        self.aborted.set()

        def change(doc: Doc) -> None:
            doc["state"] = "aborted"
            for leg in doc["legs"]:
                if leg["status"] == "pending":
                    leg["status"] = "aborted"
                    leg["verdict"] = "aborted"

        self.update(change, durable=True)

    def run_leg(
        self,
        session: str,
        prompt: bytes,
        window: float | None,
        gate: threading.Semaphore,
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
        try:
            v = turns.wake(spex, session, prompt, window=window, gate=Slot())
            result = {"turn": v.turn, "verdict": v.verdict, "rc": v.rc, "error": v.error}
        except _AbortedLeg:
            result = {"verdict": "aborted", "status": "aborted"}
        except Refused as e:
            result = {"verdict": "refused", "error": e.line()}
        except SpexError as e:
            result = {"verdict": "failed", "error": e.line()}

        def finished(doc: Doc) -> None:
            _leg(doc, session).update({"status": "done", **result})

        self.update(finished)

    def launch(self, prompt: bytes, window: float | None, max_concurrent: int) -> None:
        """Launch every leg; return when each has its verdict (or was aborted)."""
        gate = threading.Semaphore(max_concurrent)
        names = [leg["session"] for leg in self.doc["legs"]]
        # One thread per leg: the gate bounds launches, confirmations overlap.
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            futures = [pool.submit(self.run_leg, n, prompt, window, gate) for n in names]
            for future in futures:
                future.result()

        def ended(doc: Doc) -> None:
            if doc["state"] != "aborted":
                doc["state"] = overall(doc["legs"])
            doc["ended_at"] = time.time()

        self.update(ended, durable=True)

    def wait_turns(self, timeout: float | None) -> None:
        """`--wait`: wait for every started turn to end and record its state and rc."""
        started = [leg["session"] for leg in self.doc["legs"] if leg["verdict"] in SUCCESS]
        if not started:
            return
        ended = control.wait(self.spex, started, timeout=timeout)
        by_session = {e.session: e for e in ended}

        def record(doc: Doc) -> None:
            for leg in doc["legs"]:
                e = by_session.get(leg["session"])
                if e is not None and e.turn == leg["turn"]:
                    leg["turn_state"] = e.state
                    leg["rc"] = e.rc
            if doc["state"] != "aborted":
                doc["state"] = overall(doc["legs"])

        self.update(record, durable=True)


def _leg(doc: Doc, session: str) -> Doc:
    for leg in doc["legs"]:
        if leg["session"] == session:
            return leg  # type: ignore[no-any-return]
    raise KeyError(session)


class _AbortedLeg(Exception):
    """The wave was aborted before this leg got a launch slot."""


def save(spex: Spex, doc: Doc) -> None:
    with spex.store.tx() as db:
        db.execute(
            "UPDATE waves SET state = ?, ended_at = ?, doc = ? WHERE id = ?",
            (doc["state"], doc["ended_at"], json.dumps(doc), doc["id"]),
        )


def load(spex: Spex, wave: str) -> Doc:
    """A wave's document, reconciled: `launching` with a dead launcher is `aborted`."""
    validate_wave_id(wave)
    row = spex.store.db.execute("SELECT doc FROM waves WHERE id = ?", (wave,)).fetchone()
    if row is None:
        raise Refused(f"no wave {wave!r}", hint="see spex waves")
    doc: Doc = json.loads(row["doc"])
    launcher = doc["launcher"]
    if doc["state"] == "launching" and (
        identity_liveness(launcher["pid"], launcher["start_token"]) is Liveness.DEAD
    ):
        for leg in doc["legs"]:
            if leg["status"] in ("pending", "launching"):
                leg["status"] = "aborted"
                leg["verdict"] = leg["verdict"] or "aborted"
                leg["error"] = leg["error"] or "the launcher died before this leg finished"
        doc["state"] = "aborted"
        doc["ended_at"] = doc["ended_at"] or time.time()
        save(spex, doc)
        write_atomic(waves_dir(spex) / f"{wave}.json", json.dumps(doc, indent=2).encode())
    return doc


def list_waves(spex: Spex) -> list[Doc]:
    rows = spex.store.db.execute("SELECT id FROM waves ORDER BY created_at DESC").fetchall()
    return [load(spex, r["id"]) for r in rows]


def fanout(
    spex: Spex,
    names: Sequence[str],
    prompt: bytes,
    *,
    window: float | None = None,
    max_concurrent: int = DEFAULT_MAX_CONCURRENT,
    retry_of: str | None = None,
    on_create: Callable[[Wave], None] | None = None,
) -> Wave:
    """Create a wave over `names` and launch it (see `Wave.launch`)."""
    if not 1 <= max_concurrent <= 1024:
        raise Invalid(f"invalid --max-concurrent {max_concurrent}", hint="between 1 and 1024")
    sessions.validate_window(window)
    wave = Wave.create(spex, names, prompt, retry_of=retry_of)
    if retry_of is not None:

        def link(doc: Doc) -> None:
            doc["retried_by"].append(wave.id)

        old = Wave(spex, load(spex, retry_of))
        old.update(link, durable=True)
    if on_create is not None:
        on_create(wave)
    wave.launch(prompt, window, max_concurrent)
    return wave


def retry_plan(spex: Spex, wave: str) -> tuple[list[str], bytes]:
    """The sessions of `wave` whose legs did not succeed, and its prompt.

    Refused while the wave is still launching.
    """
    doc = load(spex, wave)
    if doc["state"] == "launching":
        raise Refused(f"wave {wave} is still launching", hint=f"spex wave {wave}")
    failed = [
        leg["session"]
        for leg in doc["legs"]
        if leg["verdict"] not in SUCCESS or leg.get("turn_state") == "error"
    ]
    try:
        prompt = Path(doc["prompt_file"]).read_bytes()
    except OSError as e:
        raise Refused(f"the prompt of wave {wave} is gone: {e.strerror}") from None
    return failed, prompt
