"""What a turn's harness spent, read from the output of each of its runs
(issue 26): the usage rows the exit reporter records with the end.

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
    for attempt, path, ended in runs:
        final = path.name == turndir.OUTPUT
        found = last if final and last is not None else outcome.read(path, parser)
        parts = []
        spent = found.spent
        for key, part in spent.parts.items():
            name, priced = key
            if name is None and harness in ("codex", "opencode"):
                if not looked:
                    from spexsup.adapters import convstore

                    model, looked = convstore.model(harness, conversation), True
                name = model
            # A count that was no number of tokens leaves the part's unknown.
            counts = None if key in spent.unknown else [int(n) for n in part[:4]]
            parts.append((name, counts, part[4] if priced else None))
        rows.append(
            {
                "attempt": attempt,
                "cause": cause if final else ended,
                "exact": spent.exact,
                "parts": parts if spent.metered else [],
                "bad": spent.bad,
                "running": spent.running,
                # The first run resumed what the wake resumed; a later one
                # (after a usage-limit wait) always resumes the conversation.
                "resumed": bool(meta.get("resumed")) or attempt > 1,
                "conversation": conversation,
            }
        )
    return harness, rows
