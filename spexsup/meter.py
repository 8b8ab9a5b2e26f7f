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

Lean: it runs in the exit reporter.
"""

from __future__ import annotations

import json
import re
from typing import Any


class Meter:
    """A run's usage: (model or None, cost reported?) -> [input, output,
    cache_read, cache_write, cost]. `metered` once an event that carries
    usage was read, `exact` when the counts are all the run used, `running`
    when they are the conversation's running total, not this run's alone."""

    __slots__ = ("exact", "metered", "parts", "running", "steps")

    def __init__(self) -> None:
        self.parts: dict[tuple[str | None, bool], list[float]] = {}
        self.metered = False
        self.exact = False
        self.running = False
        self.steps = 0  # opencode: step finishes less step starts read

    def add(self, model: object, counts: tuple[object, ...], cost: object = None) -> None:
        """One event's (input, output, cache_read, cache_write), normalised
        already, and the cost the CLI printed for them (None: none). A cost
        counts as reported only when above 0, or 0 for no tokens at all."""
        name = model if isinstance(model, str) and model else None
        i, o, cr, cw = (tokens(c) for c in counts)
        self.count(name, i, o, cr, cw, usd(cost))

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


def tokens(value: object) -> int:
    """A token count as a CLI printed it; anything else counts as 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0
    return max(0, min(int(value), 1 << 53))


def usd(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value < 1e9 else None


def _table(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def claude(event: dict[str, Any], meter: Meter) -> None:
    meter.metered = meter.exact = True
    models = event.get("modelUsage")
    if isinstance(models, dict) and models:
        for model, u in models.items():
            u = _table(u)
            counts = (
                u.get("inputTokens"),
                u.get("outputTokens"),
                u.get("cacheReadInputTokens"),
                u.get("cacheCreationInputTokens"),
            )
            meter.add(model, counts, u.get("costUSD"))
        return
    run = _table(event.get("usage"))
    counts = (
        run.get("input_tokens"),
        run.get("output_tokens"),
        run.get("cache_read_input_tokens"),
        run.get("cache_creation_input_tokens"),
    )
    meter.add(None, counts, event.get("total_cost_usd"))


def codex(usage: object, meter: Meter, *, failed: bool) -> None:
    """`turn.completed`'s usage; short of exact when an error followed it (`failed`)."""
    if not isinstance(usage, dict):
        return
    cached = tokens(usage.get("cached_input_tokens"))
    written = tokens(usage.get("cache_write_input_tokens"))
    fresh = max(0, tokens(usage.get("input_tokens")) - cached - written)
    meter.add(None, (fresh, usage.get("output_tokens"), cached, written))
    meter.metered = meter.running = True
    meter.exact = not failed


def opencode(part: dict[str, Any], meter: Meter) -> None:
    """One `step_finish`."""
    meter.steps += 1
    meter.metered = True
    counted = part.get("tokens")
    if not isinstance(counted, dict):
        return
    cache = _table(counted.get("cache"))
    output = tokens(counted.get("output")) + tokens(counted.get("reasoning"))
    counts = (counted.get("input"), output, cache.get("read"), cache.get("write"))
    meter.add(None, counts, part.get("cost"))


# opencode prints a step every few KB of a long run: its `step_finish` lines
# are read without decoding the whole event (its `tokens` object, small and
# flat but for `cache`, and its `cost`), and its `step_start` lines only counted.
STEP_START = (b'{"type":"step_start"', b'{"type": "step_start"')
STEP_FINISH = (b'{"type":"step_finish"', b'{"type": "step_finish"')
# As opencode 1.x prints it (JSON.stringify of its own object: this order).
_STEP_PRINTED = re.compile(
    rb'"tokens":\{(?:"total":[0-9]+,)?"input":([0-9]+),"output":([0-9]+),"reasoning":([0-9]+),'
    rb'"cache":\{"write":([0-9]+),"read":([0-9]+)\}\},"cost":([0-9][0-9.e+-]*)[,}]'
)
_STEP = re.compile(
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
        try:
            price: float | None = float(cost)
        except ValueError:
            price = None
        if price is not None and not 0 <= price < 1e9:
            price = None
        meter.steps += 1
        meter.metered = True
        meter.count(None, int(i), int(o) + int(r), int(cr), int(cw), price)
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
        total = _table(u.get("cost")).get("total")
        counts = (u.get("input"), u.get("output"), u.get("cacheRead"), u.get("cacheWrite"))
        meter.add(message.get("model"), counts, total)
        meter.metered = True
