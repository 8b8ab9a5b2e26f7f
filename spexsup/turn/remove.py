"""`spex rm`: delete a session, its turns, its home and (never with unsaved work) its worktree.

All destruction happens while the session is `removing`, before its name is
free again, so a `spex new` of the same name right after can never lose its
home or turn directories to this removal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spexsup import ledger
from spexsup.errors import Failed, Invalid, Refused, UnknownSession
from spexsup.pane import turndir
from spexsup.paths import remove_tree
from spexsup.procs import Liveness
from spexsup.spex import Spex

if TYPE_CHECKING:
    from spexsup.worktree import Removal
from spexsup.procs import identity_liveness
from spexsup.sessions import Session
from spexsup.turn.launch import kill_turn
from spexsup.turn.target import taken


def remove(
    spex: Spex,
    name: str,
    *,
    force: bool = False,
    grace: float = 5.0,
    salvage: bool = False,
    keep_worktree: bool = False,
) -> Removal | None:
    """Delete the session, its turns and its home; refused while a turn runs
    (unless `force`, which aborts it and kills what it left) or while a
    `spex stop` of it is in progress.

    A worktree session's worktree and branch go too, never with unsaved work
    in them: refused before anything changes, and checked again once its
    turn and home are gone (`worktree.dispose`). `salvage` commits unsaved
    work to a branch first; `keep_worktree` leaves worktree and branch be.

    All destruction happens while the session is `removing`, before its
    name is free again, so a `spex new` of the same name right after can
    never lose its home or turn directories to this removal. A removal cut
    short leaves the session `removing`; `spex rm` again finishes it.
    """
    from spexsup import worktree as worktrees  # dataclasses: not on every rm's path

    if salvage and keep_worktree:
        raise Invalid("--salvage and --keep-worktree: choose one")
    with taken(spex, name, "rm") as held:
        early, mine = held
        # A session still `creating` is refused below while its maker lives.
        if early.worktree is not None and not keep_worktree and early.state != "creating":
            worktrees.guard(name, early.worktree, salvage=salvage)
        with spex.store.tx() as db:
            row = db.execute("SELECT * FROM sessions WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise UnknownSession(name)
            session = Session.from_row(row)
            if session.state == "running" and not force:
                raise Refused(
                    f"session {name!r} has a running turn {session.current_turn}",
                    hint="spex stop it first, or spex rm --force",
                )
            stops = db.execute(
                "SELECT pid, start_token FROM tickets WHERE session = ? AND op = 'stop'"
                " AND id != ?",
                (name, mine),
            ).fetchall()
            if any(identity_liveness(t["pid"], t["start_token"]) is Liveness.ALIVE for t in stops):
                raise Refused(f"a spex stop of {name!r} is in progress", hint="try again after it")
            if session.state == "creating":
                makers = db.execute(
                    "SELECT pid, start_token FROM tickets WHERE session = ? AND op = 'new'",
                    (name,),
                ).fetchall()
                if any(
                    identity_liveness(t["pid"], t["start_token"]) is not Liveness.DEAD
                    for t in makers
                ):
                    raise Refused(f"session {name!r} is still being created")
            if session.current_turn is not None:
                ledger.abort_current(db, name, session.current_turn, "removed by spex rm")
            ledger.mark_removing(db, name)
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
            removal = worktrees.dispose(name, session.worktree, salvage=salvage, keep=keep_worktree)
        problems = remove_tree(turndir.of_session(spex.home, name))
        if problems:
            raise Failed(
                f"{name}: could not remove {problems[0]}"
                + (f" and {len(problems) - 1} more" if len(problems) > 1 else "")
                + "; the session is left removing",
                hint=f"fix the permissions, then spex rm {name} again",
            )
        with spex.store.tx() as db:
            ledger.delete_session(db, name, session.incarnation)
    return removal
