"""A turn's own budget (`spex wake --budget USD`), kept live in the pane.

The pane's renderer (`spexsup.pane.pretty feed`) hands every event of the
harness's structured output to `Watch.see`, which adds up what the turn has
spent so far: what the CLI reported (pi's and opencode's per-message and
per-step costs), else an estimate from the tokens at the
prices the admission wrote down (`[pricing."MODEL"]` in config.toml), per
API message as it comes (claude's `assistant` events, by message id). When
the known spend reaches the budget, it leaves `over-budget` in the turn dir
(the reporter's `judge` reads it: the end is `failed`, cause `budget`) and
ends the turn's processes as a time limit does (`python -m
spexsup.pane.deadline`).
A cost it cannot know (no price, no reported cost: codex prints none until
the end) is never counted as zero, nor against the budget: the pane says so
once.

Lean: the renderer runs on every turn of a JSON-speaking harness.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FILE = "budget"
OVER = "over-budget"
GRACE = 5.0


class Watch:
    """The turn's spend so far, against its budget."""

    def __init__(
        self, turn_dir: Path, amount: float, pricing: dict[str, list[float | None]]
    ) -> None:
        self.turn_dir = turn_dir
        self.amount = amount
        self.pricing = pricing
        # claude: each API message's latest usage, by its id.
        self.messages: dict[str, tuple[str | None, list[int]]] = {}
        self.reported = 0.0  # costs the CLI printed for a step or message
        self.estimated = 0.0
        self.unpriced: set[str] = set()
        self.tripped = False

    @classmethod
    def of(cls, output_log: str) -> Watch | None:
        """The watch of the turn whose output log this is, if it has a budget."""
        directory = Path(output_log).parent
        try:
            spec = json.loads((directory / FILE).read_text())
            return cls(directory, float(spec["amount"]), dict(spec.get("pricing") or {}))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _estimate(self, model: str | None, counts: list[int]) -> float | None:
        price = self.pricing.get(model or "")
        if price is None:
            return None
        total = 0.0
        for count, per_million in zip(counts, price, strict=False):
            if count:
                if per_million is None:
                    return None
                total += count * per_million / 1_000_000
        return total

    def _add(self, model: str | None, counts: list[int], cost: object) -> None:
        if isinstance(cost, int | float) and not isinstance(cost, bool) and cost > 0:
            self.reported += float(cost)
            return
        if not any(counts):
            return
        guess = self._estimate(model, counts)
        if guess is None:
            self._unpriced(model)
        else:
            self.estimated += guess

    def _unpriced(self, model: str | None) -> None:
        name = model or "its model"
        if name not in self.unpriced:
            self.unpriced.add(name)
            print(
                f"[spex] budget: {name} has no price ([pricing] in config.toml) and no cost"
                " was reported: its spend is not counted against the budget",
                flush=True,
            )

    def spent(self) -> float:
        live = 0.0
        for model, counts in self.messages.values():
            guess = self._estimate(model, counts)
            if guess is not None:
                live += guess
        return live + self.reported + self.estimated

    def see(self, event: dict[str, Any]) -> None:
        """One event of the harness's output; ends the turn once over budget."""
        kind = event.get("type")
        if kind == "assistant":  # claude: one API message's usage so far
            message = event.get("message")
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                u = message["usage"]
                counts = [
                    _n(u.get("input_tokens")),
                    _n(u.get("output_tokens")),
                    _n(u.get("cache_read_input_tokens")),
                    _n(u.get("cache_creation_input_tokens")),
                ]
                model = message.get("model") if isinstance(message.get("model"), str) else None
                key = str(message.get("id") or len(self.messages))
                self.messages[key] = (model, counts)
                if self._estimate(model, counts) is None and any(counts):
                    self._unpriced(model)
        elif kind == "result":
            # The run's end: its cost is the usage rows' now; nothing is left to stop.
            return
        elif kind == "step_finish":  # opencode: one step's tokens and cost
            part = _table(event.get("part"))
            t = _table(part.get("tokens"))
            cache = _table(t.get("cache"))
            counts = [
                _n(t.get("input")),
                _n(t.get("output")) + _n(t.get("reasoning")),
                _n(cache.get("read")),
                _n(cache.get("write")),
            ]
            self._add(None, counts, part.get("cost"))
        elif kind == "message_end":  # pi: one message's usage and cost
            message = event.get("message")
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                u = message["usage"]
                cost = _table(u.get("cost"))
                counts = [
                    _n(u.get("input")),
                    _n(u.get("output")),
                    _n(u.get("cacheRead")),
                    _n(u.get("cacheWrite")),
                ]
                model = message.get("model") if isinstance(message.get("model"), str) else None
                self._add(model, counts, cost.get("total"))
        if not self.tripped and self.spent() >= self.amount:
            self.trip()

    def trip(self) -> None:
        """Over budget: say so in the turn dir and the pane, end the turn's
        processes (in a thread: the pipe keeps being drained meanwhile)."""
        from spexsup.paths import write_atomic

        self.tripped = True
        spent = self.spent()
        why = f"spent {_money(spent)} of its {_money(self.amount)} budget"
        write_atomic(self.turn_dir / OVER, why.encode(), durable=False)
        print(f"[spex] budget: {why}; stopping the turn", flush=True)
        import subprocess

        from spexsup.paths import own_python

        # As the time limit's watchdog does; it spares its ancestors (this
        # renderer, the wrapper), and the pipe keeps being drained meanwhile.
        argv = [*own_python("spexsup.pane.deadline"), str(self.turn_dir), str(os.getppid())]
        subprocess.Popen([*argv, f"{GRACE:g}"], stdin=subprocess.DEVNULL)


def _table(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _n(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _money(amount: float) -> str:
    return f"${amount:.4f}" if 0 < amount < 0.01 else f"${amount:,.2f}"


def over(turn_dir: Path) -> str | None:
    """What `trip` left: why the turn was stopped, or None."""
    try:
        return (turn_dir / OVER).read_text() or "over its budget"
    except OSError:
        return None
