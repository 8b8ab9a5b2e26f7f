"""Best of N: one prompt to N sessions, each in a worktree of its own, and keep one.

`create_legs` makes the legs (`spex fanout --worktrees N`), `keep` keeps the
chosen leg and removes the others through `spex rm --salvage`, so their
unsaved work goes to `spex/salvage/…` branches and nothing is lost.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spexsup import ids, states
from spexsup.adapters.git import git, snapshot_tree
from spexsup.adapters.sandbox import Policy
from spexsup.conductors import waves
from spexsup.conductors.waves import Wave
from spexsup.core import sessions
from spexsup.core.sessions import Session, get
from spexsup.core.spex import Spex
from spexsup.core.wavedoc import Doc
from spexsup.core.worktree import Request, Setup
from spexsup.errors import Failed, Invalid, Refused
from spexsup.ids import validate_name
from spexsup.turn.remove import remove


def leg_names(prefix: str, count: int) -> list[str]:

    if not 1 <= count <= 64:
        raise Invalid(f"invalid --worktrees {count}", hint="between 1 and 64")
    return [validate_name(f"{prefix}-{i}") for i in range(1, count + 1)]


def default_prefix(repo: str | None) -> str:
    """The repo directory's name, cut to what a session name allows."""
    try:
        base = Path(repo or ".").expanduser().absolute().name
    except FileNotFoundError:
        base = ""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "-", base).strip("-")[:50]
    return cleaned or "best"


def create_legs(
    spex: Spex,
    names: Sequence[str],
    request: Request,
    *,
    harness: str | None = None,
    window: float | None = None,
    confirm: Callable[[Setup], bool] | None = None,
    sandbox: Policy | None = None,
) -> list[Session]:
    """Create one worktree session per name, each on its own branch
    `spex/<name>` from the same base. All or nothing: refused up front when a
    name is taken; a failure part-way removes the legs made so far (they are
    fresh, but still only through `spex rm`'s guards). `confirm`: as for
    `sessions.create` (asked at most once: a yes trusts the file)."""

    taken = [
        n
        for n in names
        if spex.store.db.execute("SELECT 1 FROM sessions WHERE name = ?", (n,)).fetchone()
    ]
    if taken:
        raise Refused(f"session {taken[0]!r} already exists", hint="--prefix P")
    spec = sessions.Spec(harness=harness, window=window, worktree=request, sandbox=sandbox)
    made: list[Session] = []
    try:
        for n in names:  # a loop, not extend: `made` must hold the legs made so far
            made.append(sessions.create(spex, n, spec, confirm=confirm))  # noqa: PERF401
    except BaseException as e:
        for s in made:
            try:
                remove(spex, s.name)
            except Exception as undo:
                e.add_note(f"{s.name}: left in place: {undo}")
        raise
    return made


def mark_best_of(wave: Wave, request: Request, names: Sequence[str]) -> None:
    """Record in the wave's document that it is a best-of-N wave (what `keep` needs)."""
    info = {"repo": request.repo, "base": request.base, "sessions": list(names), "kept": None}

    def change(doc: Doc) -> None:
        doc["best_of"] = info

    wave.update(change)


@dataclass
class LegOutcome:
    session: str
    outcome: str  # kept | removed | gone | refused | failed
    detail: list[str] = field(default_factory=list)
    exit_code: int = 0
    # The branches its unsaved work was salvaged to (removed legs).
    salvaged: list[str] = field(default_factory=list)

    def public(self) -> dict[str, Any]:
        return asdict(self)


def keep(spex: Spex, wave_id: str, leg: str, *, force: bool = False) -> list[LegOutcome]:
    """Keep one leg of a best-of-N wave (its session and branch) and remove the
    other legs' sessions and worktrees through `spex rm --salvage`: unsaved
    work is salvaged, never dropped. Each leg's outcome is reported; one that
    cannot be removed (a running turn without `force`, say) stays. The wave
    is a full id, a unique prefix, `last` or `last~N`."""
    doc = waves.load(spex, ids.resolve_wave(spex.store.db, wave_id))
    if not doc.get("best_of"):
        raise Refused(
            f"wave {wave_id} is not a best-of-N wave", hint="spex fanout --worktrees N made those"
        )
    if doc["state"] == states.WaveState.LAUNCHING:
        raise Refused(f"wave {wave_id} is still launching", hint=f"spex wave {wave_id}")
    legs = [entry["session"] for entry in doc["legs"]]
    if leg in legs:
        chosen = leg
    elif leg.isdigit() and 1 <= int(leg) <= len(legs):
        chosen = legs[int(leg) - 1]
    else:
        raise Invalid(f"wave {wave_id} has no leg {leg!r}", hint=f"see spex wave {wave_id}")
    others = [other for other in legs if other != chosen]
    kept = _checked(spex, doc["id"], f"{wave_id} {leg}", chosen, others, force=force)
    outcomes = [LegOutcome(chosen, "kept")]
    if kept.worktree is not None:
        outcomes[0].detail.append(f"branch {kept.worktree.branch} in {kept.worktree.path}")
    for other in others:
        try:
            removal = remove(spex, other, force=force, salvage=True)
        except Refused as e:
            try:
                sessions.get(spex, other)
            except Refused:
                outcomes.append(LegOutcome(other, "gone", ["already removed"]))
                continue
            outcomes.append(LegOutcome(other, states.Verdict.REFUSED, [e.line()], e.exit_code))
            continue
        except Failed as e:
            outcomes.append(LegOutcome(other, "failed", [e.line()], e.exit_code))
            continue
        if removal is None:
            outcomes.append(LegOutcome(other, "removed"))
            continue
        saved = [removal.salvage, *removal.stash_branches] if removal.salvage else []
        outcomes.append(LegOutcome(other, "removed", removal.lines(), salvaged=saved))

    def change(d: Doc) -> None:
        d["best_of"]["kept"] = chosen

    Wave(spex, doc).update(change)
    return outcomes


def _checked(
    spex: Spex, wave_id: str, asked: str, chosen: str, others: Sequence[str], *, force: bool
) -> Session:
    """Everything `keep` needs, checked before it changes anything: the kept
    leg's session, and that every other leg can go (`remove.refusals`, the
    rules `spex rm --salvage` applies). A leg already removed is no obstacle.
    Refused (Failed where git cannot tell) naming every leg that would stay."""
    from spexsup.errors import SpexError, UnknownSession
    from spexsup.turn.remove import refusals

    try:
        kept = sessions.get(spex, chosen)
    except UnknownSession:
        raise Refused(
            f"wave {wave_id}: the leg to keep, {chosen}, no longer exists; nothing removed",
            hint=f"keep another leg (see spex wave {wave_id})",
        ) from None
    found = refusals(spex, others, force=force, salvage=True)
    stays: dict[str, SpexError] = {
        n: e for n, e in found.items() if e is not None and not isinstance(e, UnknownSession)
    }
    if not stays:
        return kept
    said = "; ".join(f"{n}: {e.message}" for n, e in stays.items())
    running = any(sessions.get(spex, n).state == states.BUSY for n in stays)
    hint = (
        f"stop them first, or spex keep {asked} --force"
        if running and not force
        else next(iter(stays.values())).hint
    )
    cls = Refused if all(isinstance(e, Refused) for e in stays.values()) else Failed
    raise cls(f"wave {wave_id}: nothing kept or removed: {said}", hint=hint)


def next_steps(spex: Spex, outcomes: Sequence[LegOutcome]) -> list[str]:
    """What a person does after `keep`, as commands: merge the kept branch
    into its base in the repository (`git switch BASE` when the base is a
    branch: the kept branch itself cannot be checked out there while its
    worktree holds it), then `spex rm` the kept session, which removes
    worktree and branch once merged; and where the other legs' work went."""
    lines = []
    kept = outcomes[0]
    wt = None
    if kept.outcome == "kept":
        with contextlib.suppress(Refused):
            wt = get(spex, kept.session).worktree
    if wt is not None:
        q = shlex.quote
        base = (
            wt.base_ref.removeprefix("refs/heads/")
            if wt.base_ref.startswith("refs/heads/")
            else None
        )
        switch = f"git switch {q(base)} && " if base else ""
        lines.append(f"next: cd {q(wt.repo)} && {switch}git merge {q(wt.branch)}")
        lines.append(
            f"  then spex rm {kept.session} (its worktree and branch go, the merge keeps the work)"
        )
        lines.append(f"  or go on with it: spex wake {kept.session} TEXT (in {wt.path})")
    salvaged = [b for o in outcomes for b in o.salvaged]
    if salvaged:
        lines.append(f"the other legs' unsaved work is on {', '.join(salvaged)}")
        lines.append("  (spex worktree ls lists them; spex prune --salvage deletes them)")
    return lines


def leg_stat(spex: Spex, session: str) -> str | None:
    """`git diff --shortstat` of a leg's worktree now (untracked files included)
    against its base; None when the session or its worktree is gone."""

    try:
        s = get(spex, session)
    except Refused:
        return None
    wt = s.worktree
    if wt is None or wt.missing:
        return None
    try:
        tree = snapshot_tree(wt.path)
        out = git(wt.path, "diff", "--shortstat", wt.base, tree).strip()
    except Failed as e:
        return f"({e.message})"
    return out or "no changes"


# --- keeping the best leg by its check (issue 27) --------------------------------

PICKS = ("first", "smallest")


@dataclass
class Choice:
    """What `fanout --keep-best` decided: the leg kept (None: no leg passed
    its check), how it was picked, and each leg's check as it ended."""

    leg: str | None
    pick: str
    checks: dict[str, dict[str, Any] | None]
    diffstat: str | None = None

    def public(self) -> dict[str, Any]:
        return asdict(self)


def _changed_lines(stat: str | None) -> int:
    """Insertions plus deletions of a `git diff --shortstat` line (huge when unknown)."""
    if not stat or stat.startswith("("):
        return 1 << 62
    if stat == "no changes":
        return 0
    return sum(int(n) for n in re.findall(r"(\d+) (?:insertion|deletion)", stat))


def choose(spex: Spex, doc: Doc, pick: str = "first") -> Choice:
    """The leg of an ended best-of-N wave to keep: of the legs whose turn
    completed with its check passed (flag `verified`), the first to end, or
    (`smallest`) the one with the smallest diff against its base (the first
    to end among equals). None when no leg passed."""
    from spexsup.turn.read import turn_checks

    if pick not in PICKS:
        raise Invalid(f"invalid --pick {pick!r}", hint="first or smallest")
    turns = {leg["session"]: leg.get("turn") for leg in doc["legs"]}
    checks = turn_checks(spex, [t for t in turns.values() if t])
    passed = []
    for leg in doc["legs"]:
        turn = leg.get("turn")
        row = (
            spex.store.db.execute(
                "SELECT state, flags, ended_at FROM turns WHERE id = ?", (turn,)
            ).fetchone()
            if turn
            else None
        )
        if row is None or row["state"] != states.COMPLETE:
            continue
        if states.VERIFIED not in json.loads(row["flags"] or "[]"):
            continue
        passed.append((row["ended_at"] or 0.0, leg["session"]))
    per_leg = {name: checks.get(turn) if turn else None for name, turn in turns.items()}
    if not passed:
        return Choice(None, pick, per_leg)
    passed.sort()
    if pick == "smallest":
        stats = {name: leg_stat(spex, name) for _, name in passed}
        _, chosen = min(passed, key=lambda p: (_changed_lines(stats[p[1]]), p[0]))
        return Choice(chosen, pick, per_leg, stats[chosen])
    chosen = passed[0][1]
    return Choice(chosen, pick, per_leg, leg_stat(spex, chosen))
