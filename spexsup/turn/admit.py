"""Admission: may this session take a turn now, and under which limits?

`admit` (its caller holding the session's ticket) checks its state, lease
and fence, resolves the turn's plan (`turn.plan`), records the turn
`starting` (DESIGN §2.5) and writes its directory; a refusal changes nothing.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import config, durations, ids, states
from spexsup.adapters import sandbox as sandboxes
from spexsup.adapters.harness import Harness
from spexsup.adapters.procs import (
    boot_id,
    own_identity,
)
from spexsup.core.sessions import Session
from spexsup.core.spex import Spex
from spexsup.errors import (
    AtLimit,
    Failed,
    Invalid,
    OverBudget,
    Refused,
    SessionBusy,
    SessionStopped,
    UnknownSession,
)
from spexsup.pane import budget, turndir
from spexsup.pane.snapshot import work_tree
from spexsup.paths import (
    ensure_private_dir,
    own_python,
)
from spexsup.record import Record
from spexsup.state import ledger
from spexsup.state.store import session_names
from spexsup.turn import keys, plan
from spexsup.turn.plan import TurnPlan
from spexsup.turn.reconcile import orphan_pids
from spexsup.turn.request import WakeRequest, Wave

if TYPE_CHECKING:
    from spexsup.core.worktree import Setup


class QueueTaken(Refused):
    """Another launcher took the queued prompt first (or it was removed)."""


class Verdict(Record):
    """What `spex wake` reports (DESIGN §3 `wake --json`)."""

    session: str
    turn: str | None
    verdict: str  # confirmed | completed | failed | refused
    rc: int | None = None
    pid: int | None = None
    error: str | None = None
    elapsed_ms: int = 0
    attempts: int = 1
    flags: Sequence[str] = ()
    # Waiting in the pane for a usage limit to reset, until then (epoch).
    waiting_until: float | None = None
    # `queued`: the queue entry, and its place in the session's queue (1: next).
    queued: str | None = None
    position: int | None = None
    # `--key`: the key; `repeat`, this wake found it claimed and answers with
    # the first wake's verdict and what its turn (or entry) is now, `state`.
    key: str | None = None
    repeat: bool = False
    state: str | None = None
    # `queued`: what it waits for (the session's turn, a running limit…).
    waits: str | None = None

    @property
    def ok(self) -> bool:
        return self.verdict in (*states.SUCCESS, states.Verdict.QUEUED)

    def as_json(self) -> dict[str, Any]:
        return {**self._asdict(), "flags": list(self.flags)}


def new_turn_id() -> str:
    return ids.new_id()


def verification(
    home: Path, request: WakeRequest, session: Session, adapter: Harness
) -> tuple[tuple[str, ...], float]:
    """The turn's check and its time limit (`plan.verification`), reading
    the repository's `.spexsup.toml` only when the wake and the session
    leave the check to it, and only once trusted (Refused otherwise)."""
    return plan.verification(request, session, adapter, repo_check(home, request, session))


def repo_check(home: Path, request: WakeRequest, session: Session) -> Setup | None:
    """The repository's check, as `plan.resolve` takes it: None unless the
    wake and the session leave the check to it (`plan.wants_repo_check`)
    and the repository has one; Refused when its file is not trusted."""
    if not plan.wants_repo_check(request, session):
        return None
    from spexsup.core.setupfile import governing_file

    where = session.worktree.repo if session.worktree is not None else None
    governing = governing_file(Path(session.cwd), where)
    if governing is None or not governing.exists():
        return None  # most repositories: no trust module (git, dataclasses) to load
    from spexsup.core import trust

    repo = trust.repo_check(Path(session.cwd), where)
    if repo is not None:
        trust.require_check_trust(home, repo, governing)
    return repo


def parse_on_limit(text: str) -> float:
    """`wait` or `wait:DURATION` as a user types it (`wait:6h`, `wait:90m`):
    the longest usage-limit wait, in seconds. A bare number after `wait:` is
    refused: it meant hours here and means seconds in every other duration,
    so `wait:6` is read neither way (the hint spells both)."""
    head, colon, value = text.partition(":")
    if head == "wait" and colon and durations.BARE.fullmatch(value) and float(value) > 0:
        number = value.strip()
        raise Invalid(
            f"invalid --on-limit {text!r}: a bare number is no longer hours",
            hint=f"wait:{number}h for {number} hours, as it meant before; wait alone waits 12h",
        )
    return limit_wait(text)


def limit_wait(text: str) -> float:
    """The longest usage-limit wait an `--on-limit` recorded before names, in
    seconds: `wait`, `wait:DURATION`, or `wait:HOURS` (a bare number, hours:
    what a session, wave or queued prompt recorded before it was refused)."""
    head, colon, value = text.partition(":")
    hint = "wait, or wait:DURATION such as wait:6h or wait:90m, at most 14d; wait alone waits 12h"
    if head != "wait" or (colon and not value.strip()):
        raise Invalid(f"invalid --on-limit {text!r}", hint=hint)
    if not colon:
        return DEFAULT_LIMIT_WAIT_HOURS * 3600
    if durations.BARE.fullmatch(value):
        seconds = float(value) * 3600
        if not 0 < seconds <= MAX_LIMIT_WAIT:
            raise Invalid(f"invalid --on-limit {text!r}", hint=hint)
        return seconds
    try:
        return durations.parse(value, "--on-limit", maximum=MAX_LIMIT_WAIT)
    except Invalid:
        raise Invalid(f"invalid --on-limit {text!r}", hint=hint) from None


DEFAULT_LIMIT_WAIT_HOURS = 12.0
MAX_LIMIT_WAIT = 14 * 86400.0


class Admitted(Record):
    """A turn admitted: its session (as admission read it), id, prepared
    directory, the adapter that built its argv, and its resolved plan."""

    session: Session
    turn: str
    directory: Path
    adapter: Harness
    plan: TurnPlan


def admit(
    spex: Spex,
    request: WakeRequest,
    settings: config.Config | None = None,
    *,
    tree_start: TreeStart | None = None,
) -> Admitted:
    """One transaction: check the session can take a turn, insert it (`starting`).

    The caller holds the session's ticket, its turns reconciled
    (`turn.target.taken`); the row read here is the compare-and-swap.

    With `request.queued`, the turn is that queue entry's: the same
    transaction takes the entry (QueueTaken if another process did), so a
    queued prompt becomes one turn however many launchers race for it. With
    `request.key`, the same transaction claims it for the turn, before any
    other check: a key another wake claimed first raises `keys.Repeat` (its
    turn is the answer), one of another session `keys.KeyElsewhere`; a
    refusal claims nothing.

    Running-turn limits are checked in the same transaction, so they hold
    exactly however many launchers race: config.toml's `max_running` for the
    home, and a fan-out leg's `request.wave` limit (whose turn is linked to
    its wave here too); past either, `AtLimit`.

    The adapter is loaded once per wake (it reads the harness files), and
    the turn's options resolved once (`plan.resolve`) from the session as
    this transaction reads it. `settings`: config.toml as the wake read it
    (read here otherwise). `tree_start`: a conductor's shared record of the
    work tree's start (`Hooks.tree_start`), written as the turn's own.
    """
    name, prompt, wave = request.name, request.prompt, request.wave
    if b"\0" in prompt:
        raise Invalid("the prompt contains a NUL byte", hint="prompts are NUL-free text")
    turn = new_turn_id()
    pid, token = own_identity()
    if settings is None:
        settings = config.load(spex.home)
    with spex.store.tx() as db:
        row = db.execute("SELECT * FROM sessions WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise UnknownSession(name, session_names(db))
        while db.execute("SELECT 1 FROM turns WHERE id = ?", (turn,)).fetchone():
            # 24 random bits per second: a 200-leg fan-out repeats one about
            # once in 800 waves. We hold the write lock, so a free id stays free.
            turn = new_turn_id()
        if request.key is not None:
            # First: the repeat of a wake whose turn runs is no `busy` refusal.
            mark = keys.fingerprint(prompt, request.fresh, tuple(request.limits))
            keys.claim(db, request.key, name, mark, turn=turn)
        session = Session.from_row(row)
        _refuse_unready(db, session)
        adapter = session.adapter(spex.home)
        resolved = plan.resolve(
            request, session, settings, adapter, repo=repo_check(spex.home, request, session)
        )
        resume_id = resolved.resume
        # A harness that lets us choose a new conversation's id gets one now,
        # stored with the admission: a turn that dies before it prints its
        # init event can still be resumed.
        assigned = None
        if adapter.assign_id == "uuid" and not (resume_id and adapter.resume):
            import uuid

            assigned = str(uuid.uuid4())
        argv, on_stdin = adapter.argv(prompt, resume_id, assigned, resolved.model)
        # The first attempt's launch fence (see `claim_fence`), claimed here
        # so the launch needs no transaction of its own.
        fence = session.launch_fence + 1
        others = (
            [Path(r["cwd"]) for r in db.execute("SELECT cwd FROM sessions WHERE worktree NOT NULL")]
            if resolved.sandbox.enabled
            else []
        )
        check_limits(db, settings.max_running, wave)
        if settings.budget_day is not None:
            check_day_budget(db, settings)
        if request.queued is not None and not ledger.take_queued(db, request.queued, name, turn):
            raise QueueTaken(f"queued prompt {request.queued} was taken or removed")
        ledger.admit_turn(
            db,
            turn=turn,
            session=name,
            fence=fence,
            assigned=assigned,
            resumed=resume_id,
            launcher_pid=pid,
            launcher_token=token,
            started_at=time.time(),
            boot_id=boot_id() or None,
            timeout=resolved.timeout,
            strict=int(resolved.strict),
            model=resolved.model,
        )
        if wave is not None:
            ledger.link_wave(db, turn, wave.id)
    directory = ensure_private_dir(turndir.path(spex.home, name, turn), under=spex.home)
    sandbox = sandbox_plan(spex, session, adapter, resolved.sandbox, directory, others)
    resumed = resume_id if resume_id and adapter.resume else None
    run = turndir.Invocation(argv, prompt, on_stdin)
    _prepare(spex, session, turn, directory, run, adapter, ending(resolved, sandbox), resumed)
    _record_tree(Path(session.cwd), directory, tree_start)
    return Admitted(session, turn, directory, adapter, resolved)


def _refuse_unready(db: sqlite3.Connection, session: Session) -> None:
    """Refuse a session that cannot take a turn now: stopped, being removed
    or created, its worktree or cwd gone, or running one."""
    name = session.name
    if session.state == states.SessionState.STOPPED:
        raise SessionStopped(name)
    if session.state == states.SessionState.REMOVING:
        raise Refused(f"session {name!r} is being removed")
    if session.state == states.SessionState.CREATING:
        raise Refused(
            f"session {name!r} is still being created",
            hint=f"wait for spex new; if it was killed, spex rm {name}",
        )
    if session.worktree is not None and session.worktree.missing:
        # Never run elsewhere: tmux would start the turn in $HOME.
        raise Refused(
            f"{name}: its worktree {session.worktree.path} was removed behind spex",
            hint=f"spex rm {name} (its branch {session.worktree.branch} is checked first)",
        )
    if session.state == states.SessionState.RUNNING:
        busy = db.execute(
            "SELECT flags, survivors FROM turns WHERE id = ?", (session.current_turn,)
        ).fetchone()
        # An agent running on without its pane is named: only a stop ends it.
        raise SessionBusy(name, session.current_turn, orphan_pids(busy) if busy else ())
    if not Path(session.cwd).is_dir():
        # tmux would silently start the turn somewhere else.
        raise Failed(
            f"{name}: working directory {session.cwd} no longer exists",
            hint=f"restore it, or spex rm {name} and create the session again",
        )


def ending(resolved: TurnPlan, sandbox: sandboxes.Plan | None) -> Ending:
    """What the wrapper and the reporter need of the plan."""
    on_limit = resolved.on_limit
    return Ending(
        resolved.timeout,
        resolved.grace,
        resolved.strict,
        resolved.login_timeout,
        limit_wait(on_limit) if on_limit else None,
        resolved.limit_margin,
        resolved.model,
        resolved.fallback,
        resolved.budget,
        resolved.verify,
        resolved.verify_timeout,
        sandbox,
    )


def sandbox_plan(
    spex: Spex,
    session: Session,
    adapter: Harness,
    policy: sandboxes.Policy,
    directory: Path,
    others: list[Path],
) -> sandboxes.Plan | None:
    """The paths and hosts of the turn's sandbox; None when it runs without."""
    if not policy.enabled:
        return None
    import os

    from spexsup.pane import netgate

    needs = sandboxes.Needs(
        adapter.sandbox_write,
        [*adapter.model_hosts, *netgate.base_url_hosts({**os.environ, **session.env})],
        adapter.sandbox_relocate,
    )
    plan = sandboxes.plan(
        policy,
        needs,
        cwd=Path(session.cwd),
        spex_home=spex.home,
        turn_dir=directory,
        env=session.env,
        other_worktrees=others,
    )
    sandboxes.prepare_writable(plan)
    return plan


def check_day_budget(db: sqlite3.Connection, settings: config.Config) -> None:
    """OverBudget once today's known spend in the home (every turn's every
    attempt since local midnight) has reached `budget_day`; an unknown cost
    never counts."""
    from spexsup import usage

    assert settings.budget_day is not None
    spent = usage.total(
        db, settings.pricing, where="at >= ?", params=(usage.day_start(time.time()),)
    ).amount
    if spent is not None and spent >= settings.budget_day:
        raise OverBudget(usage.money(spent), usage.money(settings.budget_day))


def check_limits(db: sqlite3.Connection, home_limit: int | None, wave: Wave | None) -> None:
    """AtLimit when `home_limit` turns run in the home, or the wave's limit of its legs."""
    if home_limit is not None:
        (running,) = db.execute(
            "SELECT count(*) FROM turns WHERE state IN ('starting', 'running')"
        ).fetchone()
        if running >= home_limit:
            turns = "turns" if home_limit > 1 else "turn"
            raise AtLimit(home_limit, f"{turns} of this home", f"max_running = {home_limit}")
    if wave is not None and wave.max_running is not None:
        (running,) = db.execute(
            "SELECT count(*) FROM wave_turns w JOIN turns t ON t.id = w.turn"
            " WHERE w.wave = ? AND t.state IN ('starting', 'running')",
            (wave.id,),
        ).fetchone()
        if running >= wave.max_running:
            legs = "legs" if wave.max_running > 1 else "leg"
            raise AtLimit(
                wave.max_running, f"{legs} of wave {wave.id}", f"--max-running {wave.max_running}"
            )


class Ending(Record):
    """What the wrapper and the reporter need to judge the turn's end."""

    timeout: float | None
    grace: float
    strict: bool
    # Run in the login shell's environment, waiting at most this long for it.
    login_timeout: float | None = None
    # Wait in the pane for a usage limit to reset, at most this long.
    limit_wait: float | None = None
    limit_margin: float = 60.0
    # The model of the first attempt, and those to fall back to (pane.fallback).
    model: str | None = None
    fallback: tuple[str, ...] = ()
    budget: float | None = None
    # The check of the turn's work and its time limit (pane.verify).
    verify: tuple[str, ...] = ()
    verify_timeout: float = plan.DEFAULT_VERIFY_TIMEOUT
    # The sandbox it runs in (spexsup.adapters.sandbox), or None.
    sandbox: sandboxes.Plan | None = None


# A conductor's record of a work tree's start (`Hooks.tree_start`).
TreeStart = Callable[[Path], Mapping[str, Any] | None]


def _record_tree(cwd: Path, directory: Path, tree_start: TreeStart | None) -> None:
    """The work tree's state before the harness starts (`git-start`, for spex
    diff): a conductor's shared record when it has one, else the wrapper
    takes it (`git-start.todo`): a dozen git calls are not worth holding the
    verdict for."""
    if work_tree(cwd) is None:
        return
    shared = tree_start(cwd) if tree_start is not None else None
    if shared is not None:
        turndir.write_git_start(directory, shared)
    else:
        turndir.mark_git_start_todo(directory)


def _prepare(
    spex: Spex,
    session: Session,
    turn: str,
    directory: Path,
    run: turndir.Invocation,
    adapter: Harness,
    ending: Ending,
    resumed: str | None = None,
) -> None:
    """The turn dir: exact prompt bytes, NUL-separated argv/env/reporter, metadata
    (with the conversation id it resumes), and `deadline` (`SECONDS GRACE`) for
    the wrapper's watchdog."""
    # Never the session's cwd or PYTHONPATH on sys.path (see own_python); the
    # wrapper runs spex's other helpers with the same interpreter and flags.
    reporter = [
        *own_python("spexsup"),
        "--home",
        str(spex.home),
        "internal",
        "turn-exit",
        session.name,
        turn,
    ]
    turndir.write_launch(directory, run, env=session.env, reporter=reporter)
    # The harness is named, not its id pattern: fixing harnesses.toml fixes
    # every later read of this turn.
    meta = {
        "session": session.name,
        "turn": turn,
        "harness": adapter.name,
        "outcome": adapter.outcome,
        "strict": ending.strict,
        "timeout": ending.timeout,
        "cwd": session.cwd,
        "started": time.time(),
        "resumed": resumed,
        "model": ending.model,
        "verify": list(ending.verify) or None,
        "verify_timeout": ending.verify_timeout if ending.verify else None,
        "sandbox": ending.sandbox.as_json() if ending.sandbox is not None else None,
    }
    files = {turndir.META: json.dumps(meta).encode()}
    if adapter.outcome:
        # A CLI of JSON events: the pane shows their rendering (spexsup.pane.pretty).
        files[turndir.RENDER] = f"{adapter.outcome}\n".encode()
    if ending.timeout:
        files[turndir.DEADLINE] = f"{ending.timeout:g} {ending.grace:g}\n".encode()
    if ending.login_timeout is not None:
        # Every harness, a path too (the demo's interpreter, `-- ./agent.sh`):
        # what the login shell exports (an API key in ~/.bashrc) is its own.
        files[turndir.LOGIN] = f"{ending.login_timeout:g}\n".encode()
    if ending.budget is not None:
        prices = {m: list(p) for m, p in config.load(spex.home).pricing.items()}
        files[budget.FILE] = json.dumps({"amount": ending.budget, "pricing": prices}).encode()
    if ending.verify:
        files[turndir.VERIFY] = turndir.words(w.encode() for w in ending.verify)
        files[turndir.VERIFY_DEADLINE] = f"{ending.verify_timeout:g} {ending.grace:g}\n".encode()
    if ending.fallback:
        files[turndir.FALLBACK] = json.dumps({"models": list(ending.fallback)}).encode()
    if ending.limit_wait is not None:
        files[turndir.ON_LIMIT] = f"{ending.limit_wait:g} {ending.limit_margin:g}\n".encode()
    turndir.write_plan(directory, files)
    if ending.sandbox is not None:
        plan = ending.sandbox
        engine = sandboxes.bwrap_argv(plan, sandboxes.engine() or sandboxes.ENGINE)
        turndir.write_sandbox(directory, engine, plan)
