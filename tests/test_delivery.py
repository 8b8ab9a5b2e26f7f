"""Byte-exact prompt delivery, as a property: whatever the prompt holds, the
harness receives exactly those bytes (argv when it fits, else stdin)."""

from __future__ import annotations

import sys

from conftest import Env, harness
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spexsup import sessions, turns
from spexsup.errors import UnknownSession
from spexsup.harness import MAX_ARG_BYTES

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
        sessions.create(
            spex, "rec", env={"RECORD_TO": str(out)}, command=[sys.executable, harness("record.py")]
        )
    out.unlink(missing_ok=True)
    verdict = turns.wake(spex, "rec", prompt, window=30)
    assert verdict.verdict == "completed", verdict
    assert out.read_bytes() == prompt
    via = "stdin" if len(prompt) > MAX_ARG_BYTES else "argv"
    assert f"via={via}" in (env.root / "received.env").read_text()
    # The turn dir keeps the exact bytes too.
    assert verdict.turn is not None
    assert (spex.home / "turns" / "rec" / verdict.turn / "prompt").read_bytes() == prompt
