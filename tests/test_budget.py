"""A wave's budget (issue 26, item 4, in part): `fanout --budget USD` launches
no more legs once the wave's known spend (every ended leg's every attempt)
has reached it; the legs left end `skipped`, cause `budget`. What is unknown
never counts as zero, nor against it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Env, retry_until
from test_turns import turn_processes_alive

# What the fake claude reports for one turn (tests/fixtures/real/claude).
RUN = 0.088119


def claude(env: Env, name: str) -> None:
    args = ["new", name, "--harness", "claude", "--cwd", str(env.root)]
    r = env.run(*args, "--env", "FAKE_CLAUDE_LOGGED_IN=1")
    assert r.returncode == 0, r.stderr


def test_a_wave_budget_stops_launching_legs_once_spent(env: Env) -> None:
    names = ["a", "b", "c", "d"]
    for name in names:
        claude(env, name)
    # One leg at a time: the first two spend $0.18, past $0.10 after the second.
    r = env.run("fanout", *names, "-m", "go", "--max-running", "1", "--budget", "$0.10",
                "--wait", timeout=120)  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    assert doc["pacing"]["budget"] == 0.1
    ended = {leg["session"]: leg["turn_state"] for leg in doc["legs"]}
    assert sorted(ended.values()) == ["complete", "complete", "skipped", "skipped"], doc["legs"]
    skipped = [leg for leg in doc["legs"] if leg["turn_state"] == "skipped"]
    for leg in skipped:
        assert leg["cause"] == "budget", leg
        assert leg["turn_error"].startswith(f"budget: wave {doc['id']} spent $0.18 of its $0.10")
    assert abs(doc["cost"]["amount"] - 2 * RUN) < 1e-9 and doc["cost"]["exact"], doc["cost"]
    assert "budget $0.10" in r.stdout and "skipped" in r.stdout, r.stdout
    # The skipped legs' sessions ran nothing: each has its skipped turn only.
    for leg in skipped:
        turn = json.loads(env.run("show", leg["session"], "--json").stdout)["turn"]
        assert (turn["state"], turn["cause"]) == ("skipped", "budget"), turn


def test_a_budget_never_stops_on_costs_nobody_knows(env: Env) -> None:
    """The command harness prints no usage: its spend is none to count (null,
    not $0 and not past the budget); the summary says the budget counts known
    costs."""
    for name in ("a", "b", "c"):
        assert env.run("new", name, "--", "true").returncode == 0
    r = env.run("fanout", "a", "b", "c", "-m", "go", "--max-running", "1", "--budget", "0.01",
                "--wait", timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    assert [leg["turn_state"] for leg in doc["legs"]] == ["complete"] * 3
    assert doc["cost"] is None, doc["cost"]
    assert "budget $0.01 (of the costs known)" in r.stdout, r.stdout


def test_bad_budgets_are_refused_and_change_nothing(env: Env) -> None:
    claude(env, "a")
    for value in ("0", "-1", "lots", "nan", "$"):
        r = env.run("fanout", "a", "-m", "x", "--budget", value)
        assert r.returncode == 2, (value, r.stdout, r.stderr)
        assert r.stderr.startswith(f"spex: invalid --budget '{value}'"), r.stderr
    assert env.run("waves").stdout.startswith("no waves")


# The one rule for an amount of money, as the error line states it.
RULE = (
    "(an amount of US dollars, a finite number from 0.01 to 1000000 at cents' precision"
    " (what rounds to $0.00 is none), such as 5, 2.50 or $2.50)"
)
NOT_AMOUNTS = ["1e-320", "0.001", "0.0049", "0", "-0", "-1", "inf", "-inf", "nan", "1e999",
               "1000000.01", "$", "lots", ""]  # fmt: skip


@pytest.mark.parametrize("value", NOT_AMOUNTS)
def test_every_budget_option_keeps_one_rule_for_money(env: Env, value: str) -> None:
    """`wake --budget` and `fanout --budget` refuse what is no amount of money
    at cents (1e-320 was a budget while 0 was refused), stating the rule;
    nothing is made."""
    claude(env, "a")
    for args in (
        ("wake", "a", "x", "--budget", value),
        ("fanout", "a", "-m", "x", "--budget", value),
    ):
        r = env.run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.splitlines() == [f"spex: invalid --budget {value!r} {RULE}"], r.stderr
    assert env.run("waves").stdout.startswith("no waves")
    assert json.loads(env.run("show", "a", "--json").stdout)["turn"] is None


@pytest.mark.parametrize("value", ["1e-320", "0.001", "0", "-1", "nan", "inf", '"lots"'])
def test_budget_day_keeps_the_same_rule(env: Env, value: str) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    config = env.home / "config.toml"
    config.write_text(f"budget_day = {value}\n")
    r = env.run("ls")
    assert r.returncode == 1, r.stdout + r.stderr
    rule = RULE[1:-1]
    assert r.stderr.splitlines() == [f"spex: {config}:1: field 'budget_day' must be {rule}"]


def test_an_amount_at_cents_is_a_budget_and_reaches_each_host_whole(env: Env) -> None:
    """Half a cent rounds to one: a budget. A fleet fan-out hands each host
    its budget with every cent (`:g` made $123,456.78 $123,457)."""
    claude(env, "a")
    r = env.run("wake", "a", "go", "--budget", "0.005", "--window", "10", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert env.run("wait", "a", "--timeout", "60").returncode == 0
    r = env.run("fanout", "local:a", "-m", "go", "--budget", "$123,456.78", "--wait", "--json",
                timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    (host,) = json.loads(r.stdout)["hosts"]
    shown = json.loads(env.run("wave", host["wave"], "--json").stdout)
    assert shown["pacing"]["budget"] == 123456.78, shown["pacing"]


def test_a_turn_over_its_budget_is_stopped_in_the_pane(env: Env) -> None:
    """Each API message costs $0.315 at these prices: the third one passes
    $0.70, and the turn is stopped there with no watcher, its processes gone."""
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text(
        '[pricing."claude-sonnet-4-5"]\ninput = 3.0\noutput = 15.0\n'
    )
    claude(env, "c")
    r = env.run("wake", "c", "go [spend 8]", "--budget", "0.70", "--window", "0.3", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert env.run("wait", "c", "--timeout", "60").returncode == 1
    turn = json.loads(env.run("show", "c", "--json").stdout)["turn"]
    assert (turn["state"], turn["cause"]) == ("failed", "budget"), turn
    assert turn["error"].startswith("spent $0.9"), turn  # 3 x $0.315
    assert turn["error"].endswith(" of its $0.70 budget"), turn
    log = env.run("log", "c").stdout
    assert "step 2" in log and "step 4" not in log, log
    assert turn_processes_alive(turn["id"]) == []


@pytest.mark.parametrize(
    ("printed", "shown"),
    [
        ("1e999", "Infinity"),
        ("NaN", "NaN"),
        ("-5", "-5"),
        ("10000000000000000", "10000000000000000"),  # 10^16 tokens: no usage
    ],
)
def test_a_message_whose_usage_is_no_number_is_not_counted_and_said(
    env: Env, printed: str, shown: str
) -> None:
    """The first API message's input count is no usage: its spend is unknown,
    said once in the pane and not counted (neither as 0 silently nor as the
    number); the budget goes on counting the others: the third sound message
    ($0.315 each) passes $0.70 and the turn is stopped there."""
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text(
        '[pricing."claude-sonnet-4-5"]\ninput = 3.0\noutput = 15.0\n'
    )
    first = json.dumps({"input_tokens": f"raw:{printed}"})
    online, spend = "FAKE_CLAUDE_LOGGED_IN=1", f"FAKE_SPEND_FIRST={first}"
    r = env.run("new", "c", "--harness", "claude", "--cwd", str(env.root),
                "--env", online, "--env", spend)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = env.run("wake", "c", "go [spend 8]", "--budget", "0.70", "--window", "0.3", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert env.run("wait", "c", "--timeout", "60").returncode == 1
    turn = json.loads(env.run("show", "c", "--json").stdout)["turn"]
    assert (turn["state"], turn["cause"]) == ("failed", "budget"), turn
    assert turn["error"] == "spent $0.95 of its $0.70 budget", turn  # 3 x $0.315, not 4
    # Stopped at the third sound message's spend (the error above), before the
    # harness's own end: how many steps it printed meanwhile is the machine's.
    log = env.run("log", "c").stdout
    assert "step 3" in log and '"type": "result"' not in log, log
    pane = env.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "=c:0.0").stdout
    said = f"usage.input_tokens = {shown} is no usage number: that spend is unknown"
    assert said in pane, pane


def test_a_step_cost_that_is_no_number_is_not_counted(env: Env) -> None:
    """opencode's step costs Infinity: not past the budget (nor counted), said."""
    online, spend = "FAKE_OPENCODE_ONLINE=1", 'FAKE_USAGE={"cost": 1e999}'
    r = env.run("new", "o", "--harness", "opencode", "--cwd", str(env.root),
                "--env", online, "--env", spend)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = env.run("wake", "o", "go", "--budget", "0.01", "--window", "0.3")
    assert r.returncode == 0, r.stdout + r.stderr
    r = env.run("wait", "o", "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    turn = json.loads(env.run("show", "o", "--json").stdout)["turn"]
    assert turn["state"] == "complete" and "bad-usage:cost" in turn["flags"], turn
    pane = env.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "=o:0.0").stdout
    assert "cost = Infinity is no usage number" in pane, pane


def test_a_turn_budget_counts_no_cost_it_cannot_know(env: Env) -> None:
    """No price for its model: the turn runs to its end, the pane says why."""
    claude(env, "c")
    r = env.run("wake", "c", "go [spend 3]", "--budget", "0.01", "--window", "0.3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert env.run("wait", "c", "--timeout", "60").returncode == 0
    pane = env.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "=c:0.0").stdout
    assert "its spend is not counted against the budget" in pane, pane


def test_a_turn_budget_needs_a_harness_that_prints_usage(env: Env) -> None:
    assert env.run("new", "cmd", "--", "true").returncode == 0
    r = env.run("wake", "cmd", "x", "--budget", "1")
    assert r.returncode == 2 and "prints no usage" in r.stderr, r.stderr
    assert json.loads(env.run("show", "cmd", "--json").stdout)["turn"] is None


def test_budget_day_refuses_or_queues_once_todays_spend_reached_it(env: Env) -> None:
    """Two fake claude turns spend $0.18 today, past budget_day = $0.10: a
    third wake is refused (exit 3) or, with --queue, waits; raising the
    budget lets the next spex command launch it."""
    env.home.mkdir(parents=True, exist_ok=True)
    config = env.home / "config.toml"
    config.write_text("budget_day = 0.10\n")
    claude(env, "c")
    for _ in range(2):
        r = env.run("wake", "c", "go", "--window", "10")
        assert r.returncode == 0, r.stdout + r.stderr
    r = env.run("wake", "c", "third")
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stderr.startswith("spex: today's known spend $0.18 has reached budget_day ($0.10)")
    r = env.run("wake", "c", "--queue", "third", "--json")
    v = json.loads(r.stdout)
    assert (r.returncode, v["verdict"], v["waits"]) == (0, "queued", "tomorrow (budget_day $0.10)")
    assert len(json.loads(env.run("show", "c", "--json").stdout)["turns"]) == 2
    config.write_text("budget_day = 5\n")
    env.run("ls")  # a reader hands the waiting prompt to its launcher
    r = env.run("wait", "c", "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(env.run("queue", "ls", "--json").stdout) == []
    # A bad value is the config file's one-line error.
    config.write_text("budget_day = -1\n")
    r = env.run("wake", "c", "x")
    assert r.returncode == 1 and "field 'budget_day' must be" in r.stderr, r.stderr


def test_a_turn_budget_says_when_it_cannot_see_the_cost(env: Env) -> None:
    claude(env, "c")
    r = env.run("wake", "c", "go", "--budget", "1", "--window", "10")
    assert r.returncode == 0, r.stderr
    assert "spex: note: claude reports its cost only when the turn ends" in r.stderr
    env.home.joinpath("config.toml").write_text(
        '[pricing."claude-sonnet-4-5"]\ninput = 3.0\noutput = 15.0\n'
    )
    r = env.run("wake", "c", "go", "--budget", "1", "--window", "10")
    assert r.returncode == 0 and "note" not in r.stderr, r.stderr


def test_a_running_turn_shows_what_it_spent_so_far(env: Env) -> None:
    """The pane counts a turn's spend step by step with no budget too (issue
    42, item 3): `show`, `ls` and `wave` say it while the turn runs, marked
    as running (`so_far`, `… so far`), priced by config.toml's `[pricing]`;
    once the turn ends its recorded usage says it, and `so_far` is null."""
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text(
        '[pricing."claude-sonnet-4-5"]\ninput = 3.0\noutput = 15.0\n'
    )
    gate = env.root / "go"
    args = ["new", "c", "--harness", "claude", "--cwd", str(env.root)]
    r = env.run(*args, "--env", "FAKE_CLAUDE_LOGGED_IN=1", "--env", f"FAKE_GATE={gate}")
    assert r.returncode == 0, r.stderr
    r = env.run("fanout", "c", "-m", "go [steps 2]", "--window", "0.3", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    wave = json.loads(r.stdout)["id"]

    def turn() -> dict[str, Any]:
        return json.loads(env.run("show", "c", "--json").stdout)["turn"]  # type: ignore[no-any-return]

    # Two API messages of $0.315 each at these prices, then it waits for the gate.
    assert retry_until(lambda: (turn()["so_far"] or {}).get("cost", {}).get("amount") == 0.63)
    now = turn()
    assert now["state"] == "running" and now["cost"] is None, now
    so_far = now["so_far"]
    assert so_far["running"] is True and so_far["cost"]["source"] == "estimated", so_far
    assert so_far["usage"]["input"] == 200000 and so_far["usage"]["output"] == 2000, so_far
    assert so_far["usage"]["models"] == ["claude-sonnet-4-5"]
    assert "~$0.63 so far" in env.run("show", "c").stdout
    listed = json.loads(env.run("ls", "--json").stdout)[0]
    assert listed["turn"]["so_far"] == so_far, listed
    assert "~$0.63 so far" in env.run("top").stdout  # its table, once, through a pipe
    shown = json.loads(env.run("wave", wave, "--json").stdout)
    assert shown["legs"][0]["so_far"] == so_far and shown["so_far"]["running"] is True, shown
    assert shown["so_far"]["cost"]["amount"] == 0.63 and shown["legs"][0]["cost"] is None
    text = env.run("wave", wave).stdout
    assert "cost ~$0.63 so far" in text and "· ~$0.63 so far" in text, text
    gate.touch()
    assert env.run("wait", "c", "--timeout", "60").returncode == 0
    ended = turn()
    assert ended["state"] == "complete" and ended["so_far"] is None, ended
    assert ended["cost"]["amount"] == RUN, ended  # the result's own figure
    shown = json.loads(env.run("wave", wave, "--json").stdout)
    assert shown["so_far"] is None and shown["legs"][0]["so_far"] is None, shown
