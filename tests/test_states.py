"""The state words (spexsup/states.py), enforced.

Every closed vocabulary a reader tests (turn and session states, verdicts,
causes, checks, flags, leg statuses and results, wave states, event kinds)
is a `StrEnum` in `states`; no other module compares against one of its
words spelled as a literal. The members are their words for SQL and JSON.
"""

from __future__ import annotations

import ast
import json
import sqlite3
from enum import StrEnum
from pathlib import Path

from spexsup import states
from spexsup.state import events

PACKAGE = Path(__file__).resolve().parent.parent / "spexsup"

VOCABULARIES = [v for v in vars(states).values() if isinstance(v, type) and issubclass(v, StrEnum)]
WORDS = {m.value for v in VOCABULARIES for m in v}

# Comparisons of the same words in another vocabulary, by module and by what
# is compared: (module, the compared expression) -> what the word is there.
OTHER_MEANINGS = {
    ("spexsup.cli.complete", "action"): "the shell's completion request (`complete_bash`)",
    ("spexsup.present.render", "row"): "a recorded option's key (`verify`)",
    ("spexsup.present.render", "key"): "a recorded option's key (`strict`, `verify`, `sandbox`)",
    ("spexsup.ids", "k"): "a recorded option's key (`strict`)",
    ("spexsup.adapters.registry", "key"): "a harnesses.toml key (`verify`)",
    ("spexsup.core.trust", "data"): "a trust file's key (`verify`)",
    ("spexsup.conductors.doctor", "x"): "SQLite's quick_check answer (`ok`)",
    ("spexsup.adapters.outcome", "message.get('stopReason')"): "pi's own stop reason (`aborted`)",
    ("spexsup.pane.pretty", "message.get('stopReason')"): "pi's own stop reason (`aborted`)",
    ("spexsup.pane.pretty", "last[0].get('stopReason')"): "pi's own stop reason (`aborted`)",
    ("spexsup.core.sessions", "self.status"): "a pane check's status (`ok`, `recreated`)",
    ("spexsup.core.sessions", "result.outcome"): "a pane launch's outcome (`launched`, `busy`)",
    ("spexsup.turn.launch", "result.outcome"): "a pane launch's outcome (`launched`, `busy`)",
    ("spexsup.core.worktree", "status.state"): "a worktree's git status (`ok`)",
}


def state_words(node: ast.expr) -> list[str]:
    """The state words `node` spells as literals: a string, or a tuple, list
    or set holding strings."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in WORDS else []
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [w for e in node.elts for w in state_words(e)]
    return []


def literal_comparisons(tree: ast.AST) -> list[tuple[int, str, list[str]]]:
    """(line, the compared expression, the words) of each comparison in
    `tree` against a literal state word, and each `case "word":`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            words = [w for o in operands for w in state_words(o)]
            if words:
                subject = " ".join(ast.unparse(o) for o in operands if not state_words(o))
                found.append((node.lineno, subject, words))
        elif isinstance(node, ast.MatchValue) and (words := state_words(node.value)):
            found.append((node.lineno, "case", words))
    return found


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_no_module_compares_against_a_literal_state_word() -> None:
    found = []
    used = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        if module == "spexsup.states":
            continue
        for line, subject, words in literal_comparisons(ast.parse(path.read_text())):
            if (module, subject) in OTHER_MEANINGS:
                used.add((module, subject))
                continue
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {subject} vs {words}")
    assert found == [], "spell these through their enum in spexsup.states"
    assert set(OTHER_MEANINGS) - used == set(), "an exception nothing needs any more"


def test_the_check_finds_a_literal_comparison() -> None:
    code = """
if turn["state"] == "running":
    pass
if verdict in ("confirmed", "queued") or kind != states.EventKind.LOST:
    pass
match leg["status"]:
    case "pending":
        pass
if "done" == status or name == "main":
    pass
"""
    assert literal_comparisons(ast.parse(code)) == [
        (2, "turn['state']", ["running"]),
        (4, "verdict", ["confirmed", "queued"]),
        (7, "case", ["pending"]),
        (9, "status", ["done"]),
    ]


def test_the_members_are_their_words_in_json_and_sql() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (state TEXT)")
    db.execute("INSERT INTO t VALUES (?)", (states.TurnState.TIMED_OUT,))
    assert db.execute("SELECT state, typeof(state) FROM t").fetchall() == [("timed-out", "text")]
    assert json.dumps({"state": states.BUSY}) == '{"state": "running"}'
    assert f"{states.Verdict.CONFIRMED}" == "confirmed"
    one: set[str] = {states.SessionState.FAILED, states.TurnState.FAILED, "failed"}
    assert len(one) == 1


def test_the_event_kinds_are_the_enum() -> None:
    assert set(events.KINDS) == {k.value for k in states.EventKind}
    assert len(events.KINDS) == len(states.EventKind)
    assert all(type(k) is str for k in events.KINDS)  # reprs in messages say the word
