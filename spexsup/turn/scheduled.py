"""Scheduled wakes: `spex schedule add|ls|rm|run` and the firing an engine runs.

A schedule is a row of `schedules` (written by the ledger, with its events),
its prompt's bytes in `schedules/ID.prompt` (0600, written before the engine
is told and the row commits) and an entry of its engine (`spexsup.adapters.schedule`:
a systemd user timer, or a line of this home's block in the user's crontab).
The engine's entry is made before the row commits and taken away before the
row goes, all under the crontab's lock for cron, so a row exists only for a
clock that fires and two processes editing one home's block never lose a line.

A firing (`spex internal schedule-fire ID`, or `spex schedule run ID`) is the
wake `spex wake NAME -f schedules/ID.prompt --key sched-ID-SLOT [--queue]
[--timeout T] [--strict]`, run in-process with the environment `add` saw
(where the tmux server is, PATH, HOME): the key makes a late or doubled firing
of one slot one turn. With overlap `skip`, a busy session skips the firing
(verdict `skipped`); with `queue`, the prompt waits for it. What it did is
recorded on the schedule (`last_*`), as a `schedule-fired` event, and as a
line of `schedules/ID.log`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from spexsup import faults, ids, states
from spexsup.adapters import schedule as engines
from spexsup.core.sessions import get
from spexsup.core.spex import Spex
from spexsup.errors import Invalid, Refused, SessionBusy, SpexError
from spexsup.paths import ensure_private_dir, write_atomic
from spexsup.record import Record
from spexsup.state import ledger
from spexsup.turn.admit import Verdict
from spexsup.turn.request import Limits, QueuePolicy, WakeRequest

DIR = "schedules"
# What a firing restores of the environment `add` saw: where the tmux server
# is and what a person's shell would find (cron's is PATH=/usr/bin:/bin and
# little else), and spex's own settings, but never a turn's own variables.
KEPT_ENV = ("HOME", "PATH", "SHELL", "LANG", "LC_ALL", "TMUX_TMPDIR", "XDG_CONFIG_HOME")
NOT_KEPT = frozenset(
    {
        "SPEXSUP_HOME",
        "SPEXSUP_SESSION",
        "SPEXSUP_TURN",
        "SPEXSUP_TURN_DIR",
        "SPEXSUP_PROMPT_FILE",
        "SPEXSUP_STEP",
        faults.ENV,
        "SPEXSUP_MAINTENANCE_BROKER_FDS",
    }
)


class Schedule(Record):
    id: str
    session: str
    cadence: engines.Cadence
    overlap: str
    options: dict[str, Any]
    env: dict[str, str]
    engine: str
    first_line: str | None
    created_at: float
    last_fired_at: float | None = None
    last_slot: str | None = None
    last_verdict: str | None = None
    last_turn: str | None = None
    last_queued: str | None = None
    last_error: str | None = None
    last_repeat: bool = False

    @classmethod
    def from_row(cls, r: Any) -> Schedule:
        return cls(
            r["id"],
            r["session"],
            engines.Cadence(r["cron"], r["every"]),
            r["overlap"],
            json.loads(r["options"]),
            json.loads(r["env"]),
            r["engine"],
            r["first_line"],
            r["created_at"],
            r["last_fired_at"],
            r["last_slot"],
            r["last_verdict"],
            r["last_turn"],
            r["last_queued"],
            r["last_error"],
            bool(r["last_repeat"]),
        )

    def next_at(self, now: float | None = None) -> float | None:
        return engines.next_after(self.cadence.cron, time.time() if now is None else now)

    def as_json(self, home: Path, now: float | None = None) -> dict[str, Any]:
        next_at = self.next_at(now)
        return {
            "schema_version": ids.SCHEMA_VERSION,
            "id": self.id,
            "session": self.session,
            "cron": self.cadence.cron,
            "every": self.cadence.every,
            "when": self.cadence.describe(),
            "overlap": self.overlap,
            "options": self.options,
            "engine": self.engine,
            "unit": engines.unit_name(self.id) if self.engine == "systemd" else None,
            "env_keys": sorted(self.env),
            "first_line": self.first_line,
            "prompt_file": str(prompt_path(home, self.id)),
            "log": str(log_path(home, self.id)),
            "created_at": self.created_at,
            "created_at_iso": ids.iso(self.created_at),
            "next_at": next_at,
            "next_at_iso": ids.iso(next_at),
            "last_fired_at": self.last_fired_at,
            "last_fired_at_iso": ids.iso(self.last_fired_at),
            "last_slot": self.last_slot,
            "last_verdict": self.last_verdict,
            "last_turn": self.last_turn,
            "last_queued": self.last_queued,
            "last_error": self.last_error,
            "last_repeat": self.last_repeat,
        }


def prompt_path(home: Path, schedule: str) -> Path:
    return home / DIR / f"{schedule}.prompt"


def log_path(home: Path, schedule: str) -> Path:
    return home / DIR / f"{schedule}.log"


def _firing(home: Path, s: Schedule) -> engines.Firing:
    argv, env = engines.firing_argv(home, s.id)
    return engines.Firing(s.id, s.session, s.cadence, argv, env, log_path(home, s.id))


def captured_env() -> dict[str, str]:
    """What of this process's environment a firing restores (KEPT_ENV)."""
    env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
    env.update(
        (k, v) for k, v in os.environ.items() if k.startswith("SPEXSUP_") and k not in NOT_KEPT
    )
    return env


def entries(spex: Spex, names: tuple[str, ...] = ()) -> list[Schedule]:
    """The schedules, oldest first (of `names` only, if given)."""
    rows = spex.store.db.execute("SELECT * FROM schedules ORDER BY created_at, id").fetchall()
    found = [Schedule.from_row(r) for r in rows]
    return [s for s in found if not names or s.session in names]


def find(spex: Spex, ref: str) -> Schedule:
    """The schedule `ref` names (its id, a unique prefix of its random part,
    `last`, `last~N`); Refused when none does."""
    schedule = ids.resolve_schedule(spex.store.db, ref)
    row = spex.store.db.execute("SELECT * FROM schedules WHERE id = ?", (schedule,)).fetchone()
    if row is None:  # removed since
        raise Refused(f"no schedule {ref!r}", hint="see spex schedule ls")
    return Schedule.from_row(row)


def add(
    spex: Spex,
    name: str,
    prompt: bytes,
    *,
    cadence: engines.Cadence,
    overlap: str = "skip",
    limits: Limits | None = None,
) -> Schedule:
    """Schedule `prompt` for `name`: the engine's entry, then the row. Nothing
    is left behind when either fails (Refused for an unknown session or no
    engine, Failed when the engine refuses)."""
    if overlap not in engines.OVERLAPS:
        raise Invalid(f"invalid --overlap {overlap!r}", hint="one of: skip, queue")
    get(spex, name)
    engine = engines.choose_engine()
    limits = limits or Limits()
    options = {"timeout": limits.timeout, "strict": limits.strict}
    options = {k: v for k, v in options.items() if v not in (None, False)}
    first = prompt.split(b"\n", 1)[0].decode(errors="replace")[:200] or None
    s = Schedule(
        "s" + ids.new_id(),
        name,
        cadence,
        overlap,
        options,
        captured_env(),
        engine,
        first,
        time.time(),
    )
    ensure_private_dir(spex.home / DIR, under=spex.home)
    path = prompt_path(spex.home, s.id)
    write_atomic(path, prompt)
    try:
        _engage(spex, s)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if engine == "cron" and engines.cron_daemon() is None:
        from spexsup.errors import warn

        warn("no cron daemon is running: the schedule fires once one runs (service cron start)")
    return s


def _row(s: Schedule) -> dict[str, Any]:
    return {
        "id": s.id,
        "session": s.session,
        "cron": s.cadence.cron,
        "every": s.cadence.every,
        "overlap": s.overlap,
        "options": json.dumps(s.options),
        "env": json.dumps(s.env),
        "engine": s.engine,
        "first_line": s.first_line,
    }


def _cron_firings(
    spex: Spex, *, plus: Schedule | None = None, less: frozenset[str] = frozenset()
) -> list[engines.Firing]:
    """This home's cron schedules as the block should hold them."""
    found = [s for s in entries(spex) if s.engine == "cron" and s.id not in less]
    found += [plus] if plus is not None else []
    return [_firing(spex.home, s) for s in found]


def _engage(spex: Spex, s: Schedule) -> None:
    """The engine's entry, then the row (its `schedule-added` event); the
    entry is taken away again if the row does not commit."""
    if s.engine == "cron":
        with engines.crontab_lock():
            engines.cron_sync(spex.home, _cron_firings(spex, plus=s))
            try:
                with spex.store.tx() as db:
                    ledger.add_schedule(db, **_row(s))
            except BaseException:
                engines.cron_sync(spex.home, _cron_firings(spex, less=frozenset({s.id})))
                raise
        return
    engines.systemd_install(_firing(spex.home, s))
    try:
        with spex.store.tx() as db:
            ledger.add_schedule(db, **_row(s))
    except BaseException:
        engines.systemd_remove(s.id)
        raise


def remove(spex: Spex, ref: str, *, why: str | None = None) -> Schedule:
    """Take the schedule's entry from its engine, then its row and files.
    Refused for an unknown id; Failed (and nothing removed) when the engine
    cannot be edited. An engine no longer installed keeps nothing to take."""
    s = find(spex, ref)
    _disengage(spex, [s], why=why)
    return s


def remove_session(spex: Spex, name: str) -> list[Schedule]:
    """Every schedule of `name` (`spex rm NAME`)."""
    found = entries(spex, (name,))
    if found:
        _disengage(spex, found, why="its session was removed")
    return found


def _disengage(spex: Spex, found: list[Schedule], *, why: str | None) -> None:
    gone = frozenset(s.id for s in found)
    cron = [s for s in found if s.engine == "cron"]
    if cron:
        try:
            with engines.crontab_lock():
                engines.cron_sync(spex.home, _cron_firings(spex, less=gone))
                _forget(spex, cron, why)
        except Refused as e:  # crontab uninstalled: no line of it can fire
            if "not installed" not in e.message:
                raise
            _forget(spex, cron, why)
    for s in found:
        if s.engine == "systemd":
            try:
                engines.systemd_remove(s.id)
            except Refused as e:  # systemctl uninstalled: the files go all the same
                if "not installed" not in e.message:
                    raise
                for suffix in (".timer", ".service"):
                    (engines.unit_dir() / f"{engines.unit_name(s.id)}{suffix}").unlink(
                        missing_ok=True
                    )
            _forget(spex, [s], why)


def _forget(spex: Spex, found: list[Schedule], why: str | None) -> None:
    with spex.store.tx() as db:
        for s in found:
            ledger.remove_schedule(db, s.id, s.session, why=why)
    for s in found:
        prompt_path(spex.home, s.id).unlink(missing_ok=True)
        log_path(spex.home, s.id).unlink(missing_ok=True)


class Fired(Record):
    """One firing: the schedule, the slot it was for, its key and verdict."""

    schedule: Schedule
    slot: str
    key: str
    verdict: Verdict

    def firing(self) -> ledger.Firing:
        """What the schedule's row and its event keep of it."""
        v = self.verdict
        return ledger.Firing(self.slot, self.key, v.verdict, v.turn, v.queued, v.error, v.repeat)

    @property
    def exit_code(self) -> int:
        if self.verdict.ok:
            return 0
        return 1 if self.verdict.verdict == states.Verdict.FAILED else 3


def restore_env(s: Schedule) -> None:
    """The environment `add` saw, for what decides where a firing reaches."""
    os.environ.update(s.env)


def fire(spex: Spex, s: Schedule, *, now: float | None = None, due: bool = True) -> Fired:
    """Fire `s` once: the slot it is due in (`due`, an engine's firing), or
    the current minute (`spex schedule run`). Never raises for what the wake
    answered: a refusal is verdict `refused` (or `skipped` for a busy
    session under overlap `skip`), a failure `failed`; each is recorded."""
    from spexsup.turn.front import wake

    now = time.time() if now is None else now
    at = engines.due(s.cadence.cron, now) if due else now - now % 60
    key = engines.fire_key(s.id, at)
    limits = Limits(s.options.get("timeout"), bool(s.options.get("strict")), None)
    queue = QueuePolicy.BUSY if s.overlap == "queue" else QueuePolicy.NEVER
    try:
        prompt = prompt_path(spex.home, s.id).read_bytes()
        verdict = wake(spex, WakeRequest(s.session, prompt, limits=limits, key=key, queue=queue))
    except SessionBusy as e:
        verdict = Verdict(s.session, None, states.Verdict.SKIPPED, error=e.line(), key=key)
    except OSError as e:
        verdict = Verdict(
            s.session, None, states.Verdict.FAILED, error=f"its prompt: {e.strerror}", key=key
        )
    except SpexError as e:
        word = states.Verdict.REFUSED if isinstance(e, Refused | Invalid) else states.Verdict.FAILED
        verdict = Verdict(s.session, None, word, error=e.line(), key=key)
    fired = Fired(s, engines.slot(at), key, verdict)
    with spex.store.tx() as db:
        ledger.record_firing(db, s.id, s.session, fired.firing())
    return fired


def log_firing(spex: Spex, schedule: str, line: str) -> None:
    """Append one timestamped line to the schedule's log (0600). Best effort:
    the firing is recorded already; a log it cannot write is a warning."""
    path = log_path(spex.home, schedule)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(f"{ids.iso(time.time())} {line}\n")
    except OSError as e:
        from spexsup.errors import warn

        warn(f"cannot write {path}: {e.strerror}")
