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
once. So is the spend of a message or step whose count or cost is no usage
number (infinite, NaN, negative, past `usage.MAX_TOKENS` or `MAX_COST`):
the budget goes on counting the others.

The same count, budget or not, is what a running turn has spent so far
(DESIGN §31): after each event that changed it, `spent-so-far` in the turn
dir holds it raw (the costs the CLI printed, the tokens, and the tokens of
each model no printed cost covers), and `so_far` prices it for a reader by
config.toml's `[pricing]` as it is then.

Lean: the renderer runs on every turn of a JSON-speaking harness.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup.usage import reported_cost, token_count

if TYPE_CHECKING:
    from collections.abc import Mapping

    from spexsup.usage import Price, Spend

FILE = "budget"
OVER = "over-budget"
SO_FAR = "spent-so-far"
GRACE = 5.0
# The events that may carry usage: any other line is not parsed again.
USAGE_WORDS = (b'"usage"', b"step_finish")


class Watch:
    """The turn's spend so far, against its budget."""

    def __init__(
        self, turn_dir: Path, amount: float | None, pricing: dict[str, list[float | None]]
    ) -> None:
        self.turn_dir = turn_dir
        self.amount = amount  # None: no budget, only the count so far
        self.pricing = pricing
        # claude: each API message's latest usage, by its id.
        self.messages: dict[str, tuple[str | None, list[int]]] = {}
        self.reported = 0.0  # costs the CLI printed for a step or message
        self.n_reported = 0
        self.estimated = 0.0
        # Tokens of the steps and messages (not claude's) whose cost the CLI
        # did not print, by model: a reader prices them; and all tokens.
        self.unpriced: dict[str, list[int]] = {}
        self.tokens = [0, 0, 0, 0]
        self.bad = False  # some count or cost was no usage number
        self.said: set[str] = set()  # what the pane said it cannot count
        self.tripped = False
        self.written = ""

    @classmethod
    def of(cls, output_log: str) -> Watch:
        """The watch of the turn whose output log this is: against its budget
        if it has one, else only counting."""
        directory = Path(output_log).parent
        try:
            spec = json.loads((directory / FILE).read_text())
            return cls(directory, float(spec["amount"]), dict(spec.get("pricing") or {}))
        except (OSError, ValueError, KeyError, TypeError):
            return cls(directory, None, {})

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

    def _add(self, model: str | None, counts: list[int], cost: float | None) -> None:
        self.tokens = [a + b for a, b in zip(self.tokens, counts, strict=True)]
        if cost is not None and cost > 0:
            self.reported += cost
            self.n_reported += 1
            return
        if not any(counts):
            return
        mine = self.unpriced.setdefault(model or "", [0, 0, 0, 0])
        mine[:] = [a + b for a, b in zip(mine, counts, strict=True)]
        if self.amount is None:
            return  # no budget: a reader prices them (`so_far`)
        guess = self._estimate(model, counts)
        if guess is None:
            self._unpriced(model)
        else:
            self.estimated += guess

    def _unpriced(self, model: str | None) -> None:
        if self.amount is None:
            return  # no budget to say it about
        name = model or "its model"
        self._say(
            name,
            f"{name} has no price ([pricing] in config.toml) and no cost"
            " was reported: its spend is not counted against the budget",
        )

    def _say(self, key: str, text: str) -> None:
        """Say `text` in the pane, once for each `key`."""
        if key not in self.said:
            self.said.add(key)
            print(f"[spex] budget: {text}", flush=True)

    def _counts(self, table: dict[str, Any], where: str, *keys: str) -> list[int] | None:
        """The token counts of `keys` (0 for an absent one); None, said once,
        when one is no count: that spend is unknown."""
        out = []
        for key in keys:
            value = table.get(key)
            n = 0 if value is None else token_count(value)
            if n is None:
                self._no_usage(f"{where}.{key}" if where else key, value)
                return None
            out.append(n)
        return out

    def _cost(self, table: dict[str, Any], where: str, key: str) -> tuple[bool, float | None]:
        """(sound, the cost `table[key]`, None when none was printed); not
        sound, said once, when it is no cost: that spend is unknown."""
        value = table.get(key)
        if value is None:
            return True, None
        cost = reported_cost(value)
        if cost is None:
            self._no_usage(f"{where}.{key}" if where else key, value)
        return cost is not None, cost

    def _no_usage(self, field: str, value: object) -> None:
        self.bad = True
        if self.amount is None:
            return
        shown = json.dumps(value) if isinstance(value, int | float) else type(value).__name__
        self._say(
            field,
            f"{field} = {shown[:40]} is no usage number: that spend is unknown and not"
            " counted against the budget",
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
                counts = self._counts(
                    message["usage"],
                    "usage",
                    "input_tokens",
                    "output_tokens",
                    "cache_read_input_tokens",
                    "cache_creation_input_tokens",
                )
                model = message.get("model") if isinstance(message.get("model"), str) else None
                key = str(message.get("id") or len(self.messages))
                if counts is not None:
                    self.messages[key] = (model, counts)
                    if self._estimate(model, counts) is None and any(counts):
                        self._unpriced(model)
        elif kind == "result":
            # The run's end: its cost is the usage rows' now; nothing is left to stop.
            return
        elif kind == "step_finish":  # opencode: one step's tokens and cost
            part = _table(event.get("part"))
            t = _table(part.get("tokens"))
            counts = self._counts(t, "tokens", "input", "output", "reasoning")
            cache = self._counts(_table(t.get("cache")), "tokens.cache", "read", "write")
            sound, cost = self._cost(part, "", "cost")
            if counts is not None and cache is not None and sound:
                fresh, output, reasoning = counts
                self._add(None, [fresh, output + reasoning, *cache], cost)
        elif kind == "message_end":  # pi: one message's usage and cost
            message = event.get("message")
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                u = message["usage"]
                counts = self._counts(u, "usage", "input", "output", "cacheRead", "cacheWrite")
                sound, cost = self._cost(_table(u.get("cost")), "usage.cost", "total")
                model = message.get("model") if isinstance(message.get("model"), str) else None
                if counts is not None and sound:
                    self._add(model, counts, cost)
        self.keep()
        if self.amount is not None and not self.tripped and self.spent() >= self.amount:
            self.trip()

    def so_far(self) -> dict[str, Any]:
        """What `spent-so-far` holds: the raw count (`so_far` prices it)."""
        unpriced = {m: list(c) for m, c in self.unpriced.items()}
        tokens = list(self.tokens)
        for model, counts in self.messages.values():
            tokens = [a + b for a, b in zip(tokens, counts, strict=True)]
            mine = unpriced.setdefault(model or "", [0, 0, 0, 0])
            mine[:] = [a + b for a, b in zip(mine, counts, strict=True)]
        return {
            "reported": self.reported,
            "n_reported": self.n_reported,
            "tokens": tokens,
            "unpriced": unpriced,
            "bad": self.bad,
        }

    def keep(self) -> None:
        """Write the count so far to the turn dir when it changed (a reader
        shows it while the turn runs; the end's usage rows replace it)."""
        if not self.messages and not self.n_reported and not any(self.tokens) and not self.bad:
            return
        text = json.dumps(self.so_far())
        if text != self.written:
            from spexsup.paths import write_atomic

            write_atomic(self.turn_dir / SO_FAR, text.encode(), durable=False)
            self.written = text

    def trip(self) -> None:
        """Over budget: say so in the turn dir and the pane, end the turn's
        processes (in a thread: the pipe keeps being drained meanwhile)."""
        from spexsup.paths import write_atomic

        assert self.amount is not None
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


def _money(amount: float) -> str:
    from spexsup.usage import money

    return money(amount)


def over(turn_dir: Path) -> str | None:
    """What `trip` left: why the turn was stopped, or None."""
    try:
        return (turn_dir / OVER).read_text() or "over its budget"
    except OSError:
        return None


def so_far(turn_dir: Path, pricing: Mapping[str, Price]) -> Spend | None:
    """What a running turn has spent so far, as its pane counted it
    (`spent-so-far`), priced by `pricing`: the costs the CLI printed, and
    an estimate of the tokens no printed cost covers (unknown, so the sum
    a floor, for a model without a price). None when the pane counted
    nothing (yet), or the harness prints no usage as it goes (codex)."""
    from spexsup.usage import Spend

    try:
        raw = json.loads((turn_dir / SO_FAR).read_text())
        tokens = [int(n) for n in raw["tokens"]]
        unpriced = {str(m): [int(n) for n in c] for m, c in dict(raw["unpriced"]).items()}
        reported, n_reported = float(raw["reported"]), int(raw["n_reported"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    spend = Spend()
    spend.rows = spend.turns = spend.leads = 1
    spend.tokens, spend.tokens_known = tokens, True
    spend.inexact = int(bool(raw.get("bad")))
    spend.unknown = spend.inexact
    if n_reported:
        spend.reported, spend.n_reported = reported, n_reported
    for model, counts in unpriced.items():
        if not any(counts):
            continue
        if model:
            spend.models.add(model)
        price = pricing.get(model)
        guess = None if price is None else price.estimate(counts)
        if guess is None:
            spend.unknown += 1
        else:
            spend.estimated += guess
            spend.n_estimated += 1
    return spend
