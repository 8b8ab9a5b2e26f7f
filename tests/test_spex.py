"""The composition root: `open_store` gives a store its listeners (the event
log, then the hooks); a store without them changes state and announces nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Env, retry_until
from test_hooks import claims, recorder, runs

from spexsup.core.spex import HOOKS, open_store
from spexsup.state import events
from spexsup.state.store import Store


def create(store: Store, name: str) -> int:
    """One committed transition with its event: session `name` created."""
    with store.tx() as db:
        db.execute(
            "INSERT INTO sessions (name, harness, cwd, created_at) VALUES (?, 'demo', '/', 0)",
            (name,),
        )
        return events.record(db, "created", session=name)


def test_a_store_without_listeners_records_events_and_announces_nothing(env: Env) -> None:
    out = recorder(env, '["created"]')
    store = Store(env.home)
    event = create(store, "a")
    assert events.read(store.db)[0]["id"] == event
    assert not (env.home / "events").exists()  # no summary, no tick
    assert claims(env) == []
    assert runs(out) == []


def test_open_store_writes_the_summary_and_the_tick_and_fires_the_hooks(env: Env) -> None:
    out = recorder(env, '["created"]', "{session}")
    store = open_store(env.home)
    event = create(store, "a")
    assert (env.home / "events" / "status").read_text().startswith("running=0\nok=1\n")
    assert int((env.home / "events" / "tick").read_text()) == event
    # Claimed in the event's transaction, run once by a detached runner.
    assert retry_until(lambda: claims(env) == [("rec", "exit 0")], seconds=30), claims(env)
    assert [args for args, _ in runs(out)] == [["a"]]


class Refuse:
    """A listener after the hooks that sees the transaction's claims, then
    makes it roll back (as a failing COMMIT would)."""

    seen: list[tuple[int, str]]

    def __init__(self) -> None:
        self.seen = []

    def migrated(self, store: Store) -> None:
        pass

    def before_commit(self, store: Store) -> None:
        if events.pending_ids(store.db):  # not the migration's transaction
            self.seen += [tuple(r) for r in store.db.execute("SELECT event, hook FROM hook_runs")]
            raise RuntimeError("refused")

    def after_commit(self, store: Store) -> None:
        assert not events.pending_ids(store.db)

    def discard(self, db: Any) -> None:
        pass


def test_a_hook_claim_commits_with_its_event_or_not_at_all(env: Env) -> None:
    out = recorder(env, '["created"]', "{session}")
    refuse = Refuse()
    store = Store(env.home, (events, HOOKS, refuse))
    with pytest.raises(RuntimeError, match="refused"):
        create(store, "a")
    # The claim existed inside the transaction, and went with it.
    assert [hook for _, hook in refuse.seen] == ["rec"]
    assert events.read(store.db) == [] and claims(env) == []
    assert not (env.home / "events" / "tick").exists()
    store.close()
    # Nothing of the rolled-back transaction is left pending: the next one
    # claims and announces its own event only.
    store = open_store(env.home)
    event = create(store, "b")
    assert int((env.home / "events" / "tick").read_text()) == event
    assert retry_until(lambda: claims(env) == [("rec", "exit 0")], seconds=30), claims(env)
    assert [args for args, _ in runs(out)] == [["b"]]


PROBE = """
import json, sys
from pathlib import Path
from spexsup.state import events
from spexsup.core.spex import open_store
store = open_store(Path(sys.argv[1]))
with store.tx() as db:
    events.record(db, "created", session="a")
print(json.dumps("spexsup.core.hooks" in sys.modules))
"""


def test_the_hooks_are_imported_only_with_a_hook_table_and_hooks_on(
    env: Env, tmp_path: Path
) -> None:
    """The exit reporter commits through the hooks listener on every turn end:
    without a `[[hook]]` table (or with hooks off) it never imports `hooks`."""

    def imported(home: Path, **extra: str) -> bool:
        r = subprocess.run(
            [sys.executable, "-c", PROBE, str(home)],
            env={**env.vars, **extra},
            capture_output=True,
            text=True,
            check=True,
        )
        return bool(json.loads(r.stdout))

    assert imported(tmp_path / "plain") is False
    recorder(env, '["wave-ended"]')  # a hook that this event does not fire
    assert imported(env.home, SPEXSUP_NO_HOOKS="1") is False
    assert imported(env.home) is True


def imported_modules(module: str) -> set[str]:
    """The spexsup modules `module` imports anywhere in its body (inside
    functions too), except under `if TYPE_CHECKING:`."""
    import ast

    import spexsup

    path = Path(spexsup.__file__).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    found: set[str] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module:
                found.add(child.module)
                found.update(f"{child.module}.{a.name}" for a in child.names)
            walk(child)

    walk(ast.parse(path.read_text()))
    return found


def test_the_store_the_event_log_and_the_hooks_never_import_what_composes_them() -> None:
    """Only `spex` wires the store to its listeners: store -> events -> hooks
    -> store was a circle once."""
    assert not imported_modules("spexsup.state.store") & {
        "spexsup.state.events",
        "spexsup.core.hooks",
        "spexsup.core.spex",
    }
    above = {"spexsup.core.hooks", "spexsup.core.spex"}
    assert not imported_modules("spexsup.state.events") & above
    assert "spexsup.core.spex" not in imported_modules("spexsup.core.hooks")
