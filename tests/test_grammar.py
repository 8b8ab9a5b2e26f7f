"""One grammar through the installed CLI (issue 24): a prompt is TEXT words,
`-m TEXT` or `-f FILE|-` on every command that takes one, hints name the
command's own forms, and an unknown option gets "did you mean" everywhere."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import HARNESSES, Env, retry_until

PY = sys.executable


def recorder(env: Env, name: str) -> Path:
    got = env.root / f"{name}.got"
    r = env.run(
        "new", name, "--env", f"RECORD_TO={got}", "--", PY, str(HARNESSES / "record.py")
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return got


def delivered(env: Env, name: str, got: Path, *args: str, stdin: bytes | None = None) -> bytes:
    if got.exists():
        got.unlink()
    r = env.run(args[0], "--window", "10", *args[1:], input=stdin)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    assert retry_until(got.exists)
    return got.read_bytes()


def test_every_prompt_form_of_wake_and_resume_delivers_the_same_bytes(env: Env) -> None:
    got = recorder(env, "a")
    assert delivered(env, "a", got, "wake", "a", "fix", "the", "test") == b"fix the test"
    assert delivered(env, "a", got, "wake", "a", "fix  it") == b"fix  it"  # one word stays exact
    assert delivered(env, "a", got, "wake", "a", "-m", "as  -m") == b"as  -m"
    assert delivered(env, "a", got, "wake", "a", "--message=eq") == b"eq"
    prompt = env.root / "prompt.md"
    prompt.write_bytes(b"from a file\n")
    assert delivered(env, "a", got, "wake", "a", "-f", str(prompt)) == b"from a file\n"
    assert delivered(env, "a", got, "wake", "a", "-f", "-", stdin=b"stdin\n") == b"stdin\n"
    assert delivered(env, "a", got, "wake", "a", "--", "-starts", "dashed") == b"-starts dashed"
    for form in (["--", "go", "on"], ["-m", "go on"], ["-f", "-"]):
        assert env.run("stop", "a").returncode == 0
        args = form
        stdin = b"go on" if form == ["-f", "-"] else None
        assert delivered(env, "a", got, "resume", "a", *args, stdin=stdin) == b"go on"


@pytest.mark.parametrize(
    ("args", "says", "never"),
    [
        (["wake", "a"], "no prompt given (give it as TEXT… or -m TEXT, or -f FILE", "not both"),
        (["wake", "a", "x", "-m", "y"], "the prompt is given more than one way", None),
        (["wake", "a", "-m", "x", "-f", "-"], "the prompt is given more than one way", None),
        (["wake", "a", ""], "the prompt is empty", None),
        (["fanout", "--all"], "no prompt given (give it as -m TEXT, or -f FILE", "TEXT…"),
        (
            ["fanout", "a", "-m", "x", "-f", "-"],
            "given more than one way (give it one way: -m",
            None,
        ),
        (["resume", "a", "x", "-m", "y"], "a prompt resumes and wakes one session", None),
        (["resume", "a", "-m", "y", "--", "x"], "the prompt is given more than one way", None),
        (["resume", "a", "-m", ""], "the prompt is empty", None),
        (["up", "a", "-m", "x"], "a prompt (-m, -f) goes with --revive", None),
        (["up", "--revive", "-m", ""], "the prompt is empty", None),
    ],
)
def test_a_prompt_given_no_way_or_two_is_refused_in_the_commands_words(
    env: Env, args: list[str], says: str, never: str | None
) -> None:
    recorder(env, "a")
    assert env.run("stop", "a").returncode == 0  # so a resume that got through would show
    before = json.loads(env.run("show", "a", "--json").stdout)
    r = env.run(*args, input=b"")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert says in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert never is None or never not in r.stderr, r.stderr
    after = json.loads(env.run("show", "a", "--json").stdout)
    assert (after["state"], after["turn"]) == (before["state"], before["turn"])  # nothing changed


@pytest.mark.parametrize(
    ("args", "meant"),
    [
        (["wake", "a", "x", "--windw", "3"], "--window"),
        (["wake", "a", "--stirct", "x"], "--strict"),
        (["ls", "--stat", "failed"], "--state"),
        (["fanout", "--al", "-m", "x"], "--all"),
        (["stop", "a", "--grase", "1"], "--grace"),
        (["events", "--knd", "failed"], "--kind"),
        (["show", "a", "--jsn"], "--json"),
        (["resume", "a", "--forse"], "--force"),
        (["rm", "a", "--dryrun"], "--dry-run"),
    ],
)
def test_an_unknown_option_gets_did_you_mean_on_every_command(
    env: Env, args: list[str], meant: str
) -> None:
    recorder(env, "a")
    r = env.run(*args)
    assert r.returncode == 2, r.stderr
    assert f"did you mean {meant}?" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert json.loads(env.run("show", "a", "--json").stdout)["turn"] is None
