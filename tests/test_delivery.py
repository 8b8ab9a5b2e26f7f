"""Byte-exact prompt delivery, as a property: whatever the prompt holds, the
harness receives exactly those bytes (argv when it fits, else stdin)."""

from __future__ import annotations

import json
import os
import sys

import psutil
import pytest
from conftest import Env, harness
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spexsup.adapters.harness import MAX_ARG_BYTES
from spexsup.core import sessions
from spexsup.errors import UnknownSession
from spexsup.turn.front import wake
from spexsup.turn.request import WakeRequest

NASTY = [
    "$(touch /tmp/pwned)",
    "`id`",
    "'",
    '"',
    "\\",
    "\n",
    "-",
    "--",
    "-rf",
    "%s",
    "\t",
    "é",
    "🙂",
]

text_prompts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
    min_size=1,
    max_size=300,
)
nasty_prompts = st.lists(st.sampled_from(NASTY), min_size=1, max_size=30).map("".join)
binary_prompts = st.binary(min_size=1, max_size=300).filter(lambda b: b"\0" not in b)


@st.composite
def prompts(draw: st.DrawFn) -> bytes:
    base = draw(
        st.one_of(text_prompts.map(str.encode), nasty_prompts.map(str.encode), binary_prompts)
    )
    # Sometimes blow it up past what argv can carry, up to 1 MiB.
    repeat = draw(st.sampled_from([1, 1, 1, 2, (MAX_ARG_BYTES // len(base)) + 1]))
    return (base * repeat)[: 1 << 20]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(prompt=prompts())
def test_prompt_arrives_byte_exact(env: Env, prompt: bytes) -> None:
    out = env.root / "received"
    spex = env.spex()
    try:
        sessions.get(spex, "rec")
    except UnknownSession:
        # A harness that declares the stdin fallback (the command harness
        # refuses a prompt too big for argv instead, see below).
        env.home.mkdir(parents=True, exist_ok=True)
        (env.home / "harnesses.toml").write_text(
            f'[harness.rec]\nfresh = ["{sys.executable}", "{harness("record.py")}", "{{prompt}}"]\n'
            "stdin_fallback = true\n"
        )
        sessions.create(spex, "rec", sessions.Spec(harness="rec", env={"RECORD_TO": str(out)}))
    out.unlink(missing_ok=True)
    verdict = wake(spex, WakeRequest("rec", prompt, window=30))
    assert verdict.verdict == "completed", verdict
    assert out.read_bytes() == prompt
    via = "stdin" if len(prompt) > MAX_ARG_BYTES else "argv"
    assert f"via={via}" in (env.root / "received.env").read_text()
    # The turn dir keeps the exact bytes too.
    assert verdict.turn is not None
    assert (spex.home / "turns" / "rec" / verdict.turn / "prompt").read_bytes() == prompt


BIG = b"x" * (200 * 1024)


def test_a_command_harness_refuses_a_prompt_too_big_for_its_argv(env: Env) -> None:
    """`spex new NAME -- CMD` appends the prompt as one argument: a 200 KiB
    prompt used to move to stdin silently, so a command that reads its
    argument ran with no prompt and "completed". Refused, nothing launched."""
    out = env.root / "received"
    r = env.run("new", "c", "--env", f"RECORD_TO={out}", "--", sys.executable, harness("record.py"))
    assert r.returncode == 0, r.stderr
    (env.root / "big").write_bytes(BIG)
    r = env.run("wake", "c", "-f", str(env.root / "big"), "--window", "10")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("spex: the prompt is 204800 bytes, too big for the command's argv")
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    shown = json.loads(env.run("show", "c", "--json").stdout)
    assert shown["turns"] == [] and shown["state"] == "idle"
    assert not out.exists()
    # No turn dir (the session's home.env for its shell may be there).
    turns = env.home / "turns" / "c"
    assert not turns.exists() or not [d for d in turns.iterdir() if d.is_dir()]


def test_a_harness_that_declares_stdin_gets_a_big_prompt_there(env: Env) -> None:
    out = env.root / "received"
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        f'[harness.rin]\nfresh = ["{sys.executable}", "{harness("record.py")}"]\n'
        'prompt_via = "stdin"\n'
    )
    r = env.run("new", "s", "--harness", "rin", "--env", f"RECORD_TO={out}")
    assert r.returncode == 0, r.stderr
    r = env.run("wake", "s", "-f", "-", "--window", "20", "--json", input=BIG + b"!")
    assert json.loads(r.stdout)["verdict"] == "completed", r.stdout
    assert out.read_bytes() == BIG + b"!"
    assert "via=stdin" in (env.root / "received.env").read_text()


# --- the built-in CLIs -----------------------------------------------------------

CLI_PROMPT = "say hi\nreply \"briefly\", please. $(echo x) `y` -lead é ✓ \\ 'q'".encode()
ONLINE = {
    "claude": "FAKE_CLAUDE_LOGGED_IN",
    "codex": "FAKE_CODEX_ONLINE",
    "opencode": "FAKE_OPENCODE_ONLINE",
    "pi": "FAKE_PI_ONLINE",
}


@pytest.mark.parametrize("cli", sorted(ONLINE))
def test_every_built_in_cli_gets_the_prompt_byte_exact_fresh_and_resumed(
    env: Env, cli: str
) -> None:
    """opencode re-quotes an argument that holds a space (`"say hi\\nreply
    \\"briefly\\"…"` reached its model): every built-in CLI takes the prompt on
    stdin, where the bytes arrive as given. The fakes receive it as the real
    CLIs do, re-quoting included."""
    (env.root / ".git").mkdir()  # codex runs in a trusted directory only
    got = env.root / "prompt-got"
    r = env.run(
        "new", cli, "--harness", cli, "--cwd", str(env.root),
        "--env", f"{ONLINE[cli]}=1", "--env", f"FAKE_PROMPT_LOG={got}",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    for attempt in ("fresh", "resumed"):
        got.unlink(missing_ok=True)
        r = env.run("wake", cli, "-f", "-", "--window", "10", "--json", input=CLI_PROMPT)
        v = json.loads(r.stdout)
        assert v["verdict"] in ("completed", "confirmed"), (attempt, v)
        assert got.read_bytes() == CLI_PROMPT, attempt
        turn = env.home / "turns" / cli / v["turn"]
        argv = (turn / "argv").read_bytes().split(b"\0")
        assert not any(b"say hi" in word for word in argv), argv
        if attempt == "fresh":
            assert env.run("wait", cli, "--timeout", "20").returncode == 0
            assert (
                env.spex()
                .store.db.execute("SELECT harness_session_id FROM sessions WHERE name = ?", (cli,))
                .fetchone()[0]
            )


def test_a_running_cli_has_no_prompt_in_any_process_argv(env: Env) -> None:
    """Any local user reads argv (`ps`, /proc/PID/cmdline): a planted prompt
    appears in no process's command line while its turn runs."""
    secret = "plant-" + os.urandom(6).hex()
    env.run("new", "c", "--harness", "claude", "--env", "FAKE_CLAUDE_LOGGED_IN=1")
    r = env.run("wake", "c", f"{secret} [sleep 30]", "--window", "2", "--json")
    assert json.loads(r.stdout)["verdict"] == "confirmed", r.stdout
    seen = [
        proc.info["cmdline"]
        for proc in psutil.process_iter(["cmdline"])
        if any(secret in word for word in proc.info["cmdline"] or ())
    ]
    assert seen == []
    assert env.run("stop", "c").returncode == 0
