"""Turns: admission, prepare, launch, startup confirmation, reconciliation.

A turn is one headless run of a session's harness, started in the session's
pane by `shell/turn.sh`, which records how it ended in the `outcome` marker
(see `marker`). `wake` tells the truth about startup within the confirmation
window (DESIGN §2.5); `reconcile` settles turns whose wrapper vanished.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, NamedTuple

from spexsup import config, events, ids, ledger, marker, report, states
from spexsup.errors import Failed, Invalid, Refused, UnknownSession, warn
from spexsup.harness import Harness
from spexsup.home import Launch
from spexsup.marker import Marker, Stage
from spexsup.paths import (
    disk_full,
    ensure_private_dir,
    no_space,
    own_python,
    wrapper_path,
    write_atomic,
)
from spexsup.procs import (
    Liveness,
    boot_id,
    command_line_liveness,
    identity_liveness,
    is_zombie,
    own_identity,
    start_token,
)
from spexsup.sessions import Session, get, shell_env, validate_window
from spexsup.spex import Spex
from spexsup.tickets import ticket
from spexsup.watch import DirWatch

DEFAULT_WINDOW = 2.0
# A turn that exited just before the window closed gets this long for its
# exit reporter to finish, rather than a verdict that races the reporter.
REPORTER_GRACE = 1.0
RETRY_BACKOFF = (0.25, 0.5, 1.0, 2.0)
assert len(RETRY_BACKOFF) == report.MAX_RETRIES
TAIL_LINES = 5


class Verdict(NamedTuple):
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

    @property
    def ok(self) -> bool:
        return self.verdict in ("confirmed", "completed")

    def as_json(self) -> dict[str, Any]:
        return {**self._asdict(), "flags": list(self.flags)}


def new_turn_id() -> str:
    return ids.new_id()


def turn_dir(spex: Spex, session: str, turn: str) -> Path:
    return spex.home / "turns" / session / turn


def output_end(directory: Path, size: int = 65536) -> str:
    """The last `size` bytes of a turn's output, decoded (see outcome.output_end)."""
    from spexsup.outcome import output_end as end

    return end(directory, size)


def output_tail(directory: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of a turn's output as a person reads them (JSON events
    rendered for its CLI), joined for a one-line message."""
    from spexsup import pretty

    return " | ".join(line[:200] for line in pretty.turn_lines(directory)[-lines:])


def failure_message(harness: Harness, directory: Path, rc: int, cas: int | None) -> str:
    """`exited rc=N`, the reporter's rc when non-zero, a named cause, the last output lines."""
    decoded = output_end(directory)
    parts = [f"exited rc={rc}"]
    if cas not in (None, report.RECORDED, report.STALE, report.DEFERRED):
        parts.append(f"exit reporter rc={cas}")
    message = ", ".join(parts)
    for fatal in harness.fatal:
        if re.search(fatal.pattern, decoded):
            message = f"{fatal.cause}: {message}"
            break
    tail = output_tail(directory)
    return f"{message}: {tail}" if tail else message


# --- admission and launch -------------------------------------------------


class Limits(NamedTuple):
    """A wake's own `--timeout` (seconds) and `--strict`; the session's and
    then the harness's apply where these are not given."""

    timeout: float | None = None
    strict: bool = False
    on_limit: str | None = None


def parse_on_limit(text: str) -> float:
    """`wait` or `wait:HOURS`: the longest usage-limit wait, in seconds."""
    head, _, hours = text.partition(":")
    try:
        value = float(hours) if hours else DEFAULT_LIMIT_WAIT_HOURS
    except ValueError:
        value = -1
    if head != "wait" or not 0 < value <= 24 * 14:
        raise Invalid(f"invalid --on-limit {text!r}", hint="wait, or wait:HOURS (the longest wait)")
    return value * 3600


DEFAULT_LIMIT_WAIT_HOURS = 12.0
# After the reset time a CLI names, this long before the harness runs again.
DEFAULT_LIMIT_MARGIN = 60.0


def admit(
    spex: Spex, name: str, prompt: bytes, *, fresh: bool, limits: Limits | None = None
) -> tuple[Session, str, Path, Harness]:
    """One transaction: check the session can take a turn, insert it (`starting`).

    Returns the session, the turn id, its prepared directory and the adapter
    that built its argv (loaded once per wake: it reads the harness files).
    """
    if b"\0" in prompt:
        raise Invalid("the prompt contains a NUL byte", hint="prompts are NUL-free text")
    reconcile(spex, [name])
    turn = new_turn_id()
    pid, token = own_identity()
    settings = config.load(spex.home)
    with spex.store.tx() as db:
        row = db.execute("SELECT * FROM sessions WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise UnknownSession(name)
        session = Session.from_row(row)
        if session.state == "stopped":
            raise Refused(f"session {name!r} is stopped", hint=f"spex resume {name}")
        if session.state == "removing":
            raise Refused(f"session {name!r} is being removed")
        if session.state == "creating":
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
        if session.state == "running":
            raise Refused(
                f"session {name!r} is busy with turn {session.current_turn}",
                hint=f"spex wait {name}, or spex stop {name}",
            )
        if not Path(session.cwd).is_dir():
            # tmux would silently start the turn somewhere else.
            raise Failed(
                f"{name}: working directory {session.cwd} no longer exists",
                hint=f"restore it, or spex rm {name} and create the session again",
            )
        adapter = session.adapter(spex.home)
        resume_id = None if fresh else session.harness_session_id
        # A harness that lets us choose a new conversation's id gets one now,
        # stored with the admission: a turn that dies before it prints its
        # init event can still be resumed.
        assigned = None
        if adapter.assign_id == "uuid" and not (resume_id and adapter.resume):
            import uuid

            assigned = str(uuid.uuid4())
        argv, on_stdin = adapter.argv(prompt, resume_id, assigned)
        # The first attempt's launch fence (see `_claim_fence`), claimed here
        # so the launch needs no transaction of its own.
        fence = session.launch_fence + 1
        limits = limits or Limits()
        timeout = limits.timeout or session.timeout or adapter.timeout
        strict = limits.strict or session.strict or adapter.strict or settings.strict
        while db.execute("SELECT 1 FROM turns WHERE id = ?", (turn,)).fetchone():
            # 24 random bits per second: a 200-leg fan-out repeats one about
            # once in 800 waves. We hold the write lock, so a free id stays free.
            turn = new_turn_id()
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
            timeout=timeout,
            strict=int(strict),
        )
    directory = ensure_private_dir(turn_dir(spex, name, turn), under=spex.home)
    grace = settings.grace if timeout else None
    on_limit = limits.on_limit or session.on_limit
    ending = Ending(
        timeout,
        DEFAULT_KILL_GRACE if grace is None else grace,
        strict,
        settings.login_timeout if settings.login_shell else None,
        parse_on_limit(on_limit) if on_limit else None,
        settings.limit_margin if settings.limit_margin is not None else DEFAULT_LIMIT_MARGIN,
    )
    resumed = resume_id if resume_id and adapter.resume else None
    _prepare(spex, session, turn, directory, prompt, argv, on_stdin, adapter, ending, resumed)
    if _in_git_tree(Path(session.cwd)):
        # The wrapper records the work tree's state (`git-start`, for spex
        # diff) before the harness starts: a dozen git calls are not worth
        # holding the verdict for.
        write_atomic(directory / "git-start.todo", b"", durable=False)
    return session, turn, directory, adapter


# Between the watchdog's SIGTERM and SIGKILL when config.toml sets no grace.
DEFAULT_KILL_GRACE = 5.0


class Ending(NamedTuple):
    """What the wrapper and the reporter need to judge the turn's end."""

    timeout: float | None
    grace: float
    strict: bool
    # Run in the login shell's environment, waiting at most this long for it.
    login_timeout: float | None = None
    # Wait in the pane for a usage limit to reset, at most this long.
    limit_wait: float | None = None
    limit_margin: float = 60.0


def _in_git_tree(cwd: Path) -> bool:
    """Is `cwd` inside a git work tree? (stat calls only; git itself decides later)"""
    return any((d / ".git").exists() for d in (cwd, *cwd.parents))


def _prepare(
    spex: Spex,
    session: Session,
    turn: str,
    directory: Path,
    prompt: bytes,
    argv: list[bytes],
    on_stdin: bool,
    adapter: Harness,
    ending: Ending,
    resumed: str | None = None,
) -> None:
    """The turn dir: exact prompt bytes, NUL-separated argv/env/reporter, metadata
    (with the conversation id it resumes), and `deadline` (`SECONDS GRACE`) for
    the wrapper's watchdog."""
    files = {
        "prompt": prompt,
        "argv": b"\0".join(argv) + b"\0",
        "env": b"".join(f"{k}={v}".encode() + b"\0" for k, v in session.env.items()),
    }
    if on_stdin:
        files["stdin"] = b""
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
    files["reporter"] = "\0".join(reporter).encode() + b"\0"
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
    }
    files["meta.json"] = json.dumps(meta).encode()
    if adapter.outcome:
        # A CLI of JSON events: the pane shows their rendering (spexsup.pretty).
        files["render"] = f"{adapter.outcome}\n".encode()
    if ending.timeout:
        files["deadline"] = f"{ending.timeout:g} {ending.grace:g}\n".encode()
    if ending.login_timeout is not None:
        # Every harness, a path too (the demo's interpreter, `-- ./agent.sh`):
        # what the login shell exports (an API key in ~/.bashrc) is its own.
        files["login"] = f"{ending.login_timeout:g}\n".encode()
    if ending.limit_wait is not None:
        files["on-limit"] = f"{ending.limit_wait:g} {ending.limit_margin:g}\n".encode()
    # Not fsync'd: after a crash the turn is lost anyway, and these die with it.
    for name, data in files.items():
        write_atomic(directory / name, data, durable=False)


def _stopped(name: str, turn: str) -> Refused:
    return Refused(
        f"turn {turn} of {name!r} was stopped (spex stop or rm) before it started",
        hint=f"spex show {name}",
    )


def _claim_fence(spex: Spex, name: str, turn: str) -> int:
    """A new launch fence for another attempt of `turn`, in one transaction
    that also proves the turn is still its session's current `starting` turn.

    A stop reads the session's fence in its own transaction and then fences
    the pane with it, so an attempt either sees the abort here (or, for the
    first attempt, at admission) or is barred inside tmux (`TmuxHome.launch`):
    it can never launch after a stop.
    """
    with spex.store.tx() as db:
        row = db.execute(
            "SELECT t.state, s.launch_fence FROM turns t JOIN sessions s"
            " ON s.name = t.session AND s.current_turn = t.id WHERE t.id = ?",
            (turn,),
        ).fetchone()
        if row is None or row["state"] != "starting":
            raise _stopped(name, turn)
        fence = int(row["launch_fence"]) + 1
        db.execute("UPDATE sessions SET launch_fence = ? WHERE name = ?", (fence, name))
        db.execute("UPDATE turns SET fence = ? WHERE id = ?", (fence, turn))
    return fence


def _busy(spex: Spex, session: Session, turn: str, directory: Path, command: str) -> Refused:
    """The pane runs a person's work: undo the admission (the turn never
    existed for anyone but us) and say what runs there."""
    from spexsup.home import pane_activity

    with spex.store.tx() as db:
        ledger.undo_admission(
            db, session.name, turn, previous_turn=session.current_turn, was=session.state
        )
    shutil.rmtree(directory, ignore_errors=True)
    pane = spex.tmux.pane(session.name)
    activity = pane_activity(pane, spex.home / "turns") if pane else None
    return Refused(
        f"{session.name}: the pane is running {activity or command}",
        hint="spex wake --force to replace it",
    )


def launch(spex: Spex, session: Session, turn: str, directory: Path, *, force: bool = False) -> int:
    """Start the wrapper in the home with a fenced `respawn-pane -k`, recreating a
    vanished home first. Returns tmux's pane_pid for the new wrapper.

    Raises Refused when a stop (or rm) got there first: the pane was fenced,
    or the turn is no longer `starting`; and, unless `force`, when a person
    runs something in the pane (the admission is then undone).
    """
    name = session.name
    row = spex.store.db.execute("SELECT fence FROM turns WHERE id = ?", (turn,)).fetchone()
    if row is None or row["fence"] is None:
        raise _stopped(name, turn)
    fence = int(row["fence"])
    env = {
        "SPEXSUP_SESSION": name,
        "SPEXSUP_TURN": turn,
        "SPEXSUP_TURN_DIR": str(directory),
        "SPEXSUP_PROMPT_FILE": str(directory / "prompt"),
        "SPEXSUP_HOME": str(spex.home),
    }
    wrapper = os.environ.get("SPEXSUP_WRAPPER") or str(wrapper_path())
    argv = ["bash", wrapper, str(directory)]
    owner = session.owner(spex.home)

    def attempt() -> Launch:
        return spex.tmux.launch(name, owner, fence, turn, session.cwd, env, argv, force=force)

    _await_reporter(spex, name, session.current_turn)
    result = attempt()
    if result.outcome == "missing" or (result.outcome == "foreign" and not result.holder):
        # Recreate a vanished home, or adopt an older spex's untagged one
        # (create refuses a session of that name that is not provably ours).
        if spex.tmux.create(name, session.cwd, owner, shell_env(spex, session)):
            events.emit(spex.store, "home-recreated", session=name, turn=turn)
        result = attempt()
    if result.outcome == "busy" and not force:
        result = _after_startup(result, attempt)
    if result.outcome == "busy":
        raise _busy(spex, session, turn, directory, result.holder)
    if result.outcome == "fenced" or (
        result.outcome == "foreign" and result.holder.startswith(owner.split("-")[0] + "-")
    ):
        raise _stopped(name, turn)  # by a stop, or by rm (a newer incarnation owns the name)
    if result.outcome == "foreign":
        raise Refused(
            f"the tmux session {name!r} belongs to another spex home ({result.holder})",
            hint=f"kill it: tmux {spex.tmux.where()} kill-session -t ={name}",
        )
    if result.outcome != "launched" or result.pane_pid is None:
        raise Failed(f"the tmux home of {name!r} vanished while starting the turn")
    # A home recreated above died with any fence a stop put on the old one:
    # re-read the store, and undo our own launch if the turn lost meanwhile.
    if _turn_state(spex, turn) != "starting":
        kill_turn(spex, session, turn, grace=0.5)
        raise _stopped(name, turn)
    return result.pane_pid


# How long after spex put a shell in the pane a foreground job may still be
# its rc files (zsh runs them as jobs; pyenv or nvm init can take seconds).
STARTUP_GRACE = 15.0


def _after_startup(busy: Launch, attempt: Callable[[], Launch]) -> Launch:
    """A shell spex started moments ago whose foreground is a job may still be
    running its rc files: wait for each such job to end (bounded by
    STARTUP_GRACE from the shell's start) and try again. A person's command
    does not end, so past the grace the pane is busy."""
    import psutil

    from spexsup.home import foreground

    result = busy
    deadline = busy.shell_at + STARTUP_GRACE
    while result.outcome == "busy" and result.pane_pid and time.time() < deadline:
        job = foreground(result.pane_pid)
        if job is not None:
            try:
                psutil.Process(job).wait(timeout=max(0.0, deadline - time.time()))
            except psutil.TimeoutExpired:
                break
            except psutil.Error:
                if foreground(result.pane_pid) == job:
                    break  # a group whose leader is gone: nothing to wait on
        result = attempt()
    return result


def _await_reporter(spex: Spex, name: str, previous: str | None) -> None:
    """Let the previous turn's exit reporter finish before our respawn-pane -k.

    A wake records a clean exit at `reporting:` and returns while that turn's
    reporter still runs in the pane; killed, it would leave its marker short
    of `exit:` and the hooks it claimed unstarted. A turn that ended long ago
    is past `reporting:` (one marker read); a stuck reporter gets the same
    bound as a stopped turn's wrapper.
    """
    if previous is None:
        return
    directory = turn_dir(spex, name, previous)
    m = marker.read(directory)
    if m.stage is Stage.REPORTING:
        _await_wrapper(directory, m.pid, until=lambda m: m.stage is not Stage.REPORTING)


def _await_wrapper(
    directory: Path, wrapper: int | None, until: Callable[[Marker], bool] = lambda m: False
) -> tuple[Marker, int | None]:
    """Wait (event-driven, at most WRAPPER_EXIT_WAIT) until the marker satisfies
    `until` or the wrapper is gone or has exec'd the pane's shell; returns
    the last marker read and the wrapper's pid."""
    m = marker.read(directory)
    with DirWatch([directory]) as watch:
        deadline = time.monotonic() + WRAPPER_EXIT_WAIT
        while (left := deadline - time.monotonic()) > 0:
            m = marker.read(directory)
            wrapper = m.pid or wrapper  # `exit:` no longer names it
            if until(m) or wrapper is None:
                break
            if wrapper_liveness(wrapper, directory) is Liveness.DEAD:
                break
            # After `exit:` nothing the wrapper does touches the turn dir.
            watch.wait(min(left, WRAPPER_TAIL_POLL) if m.stage is Stage.EXIT else left)
    return m, wrapper


def _turn_state(spex: Spex, turn: str) -> str | None:
    row = spex.store.db.execute("SELECT state FROM turns WHERE id = ?", (turn,)).fetchone()
    return None if row is None else str(row["state"])


def kill_turn(spex: Spex, session: Session, turn: str, grace: float) -> list[int]:
    """Fence the pane against the turn, kill every process it left, and hand the
    pane back to a shell if it still belongs to the turn. Whatever the
    turn's recorded state: a second call finishes what an interrupted one
    started. Returns the pids that survived SIGKILL.
    """
    from spexsup.procs import reap, turn_processes

    name = session.name
    owner = session.owner(spex.home)
    row = spex.store.db.execute(
        "SELECT t.fence, t.started_at, t.ended_at, s.launch_fence FROM turns t"
        " JOIN sessions s ON s.name = t.session WHERE t.id = ?",
        (turn,),
    ).fetchone()
    if row is not None:
        spex.tmux.fence(name, owner, max(int(row["launch_fence"]), int(row["fence"] or 0)))
    directory = turn_dir(spex, name, turn)
    m = marker.read(directory)
    pane = spex.tmux.pane(name)
    ours = pane is not None and pane.owner == owner and pane.turn == turn
    if m.stage is Stage.NONE and ours:
        # The wrapper may be about to start: replace the pane's process first.
        spex.tmux.respawn_shell(name, owner, turn, session.cwd, shell_env(spex, session))
    wrapper = m.pid if m.pid is not None else (pane.pane_pid if pane and ours else None)
    since = float(row["started_at"]) if row else 0.0
    until = row["ended_at"] if row else None
    survivors = reap(lambda: turn_processes(turn, wrapper, since=since, until=until), grace)
    if not directory.is_dir():
        return [p.pid for p in survivors]  # removed with its session: nothing to wait for
    # Wait for the wrapper to record the end and hand the pane back (its exec
    # of the shell): until then its last steps (reporter, status, input
    # flush) are processes of the turn, and a stop returns with none left.
    m, wrapper = _await_wrapper(directory, wrapper)
    pane = spex.tmux.pane(name)
    stuck = wrapper is not None and wrapper_liveness(wrapper, directory) is Liveness.ALIVE
    if (
        pane is not None
        and pane.turn == turn
        and (pane.pane_dead or stuck or m.stage is not Stage.EXIT)
    ):
        spex.tmux.respawn_shell(name, owner, turn, session.cwd, shell_env(spex, session))
    return [p.pid for p in survivors]


# How long a stopped turn's wrapper gets to write its final marker and exec
# the pane's shell before the pane is forced back to a shell.
WRAPPER_EXIT_WAIT = 5.0
# Its few steps after `exit:` leave no file event to wait for: re-check at this pace.
WRAPPER_TAIL_POLL = 0.01


# --- confirmation ---------------------------------------------------------


def _pid_problem(pid: int, pane_pid: int) -> str | None:
    """Why `running:<pid>` can't be trusted, or None: alive, not a zombie, the pane's pid."""
    liveness = identity_liveness(pid, None)
    if liveness is Liveness.DEAD:
        return f"wrapper pid {pid} is {'a zombie' if is_zombie(pid) else 'dead'}"
    if liveness is Liveness.UNPROVEN:
        return f"cannot inspect wrapper pid {pid}"
    if pid != pane_pid:
        return f"marker pid {pid} is not the pane's process (pane_pid {pane_pid})"
    return None


class Startup(NamedTuple):
    """What the window showed. `verdict` is confirmed, completed or failed;
    `rc` is the harness's exit status when it is known (exit or reporting)."""

    verdict: str
    marker: Marker
    error: str | None = None
    pid: int | None = None

    @property
    def rc(self) -> int | None:
        return self.marker.rc if self.marker.stage in (Stage.EXIT, Stage.REPORTING) else None


def confirm_startup(
    directory: Path, window: float, started: float, watch: DirWatch, pane_pid: int
) -> Startup:
    """Wait (event-driven) for the marker to prove the turn's startup, per DESIGN §2.5.

    `pane_pid` is tmux's pane_pid for the pane, read at launch. The pid checks
    run `settle` before the window ends and the re-read at its end, so a
    confirmed verdict costs nothing beyond the window. A marker still at
    `reporting:` when the window ends is an exit with a known rc, never a
    failure: its reporter gets a grace period and is never killed.

    Inside the window, `reporting:<pid>:0` is already the end: the wake
    records it itself (by the reporter's compare-and-swap: whichever comes
    first records it) rather than wait ~80 ms for the reporter's Python to
    start. A failure still waits for its reporter, which may defer it to us
    (a lock-class failure is retried) and whose own rc the verdict names.
    """
    deadline = started + window
    settle = min(0.1, window / 4)
    first: Marker | None = None
    token: str | None = None
    while True:
        m = marker.read(directory)
        if m.stage is Stage.EXIT:
            return Startup("completed" if m.rc == 0 else "failed", m)
        if m.stage is Stage.INVALID:
            return Startup("failed", m, f"invalid outcome marker {m.text!r}")
        if m.stage is Stage.REPORTING and m.rc == 0:
            return Startup("completed", m, None, m.pid)
        now = time.monotonic()
        if m.stage is Stage.REPORTING and now >= deadline:
            if now < deadline + REPORTER_GRACE:
                watch.wait(deadline + REPORTER_GRACE - now)
                continue
            return Startup("completed" if m.rc == 0 else "failed", m, None, m.pid)
        if first is None and now >= deadline - settle and m.stage is not Stage.REPORTING:
            if m.stage is Stage.NONE:
                return Startup("failed", m, "never confirmed startup (no outcome marker)")
            assert m.pid is not None
            problem = _pid_problem(m.pid, pane_pid)
            if problem:
                return Startup("failed", m, problem, m.pid)
            first, token = m, start_token(m.pid)
        if first is not None and now >= deadline:
            if m.stage is Stage.REPORTING:
                continue  # it exited while settling: wait for its exit like any other
            # A usage-limit wait (`limited:`) is the same wrapper, alive.
            if (
                first.pid is None
                or m.pid != first.pid
                or m.stage not in (Stage.RUNNING, Stage.LIMITED)
            ):
                return Startup("failed", m, f"marker changed while settling: {m.text!r}")
            if identity_liveness(first.pid, token) is not Liveness.ALIVE:
                return Startup("failed", m, f"wrapper pid {first.pid} died while settling")
            return Startup("confirmed", m, None, first.pid)
        target = deadline if first is not None else deadline - settle
        watch.wait(target - now)


# --- wake -----------------------------------------------------------------


def resolve_window(
    session: Session, adapter: Harness, window: float | None, configured: float | None = None
) -> float:
    """The call's window, else the session's, else config.toml's, else the harness's, else 2 s."""
    return (
        validate_window(window) or session.window or configured or adapter.window or DEFAULT_WINDOW
    )


def wake(
    spex: Spex,
    name: str,
    prompt: bytes,
    *,
    window: float | None = None,
    fresh: bool = False,
    force: bool = False,
    gate: AbstractContextManager[object] | None = None,
    on_admitted: Callable[[str], None] | None = None,
    limits: Limits | None = None,
) -> Verdict:
    """Start a turn and report what is true about it within the window.

    Refusals raise `Refused` (exit 3) and change nothing; so does a wake that
    loses to a stop between admission and launch, and (unless `force`) one
    whose pane runs something other than an idle shell. A failed startup leaves no
    process of the turn behind and the pane back at a shell. `gate` (a
    fan-out's concurrency limit) is held around admission and launch only,
    so many turns can confirm at once.

    Interrupted (SIGINT, SIGTERM) before the launch, the turn is aborted and
    fenced; after it, the turn keeps running and the exception carries a
    note saying so (its end is still recorded by its wrapper). A gate that
    refuses the launch (an aborted wave) ends the admitted turn `aborted`
    the same way. `on_admitted` hears the turn id once it exists.
    """
    started = time.monotonic()
    get(spex, name)
    validate_window(window)
    # Read before admission: a broken config file changes nothing.
    configured = config.load(spex.home).window
    gate = gate or nullcontext()
    with ticket(spex, name, "wake"):
        with gate:
            session, turn, directory, adapter = admit(
                spex, name, prompt, fresh=fresh, limits=limits
            )
        if on_admitted is not None:
            on_admitted(turn)
        span = resolve_window(session, adapter, window, configured)
        attempts = 0
        launched_once = False
        try:
            while True:
                attempts += 1
                with DirWatch([directory]) as watch:
                    with gate:
                        # A retry replaces our own previous attempt's shell.
                        mine = force or attempts > 1
                        pane_pid = launch(spex, session, turn, directory, force=mine)
                    launched_once = True
                    # The window measures the harness's startup, not our own
                    # admission (which may queue behind other writers).
                    launched = time.monotonic()
                    result = confirm_startup(directory, span, launched, watch, pane_pid)
                if not _retryable(adapter, directory, result, attempts):
                    break
                if not _rotate_attempt(spex, name, turn, directory, attempts):
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
    return verdict._replace(attempts=attempts, elapsed_ms=int((time.monotonic() - started) * 1000))


def _abort_unlaunched(spex: Spex, session: Session, turn: str, why: str) -> None:
    """End a turn that never (provably) launched: abort it, then fence and kill,
    in case the tmux call was already on its way when we were interrupted."""
    with spex.store.tx() as db:
        ledger.abort_current(
            db, session.name, turn, why, only_starting=True, session_after=states.FAILED
        )
    from spexsup.home import TmuxTimeout

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
    if result.verdict != "failed" or result.rc is None or result.rc == 0:
        return False
    if attempts > len(RETRY_BACKOFF):
        return False
    return report.worth_retrying(directory, adapter)


def _rotate_attempt(spex: Spex, name: str, turn: str, directory: Path, attempt: int) -> bool:
    """Keep attempt N's marker and output beside the turn for the next attempt.

    The failed attempt was never published (its reporter deferred to us), so
    the turn is still `starting`. If it is not, either a stop won (Refused)
    or a reader recorded the deferred end because we took too long (a
    suspended wake; see report.DEFER_BOUND): False, there is nothing to retry.
    """
    try:
        _claim_fence(spex, name, turn)
        with spex.store.tx() as db:
            cur = db.execute(
                "UPDATE turns SET attempts = ? WHERE id = ? AND state = 'starting'",
                (attempt + 1, turn),
            )
            if not cur.rowcount:
                raise _stopped(name, turn)
    except Refused:
        if _turn_state(spex, turn) in (None, "aborted"):
            raise
        return False
    for file in ("outcome", "output.log"):
        src = directory / file
        if src.exists():
            src.rename(directory / f"attempt-{attempt}.{file}")
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
    if _turn_state(spex, turn) == "aborted":
        if result.verdict == "failed" and rc is None:
            kill_turn(spex, session, turn, grace=0.5)
        report.remember_conversation(spex.store, name, directory, adapter)
        raise Refused(
            f"turn {turn} of {name!r} was stopped while it started", hint=f"spex show {name}"
        )
    verdict = result.verdict
    flags: list[str] = []
    if rc is not None:
        # The wrapper's reporter may have deferred to us (a failure we might
        # have retried), failed, or be slow: the CAS makes recording twice safe.
        report.record_exit(spex.store, name, turn, rc, directory, adapter=adapter)
        ended = spex.store.db.execute(
            "SELECT state, error, flags, cause FROM turns WHERE id = ?", (turn,)
        ).fetchone()
        flags = json.loads(ended["flags"] or "[]") if ended else []
        if ended is not None and ended["cause"]:
            # Timed out, strict, an error opencode exited 0 after, a usage limit.
            verdict, error = "failed", ended["error"]
        elif rc != 0:
            error = failure_message(adapter, directory, rc, m.cas)
    elif result.verdict == "failed":
        _abandon(spex, session, turn, directory, error or "failed")
    else:
        report.remember_conversation(spex.store, name, directory, adapter)
    with spex.store.tx() as db:
        db.execute(
            "UPDATE turns SET verdict = ?, error = coalesce(?, error),"
            " pid = coalesce(?, pid) WHERE id = ?",
            (verdict, error, result.pid, turn),
        )
        if verdict == "confirmed":
            ledger.mark_running(db, name, turn, pid=result.pid)
    waiting_until = None
    if verdict == "confirmed":
        row = spex.store.db.execute(
            "SELECT waiting_until FROM turns WHERE id = ?", (turn,)
        ).fetchone()
        waiting_until = row["waiting_until"] if row else None
    return Verdict(
        name, turn, verdict, rc, result.pid, error, flags=flags, waiting_until=waiting_until
    )


def _abandon(spex: Spex, session: Session, turn: str, directory: Path, error: str) -> None:
    """End a turn whose startup failed without an exit: record first, then kill."""
    report.record_exit(
        spex.store, session.name, turn, None, directory, state="error", error=error, launched=True
    )
    kill_turn(spex, session, turn, grace=0.5)


# --- reading and reconciliation --------------------------------------------


def wrapper_liveness(pid: int, directory: Path) -> Liveness:
    """Is the wrapper of this turn dir alive as `pid`? (reuse-proof: its argv names the dir)."""
    return command_line_liveness(pid, str(directory))


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
    return wrapper_liveness(pane.pane_pid, directory)


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
    proves nothing leaves the turn alone.
    """
    query = (
        "SELECT t.id, t.session, t.state, t.launcher_pid, t.launcher_token, t.fence,"
        " t.boot_id FROM sessions s JOIN turns t ON t.id = s.current_turn"
        " WHERE t.state IN ('starting', 'running')"
    )
    rows = spex.store.db.execute(query).fetchall()
    # Hooks whose claimer died before starting them are a reader's to start.
    spex.resume_hooks()
    boot = boot_id() if rows else ""
    due: float | None = None
    for row in rows:
        name, turn = row["session"], row["id"]
        if names is not None and name not in names:
            continue
        if row["boot_id"] and boot and row["boot_id"] != boot:
            # Nothing of an earlier boot runs now; pids and start tokens of
            # then mean nothing. The conversation is kept for `up --revive`.
            directory = turn_dir(spex, name, turn)
            report.record_exit(
                spex.store,
                name,
                turn,
                None,
                directory,
                state="interrupted",
                error="machine rebooted",
                launched=row["state"] == "running",
            )
            continue
        launcher = identity_liveness(row["launcher_pid"], row["launcher_token"])
        directory = turn_dir(spex, name, turn)
        if row["state"] == "starting" and launcher is not Liveness.DEAD:
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
    return due


def _settle_waves(spex: Spex, settled: Sequence[str]) -> None:
    """Move on the waves whose legs' ends a reader recorded here (their
    reporter would have, had it lived), and start an on-complete command
    whose claimer died before starting it (`waves.resume`): no wave waits
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
    waiting = db.execute(
        "SELECT 1 FROM waves WHERE ended_at IS NOT NULL"
        " AND json_extract(doc, '$.on_complete.claimed_at') IS NOT NULL"
        " AND json_type(doc, '$.on_complete.started_at') = 'null' LIMIT 1"
    ).fetchone()
    if not ended and waiting is None:
        return
    from spexsup import waves

    for turn in ended:
        waves.settle_turn_end(spex, turn)
    if waiting is not None:
        waves.resume(spex)


# How soon a waiter tries again to record an end a full disk kept it from.
DISK_FULL_RETRY = 2.0


def _settle_current(spex: Spex, row: Any, directory: Path) -> None:
    """Record what the markers and processes say of one unfinished turn (see reconcile)."""
    name, turn = row["session"], row["id"]
    m = marker.read(directory)
    if m.stage is Stage.EXIT:
        report.record_exit(spex.store, name, turn, m.rc, directory)
    elif m.stage in (Stage.RUNNING, Stage.LIMITED, Stage.REPORTING):
        assert m.pid is not None
        alive = wrapper_liveness(m.pid, directory)
        if alive is Liveness.ALIVE and m.stage is not Stage.REPORTING:
            with spex.store.tx() as db:
                why = "its launcher died; its wrapper runs"
                ledger.mark_running(db, name, turn, pid=m.pid, cause=why)
        if alive is not Liveness.DEAD:
            return
        # Its last markers may be in the pane, where the wrapper kept what a
        # full disk had no room for.
        kept = _kept_marker(spex, name, turn)
        if kept is not None and kept.stage is Stage.EXIT:
            report.record_exit(spex.store, name, turn, kept.rc, directory)
            return
        if kept is not None and kept.stage is Stage.REPORTING:
            m = kept._replace(pid=m.pid)
        if m.stage is Stage.REPORTING:
            why = f"wrapper pid {m.pid} died while reporting rc={m.rc}"
            report.record_exit(spex.store, name, turn, m.rc, directory, error=why)
        else:
            why = f"wrapper pid {m.pid} vanished without a final marker"
            report.record_exit(
                spex.store, name, turn, None, directory, state="lost", error=why, launched=True
            )
    elif m.stage is Stage.INVALID:
        why = f"invalid outcome marker {m.text!r}"
        report.record_exit(spex.store, name, turn, None, directory, state="lost", error=why)
    elif _unlaunched(spex, row, directory) is Liveness.DEAD:
        why = "its launcher died before the turn confirmed startup"
        report.record_exit(spex.store, name, turn, None, directory, state="lost", error=why)


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
    if marker.read(directory).stage is not Stage.EXIT:
        return None
    try:
        return (directory / "outcome").stat().st_mtime + report.DEFER_BOUND
    except OSError:  # rotated away for a retry meanwhile
        return None


def turn_json(row: Any) -> dict[str, Any]:
    """The one JSON shape of a turn, wherever a command prints one."""
    return {
        "schema_version": ids.SCHEMA_VERSION,
        "id": row["id"],
        "session": row["session"],
        "state": row["state"],
        "verdict": row["verdict"],
        "rc": row["rc"],
        "pid": row["pid"],
        "error": row["error"],
        "attempts": row["attempts"],
        "resumed": row["resumed"],
        "flags": json.loads(row["flags"]) if row["flags"] else [],
        "cause": row["cause"],
        "timeout": row["timeout"],
        "strict": bool(row["strict"]),
        "survivors": json.loads(row["survivors"]) if row["survivors"] else [],
        "limit_reset": row["limit_reset"],
        "limit_reset_iso": ids.iso(row["limit_reset"]),
        "waiting_until": row["waiting_until"],
        "waiting_until_iso": ids.iso(row["waiting_until"]),
        "started_at": row["started_at"],
        "started_at_iso": ids.iso(row["started_at"]),
        "ended_at": row["ended_at"],
        "ended_at_iso": ids.iso(row["ended_at"]),
    }


def _first_line(path: Path, size: int = 4096) -> str | None:
    try:
        with path.open("rb") as f:
            data = f.read(size).decode("utf-8", "replace")
    except OSError:
        return None
    for line in data.splitlines():
        if line.strip():
            return line.strip()[:200]
    return None


def turn_summary(spex: Spex, session: str, turn: str) -> dict[str, str | None]:
    """What `spex show` adds about a turn: the harness binary it resolved, its
    prompt's first line and the last line of its final answer (from the
    structured output, bounded as the exit reporter reads it)."""
    from spexsup import outcome

    directory = turn_dir(spex, session, turn)
    binary = _first_line(directory / "binary")
    prompt = _first_line(directory / "prompt")
    answer = None
    parser = report._meta(directory).get("outcome")
    if isinstance(parser, str):
        text = outcome.read(directory, parser).answer
        lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
        answer = lines[-1][:200] if lines else None
    return {"binary": binary, "prompt_line": prompt, "answer_line": answer}


def load_turn(spex: Spex, turn: str) -> dict[str, Any]:
    """One turn in its JSON shape; Refused if there is no such turn."""
    row = spex.store.db.execute("SELECT * FROM turns WHERE id = ?", (turn,)).fetchone()
    if row is None:
        raise Refused(f"no turn {turn!r}")
    return turn_json(row)


def recent_turns(spex: Spex, names: Sequence[str], limit: int) -> dict[str, list[dict[str, Any]]]:
    """The newest `limit` turns of each session, newest first.

    One indexed query per session (`turns_by_session`, stopping after `limit`
    rows), not one window query: row_number() over every session's whole
    history read all 200 000 rows of a 1 000-session home (1 s, against 54 ms).
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        rows = spex.store.db.execute(
            "SELECT * FROM turns WHERE session = ? ORDER BY started_at DESC, id DESC LIMIT ?",
            (name, limit),
        ).fetchall()
        if rows:
            out[name] = [turn_json(row) for row in rows]
    return out
