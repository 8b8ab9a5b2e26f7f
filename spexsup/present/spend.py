"""What a wave's turns spent (issue 26), as `spex fanout`, `spex wave` and
the live fan-out views show it: computed when shown, never written into the
wave's document (estimates follow config.toml's `[pricing]` as it is now)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from spexsup.core.spex import Spex

# What a leg spent, as its cost text (`$0.09`; "" for none recorded): given
# the wave's id and the leg's session, from the views' own threads.
LegCost = Callable[[str, str], str]


def with_spend(spex: Spex, doc: dict[str, Any]) -> dict[str, Any]:
    """The wave document with what it spent (issue 26): `usage` and `cost`
    per leg (null before its turn recorded any) and for the whole wave,
    every leg and every attempt; and each leg's `verify` (issue 27). Printed
    only: the wave's file is as it was."""
    from spexsup import config, states, usage
    from spexsup.pane import budget, turndir
    from spexsup.turn.read import so_far_json, turn_checks

    pricing = config.load(spex.home).pricing
    per, whole = usage.wave_spend(spex.store.db, doc["id"], pricing, doc["legs"])
    checks = turn_checks(spex, [leg["turn"] for leg in doc["legs"] if leg.get("turn")])
    legs = []
    running: list[usage.Spend] = []  # what the running legs spent so far
    for leg in doc["legs"]:
        spent = per.get(leg["session"])
        extra: dict[str, Any] = {"usage": None, "cost": None, "so_far": None}
        if spent is not None:
            extra.update(usage=spent.usage_json(), cost=spent.cost_json())
        if leg.get("turn") and leg.get("turn_state") in (None, *states.ACTIVE):
            now = budget.so_far(turndir.path(spex.home, leg["session"], leg["turn"]), pricing)
            if now is not None:
                extra["so_far"] = so_far_json(now)
                running.append(now)
        # Its turn's latest check (issue 27), null without one.
        extra["verify"] = checks.get(leg["turn"]) if leg.get("turn") else None
        legs.append({**leg, **extra})
    so_far = None
    if running:
        # The wave's known spend with its running legs' so far (DESIGN §31):
        # a leg counted so has no unknown of its own left (`wave_spend`).
        base = usage.grand([whole])
        counted = sum(1 for leg in legs if leg["so_far"] and leg["session"] not in per)
        base.rows, base.unknown = base.rows - counted, base.unknown - counted
        so_far = so_far_json(usage.grand([base, *running]))
    if not whole.rows:
        # No leg recorded usage and none may still (its harness reports none:
        # command, demo): nothing was expected, nothing is unknown (issue 38,
        # item 15).
        return {**doc, "legs": legs, "usage": None, "cost": None, "so_far": so_far}
    spend = {"usage": whole.usage_json(), "cost": whole.cost_json(), "so_far": so_far}
    return {**doc, "legs": legs, **spend}


def leg_costs(home: Path) -> LegCost:
    """A leg's cost text (`$0.09`, "" when it recorded none), for the live
    views: each call its own read-only connection (they run in other threads)."""
    import sqlite3

    from spexsup import config, usage

    pricing = config.load(home).pricing

    def cost(wave: str, session: str) -> str:
        try:
            db = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True, timeout=5)
            try:
                spent = usage.total(
                    db, pricing, where="wave = ? AND session = ?", params=(wave, session)
                )
            finally:
                db.close()
        except sqlite3.Error:
            return ""
        return spent.cost_text() if spent.rows else ""

    return cost


def running_cost(home: Path) -> LegCost:
    """A running leg's spend so far (`$0.42 so far`, "" when its pane counted
    none), given its session and turn, for the live table (DESIGN §31)."""
    from spexsup import config
    from spexsup.pane import budget, turndir

    pricing = config.load(home).pricing

    def cost(session: str, turn: str) -> str:
        spent = budget.so_far(turndir.path(home, session, turn), pricing)
        return "" if spent is None else f"{spent.cost_text()} so far"

    return cost


def spend_text(doc: dict[str, Any], *, tokens: bool = True) -> str:
    """`cost $0.18 · 58.7k in, 12 out, cache 0/0` for a wave (a leg, a fleet
    wave) that has one, or only `$0.18` without `tokens`; "" otherwise."""
    from spexsup import usage

    if not doc.get("cost"):
        return ""
    spent = usage.from_json({"usage": doc.get("usage"), "cost": doc["cost"]})
    return "cost " + spent.line() if tokens else spent.cost_text()
