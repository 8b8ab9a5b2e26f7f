"""`spex rm`: delete a session, its turns, its pane and (never with unsaved work) its worktree.

All destruction happens while the session is `removing`, before its name is
free again, so a `spex new` of the same name right after can never lose its
pane or turn directories to this removal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from spexsup import states
from spexsup.adapters import dequeuer
from spexsup.adapters.group import named_lock
from spexsup.adapters.procs import Liveness, identity_liveness
from spexsup.core.sessions import Session, get
from spexsup.core.spex import Spex
from spexsup.errors import Failed, Invalid, Refused, SpexError, UnknownSession
from spexsup.pane import turndir
from spexsup.paths import remove_tree
from spexsup.state import lease, ledger
from spexsup.state.store import session_names
from spexsup.turn import scheduled
from spexsup.turn.launch import kill_turn
from spexsup.turn.reconcile import reconcile
from spexsup.turn.target import taken

if TYPE_CHECKING:
    import sqlite3

    from spexsup.core.worktree import Removal


def refusals(
    spex: Spex,
    names: Sequence[str],
    *,
    force: bool = False,
    salvage: bool = False,
    keep_worktree: bool = False,
) -> dict[str, SpexError | None]:
    """What would stop `remove` of each of `names` with these flags before it
    changed anything (the error, or None when it would go), checked by the
    rules `remove` itself applies, for all of them before any is removed.

    Nothing is held or changed but what every reader settles (turns that
    ended are reconciled): another process may start a turn or a stop
    between this and the removal, which `remove` still refuses on its own.
    A maintenance lease that recovery would end still bars here (`remove`
    settles it first). A worktree whose state git cannot tell is a Failed.
    """
    _check_flags(salvage=salvage, keep_worktree=keep_worktree)
    reconcile(spex, list(names))
    found: dict[str, SpexError | None] = {}
    for name in names:
        try:
            session = get(spex, name)
            lease.check_admission_unsettled(spex.store.db, name)
            unsaved = _unsaved(session, salvage=salvage, keep_worktree=keep_worktree)
        except (Refused, Failed) as e:  # unknown, leased; a worktree git cannot read
            found[name] = e
        else:
            found[name] = unsaved or _held(spex.store.db, session, force=force, mine=None)
    return found


def _check_flags(*, salvage: bool, keep_worktree: bool) -> None:
    if salvage and keep_worktree:
        raise Invalid("--salvage and --keep-worktree: choose one")


def _unsaved(session: Session, *, salvage: bool, keep_worktree: bool) -> Refused | None:
    """The worktree's rule: unsaved work refuses, unless salvaged or kept.
    A session still `creating` is left to `_held` (refused while its maker
    lives). Failed when git cannot tell."""
    from spexsup.core import worktree as worktrees  # dataclasses: not on every rm's path

    if session.worktree is None or keep_worktree or session.state == states.SessionState.CREATING:
        return None
    try:
        worktrees.guard(session.name, session.worktree, salvage=salvage)
    except Refused as e:
        return e
    return None


def _held(
    db: sqlite3.Connection, session: Session, *, force: bool, mine: int | None
) -> Refused | None:
    """The state's rules, read in `db`: a running turn (unless `force`), a
    live `spex stop` of it (other than ticket `mine`), a live maker of a
    session still `creating`."""
    name = session.name
    if session.state == states.SessionState.RUNNING and not force:
        return Refused(
            f"session {name!r} has a running turn {session.current_turn}",
            hint="spex stop it first, or spex rm --force",
        )
    stops = db.execute(
        "SELECT pid, start_token FROM tickets WHERE session = ? AND op = 'stop' AND id IS NOT ?",
        (name, mine),
    ).fetchall()
    if any(identity_liveness(t["pid"], t["start_token"]) is Liveness.ALIVE for t in stops):
        return Refused(f"a spex stop of {name!r} is in progress", hint="try again after it")
    (queued,) = db.execute("SELECT count(*) FROM queue WHERE session = ?", (name,)).fetchone()
    if queued and not force:
        return Refused(
            f"session {name!r} has {queued} queued prompt{'s' * (queued != 1)}",
            hint=f"spex queue clear {name}, or spex rm --force",
        )
    if session.state == states.SessionState.CREATING:
        makers = db.execute(
            "SELECT pid, start_token FROM tickets WHERE session = ? AND op = 'new'", (name,)
        ).fetchall()
        if any(identity_liveness(t["pid"], t["start_token"]) is not Liveness.DEAD for t in makers):
            return Refused(f"session {name!r} is still being created")
    return None


def remove(
    spex: Spex,
    name: str,
    *,
    force: bool = False,
    grace: float = 5.0,
    salvage: bool = False,
    keep_worktree: bool = False,
) -> Removal | None:
    """Delete the session, its turns and its pane; refused while a turn runs
    (unless `force`, which aborts it and kills what it left) or while a
    `spex stop` of it is in progress.

    A worktree session's worktree and branch go too, never with unsaved work
    in them: refused before anything changes, and checked again once its
    turn and pane are gone (`worktree.dispose`). `salvage` commits unsaved
    work to a branch first; `keep_worktree` leaves worktree and branch be.

    All destruction happens while the session is `removing`, before its
    name is free again, so a `spex new` of the same name right after can
    never lose its pane or turn directories to this removal. A removal cut
    short leaves the session `removing`; `spex rm` again finishes it.
    """
    from spexsup.core import worktree as worktrees  # dataclasses: not on every rm's path

    _check_flags(salvage=salvage, keep_worktree=keep_worktree)
    with taken(spex, name, "rm") as held:
        early, mine = held
        refusal = _unsaved(early, salvage=salvage, keep_worktree=keep_worktree)
        if refusal is not None:
            raise refusal
        with spex.store.tx() as db:
            row = db.execute("SELECT * FROM sessions WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise UnknownSession(name, session_names(db))
            session = Session.from_row(row)
            refusal = _held(db, session, force=force, mine=mine)
            if refusal is not None:
                raise refusal
            if session.current_turn is not None:
                ledger.abort_current(db, name, session.current_turn, "removed by spex rm")
            ledger.mark_removing(db, name)
        # Its clocks first: no firing is left to find the session half gone.
        try:
            scheduled.remove_session(spex, name)
        except SpexError as e:
            raise Failed(
                f"{name}: could not remove its schedules: {e.line()}; the session is left removing",
                hint=f"spex rm {name} again once that is fixed",
            ) from None
        if session.current_turn is not None:
            survivors = kill_turn(spex, session, session.current_turn, grace)
            if survivors:
                raise Failed(
                    f"{name}: process(es) {', '.join(map(str, survivors))} of turn"
                    f" {session.current_turn} survived SIGKILL; the session is left removing",
                    hint=f"spex rm {name} again once they are gone",
                )
        spex.tmux.kill(name, session.owner(spex.home))
        removal = None
        if session.worktree is not None:
            # Several removals at once (`Spex.at_once`) take a repository's
            # worktrees and branches one at a time: git locks its own files.
            with named_lock(f"worktrees of {session.worktree.repo}"):
                removal = worktrees.dispose(
                    name, session.worktree, salvage=salvage, keep=keep_worktree
                )
            if removal.salvage:
                from spexsup.core import salvage as salvages

                branches = [removal.salvage, *removal.stash_branches]
                salvages.record(spex, name, session.worktree.repo, branches)
        problems = remove_tree(turndir.of_session(spex.home, name))
        if problems:
            raise Failed(
                f"{name}: could not remove {problems[0]}"
                + (f" and {len(problems) - 1} more" if len(problems) > 1 else "")
                + "; the session is left removing",
                hint=f"fix the permissions, then spex rm {name} again",
            )
        queued = spex.store.db.execute("SELECT id FROM queue WHERE session = ?", (name,))
        for (entry,) in queued.fetchall():
            (spex.home / "queue" / f"{entry}.prompt").unlink(missing_ok=True)
        with spex.store.tx() as db:
            ledger.delete_session(db, name, session.incarnation)
    if session.current_turn is not None:
        # Its turn's slot under a running limit is free.
        dequeuer.start_waiting(spex.store.db, spex.home)
    return removal
