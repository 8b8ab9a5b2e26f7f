"""One writer of state: only `spexsup/ledger/` executes SQL that changes a
turn's or a session's state (or creates one), so abort-wins, the stale-report
no-op and the fence live in one file. Read from the source, statement by
statement, as SQLite would see them (string literals joined)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "spexsup"
# The ledger: one package (its transitions, usage's and checks' beside them).
LEDGER = PACKAGE / "ledger"


def in_ledger(path: Path) -> bool:
    return LEDGER in path.parents


# A statement that sets `state` on turns or sessions, or makes a row of them
# (which gives it its first state).
WRITES_STATE = re.compile(
    r"\bUPDATE\s+(turns|sessions)\s+SET\b(?:(?!\bWHERE\b).)*\bstate\s*="
    r"|\bINSERT\s+INTO\s+(turns|sessions)\b",
    re.IGNORECASE | re.DOTALL,
)


def sql_strings(path: Path) -> list[tuple[int, str]]:
    """Every string constant in the module (adjacent literals are one), with its line."""
    tree = ast.parse(path.read_text(), str(path))
    inner = {
        id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in inner:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):
            text = "".join(
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "?"
                for v in node.values
            )
            found.append((node.lineno, text))
    return found


def migration_lines(path: Path) -> range:
    """The lines of the store's numbered schema migrations: renaming a
    state's stored word (`error` -> `failed`) is a schema change, no transition."""
    for node in ast.parse(path.read_text(), str(path)).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "MIGRATIONS" for t in targets):
            return range(node.lineno, (node.end_lineno or node.lineno) + 1)
    return range(0)


def state_writers() -> list[str]:
    places = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if in_ledger(path):
            continue
        skip = migration_lines(path) if path.name == "store.py" else range(0)
        for line, text in sql_strings(path):
            if line not in skip and WRITES_STATE.search(text):
                places.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line}: {' '.join(text.split())}"
                )
    return places


def test_only_the_ledger_writes_turn_and_session_states() -> None:
    assert state_writers() == []


def test_the_check_finds_a_state_write_where_there_is_one(tmp_path: Path) -> None:
    """The check itself: each form a writer could take is caught."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "A = 'UPDATE turns SET rc = 1, state = ? WHERE id = ?'\n"
        "B = ('UPDATE sessions SET state'\n     \" = 'idle' WHERE name = ?\")\n"
        "C = f'INSERT INTO turns ({1}) VALUES (?)'\n"
        "D = 'UPDATE waves SET state = ?'\n"
        "E = \"UPDATE turns SET attempts = 2 WHERE state = 'starting'\"\n"
    )
    hits = [text for _, text in sql_strings(planted) if WRITES_STATE.search(text)]
    assert len(hits) == 3 and not any("waves" in h for h in hits), hits
    ledger = [t for p in LEDGER.glob("*.py") for _, t in sql_strings(p) if WRITES_STATE.search(t)]
    assert len(ledger) >= 8, ledger  # the writers are all there
    assert len(migration_lines(PACKAGE / "store.py")) > 100  # and only the migrations are skipped
