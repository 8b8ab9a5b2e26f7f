"""Usage and cost: what the agents' turns spent, and how it adds up (issue 26).

The exit reporter records one `usage` row per model per attempt of a turn
(see `ledger.record_usage`): tokens as the harness's structured output
counted them, normalised to Anthropic's convention (`input` excludes the
cache reads and writes, which are counted apart), and the cost the CLI
reported, or NULL. A row with NULL tokens is an attempt whose spend is
unknown (the CLI printed no usage: it was killed, or it prints none).

The sum rules, the same for a turn, a session, a wave, a day or a fleet:

- tokens are added key by key;
- a cost is `reported` (by the CLI), `estimated` (from `[pricing."MODEL"]`
  in config.toml, computed here at read time from the tokens, so a fixed
  price table fixes old estimates), `mixed` when a sum holds both, or
  `unknown`;
- a sum of nothing is not $0: with no known cost anywhere the amount is
  null, never 0;
- a part whose cost or tokens are unknown (or a row whose counts may be
  short, `exact` 0) makes the sum a floor: `exact: false`.

Pure and lean (the standard library only): it is a shared word, read by the
CLI, the wave record and `spex top`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spexsup.record import Record

if TYPE_CHECKING:
    import sqlite3

CURRENCY = "USD"
KINDS = ("input", "output", "cache_read", "cache_write")
SOURCES = ("reported", "estimated", "mixed", "unknown")
# `spex cost --by`: what each grouping reads from a usage row.
GROUPS: dict[str, str] = {
    "session": "session",
    "harness": "coalesce(harness, '-')",
    "model": "coalesce(model, '-')",
    "day": "date(at, 'unixepoch', 'localtime')",
    "wave": "coalesce(wave, '-')",
    "turn": "turn",
}
# What the text views write for a cost or a count nobody knows.
UNKNOWN = "?"
FLOOR = "≥"
ESTIMATE = "~"
# Past these a number a CLI printed is not usage (no run spends 10^15 tokens
# or $10^9): it is unknown, as an infinite, NaN or negative one is.
MAX_TOKENS = 10**15
MAX_COST = 1e9
# The turn flag naming a field whose number was not usage (`bad-usage:FIELD`).
BAD_USAGE = "bad-usage:"


def token_count(value: object) -> int | None:
    """A token count as a CLI printed it, or None when it is not one: not a
    number, not finite, negative, or past MAX_TOKENS."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    # A comparison, never a conversion first: NaN and infinities fail it, and
    # int(inf) or float(10**400) would raise.
    return int(value) if 0 <= value <= MAX_TOKENS else None


def reported_cost(value: object) -> float | None:
    """A cost in USD as a CLI printed it, or None when it is not one: not a
    number, not finite, negative, or past MAX_COST."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value <= MAX_COST else None


class Price(Record):
    """`[pricing."MODEL"]`: USD per million tokens of each kind. A kind with
    no price (None) cannot be estimated when it was used."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def estimate(self, counts: Sequence[int]) -> float | None:
        """USD for (input, output, cache_read, cache_write) tokens; None when a
        kind that was used has no price."""
        total = 0.0
        for count, price in zip(counts, self, strict=True):
            if not count:
                continue
            if price is None:
                return None
            total += count * price / 1_000_000
        return total


Pricing = Mapping[str, Price]


class Spend:
    """A sum of usage by the rules above. A plain class: the exit reporter's
    neighbours must not import `dataclasses`."""

    __slots__ = (
        "estimated",
        "inexact",
        "leads",
        "models",
        "n_estimated",
        "n_reported",
        "reported",
        "rows",
        "tokens",
        "tokens_known",
        "turns",
        "unknown",
    )

    def __init__(self) -> None:
        self.tokens = [0, 0, 0, 0]
        self.tokens_known = False  # some row had counts
        self.inexact = 0  # rows whose counts are unknown or may be short
        self.reported = 0.0
        self.estimated = 0.0
        self.n_reported = 0
        self.n_estimated = 0
        self.unknown = 0  # rows whose cost is unknown
        self.rows = 0
        self.turns = 0  # the turns in this sum (a turn with two models: in each model's)
        self.leads = 0  # the turns in this sum, each once whatever the grouping
        self.models: set[str] = set()

    def add(self, other: Spend) -> Spend:
        """Add `other` into this one (key by key, sources kept); returns self."""
        for i, n in enumerate(other.tokens):
            self.tokens[i] += n
        self.tokens_known = self.tokens_known or other.tokens_known
        self.inexact += other.inexact
        self.reported += other.reported
        self.estimated += other.estimated
        self.n_reported += other.n_reported
        self.n_estimated += other.n_estimated
        self.unknown += other.unknown
        self.rows += other.rows
        self.turns += other.turns
        self.leads += other.leads
        self.models |= other.models
        return self

    @property
    def amount(self) -> float | None:
        """The known cost in USD; None when no part of it is known (never 0 then)."""
        if not self.n_reported and not self.n_estimated:
            return None
        return self.reported + self.estimated

    @property
    def source(self) -> str:
        if self.n_reported and self.n_estimated:
            return "mixed"
        if self.n_reported:
            return "reported"
        return "estimated" if self.n_estimated else "unknown"

    @property
    def tokens_exact(self) -> bool:
        return self.tokens_known and not self.inexact

    @property
    def exact(self) -> bool:
        """The amount is the whole cost: nothing unknown, no count short. A
        total that is not exact is a floor."""
        return self.amount is not None and not self.unknown and not self.inexact

    def usage_json(self) -> dict[str, Any]:
        """`usage`: the tokens (null when no row had counts), the models, and
        whether the counts are complete."""
        known = self.tokens_known
        counts = {k: (n if known else None) for k, n in zip(KINDS, self.tokens, strict=True)}
        return {**counts, "models": sorted(self.models), "exact": self.tokens_exact}

    def cost_json(self) -> dict[str, Any]:
        """`cost`: {amount, currency, source, exact}; `estimated` and
        `reported` say how much of the amount is which (for `mixed`)."""
        return {
            "amount": _round(self.amount),
            "currency": CURRENCY,
            "source": self.source,
            "exact": self.exact,
            "reported": _round(self.reported) if self.n_reported else None,
            "estimated": _round(self.estimated) if self.n_estimated else None,
        }

    def cost_text(self) -> str:
        """`$1.23`, an estimate `~$0.40`, both `$1.23 + ~$0.40` (never one
        silent sum), a floor `≥$1.23`, nothing known `?`."""
        if self.amount is None:
            return UNKNOWN
        parts = []
        if self.n_reported:
            parts.append(money(self.reported))
        if self.n_estimated:
            parts.append(ESTIMATE + money(self.estimated))
        text = " + ".join(parts)
        return text if self.exact else FLOOR + text

    def tokens_text(self, kind: str) -> str:
        """One kind's count, compact (`29.3k`), `≥` when the counts may be short."""
        if not self.tokens_known:
            return UNKNOWN
        text = count_text(self.tokens[KINDS.index(kind)])
        return text if self.tokens_exact else FLOOR + text

    def cache_text(self) -> str:
        """Cache reads and writes as `READ/WRITE`."""
        if not self.tokens_known:
            return UNKNOWN
        text = f"{count_text(self.tokens[2])}/{count_text(self.tokens[3])}"
        return text if self.tokens_exact else FLOOR + text

    def line(self) -> str:
        """`~$0.40 · 29.3k in, 6 out, cache 0/0` for `spex show` and the wave views."""
        if not self.rows:
            return "-"
        if not self.tokens_known:
            return f"{self.cost_text()} · tokens unknown"
        return (
            f"{self.cost_text()} · {self.tokens_text('input')} in,"
            f" {self.tokens_text('output')} out, cache {self.cache_text()}"
        )

    def as_json(self) -> dict[str, Any]:
        return {"turns": self.turns, "usage": self.usage_json(), "cost": self.cost_json()}


def _round(amount: float | None) -> float | None:
    return None if amount is None else round(amount, 8)


# The one rule for an amount of money a user gives (`--budget`, `budget_day`).
MAX_AMOUNT = 1_000_000
AMOUNT_RULE = (
    "an amount of US dollars, a finite number from 0.01 to 1000000 at cents' precision"
    " (what rounds to $0.00 is none), such as 5, 2.50 or $2.50"
)


def amount(value: object) -> float | None:
    """An amount of money as a user gives it, on the command line (`5`,
    `2.50`, `$2.50`, `1,000`) or in config.toml (a number); None unless it
    keeps AMOUNT_RULE: not 0, negative, infinite or NaN, nor so small that
    it rounds to $0.00 at cents (0.001, 1e-320), nor past MAX_AMOUNT."""
    if isinstance(value, str):
        try:
            number = float(value.strip().removeprefix("$").replace(",", ""))
        except ValueError:
            return None
    elif isinstance(value, bool) or not isinstance(value, int | float):
        return None
    else:
        number = value
    # Half a cent rounds up to one; NaN and the infinities fail the comparison.
    return float(number) if 0.005 <= number <= MAX_AMOUNT else None


def money(amount: float) -> str:
    """`$1.23`; under a cent with four decimals (`$0.0042`): a small cost never reads $0.00."""
    if 0 < amount < 0.01:
        return f"${amount:.4f}"
    return f"${amount:,.2f}"


def count_text(n: int) -> str:
    """`812`, `29.3k`, `1.25M`, `3.1B`."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            value = n / size
            return f"{value:.3g}{unit}" if value < 1000 else f"{value:.0f}{unit}"
    return str(n)


# --- reading the usage table ------------------------------------------------------

# Each row's numbers as the sums read them: a row holding a count that is no
# usage (an infinity, a negative or absurd number: an older spex wrote them)
# has its counts unknown, one holding such a cost its cost, as `meter` leaves
# them now. Never a conversion of such a number.
_TOKENS_SOUND = " AND ".join(f"{k} BETWEEN 0 AND {MAX_TOKENS}" for k in KINDS)
_SOUND = ", ".join(
    [
        *(f"CASE WHEN {_TOKENS_SOUND} THEN {k} END AS {k}" for k in KINDS),
        f"CASE WHEN cost BETWEEN 0 AND {MAX_COST:.0f} THEN cost END AS cost",
        f"CASE WHEN {_TOKENS_SOUND} THEN exact ELSE 0 END AS exact",
    ]
)

_SUMS = (
    "sum(turn_first), sum(model_first),"
    " count(*), sum(input), sum(output), sum(cache_read), sum(cache_write),"
    " sum(cost), count(cost),"
    " sum(CASE WHEN cost IS NULL THEN input END), sum(CASE WHEN cost IS NULL THEN output END),"
    " sum(CASE WHEN cost IS NULL THEN cache_read END),"
    " sum(CASE WHEN cost IS NULL THEN cache_write END),"
    " sum(cost IS NULL AND input IS NOT NULL), sum(input IS NULL), sum(exact = 0)"
)


def _fold(
    spend: Spend, model: str | None, row: Sequence[Any], pricing: Pricing, by_model: bool
) -> None:
    """Add one (group, model) line of the aggregate query into `spend`; the
    estimate is made here, per model, from the tokens whose cost no CLI reported."""
    leads, firsts, n, i, o, cr, cw, rep, n_rep, ei, eo, ecr, ecw, n_est, n_none, n_inexact = (
        v or 0 for v in row
    )
    spend.rows += n
    spend.leads += int(leads or 0)
    spend.turns += int((firsts if by_model else leads) or 0)
    if n > n_none:
        spend.tokens_known = True
        for k, value in enumerate((i, o, cr, cw)):
            spend.tokens[k] += int(value or 0)
    spend.inexact += int(n_inexact or 0)
    spend.unknown += int(n_none or 0)
    if n_rep:
        spend.reported += float(rep or 0.0)
        spend.n_reported += n_rep
    if n_est:
        price = pricing.get(model) if model else None
        counts = [int(v or 0) for v in (ei, eo, ecr, ecw)]
        estimate = price.estimate(counts) if price is not None else None
        if estimate is None:
            spend.unknown += n_est
        else:
            spend.estimated += estimate
            spend.n_estimated += n_est
    if model:
        spend.models.add(model)


def totals(
    db: sqlite3.Connection,
    by: str | None,
    pricing: Pricing,
    *,
    where: str = "",
    params: Sequence[Any] = (),
    scan: bool = False,
) -> dict[str, Spend]:
    """The usage rows (those `where` selects) summed per group of `by` (a
    key of GROUPS; None: one group, ""), in SQL: one GROUP BY (group, model),
    the turns counted by the rows that are a turn's first (`turn_first`, and
    `model_first` per model), never `count(DISTINCT …)`. For the few rows of
    a turn, session or wave (indexed); `summary` sums the whole table.
    `scan`: read the table in its order, not by an index. Groups in key order."""
    key = GROUPS[by] if by is not None else "''"
    clause = f" WHERE {where}" if where else ""
    source = "usage NOT INDEXED" if scan else "usage"
    out: dict[str, Spend] = {}
    rows = db.execute(
        f"SELECT k, model, {_SUMS} FROM (SELECT {key} AS k, model, turn_first, model_first,"
        f" {_SOUND} FROM {source}{clause}) GROUP BY k, model ORDER BY k",
        tuple(params),
    )
    for row in rows:
        spend = out.get(row[0])
        if spend is None:
            spend = out[row[0]] = Spend()
        _fold(spend, row[1], tuple(row)[2:], pricing, by == "model")
    return out


# `spex cost --by` over `usage_days` (a NULL is '' there).
DAY_GROUPS: dict[str, str] = {
    "session": "session",
    "harness": "coalesce(nullif(harness, ''), '-')",
    "model": "coalesce(nullif(model, ''), '-')",
    "day": "day",
    "wave": "coalesce(nullif(wave, ''), '-')",
}
# `usage_days` sums rows: a sum past `rows` times a bound holds one that was no
# usage; its tokens are then unknown, or its cost (and what it priced).
_DAY_TOKENS_SOUND = " AND ".join(f"{k} BETWEEN 0 AND rows * {MAX_TOKENS}" for k in KINDS)
_DAY_COST_SOUND = f"cost BETWEEN 0 AND rows * {MAX_COST:.0f}"
_DAY_SOUND = ", ".join(
    [
        "turns, model_turns, rows",
        f"CASE WHEN {_DAY_TOKENS_SOUND} THEN exact ELSE 0 END AS exact",
        f"CASE WHEN {_DAY_TOKENS_SOUND} THEN known ELSE 0 END AS known",
        f"CASE WHEN {_DAY_COST_SOUND} THEN priced ELSE 0 END AS priced",
        *(f"CASE WHEN {_DAY_TOKENS_SOUND} THEN {k} ELSE 0 END AS {k}" for k in KINDS),
        f"CASE WHEN {_DAY_COST_SOUND} THEN cost ELSE 0 END AS cost",
    ]
)
_DAY_SUMS = (
    "sum(turns), sum(model_turns), sum(rows), sum(input), sum(output), sum(cache_read),"
    " sum(cache_write), sum(CASE WHEN priced THEN cost END), sum(CASE WHEN priced THEN rows END),"
    " sum(CASE WHEN NOT priced THEN input END), sum(CASE WHEN NOT priced THEN output END),"
    " sum(CASE WHEN NOT priced THEN cache_read END),"
    " sum(CASE WHEN NOT priced THEN cache_write END),"
    " sum(CASE WHEN NOT priced AND known THEN rows END), sum(CASE WHEN NOT known THEN rows END),"
    " sum(CASE WHEN NOT exact THEN rows END)"
)


def local_day(epoch: float) -> str:
    """`2026-12-02`: the local date `usage_days` files a row under."""
    return time.strftime("%Y-%m-%d", time.localtime(epoch))


def next_midnight(epoch: float) -> float:
    """The local midnight that ends `epoch`'s day."""
    t = time.localtime(epoch)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday + 1, 0, 0, 0, 0, 0, -1))


def day_start(epoch: float) -> float:
    """The local midnight that starts `epoch`'s day."""
    t = time.localtime(epoch)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, -1))


def summary(
    db: sqlite3.Connection, by: str, pricing: Pricing, *, since: float | None = None
) -> dict[str, Spend]:
    """`spex cost`: the sums per group of `by` (a key of DAY_GROUPS) from
    `usage_days`, a few rows per session and day, never the 100 000 usage
    rows; with `since` (epoch), the days after its own from `usage_days`
    and its own day's rows from `at` on (indexed by `at`). Groups in key order."""
    key = DAY_GROUPS[by]
    where = ""
    params: tuple[str, ...] = ()
    out: dict[str, Spend] = {}
    if since is not None:
        where, params = " WHERE day > ?", (local_day(since),)
        edge = "at >= ? AND at < ?"
        out = totals(db, by, pricing, where=edge, params=(since, next_midnight(since)))
    rows = db.execute(
        f"SELECT k, m, {_DAY_SUMS} FROM (SELECT {key} AS k, nullif(model, '') AS m,"
        f" {_DAY_SOUND} FROM usage_days{where})"
        " GROUP BY k, m",
        params,
    )
    for row in rows:
        spend = out.get(row[0])
        if spend is None:
            spend = out[row[0]] = Spend()
        _fold(spend, row[1], tuple(row)[2:], pricing, by == "model")
    return dict(sorted(out.items()))


def total(
    db: sqlite3.Connection, pricing: Pricing, *, where: str = "", params: Sequence[Any] = ()
) -> Spend:
    """One sum of the rows `where` selects (an empty Spend when there are none)."""
    return totals(db, None, pricing, where=where, params=params).get("", Spend())


def wave_spend(
    db: sqlite3.Connection, wave: str, pricing: Pricing, legs: Iterable[Mapping[str, Any]] = ()
) -> tuple[dict[str, Spend], Spend]:
    """A wave's spend per leg (its session: every turn and attempt it ran in
    the wave) and in all, from the rows that name the wave (one indexed sum).
    A leg of `legs` that launched a turn and has no row yet (still running,
    or ended unheard) makes the total a floor; one whose turn never ran
    (`skipped`) or whose harness reports no usage spent nothing known."""
    per = totals(db, "session", pricing, where="wave = ?", params=(wave,))
    whole = grand(per.values())
    for leg in legs:
        # A turn that ended with its report recorded its usage with its end;
        # one without a row then reports none (command, demo): nothing was
        # expected, nothing is unknown. One still running, or ended unheard
        # (lost, interrupted) or cut short (aborted, timed-out), may have
        # spent what no row says.
        pending = ("starting", "running", "lost", "interrupted", "aborted", "timed-out", None)
        ran = leg.get("turn") and leg.get("turn_state") in pending
        if ran and leg.get("session") not in per:
            whole.rows += 1
            whole.unknown += 1
    return per, whole


def grand(spends: Iterable[Spend]) -> Spend:
    """The sum of several sums (a table's TOTAL; a fleet wave's hosts); its
    turns each once, whatever the grouping was."""
    out = Spend()
    for s in spends:
        out.add(s)
    out.turns = out.leads
    return out


def from_json(doc: Mapping[str, Any] | None) -> Spend:
    """A Spend back from its `as_json` (another host's wave), for a fleet's
    total: the parts keep their sources; an absent one is unknown."""
    spend = Spend()
    if not isinstance(doc, Mapping):
        spend.rows = spend.unknown = 1
        return spend
    usage, cost = doc.get("usage") or {}, doc.get("cost") or {}
    spend.rows = 1
    spend.turns = spend.leads = int(doc.get("turns") or 0)
    counts = [usage.get(k) for k in KINDS]
    if any(isinstance(c, int) for c in counts):
        spend.tokens_known = True
        spend.tokens = [int(c or 0) for c in counts]
    spend.models = {str(m) for m in usage.get("models") or ()}
    if not usage.get("exact", False):
        spend.inexact = 1
    if isinstance(cost.get("reported"), int | float):
        spend.reported, spend.n_reported = float(cost["reported"]), 1
    if isinstance(cost.get("estimated"), int | float):
        spend.estimated, spend.n_estimated = float(cost["estimated"]), 1
    if not cost.get("exact", False):
        spend.unknown = 1
    return spend
