"""Usage and cost (issue 26): each CLI's usage recorded per turn and per
attempt, estimates from `[pricing]`, the sum rules (mixed, floors, unknown
is never $0) and `spex cost`, against the fakes under tests/fakes/, which
print usage in the real CLIs' formats (tests/fixtures/real)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Env, retry_until
from test_turns import show, wake_json

from spexsup import usage
from spexsup.adapters import outcome
from spexsup.pane import marker, turndir
from spexsup.state import ledger

REAL = Path(__file__).parent / "fixtures" / "real"
ONLINE = {
    "claude": {"FAKE_CLAUDE_LOGGED_IN": "1"},
    "codex": {"FAKE_CODEX_ONLINE": "1"},
    "opencode": {"FAKE_OPENCODE_ONLINE": "1", "FAKE_OPENCODE_STORE": "sqlite"},
    "pi": {"FAKE_PI_ONLINE": "1"},
}
PRICES = """
[pricing."gpt-5.5"]
input = 1.25
output = 10
cache_read = 0.125

[pricing."fake-model"]
input = 2
output = 8
"""


def new(env: Env, name: str, cli: str, **env_vars: str) -> None:
    (env.root / ".git").mkdir(exist_ok=True)  # codex wants a git directory
    args = ["new", name, "--harness", cli, "--cwd", str(env.root)]
    for key, value in {**ONLINE[cli], **env_vars}.items():
        args += ["--env", f"{key}={value}"]
    r = env.run(*args)
    assert r.returncode == 0, r.stderr


def turn(env: Env, name: str, prompt: str = "go", *extra: str) -> dict[str, Any]:
    _, v = wake_json(env, name, prompt, "--window", "20", *extra)
    assert v["verdict"] in ("completed", "confirmed", "failed"), v
    env.run("wait", name, "--timeout", "60")
    return v


def rows(env: Env, where: str = "1", params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    db = sqlite3.connect(env.home / "state.db")
    db.row_factory = sqlite3.Row
    try:
        found = db.execute(f"SELECT * FROM usage WHERE {where} ORDER BY id", params).fetchall()
    finally:
        db.close()
    return [dict(r) for r in found]


def cost(env: Env, *args: str) -> dict[str, Any]:
    r = env.run("cost", *args, "--json")
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def shift(env: Env, seconds: float, where: str = "1") -> None:
    """Move usage rows back in time (and the days that sum them)."""
    db = sqlite3.connect(env.home / "state.db")
    with db:
        db.execute(f"UPDATE usage SET at = at - ? WHERE {where}", (seconds,))
        ledger.rebuild_usage_days(db)
    db.close()


def prices(env: Env, text: str = PRICES) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text(text)


# --- the real CLIs' formats -------------------------------------------------------


@pytest.mark.parametrize(
    ("cli", "name", "parts", "exact"),
    [
        ("claude", "answer", {("claude-sonnet-4-5", True): [29343, 6, 0, 0, 0.088119]}, True),
        # A run that failed before any model call: $0 reported for 0 tokens.
        ("claude", "http500", {(None, True): [0, 0, 0, 0, 0.0]}, True),
        ("claude", "sigterm", {}, False),  # killed before its result: unknown
        # codex's totals run over the conversation (the resumed turn's include the first's).
        ("codex", "resume", {(None, False): [19379, 6, 0, 0, 0.0]}, True),
        ("codex", "http500", {}, False),
        # Two steps, summed; opencode's cost 0 for a model it has no price for: unknown.
        ("opencode", "tool-write", {(None, False): [15647, 2, 0, 0, 0.0]}, True),
        ("pi", "tool-write", {("fake-model", False): [2979, 2, 0, 0, 0.0]}, True),
        # Cut short (no agent_end): the messages that ended, short of exact.
        ("pi", "sigterm-tool", {("fake-model", False): [1434, 1, 0, 0, 0.0]}, False),
    ],
)
def test_each_real_format_is_read(
    cli: str, name: str, parts: dict[tuple[str | None, bool], list[float]], exact: bool
) -> None:
    found = outcome.read(REAL / cli / f"{name}.out", cli)
    assert found.spent.parts == parts
    assert found.spent.exact is exact
    assert found.spent.running is (cli == "codex" and bool(parts))


def test_codex_counts_are_normalised_to_exclude_the_cache(tmp_path: Path) -> None:
    """OpenAI's (and codex's) `input_tokens` include the cached ones, which it
    reports again as `cached_input_tokens`; Anthropic's exclude them."""
    out = tmp_path / "output.log"
    usage_ = {
        "input_tokens": 1000,
        "cached_input_tokens": 600,
        "cache_write_input_tokens": 100,
        "output_tokens": 50,
        "reasoning_output_tokens": 20,
    }
    out.write_text(json.dumps({"type": "turn.completed", "usage": usage_}) + "\n")
    assert outcome.read(out, "codex").spent.parts == {(None, False): [300, 50, 600, 100, 0.0]}
    step = {"tokens": {"input": 10, "output": 5, "reasoning": 7, "cache": {"read": 3, "write": 1}}}
    out.write_text(
        json.dumps({"type": "step_start", "part": {}})
        + "\n"
        + json.dumps({"type": "step_finish", "part": {**step, "cost": 0.01}})
        + "\n"
        + json.dumps({"type": "step_start", "part": {}})
        + "\n"
    )
    found = outcome.read(out, "opencode").spent
    # Reasoning is output (opencode prints it apart); a step that never finished: not exact.
    assert found.parts == {(None, True): [10, 12, 3, 1, 0.01]} and not found.exact


def test_the_sum_rules() -> None:
    price = usage.Price(input=3, output=15, cache_read=0.3)
    assert price.estimate([1_000_000, 0, 0, 0]) == 3
    assert price.estimate([0, 0, 0, 10]) is None  # cache writes used, no price
    empty = usage.Spend()
    assert empty.amount is None and empty.source == "unknown" and not empty.exact
    assert empty.cost_text() == "?"
    reported = usage.from_json(
        {"usage": {"input": 10, "output": 1}, "cost": {"reported": 1.5, "exact": True}}
    )
    reported.inexact = reported.unknown = 0
    estimated = usage.from_json(
        {"usage": {"input": 5, "output": 1}, "cost": {"estimated": 0.25, "exact": True}}
    )
    estimated.inexact = estimated.unknown = 0
    both = usage.grand([reported, estimated])
    assert both.source == "mixed" and both.amount == 1.75 and both.exact
    assert both.tokens == [15, 2, 0, 0]
    assert both.cost_text() == "$1.50 + ~$0.25"
    floor = usage.grand([both, usage.from_json(None)])
    assert not floor.exact and floor.amount == 1.75 and floor.cost_text() == "≥$1.50 + ~$0.25"
    assert usage.money(0.0042) == "$0.0042" and usage.count_text(29343) == "29.3k"


# --- recorded per turn --------------------------------------------------------------


def test_claude_records_its_reported_cost_per_model(env: Env) -> None:
    new(env, "c", "claude")
    turn(env, "c")
    (row,) = rows(env)
    assert row["harness"] == "claude" and row["model"] == "claude-sonnet-4-5"
    assert (row["input"], row["output"], row["cache_read"], row["cache_write"]) == (29343, 6, 0, 0)
    assert row["cost"] == pytest.approx(0.088119) and row["exact"] == 1 and row["attempt"] == 1
    t = show(env, "c")["turns"][0]
    assert t["usage"] == {
        "input": 29343,
        "output": 6,
        "cache_read": 0,
        "cache_write": 0,
        "models": ["claude-sonnet-4-5"],
        "exact": True,
    }
    assert t["cost"]["amount"] == pytest.approx(0.088119)
    assert (t["cost"]["currency"], t["cost"]["source"], t["cost"]["exact"]) == (
        "USD",
        "reported",
        True,
    )
    text = env.run("show", "c").stdout
    assert "last turn    $0.09 · 29.3k in, 6 out, cache 0/0" in text, text
    assert "spent        $0.09 · 29.3k in, 6 out, cache 0/0 (1 turn)" in text, text


@pytest.mark.parametrize("cli", ["codex", "opencode", "pi"])
def test_tokens_with_no_cost_are_unknown_until_priced(env: Env, cli: str) -> None:
    """codex reports no cost; opencode and pi report 0 for a model they have no
    price for, which is no reported $0: unknown, then estimated from [pricing]."""
    new(env, "s", cli)
    turn(env, "s")
    (row,) = rows(env)
    model = "gpt-5.5" if cli == "codex" else "fake-model"
    assert row["model"] == model and row["cost"] is None and row["exact"] == 1
    assert row["input"] > 0 and row["output"] > 0
    doc = cost(env)
    assert doc["total"]["cost"] == {
        "amount": None,
        "currency": "USD",
        "source": "unknown",
        "exact": False,
        "reported": None,
        "estimated": None,
    }
    assert env.run("cost").stdout.splitlines()[1].split()[-1] == "?"
    # Priced now: the same rows are estimated at read time.
    prices(env)
    price = usage.Price(1.25, 10, 0.125) if cli == "codex" else usage.Price(2, 8)
    expected = price.estimate([row["input"], row["output"], row["cache_read"], row["cache_write"]])
    assert expected is not None
    spent = cost(env)["total"]["cost"]
    assert spent["source"] == "estimated" and spent["exact"] is True
    assert spent["amount"] == pytest.approx(expected)
    assert env.run("cost").stdout.splitlines()[1].split()[-1] == "~" + usage.money(expected)


def test_a_codex_resume_records_its_own_share_of_the_running_total(env: Env) -> None:
    new(env, "x", "codex", FAKE_USAGE='{"input": 100, "output": 10, "cache_read": 50}')
    turn(env, "x")
    assert show(env, "x")["harness_session_id"]
    new(env, "y", "codex", FAKE_USAGE='{"input": 7, "output": 1}')
    turn(env, "x", "again")
    found = rows(env, "session = 'x'")
    assert [(r["input"], r["output"], r["cache_read"]) for r in found] == [
        (100, 10, 50),
        (100, 10, 50),
    ]
    assert json.loads(found[1]["running"]) == [200, 20, 100, 0]
    # The second turn's exit reporter may still be on its way when a reader
    # (the wake, the wait) recorded the end and its usage: a late report
    # finds the rows deleted below and writes its own again. Its wrapper's
    # `exit:` marker comes only after the reporter returned.
    again = turndir.path(env.home, "x", show(env, "x")["turn"]["id"])
    assert retry_until(lambda: marker.read(again).stage is marker.Stage.EXIT, 30)
    # A conversation resumed whose earlier total was never recorded: unknown.
    db = sqlite3.connect(env.home / "state.db")
    with db:
        db.execute("DELETE FROM usage")
        ledger.rebuild_usage_days(db)
    db.close()
    turn(env, "x", "third")
    found = rows(env)
    assert len(found) == 1, found
    (last,) = found
    assert last["input"] is None and last["exact"] == 0
    assert cost(env)["total"]["cost"]["exact"] is False


def test_a_mixed_sum_and_a_floor(env: Env) -> None:
    prices(env)
    new(env, "c", "claude")
    new(env, "x", "codex")
    turn(env, "c")
    turn(env, "x")
    spent = cost(env)["total"]
    assert spent["cost"]["source"] == "mixed" and spent["cost"]["exact"] is True
    codex = usage.Price(1.25, 10, 0.125).estimate([9642, 6, 0, 0])
    assert codex is not None
    assert spent["cost"]["estimated"] == pytest.approx(codex)
    assert spent["cost"]["amount"] == pytest.approx(0.088119 + codex)
    assert spent["usage"]["models"] == ["claude-sonnet-4-5", "gpt-5.5"]
    text = env.run("cost").stdout
    assert f"$0.09 + ~{usage.money(codex)}" in text.splitlines()[3], text
    assert "~ estimated from [pricing" in text
    # A turn that printed no usage at all (no result event): the total is a floor.
    turn(env, "c", "go [silent]")
    assert rows(env)[-1]["input"] is None
    spent = cost(env)["total"]
    assert spent["cost"]["exact"] is False and spent["turns"] == 3
    assert spent["cost"]["amount"] == pytest.approx(0.088119 + codex)
    lines = env.run("cost").stdout.splitlines()
    assert lines[3].startswith("TOTAL") and lines[3].endswith(f"≥$0.09 + ~{usage.money(codex)}")
    assert lines[-1].startswith("≥ a floor")
    assert env.run("show", "c").stdout.count("?") >= 1


def test_a_model_with_no_price_leaves_its_part_unknown(env: Env) -> None:
    prices(env, '[pricing."gpt-5.5"]\ninput = 1\noutput = 1\n')
    new(env, "x", "codex", FAKE_USAGE='{"input": 10, "output": 1, "cache_read": 5}')
    turn(env, "x")
    # cache reads used, no cache_read price: no estimate, not $0.
    assert cost(env)["total"]["cost"]["amount"] is None


def test_every_attempt_counts_and_the_wave_sums_them(env: Env) -> None:
    """A usage-limit wait in the pane runs the harness again: each run is an
    attempt with its own row, and the wave's total holds every leg's every attempt."""
    prices(env, "limit_margin = 1\n")
    new(env, "a", "claude", FAKE_LIMIT_SECONDS="2")
    new(env, "b", "claude", FAKE_LIMIT_SECONDS="2", FAKE_USAGE='{"cost": 0.5, "model": "opus"}')
    r = env.run(
        "fanout", "a", "b", "-m", "go [limit]", "--on-limit", "wait:1h", "--window", "20", "--wait"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("a", "b"):
        attempts = rows(env, "session = ?", (name,))
        assert [(x["attempt"], x["cause"]) for x in attempts] == [(1, "usage-limit"), (2, None)]
    wave = json.loads(env.run("wave", "last", "--json").stdout)
    legs = {leg["session"]: leg for leg in wave["legs"]}
    assert legs["a"]["cost"]["amount"] == pytest.approx(2 * 0.088119)
    assert legs["b"]["cost"]["amount"] == pytest.approx(2 * 0.5)
    assert legs["b"]["usage"]["models"] == ["opus"]
    assert wave["cost"]["amount"] == pytest.approx(2 * 0.088119 + 1.0)
    assert wave["cost"]["exact"] is True and wave["usage"]["input"] == 4 * 29343
    assert wave["usage"]["models"] == ["claude-sonnet-4-5", "opus"]
    summary = r.stdout.splitlines()[-1]
    assert summary.endswith("· cost $1.18 · 117k in, 24 out, cache 0/0"), r.stdout
    # Through a pipe, each leg's line as it ends says its cost.
    ended = {line.split(":")[0].strip(): line for line in r.stdout.splitlines() if "ended" in line}
    assert ended["a"].endswith(" · $0.18") and ended["b"].endswith(" · $1.00"), r.stdout
    text = env.run("wave", "last").stdout
    assert "· $0.18" in text and "· $1.00" in text, text
    by_wave = cost(env, "--by", "wave")["groups"]
    assert [g["key"] for g in by_wave] == [wave["id"]]
    assert by_wave[0]["cost"]["amount"] == pytest.approx(2 * 0.088119 + 1.0)
    assert by_wave[0]["turns"] == 2


def test_a_stopped_turn_keeps_what_it_spent(env: Env) -> None:
    """The stop records the end first; the turn's own reporter still records
    its usage (here none printed: unknown, a floor)."""
    new(env, "c", "claude")
    code, v = wake_json(env, "c", "go [sleep 30]", "--window", "1")
    assert code == 0, v
    assert env.run("stop", "c").returncode == 0
    assert retry_until(lambda: bool(rows(env)), 15)
    (row,) = rows(env)
    assert row["turn"] == v["turn"] and row["input"] is None and row["exact"] == 0


def test_cost_groups_and_since(env: Env) -> None:
    prices(env)
    new(env, "c", "claude")
    new(env, "p", "pi")
    turn(env, "c")
    turn(env, "c", "again")
    turn(env, "p")
    by_session = {g["key"]: g for g in cost(env)["groups"]}
    assert set(by_session) == {"c", "p"} and by_session["c"]["turns"] == 2
    assert by_session["c"]["cost"]["amount"] == pytest.approx(2 * 0.088119)
    assert by_session["p"]["cost"]["source"] == "estimated"
    assert [g["key"] for g in cost(env, "--by", "harness")["groups"]] == ["claude", "pi"]
    models = [g["key"] for g in cost(env, "--by", "model")["groups"]]
    assert models == ["claude-sonnet-4-5", "fake-model"]
    days = cost(env, "--by", "day")["groups"]
    assert [g["key"] for g in days] == [time.strftime("%Y-%m-%d")]
    assert days[0]["turns"] == 3
    text = env.run("cost", "--by", "harness").stdout.splitlines()
    assert text[0].split() == ["HARNESS", "TURNS", "INPUT", "OUTPUT", "CACHE", "R/W", "COST"]
    assert text[-2].split()[0] == "TOTAL" or text[-1].split()[0] == "TOTAL", text
    # The days' sums that `spex cost` reads agree with the rows, every grouping.
    pricing = {"gpt-5.5": usage.Price(1.25, 10, 0.125), "fake-model": usage.Price(2, 8)}
    db = sqlite3.connect(env.home / "state.db")
    for by in usage.DAY_GROUPS:
        summed = {k: v.as_json() for k, v in usage.summary(db, by, pricing).items()}
        assert summed == {k: v.as_json() for k, v in usage.totals(db, by, pricing).items()}, by
    db.close()
    # Older rows fall outside --since.
    shift(env, 3 * 86400, "session = 'c'")
    recent = cost(env, "--since", "2d")
    assert [g["key"] for g in recent["groups"]] == ["p"] and recent["total"]["turns"] == 1
    assert recent["since"] == pytest.approx(time.time() - 2 * 86400, abs=30)
    assert cost(env, "--since", "1w")["total"]["turns"] == 3
    shift(env, 60)
    assert env.run("cost", "--since", "30s").stdout.strip() == "no usage recorded in the last 30s"


def test_usage_outlives_rm_and_retention_prunes_it_by_age(env: Env) -> None:
    new(env, "c", "claude")
    turn(env, "c")
    assert env.run("rm", "c").returncode == 0
    assert cost(env)["total"]["turns"] == 1  # cost history outlives spex rm
    # A new session of the same name starts its own total.
    new(env, "c", "claude")
    assert show(env, "c")["cost"]["amount"] is None
    shift(env, 100 * 86400)
    r = env.run("prune", "--json")
    assert json.loads(r.stdout)["usage"] == 1, r.stdout
    assert rows(env) == [] and cost(env)["groups"] == []


def test_top_shows_each_sessions_cost(env: Env) -> None:
    new(env, "c", "claude")
    new(env, "idle", "claude")
    turn(env, "c")
    lines = env.run("top").stdout.splitlines()
    at = lines[0].index("COST")
    cells = {line.split()[0]: line[at:].split()[0] for line in lines[1:]}
    assert cells == {"c": "$0.09", "idle": "-"}
    doc = {d["name"]: d for d in json.loads(env.run("top", "--json").stdout)}
    assert doc["c"]["cost"]["amount"] == pytest.approx(0.088119) and doc["idle"]["cost"] is None


# --- numbers that are not usage (issue 36) -------------------------------------------


def lives_on(env: Env, name: str) -> None:
    """Every reader and writer of the home still works: ls, show, top, cost,
    then stop and rm."""
    for args in (("ls",), ("show", name), ("top", "--json"), ("cost", "--json")):
        r = env.run(*args)
        assert r.returncode == 0 and "internal error" not in r.stderr, (args, r.stderr)
    for args in (("stop", name), ("rm", name)):
        r = env.run(*args)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    assert env.run("ls", "--json").stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("cli", "printed", "field"),
    [
        # claude prints its usage twice, `usage` and `modelUsage`: the model's is read.
        ("claude", {"input": "raw:1e999"}, "modelUsage.inputTokens"),
        ("claude", {"input": "raw:Infinity"}, "modelUsage.inputTokens"),
        ("claude", {"output": "raw:NaN"}, "modelUsage.outputTokens"),
        ("claude", {"cache_read": "raw:-5"}, "modelUsage.cacheReadInputTokens"),
        ("claude", {"input": "raw:1000000000000001"}, "modelUsage.inputTokens"),  # past 10^15
        ("claude", {"cost": "raw:1e999"}, "modelUsage.costUSD"),
        ("claude", {"cost": "raw:-0.5"}, "modelUsage.costUSD"),
        ("claude", {"cost": "raw:2000000000"}, "modelUsage.costUSD"),  # past $10^9
        # These fakes print a float as Python does: `Infinity`, `1e+16`, `NaN`.
        ("codex", {"input": float("inf")}, "usage.input_tokens"),
        ("opencode", {"output": 1e16}, "tokens.output"),
        ("pi", {"cost": float("nan")}, "usage.cost.total"),
    ],
)
def test_a_number_that_is_no_usage_is_unknown_and_named(
    env: Env, cli: str, printed: dict[str, object], field: str
) -> None:
    """A CLI's usage line holding an infinite, NaN, negative or absurd number:
    the turn ends with its verdict, that count (or cost) is unknown, never 0
    nor the number, a flag names the field, and the home lives on."""
    new(env, "s", cli, FAKE_USAGE=json.dumps(printed))
    v = turn(env, "s")
    assert v["verdict"] in ("completed", "confirmed"), v
    r = env.run("wait", "s", "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    t = show(env, "s")["turns"][0]
    assert t["state"] == "complete" and f"bad-usage:{field}" in t["flags"], t
    bad_cost = "cost" in printed
    if bad_cost:
        assert t["cost"]["amount"] is None and t["cost"]["source"] == "unknown", t["cost"]
        assert t["usage"]["input"] is not None and t["usage"]["exact"] is True, t
    else:
        assert t["usage"]["input"] is None and t["usage"]["exact"] is False, t["usage"]
        assert t["cost"]["exact"] is False, t["cost"]
    text = env.run("show", "s").stdout
    assert f"({field} was no usage number: unknown)" in text, text
    assert f"bad-usage:{field}" in env.run("ls").stdout
    lives_on(env, "s")


def test_usage_rows_an_older_spex_wrote_with_no_usage_in_them(env: Env) -> None:
    """Rows holding an infinity, a negative or an absurd number (an older
    spex wrote them): they read as unknown, and the home lists, stops and
    removes as ever."""
    new(env, "c", "claude")
    turn(env, "c")
    (row,) = rows(env)
    db = sqlite3.connect(env.home / "state.db")
    with db:
        bad = [(1e999, 6, 0, 0, 0.05), (-7, 6, 0, 0, float("inf")), (10**16, 1, 0, 0, -1.0)]
        for attempt, (i, o, cr, cw, spent) in enumerate(bad, start=2):
            db.execute(
                "INSERT INTO usage (turn, attempt, session, harness, model, input, output,"
                " cache_read, cache_write, cost, exact, at) VALUES (?, ?, 'c', 'claude',"
                " 'claude-sonnet-4-5', ?, ?, ?, ?, ?, 1, ?)",
                (row["turn"], attempt, i, o, cr, cw, spent, time.time()),
            )
        ledger.rebuild_usage_days(db)
    db.close()
    t = show(env, "c")["turns"][0]
    # The sound row's cost and the first bad row's stand; the counts are a floor.
    assert t["cost"]["amount"] == pytest.approx(0.088119 + 0.05), t["cost"]
    assert t["cost"]["exact"] is False and t["usage"]["exact"] is False, t
    assert t["usage"]["input"] == 29343, t["usage"]
    assert "≥$0.14 · ≥29.3k in" in env.run("show", "c").stdout
    # The day's sums hold them all (as an older spex added them up): unknown.
    total = cost(env)["total"]
    assert total["turns"] == 1 and total["usage"]["input"] is None, total
    assert total["cost"]["amount"] is None and total["cost"]["source"] == "unknown", total
    lives_on(env, "c")


# --- bad input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--by", "week"),
            "spex: invalid --by 'week' (one of: session, harness, model, day, wave)",
        ),
        (("--since", "soon"), "spex: invalid --since 'soon' (a duration: 90s, 15m, 2h, 1h30m)"),
        (("--since", "0"), "spex: invalid --since '0' (a duration more than 0)"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(env: Env, args: tuple[str, ...], message: str) -> None:
    r = env.run("cost", *args)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.splitlines() == [message], r.stderr
    r = env.run("cost", *args, "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["exit_code"] == 2


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('[pricing."m"]\ninput = -1\noutput = 2\n', 2, "field 'pricing.\"m\".input' must be"),
        ('[pricing."m"]\ninput = 1\n', 1, '[pricing."m"] needs output'),
        ('[pricing."m"]\ninput = "cheap"\noutput = 1\n', 2, "a number of USD per million"),
        ("pricing = 3\n", 1, "field 'pricing' must be tables"),
        ("[pricing]\nm = 1\n", 2, "field 'pricing.\"m\"' must be a table"),
    ],
)
def test_a_bad_pricing_table_is_named_with_its_line(
    env: Env, text: str, line: int, message: str
) -> None:
    new(env, "c", "claude")
    prices(env, text)
    path = env.home / "config.toml"
    for args in (("cost",), ("show", "c"), ("wake", "c", "go")):
        r = env.run(*args)
        assert r.returncode == 1, (args, r.stdout)
        assert r.stderr.startswith(f"spex: {path}:{line}: ") and message in r.stderr, r.stderr
        assert len(r.stderr.splitlines()) == 1
    path.unlink()
    assert show(env, "c")["turns"] == [] and rows(env) == []  # nothing changed


def test_an_unknown_pricing_key_is_a_warning(env: Env) -> None:
    prices(env, '[pricing."m"]\ninput = 1\noutput = 2\ncache_reads = 1\n')
    r = env.run("cost")
    assert r.returncode == 0
    assert "unknown key 'cache_reads' in [pricing.\"m\"], ignored (did you mean 'cache_read'?)" in (
        r.stderr
    )


def test_a_fleet_wave_sums_every_hosts_spend(env: Env) -> None:
    """A fleet wave (here one host, `local`) carries each host's spend and their sum."""
    new(env, "c", "claude")
    r = env.run("fanout", "local:c", "-m", "go", "--window", "20", "--wait", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "fleet"
    (host,) = doc["hosts"]
    assert host["cost"]["amount"] == pytest.approx(0.088119) and host["cost"]["exact"] is True
    assert doc["cost"]["amount"] == pytest.approx(0.088119) and doc["cost"]["exact"] is True
    assert doc["usage"]["input"] == 29343 and doc["legs"][0]["cost"]["source"] == "reported"
    shown = json.loads(env.run("wave", doc["id"], "--json").stdout)
    assert shown["cost"] == doc["cost"]
    assert "· cost $0.09 · 29.3k in, 6 out" in env.run("wave", doc["id"]).stdout


# --- opencode's subagents (issue 42, item 1) ------------------------------------

PRICED = '{"input": 1000, "output": 100, "cost": 0.05}'


def test_opencode_subagents_spend_is_the_turns_per_model(env: Env) -> None:
    """Its `task` tool runs a subagent in a session of its own whose usage
    the output never prints: read from opencode's database (the fixture the
    fake opencode writes, opencode 1.18.33's tables), per model, to any depth."""
    new(env, "o", "opencode", FAKE_USAGE=PRICED,
        FAKE_SUBAGENT_USAGE='{"input": 300, "output": 20, "reasoning": 5, "cost": 0.01}',
        FAKE_SUBAGENT_MODEL="fake-small")  # fmt: skip
    turn(env, "o", "go [task-nested]")
    found = rows(env, "session = 'o'")
    by_model = {(r["model"], r["input"], r["output"], r["cost"], r["exact"]) for r in found}
    # The turn's own step, and the subagent and its own subagent (one model, summed).
    assert by_model == {("fake-model", 1000, 100, 0.05, 1), ("fake-small", 600, 50, 0.02, 1)}
    t = show(env, "o")["turn"]
    assert t["cost"]["amount"] == pytest.approx(0.07) and t["cost"]["exact"] is True, t
    assert t["usage"]["models"] == ["fake-model", "fake-small"]
    # The next turn of the same conversation counts only its own subagents.
    turn(env, "o", "again")
    t = show(env, "o")["turn"]
    assert t["cost"]["amount"] == pytest.approx(0.05) and t["usage"]["models"] == ["fake-model"]


@pytest.mark.parametrize(
    ("prompt", "store"),
    [
        ("go [task-lost]", "sqlite"),  # the session it names is nowhere
        ("go [task-open]", "sqlite"),  # its message never finished
        ("go [task]", "json"),  # no database to read
    ],
)
def test_opencode_subagents_it_cannot_read_make_the_cost_a_floor(
    env: Env, prompt: str, store: str
) -> None:
    new(env, "o", "opencode", FAKE_USAGE=PRICED, FAKE_OPENCODE_STORE=store)
    turn(env, "o", prompt)
    t = show(env, "o")["turn"]
    assert t["state"] == "complete", t
    assert t["cost"]["exact"] is False and t["cost"]["amount"] >= 0.05, t["cost"]
    assert t["usage"]["exact"] is False
    shown = env.run("show", "o").stdout
    assert "≥$0.05" in shown, shown
    # Without a subagent the same turn is exact.
    turn(env, "o", "go")
    t = show(env, "o")["turn"]
    assert t["cost"]["exact"] is True and t["cost"]["amount"] == pytest.approx(0.05), t["cost"]


def test_codex_model_its_rollout_does_not_name_is_the_one_passed(env: Env) -> None:
    """Issue 42, item 6: a rollout whose `turn_context` names no model (as
    the fake's does with FAKE_CODEX_MODEL empty): the model is the one spex
    passed with `--model`; with none passed it stays unknown (null)."""
    new(env, "x", "codex", FAKE_CODEX_MODEL="")
    turn(env, "x", "go", "--model", "gpt-5.4-mini")
    (row,) = rows(env)
    assert row["model"] == "gpt-5.4-mini" and row["input"] == 9642, row
    turn(env, "x", "again")
    assert rows(env)[-1]["model"] is None
