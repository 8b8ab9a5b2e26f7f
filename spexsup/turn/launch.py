"""Launch: write the turn directory and start `shell/turn.sh` in the session's pane.

The pane is fenced against the turn's attempt first, so a tmux call of a dead
launcher still in flight can never land; a pane still busy with the previous
turn's reporter or wrapper is waited for, within bounds. `kill_turn` ends a
turn's whole process tree.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from spexsup import faults, states
from spexsup.adapters import login
from spexsup.adapters.home import Launch, after_startup, pane_activity
from spexsup.adapters.procs import (
    Liveness,
    reap,
    turn_processes,
)
from spexsup.adapters.watch import DirWatch
from spexsup.core.sessions import Session, shell_env
from spexsup.core.spex import Spex
from spexsup.errors import Failed, Refused, TurnStopped
from spexsup.pane import marker, turndir
from spexsup.pane.marker import Marker, Stage
from spexsup.paths import (
    wrapper_path,
)
from spexsup.state import events, ledger

# A turn that exited just before the window closed gets this long for its
# exit reporter to finish, rather than a verdict that races the reporter.
REPORTER_GRACE = 1.0


def claim_fence(spex: Spex, name: str, turn: str) -> int:
    """A new launch fence for another attempt of `turn` (`ledger.claim_fence`);
    TurnStopped when a stop got there first."""
    with spex.store.tx() as db:
        fence = ledger.claim_fence(db, name, turn)
    if fence is None:
        raise TurnStopped(name, turn)
    return fence


def _busy(spex: Spex, session: Session, turn: str, directory: Path, command: str) -> Refused:
    """The pane runs a person's work: undo the admission (the turn never
    existed for anyone but us) and say what runs there."""
    import shutil  # here only: a wake that starts its turn never needs it

    with spex.store.tx() as db:
        ledger.undo_admission(
            db, session.name, turn, previous_turn=session.current_turn, was=session.state
        )
    shutil.rmtree(directory, ignore_errors=True)
    pane = spex.tmux.pane(session.name)
    activity = pane_activity(pane, turndir.root(spex.home)) if pane else None
    return Refused(
        f"{session.name}: the pane is running {activity or command}",
        hint="spex wake --force to replace it",
    )


def launch(spex: Spex, session: Session, turn: str, directory: Path, *, force: bool = False) -> int:
    """Start the wrapper in the session's pane with a fenced `respawn-pane -k`,
    recreating a vanished pane first. Returns tmux's pane_pid for the new wrapper.

    Raises Refused when a stop (or rm) got there first: the pane was fenced,
    or the turn is no longer `starting`; and, unless `force`, when a person
    runs something in the pane (the admission is then undone).
    """
    name = session.name
    row = spex.store.db.execute("SELECT fence FROM turns WHERE id = ?", (turn,)).fetchone()
    if row is None or row["fence"] is None:
        raise TurnStopped(name, turn)
    fence = int(row["fence"])
    env = {
        "SPEXSUP_SESSION": name,
        "SPEXSUP_TURN": turn,
        "SPEXSUP_TURN_DIR": str(directory),
        "SPEXSUP_PROMPT_FILE": str(directory / turndir.PROMPT),
        "SPEXSUP_HOME": str(spex.home),
    }
    wrapper = os.environ.get("SPEXSUP_WRAPPER") or str(wrapper_path())
    argv = ["bash", wrapper, str(directory)]
    owner = session.owner(spex.home)

    def attempt() -> Launch:
        return spex.tmux.launch(name, owner, fence, turn, session.cwd, env, argv, force=force)

    faults.at(faults.Fault.PAUSE_BEFORE_LAUNCH)
    _await_reporter(spex, name, session.current_turn)
    _note_login_stats(directory)
    result = attempt()
    if result.outcome == "missing" or (result.outcome == "foreign" and not result.holder):
        # Recreate a vanished pane, or adopt an older spex's untagged one
        # (create refuses a session of that name that is not provably ours).
        if spex.tmux.create(name, session.cwd, owner, shell_env(spex, session)):
            events.emit(spex.store, events.PANE_RECREATED, session=name, turn=turn)
        result = attempt()
    if result.outcome == "busy" and not force:
        result = after_startup(result, attempt)
    if result.outcome == "busy":
        raise _busy(spex, session, turn, directory, result.holder)
    if result.outcome == "fenced" or (
        result.outcome == "foreign" and result.holder.startswith(owner.split("-")[0] + "-")
    ):
        raise TurnStopped(name, turn)  # by a stop, or by rm (a newer incarnation owns the name)
    if result.outcome == "foreign":
        raise Refused(
            f"the tmux session {name!r} belongs to another spex home ({result.holder})",
            hint=f"kill it: tmux {spex.tmux.where()} kill-session -t ={name}",
        )
    if result.outcome != "launched" or result.pane_pid is None:
        raise Failed(f"the tmux pane of {name!r} vanished while starting the turn")
    faults.at(faults.Fault.PAUSE_AFTER_LAUNCH)
    # A pane recreated above died with any fence a stop put on the old one:
    # re-read the store, and undo our own launch if a stop aborted the turn
    # meanwhile. A turn that already ended on its own (its reporter recorded
    # the end while we were slow) is no stop's: its verdict follows its end.
    if turn_state(spex, turn) == states.TurnState.ABORTED:
        kill_turn(spex, session, turn, grace=0.5)
        raise TurnStopped(name, turn)
    return result.pane_pid


def _note_login_stats(directory: Path) -> None:
    """For a turn whose harness runs in the login environment: the rc files'
    stats its wrapper's login cache is keyed on (`login.rc_stats`), taken at
    the launch, for this HOME. The wrapper takes them when they are missing
    (a full disk) or for another HOME (the pane's is the tmux server's)."""
    if not (directory / turndir.LOGIN).exists():
        return
    home = os.environ.get("HOME", "")
    target = directory / turndir.LOGIN_STATS
    data = f"{home}\t{login.rc_stats(home)}".encode(errors="surrogateescape")
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            if os.write(fd, data) != len(data):  # a full disk may take a part
                raise OSError("short write")
        finally:
            os.close(fd)
    except OSError:
        with contextlib.suppress(OSError):
            target.unlink()  # never a part of them: that would be a key of its own


def _await_reporter(spex: Spex, name: str, previous: str | None) -> None:
    """Let the previous turn's exit reporter finish before our respawn-pane -k.

    A wake records a clean exit at `reporting:` and returns while that turn's
    reporter still runs in the pane; killed, it would leave its marker short
    of `exit:` and the hooks it claimed unstarted, and the pane without the
    turn's end line (the wrapper prints it before `exit:`). A turn that ended long ago
    is past `reporting:` (one marker read); a stuck reporter gets the same
    bound as a stopped turn's wrapper.
    """
    if previous is None:
        return
    directory = turndir.path(spex.home, name, previous)
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
            if turndir.wrapper_liveness(wrapper, directory) is Liveness.DEAD:
                break
            # After `exit:` nothing the wrapper does touches the turn dir.
            watch.wait(min(left, WRAPPER_TAIL_POLL) if m.stage is Stage.EXIT else left)
    return m, wrapper


def turn_state(spex: Spex, turn: str) -> str | None:
    row = spex.store.db.execute("SELECT state FROM turns WHERE id = ?", (turn,)).fetchone()
    return None if row is None else str(row["state"])


def kill_turn(spex: Spex, session: Session, turn: str, grace: float) -> list[int]:
    """Fence the pane against the turn, kill every process it left, and hand the
    pane back to a shell if it still belongs to the turn. Whatever the
    turn's recorded state: a second call finishes what an interrupted one
    started. Returns the pids that survived SIGKILL.
    """

    name = session.name
    owner = session.owner(spex.home)
    row = spex.store.db.execute(
        "SELECT t.fence, t.started_at, t.ended_at, s.launch_fence FROM turns t"
        " JOIN sessions s ON s.name = t.session WHERE t.id = ?",
        (turn,),
    ).fetchone()
    if row is not None:
        spex.tmux.fence(name, owner, max(int(row["launch_fence"]), int(row["fence"] or 0)))
    directory = turndir.path(spex.home, name, turn)
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
    stuck = wrapper is not None and turndir.wrapper_liveness(wrapper, directory) is Liveness.ALIVE
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
