"""The one duration grammar (spexsup.durations), and the CLI options and config
keys that read times through it."""

from __future__ import annotations

import json

import pytest
from conftest import Env, harness

from spexsup import durations
from spexsup.errors import Invalid

# --- the parser -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45", 45),
        ("0.2", 0.2),
        (".5", 0.5),
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("1d", 86400),
        ("1w", 7 * 86400),
        ("1.5h", 5400),
        ("1h30m", 5400),
        ("1d2h3m4s", 86400 + 7200 + 180 + 4),
        ("  1h 30m ", 5400),
        ("1 h", 3600),
        ("\t10m\n", 600),
        (3, 3),
        (2.5, 2.5),
    ],
)
def test_every_unit_and_compound(text: str | float, seconds: float) -> None:
    assert durations.parse(text, "--x") == pytest.approx(seconds)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        " ",
        "1x",
        "-1",
        "+1s",
        "m",
        "1m1",
        "1hh",
        "1,5s",
        "nan",
        "inf",
        "1e999",
        "1e3",
        "9" * 400,
    ],
)
def test_what_is_not_a_duration(bad: str) -> None:
    with pytest.raises(Invalid) as caught:
        durations.parse(bad, "--grace")
    assert caught.value.message.startswith("invalid --grace ")
    assert caught.value.hint == "a duration: 90s, 15m, 2h, 1h30m"
    assert "\n" not in caught.value.line()


@pytest.mark.parametrize("bad", [True, None, float("nan"), float("inf"), [], {}])
def test_what_toml_may_give_that_is_not_a_duration(bad: object) -> None:
    with pytest.raises(Invalid):
        durations.parse(bad, "window")  # type: ignore[arg-type]


def test_the_message_names_the_option_and_quotes_the_value() -> None:
    with pytest.raises(Invalid) as caught:
        durations.parse("1x", "--grace")
    assert caught.value.line() == "invalid --grace '1x' (a duration: 90s, 15m, 2h, 1h30m)"


def test_bounds_are_the_callers() -> None:
    # The default: more than 0, at most 7 days (a turn's --timeout).
    assert durations.parse("7d", "--timeout") == 7 * 86400
    for bad in ("0", "0s", "7d1s", "2w", -1):
        with pytest.raises(Invalid, match="more than 0 and at most 7d"):
            durations.parse(bad, "--timeout")
    assert durations.parse("0s", "--older-than", allow_zero=True, maximum=None) == 0
    assert durations.parse("520w", "--older-than", allow_zero=True, maximum=None) == 520 * 7 * 86400
    with pytest.raises(Invalid, match=r"from 0\.05s to 1h"):
        durations.parse("0.01", "--window", minimum=0.05, maximum=3600)
    with pytest.raises(Invalid, match=r"from 0\.05s to 1h"):
        durations.parse("61m", "--window", minimum=0.05, maximum=3600)
    assert durations.parse("1h", "--window", minimum=0.05, maximum=3600) == 3600
    # Huge but finite values are bounded, never an overflow.
    with pytest.raises(Invalid):
        durations.parse("9" * 305 + "w", "--older-than", allow_zero=True, maximum=None)


def test_spell() -> None:
    assert [durations.spell(s) for s in (0, 0.05, 90, 3600, 5400, 7 * 86400)] == [
        "0s",
        "0.05s",
        "1m30s",
        "1h",
        "1h30m",
        "7d",
    ]


# --- through the CLI --------------------------------------------------------------


def one_line_error(r: object, option: str) -> None:
    assert r.returncode == 2, r.stderr  # type: ignore[attr-defined]
    assert r.stderr.startswith(f"spex: invalid {option} "), r.stderr  # type: ignore[attr-defined]
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr  # type: ignore[attr-defined]


def test_time_options_take_durations(env: Env) -> None:
    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    assert env.run("wake", "a", "go", "--window", "0.3s").returncode == 0
    r = env.run("wait", "a", "--timeout", "1s")
    assert r.returncode == 124, r.stderr
    r = env.run("stop", "a", "--grace", "1s", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "stopped", r.stderr
    assert env.run("resume", "a", "--json").returncode == 0
    # A wait that ends well before its long timeout.
    assert env.run("new", "b", "--", harness("exit0.sh")).returncode == 0
    assert env.run("wake", "b", "go", "--window", "0.3", "--timeout", "1h30m").returncode == 0
    assert env.run("wait", "b", "--timeout", "10m").returncode == 0
    r = env.run("prune", "--older-than", "0s", "--json")
    assert r.returncode == 0, r.stderr
    r = env.run("events", "--since", "1h", "--json")
    assert r.returncode == 0 and any(
        json.loads(line)["kind"] == "stopped" for line in r.stdout.splitlines()
    ), r.stdout
    assert env.run("events", "--since", "0s").stdout == ""


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("wait", "a", "--timeout", "10x"), "--timeout"),
        (("wait", "a", "--timeout", "-1"), "--timeout"),
        (("stop", "a", "--grace", "1x"), "--grace"),
        (("stop", "a", "--grace", "2h"), "--grace"),
        (("wake", "a", "go", "--window", "1m1"), "--window"),
        (("wake", "a", "go", "--timeout", "nan"), "--timeout"),
        (("prune", "--older-than", "30x"), "--older-than"),
        (("events", "--since", "5q"), "--since"),
        (("maint", "--all", "--ttl", "1e999", "--", "true"), "--ttl"),
        (("maint", "--all", "--wait", "2d", "--", "true"), "--wait"),
    ],
)
def test_a_bad_duration_is_one_line(env: Env, args: tuple[str, ...], option: str) -> None:
    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    one_line_error(env.run(*args), option)
    assert json.loads(env.run("ls", "--json").stdout)[0]["state"] == "idle"


def test_config_time_keys_take_numbers_and_durations(env: Env) -> None:
    config = env.home / "config.toml"
    env.home.mkdir(parents=True, exist_ok=True)
    config.write_text('window = "2s"\ngrace = 0\nlogin_timeout = "10s"\nlimit_margin = "1m"\n')
    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    assert env.run("doctor").returncode in (0, 1)  # reads the config
    assert env.run("ls").returncode == 0
    config.write_text('grace = "1x"\n')
    r = env.run("ls")
    assert r.returncode == 1 and f"{config}:1: field 'grace' must be" in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    config.write_text('[retention]\nkeep_days = "12h"\n')
    r = env.run("prune", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
