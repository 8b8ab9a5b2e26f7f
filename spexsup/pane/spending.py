"""What a turn's harness spent, read from the output of each of its runs
(issue 26): the usage rows the exit reporter records with the end. What
opencode's subagents spent is not in its output: it is read from its
database (issue 42, `subagents`).

Runs inside the pane (the exit reporter): the standard library, the outcome
parsers and the turn dir only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup.pane import turndir

if TYPE_CHECKING:
    from collections.abc import Sequence

    from spexsup.adapters import outcome as outcome_mod
    from spexsup.adapters.harness import Harness


def spending(
    turn_dir: Path,
    adapter: Harness | None,
    conversation: str | None,
    runs: Sequence[tuple[int, Path, str | None]],
    *,
    last: outcome_mod.Outcome | None = None,
    cause: str | None = None,
) -> tuple[str | None, list[dict[str, Any]]]:
    """(the harness, the usage of each of the turn's runs) for
    `ledger.record_usage`, read from their outputs as the flags are (`last`:
    the final run's Outcome when judged already). A model the output does not
    name (codex, opencode) is looked up in the CLI's own store."""
    from spexsup.adapters import outcome

    meta = turndir.meta(turn_dir)
    harness = adapter.name if adapter is not None else str(meta.get("harness") or "") or None
    parser = adapter.outcome if adapter is not None else meta.get("outcome")
    parser = parser if isinstance(parser, str) else None
    if parser is None:
        # A harness that never reports usage (command, demo): nothing was
        # expected, so nothing is unknown; no row, no `? · tokens unknown`.
        return harness, []
    rows = []
    model: str | None = None
    looked = False
    tasks: list[str | None] = []
    passed = _models_passed(turn_dir, meta)
    for attempt, path, ended in runs:
        final = path.name == turndir.OUTPUT
        found = last if final and last is not None else outcome.read(path, parser)
        parts = []
        spent = found.spent
        tasks += spent.tasks
        for key, part in spent.parts.items():
            name, priced = key
            if name is None and harness in ("codex", "opencode"):
                if not looked:
                    from spexsup.adapters import convstore

                    model, looked = convstore.model(harness, conversation), True
                # codex's rollout names the model its thread ran last: a run
                # before a fallback ran the one spex passed it. A run whose
                # store names none ran the one spex passed, if any.
                own = passed.get(path.name)
                name = own if own and harness == "codex" and not final else model or own
            # A count that was no number of tokens leaves the part's unknown.
            counts = None if key in spent.unknown else [int(n) for n in part[:4]]
            parts.append((name, counts, part[4] if priced else None))
        exact = spent.exact
        if final and parser == "opencode":
            # Its subagents' spend, read from its database, is this run's.
            below, whole, bad = subagents(turn_dir, meta, conversation, tasks)
            spent.bad += [field for field in bad if field not in spent.bad]
            if below:
                if not spent.metered:
                    parts.append((model if looked else None, None, None))
                parts += below
            exact = exact and whole
        rows.append(
            {
                "attempt": attempt,
                "cause": cause if final else ended,
                "exact": exact,
                "parts": parts if spent.metered or parts else [],
                "bad": spent.bad,
                "running": spent.running,
                # The first run resumed what the wake resumed; a later one
                # (after a usage-limit wait) always resumes the conversation.
                "resumed": bool(meta.get("resumed")) or attempt > 1,
                "conversation": conversation,
            }
        )
    return harness, rows


def subagents(
    turn_dir: Path,
    meta: dict[str, Any],
    conversation: str | None,
    tasks: Sequence[str | None],
) -> tuple[list[tuple[str | None, list[int] | None, float | None]], bool, list[str]]:
    """(the usage parts of what opencode's subagents spent in the turn, per
    model; whether that is all of it; the fields that held no usage). Read
    from opencode's database: the sessions below the turn's conversation,
    and those its `task` calls named, from the turn's start to its harness's exit (the outcome
    marker's last write). Not all of it when a call named no session, a
    named one is not there, or the database cannot be read and the output
    shows a call; with no call shown and no database, nothing is missing."""
    import time

    from spexsup.adapters import convstore
    from spexsup.adapters.meter import Meter

    started = meta.get("started")
    if not isinstance(started, int | float) or not conversation:
        return [], not tasks, []
    try:
        until = (turn_dir / turndir.OUTCOME).stat().st_mtime + 2
    except OSError:
        until = time.time()
    meter = Meter()
    named = [t for t in tasks if t]
    read = convstore.opencode_subagents(conversation, named, started, until, meter)
    if read is None:
        return [], not tasks, []
    parts = []
    for key, part in meter.parts.items():
        name, priced = key
        counts = None if key in meter.unknown else [int(n) for n in part[:4]]
        parts.append((name, counts, part[4] if priced else None))
    return parts, read and len(named) == len(tasks) and not meter.bad, meter.bad


def _models_passed(turn_dir: Path, meta: dict[str, Any]) -> dict[str, str]:
    """The model spex passed each run (`--model`), by its output's name: the
    last run's in the turn's meta, those a fallback ended in its file."""
    import json

    passed: dict[str, str] = {}
    if isinstance(meta.get("model"), str) and meta["model"]:
        passed[turndir.OUTPUT] = meta["model"]
    try:
        attempts = json.loads((turn_dir / turndir.FALLBACK).read_text()).get("attempts") or []
    except (OSError, ValueError, AttributeError):
        attempts = []
    for attempt in attempts:
        if isinstance(attempt, dict) and isinstance(attempt.get("model"), str):
            passed[str(attempt.get("output"))] = attempt["model"]
    return passed
