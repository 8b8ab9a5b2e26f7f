"""Patterns compiled on first use (spexsup.lazyre): no module of spexsup
compiles one when it is imported (every `spex` start paid for all of them,
issue 40), and a lazy pattern matches as `re`'s does."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spexsup import lazyre

PACKAGE = Path(__file__).resolve().parent.parent / "spexsup"

PROBE = """
import importlib, json, re, sys
held = {}
for name in json.loads(sys.argv[1]):
    module = importlib.import_module(name)
    compiled = sorted(k for k, v in vars(module).items() if isinstance(v, re.Pattern))
    if compiled:
        held[name] = compiled
print(json.dumps(held))
"""


def modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] != "__main__":
            names.append(".".join(parts))
    return names


def test_no_module_holds_a_pattern_compiled_at_import() -> None:
    r = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(modules())],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(r.stdout) == {}, "use lazyre.compile for a module's pattern"


def test_a_lazy_pattern_compiles_on_its_first_use_only() -> None:
    broken = lazyre.compile("(unclosed")  # made without a word: nothing compiled
    with pytest.raises(re.error):
        broken.fullmatch("x")


@pytest.mark.parametrize(
    ("source", "flags", "text"),
    [
        (r"[A-Za-z0-9_-]{1,64}", 0, "api-1"),
        (r"rate.?limit", re.IGNORECASE, "RATE LIMIT reached"),
        (r"(\d+)\s*([smh])", 0, "1h 30m x"),
    ],
)
def test_a_lazy_pattern_answers_as_the_compiled_one(source: str, flags: int, text: str) -> None:
    lazy, eager = lazyre.compile(source, flags), re.compile(source, flags)
    assert lazy.pattern == eager.pattern
    for method in ("fullmatch", "match", "search"):
        mine, theirs = getattr(lazy, method)(text), getattr(eager, method)(text)
        assert (mine and mine.group(0)) == (theirs and theirs.group(0)), method
    assert lazy.findall(text) == eager.findall(text)
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in eager.finditer(text)]
    assert lazy.sub("_", text) == eager.sub("_", text)
    assert lazy.sub(lambda m: m.group(0).upper(), text) == eager.sub(
        lambda m: m.group(0).upper(), text
    )
    mine, theirs = lazy.search(text, 2), eager.search(text, 2)
    assert (mine and mine.span()) == (theirs and theirs.span())


def test_bytes_patterns_too() -> None:
    lazy = lazyre.compile(rb"running:(?P<pid>[0-9]{1,10})")
    m = lazy.fullmatch(b"running:42")
    assert m is not None and m["pid"] == b"42"
