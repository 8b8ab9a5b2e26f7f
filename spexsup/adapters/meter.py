"""What one run of an agent CLI spent, read from its structured output (issue 26).

`outcome`'s parsers hand each event that carries usage to the reader of its
CLI here, which adds it to the run's `Meter`:

- claude: the `result` event, `modelUsage` per model (`costUSD`), else the
  run's `usage` and `total_cost_usd` with no model named;
- codex: `turn.completed`'s `usage`, the conversation's running total
  (`exec resume` starts from the thread's old total: `running`);
- opencode: every `step_finish` (its `tokens` and `cost`); the count is
  exact only when every step that started finished and all were read;
- pi: each assistant message's `usage` (and `model`), those of `agent_end`,
  else of each `message_end` (short of exact: the run was cut short).

Counts are normalised to Anthropic's convention: `input` excludes the cache
reads and writes. codex's `input_tokens` include its `cached_input_tokens`
and cache writes (as OpenAI counts them, reported again apart): taken out;
opencode's `output` excludes its `reasoning` (priced as output): added back;
claude's and pi's already are so. A cost of 0 with tokens used is no
reported $0 (opencode and pi print 0 for a model they have no price for):
those tokens' cost is left unknown, for an estimate from `[pricing]`.

A number that is not usage (not finite, negative, past `usage.MAX_TOKENS`
or `usage.MAX_COST`, or no number at all) is unknown: the event's counts
(or its cost) are left unknown, and the field is named in `bad` (the turn's
flag `bad-usage:FIELD`). An absent field is 0, as the CLIs omit a zero.

Lean: it runs in the exit reporter.
"""

from __future__ import annotations

import json
from typing import Any

from spexsup import lazyre, usage


class Meter:
    """A run's usage: (model or None, cost reported?) -> [input, output,
    cache_read, cache_write, cost]. `metered` once an event that carries
    usage was read, `exact` when the counts are all the run used, `running`
    when they are the conversation's running total, not this run's alone.
    `tasks`: the subagent sessions opencode's `task` tool ran (their spend
    is not in the run's output).
    `unknown`: the parts whose counts are unknown (an event's count was no
    number of tokens); `bad`: the fields that held no usage, as printed."""

    __slots__ = ("bad", "exact", "metered", "parts", "running", "steps", "tasks", "unknown")

    def __init__(self) -> None:
        self.parts: dict[tuple[str | None, bool], list[float]] = {}
        self.unknown: set[tuple[str | None, bool]] = set()
        self.bad: list[str] = []
        self.metered = False
        self.exact = False
        self.running = False
        self.steps = 0  # opencode: step finishes less step starts read
        # opencode: the subagent sessions its `task` tool ran (None: one whose
        # session the output does not name); their spend is in its database.
        self.tasks: list[str | None] = []

    def counts(self, table: dict[str, Any], where: str, *keys: str) -> list[int | None]:
        """The token counts of `keys` in `table` (`where`: its name, for the
        flag): 0 for an absent one, None for one that is no count."""
        out: list[int | None] = []
        for key in keys:
            value = table.get(key)
            n = 0 if value is None else usage.token_count(value)
            if n is None:
                self.flag(f"{where}.{key}" if where else key)
            out.append(n)
        return out

    def cost(self, table: dict[str, Any], where: str, key: str) -> float | None:
        """The cost `table[key]` in USD; None when absent or no cost (flagged)."""
        value = table.get(key)
        if value is None:
            return None
        cost = usage.reported_cost(value)
        if cost is None:
            self.flag(f"{where}.{key}" if where else key)
        return cost

    def flag(self, field: str) -> None:
        if field not in self.bad:
            self.bad.append(field)

    def add(self, model: object, counts: list[int | None], cost: float | None = None) -> None:
        """One event's (input, output, cache_read, cache_write), normalised
        already (None: unknown), and the cost the CLI printed for them (None:
        none). A cost counts as reported only when above 0, or 0 for no
        tokens at all."""
        name = model if isinstance(model, str) and model else None
        i, o, cr, cw = counts
        if i is None or o is None or cr is None or cw is None:
            priced = cost is not None and cost > 0
            key = (name, priced)
            self.unknown.add(key)
            part = self.parts.setdefault(key, [0, 0, 0, 0, 0.0])
            if priced and cost is not None:
                part[4] += cost
            return
        self.count(name, i, o, cr, cw, cost)

    def count(
        self, model: str | None, i: int, o: int, cr: int, cw: int, cost: float | None
    ) -> None:
        """`add`, the counts checked already."""
        priced = cost is not None and (cost > 0 or not (i or o or cr or cw))
        part = self.parts.get((model, priced))
        if part is None:
            part = self.parts[(model, priced)] = [0, 0, 0, 0, 0.0]
        part[0] += i
        part[1] += o
        part[2] += cr
        part[3] += cw
        if priced and cost is not None:
            part[4] += cost


def _table(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def claude(event: dict[str, Any], meter: Meter) -> None:
    meter.metered = meter.exact = True
    models = event.get("modelUsage")
    if isinstance(models, dict) and models:
        for model, u in models.items():
            u = _table(u)
            counts = meter.counts(
                u,
                "modelUsage",
                "inputTokens",
                "outputTokens",
                "cacheReadInputTokens",
                "cacheCreationInputTokens",
            )
            meter.add(model, counts, meter.cost(u, "modelUsage", "costUSD"))
        return
    run = _table(event.get("usage"))
    counts = meter.counts(
        run,
        "usage",
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    )
    meter.add(None, counts, meter.cost(event, "", "total_cost_usd"))


def codex(usage: object, meter: Meter, *, failed: bool) -> None:
    """`turn.completed`'s usage; short of exact when an error followed it (`failed`)."""
    if not isinstance(usage, dict):
        return
    given, output, cached, written = meter.counts(
        usage, "usage", "input_tokens", "output_tokens", "cached_input_tokens",
        "cache_write_input_tokens",
    )  # fmt: skip
    fresh = None
    if given is not None and cached is not None and written is not None:
        fresh = max(0, given - cached - written)
    meter.add(None, [fresh, output, cached, written])
    meter.metered = meter.running = True
    meter.exact = not failed


def opencode(part: dict[str, Any], meter: Meter) -> None:
    """One `step_finish`."""
    meter.steps += 1
    meter.metered = True
    counted = part.get("tokens")
    if not isinstance(counted, dict):
        return
    fresh, output, reasoning = meter.counts(counted, "tokens", "input", "output", "reasoning")
    read, write = meter.counts(_table(counted.get("cache")), "tokens.cache", "read", "write")
    both = None if output is None or reasoning is None else output + reasoning
    meter.add(None, [fresh, both, read, write], meter.cost(part, "", "cost"))


# opencode prints a step every few KB of a long run: its `step_finish` lines
# are read without decoding the whole event (its `tokens` object, small and
# flat but for `cache`, and its `cost`), and its `step_start` lines only counted.
STEP_START = (b'{"type":"step_start"', b'{"type": "step_start"')
STEP_FINISH = (b'{"type":"step_finish"', b'{"type": "step_finish"')
# As opencode 1.x prints it (JSON.stringify of its own object: this order).
_STEP_PRINTED = lazyre.compile(
    rb'"tokens":\{(?:"total":[0-9]+,)?"input":([0-9]+),"output":([0-9]+),"reasoning":([0-9]+),'
    rb'"cache":\{"write":([0-9]+),"read":([0-9]+)\}\},"cost":([0-9][0-9.e+-]*)[,}]'
)
_STEP = lazyre.compile(
    rb'"tokens"\s*:\s*(\{[^{}]*(?:\{[^{}]*\}[^{}]*)?\})\s*,\s*"cost"\s*:\s*'
    rb"(-?[0-9][0-9.eE+-]*)\s*[,}]"
)


def opencode_line(line: bytes, meter: Meter) -> bool:
    """A `step_start` or `step_finish` line read here; False for any other
    line (or one this cannot read: the caller decodes it)."""
    if line.startswith(STEP_START):
        meter.steps -= 1
        return True
    if not line.startswith(STEP_FINISH):
        return False
    printed = _STEP_PRINTED.search(line)
    if printed is not None:
        i, o, r, cw, cr, cost = printed.groups()
        counts = [usage.token_count(int(n)) for n in (i, o, r, cr, cw)]
        try:
            price = usage.reported_cost(float(cost))
        except ValueError:
            price = None
        if price is not None and None not in counts:
            # The common case, every number sound; any other is decoded below
            # and named in `bad`.
            fresh, output, reasoning, read, write = (n or 0 for n in counts)
            meter.steps += 1
            meter.metered = True
            meter.count(None, fresh, output + reasoning, read, write, price)
            return True
    found = _STEP.search(line)
    if found is None:
        return False
    try:
        counted, cost = json.loads(found.group(1)), json.loads(found.group(2))
    except ValueError:
        return False
    opencode({"tokens": counted, "cost": cost}, meter)
    return True


def pi(message: dict[str, Any], meter: Meter) -> None:
    """One assistant message."""
    u = message.get("usage")
    if isinstance(u, dict):
        counts = meter.counts(u, "usage", "input", "output", "cacheRead", "cacheWrite")
        meter.add(
            message.get("model"), counts, meter.cost(_table(u.get("cost")), "usage.cost", "total")
        )
        meter.metered = True
