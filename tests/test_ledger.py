"""One writer of the record: only `spexsup/state/ledger/` executes SQL that
inserts, updates, deletes or replaces a row of a turn, a session, or a row
that hangs off them, so abort-wins, the stale-report no-op, the fence and
each transition's event live in one place. Read from the source, statement
by statement, as SQLite would see them (adjacent literals joined, an
f-string's fields as `?`); the store's numbered schema migrations aside.

The tables it covers (`LEDGER_TABLES`) and the ones it leaves out, and why:

- in: `sessions` and `turns`; what hangs off a turn: its checks
  (`verifications`), its wave link (`wave_turns`), its spend (`usage`, and
  `usage_days`, the same rows summed per day in the same transaction); what
  hangs off a session: its queued prompts (`queue`, turns to be), the wake
  keys naming a turn or a queued prompt (`wake_keys`), its clocks
  (`schedules`), the branches its removal salvaged (`salvages`). A turn's
  attempts, limit waits, verdict, fence and `launched` event are columns of
  `turns`, so they are in.
- out: the event log (`events`: `events.record` appends it, called by the
  ledger inside each transition) and the hooks' claims on it (`hook_runs`);
  the maintenance lease (`lease`, `capabilities`) and the process tickets
  that admit to it (`tickets`); the home's own rows (`notices` for `spex
  doctor`, `settings`); a wave's row (`waves`), a mirror of the wave's
  document that `wavedoc` owns (its legs' links, `wave_turns`, are in).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "spexsup"
# The ledger: one package (its transitions, queue's, schedules', usage's and checks' beside them).
LEDGER = PACKAGE / "state" / "ledger"

LEDGER_TABLES = frozenset(
    {
        "sessions",
        "turns",
        "verifications",
        "wave_turns",
        "usage",
        "usage_days",
        "queue",
        "wake_keys",
        "schedules",
        "salvages",
    }
)
# Every other table the schema makes (see the docstring for why each is out).
OTHER_TABLES = frozenset(
    {"events", "hook_runs", "lease", "capabilities", "tickets", "notices", "settings", "waves"}
)

# A statement that writes rows of a table: group 1 is the table (`?` when an
# f-string interpolates it, which is flagged too: the table must be named).
WRITES = re.compile(
    r"\b(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM)"
    r"\s+[\"`\[]?(\w+|\?)",
    re.IGNORECASE,
)


def in_ledger(path: Path) -> bool:
    return LEDGER in path.parents


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


def written_tables(text: str) -> list[str]:
    """The tables a statement writes (lower case; `?` for an interpolated one)."""
    return [m.group(1).lower() for m in WRITES.finditer(text)]


def row_writers(package: Path = PACKAGE) -> list[str]:
    """`file:line: table: statement` for each write of a ledger table (or of
    an unnamed one) in `package` outside its `ledger/` and its store's migrations."""
    ledger = package / "state" / "ledger"
    places = []
    for path in sorted(package.rglob("*.py")):
        if ledger in path.parents:
            continue
        skip = migration_lines(path) if path == package / "state" / "store.py" else range(0)
        for line, text in sorted(sql_strings(path)):
            if line in skip:
                continue
            for table in written_tables(text):
                if table in LEDGER_TABLES or table == "?":
                    where = path.relative_to(package.parent)
                    places.append(f"{where}:{line}: {table}: {' '.join(text.split())}")
    return places


def test_only_the_ledger_writes_turns_sessions_and_their_rows() -> None:
    found = row_writers()
    assert found == [], (
        "rows of turns, sessions and what hangs off them are written by a named"
        " function in spexsup/state/ledger/ only (move each statement there):\n" + "\n".join(found)
    )


def test_every_table_is_decided_in_or_out() -> None:
    """A new table is placed on one side, and each ledger table is really
    written in the ledger (a misspelt name here would cover nothing)."""
    schema = (PACKAGE / "state" / "store.py").read_text()
    made = {t.lower() for t in re.findall(r"CREATE TABLE (\w+)", schema)}
    assert made == LEDGER_TABLES | OTHER_TABLES, made ^ (LEDGER_TABLES | OTHER_TABLES)
    assert not LEDGER_TABLES & OTHER_TABLES
    in_ledger_writes = {
        table for p in LEDGER.glob("*.py") for _, t in sql_strings(p) for table in written_tables(t)
    }
    assert in_ledger_writes >= LEDGER_TABLES, LEDGER_TABLES - in_ledger_writes


def test_the_check_finds_a_write_where_there_is_one(tmp_path: Path) -> None:
    """The checker itself, on a planted package: each form a writer could
    take is caught and named by file and line; the ledger, the migrations
    and the tables that are out are not."""
    package = tmp_path / "spexsup"
    (package / "state" / "ledger").mkdir(parents=True)
    (package / "pane").mkdir()
    (package / "mod.py").write_text(
        "A = 'UPDATE turns SET rc = 1, state = ? WHERE id = ?'\n"
        "B = ('UPDATE sessions SET launch_fence'\n     \" = 2 WHERE name = ?\")\n"
        "C = f'INSERT INTO turns ({1}) VALUES (?)'\n"
        "D = 'UPDATE waves SET state = ?'\n"
        "E = 'INSERT OR REPLACE INTO usage_days (day) VALUES (?)'\n"
        "F = 'delete from wave_turns where wave = ?'\n"
        "G = 'SELECT state FROM turns WHERE id = ?'\n"
        "H = 'INSERT INTO events (kind) VALUES (?) ON CONFLICT DO UPDATE SET kind = 1'\n"
        "I = f'DELETE FROM {1} WHERE id = ?'\n"
        "J = 'REPLACE INTO verifications (turn) VALUES (?)'\n"
    )
    (package / "pane" / "deep.py").write_text(
        "def f(db):\n    db.execute(\n        'UPDATE OR IGNORE wake_keys SET turn = ?'\n    )\n"
    )
    planted = package / "state" / "ledger" / "__init__.py"
    planted.write_text("A = 'DELETE FROM turns WHERE id = ?'\n")
    (package / "state" / "store.py").write_text(
        "MIGRATIONS = (\n    'UPDATE turns SET state = 1',\n)\n"
        "LATER = 'UPDATE sessions SET state = 2'\n"
    )
    found = row_writers(package)
    assert [f.split(": ")[0:2] for f in found] == [
        ["spexsup/mod.py:1", "turns"],
        ["spexsup/mod.py:2", "sessions"],
        ["spexsup/mod.py:4", "turns"],
        ["spexsup/mod.py:6", "usage_days"],
        ["spexsup/mod.py:7", "wave_turns"],
        ["spexsup/mod.py:10", "?"],
        ["spexsup/mod.py:11", "verifications"],
        ["spexsup/pane/deep.py:3", "wake_keys"],
        ["spexsup/state/store.py:4", "sessions"],
    ], found
    assert found[1].endswith("UPDATE sessions SET launch_fence = 2 WHERE name = ?")
