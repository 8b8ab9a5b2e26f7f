"""Idempotent wakes (issue 25, item 7): `--key K` on wake and fanout. A
second wake with a key already used starts no second turn and answers with
the first one's; a refused wake leaves no key; a key lives as its turn (or
queue entry) and its session do."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import time
from pathlib import Path

from conftest import SPEX, Env, retry_until

from spexsup.core import sessions
from spexsup.pane import report
from spexsup.turn.admit import admit
from spexsup.turn.request import WakeRequest


def db(env: Env) -> sqlite3.Connection:
    conn = sqlite3.connect(env.home / "state.db", timeout=5)
    conn.row_factory = sqlite3.Row
    return conn


def count(env: Env, table: str, session: str | None = None) -> int:
    with db(env) as conn:
        if session is None:
            return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        query = f"SELECT count(*) FROM {table} WHERE session = ?"
        return int(conn.execute(query, (session,)).fetchone()[0])


def keys(env: Env) -> dict[str, tuple[str, str | None, str | None]]:
    with db(env) as conn:
        rows = conn.execute("SELECT key, session, turn, queued FROM wake_keys").fetchall()
    return {r["key"]: (r["session"], r["turn"], r["queued"]) for r in rows}


def new(env: Env, name: str, script: str = "sleep 3") -> None:
    r = env.run("new", name, "--", "bash", "-c", script)
    assert r.returncode == 0, r.stderr


def wake(env: Env, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    r = env.run("wake", *args, "--json")
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def test_ten_concurrent_wakes_with_one_key_start_one_turn(env: Env) -> None:
    new(env, "a", "sleep 5")
    procs = [
        subprocess.Popen(
            [SPEX, "wake", "a", "--key", "nightly-1", "go", "--window", "0.5", "--json"],
            env=env.vars,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(10)
    ]
    answers = []
    for p in procs:
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, (out, err)
        answers.append(json.loads(out))
    assert count(env, "turns", "a") == 1
    (turn,) = {v["turn"] for v in answers}
    assert turn is not None
    assert {v["verdict"] for v in answers} == {"confirmed"}
    assert [v["repeat"] for v in answers].count(False) == 1
    assert all(v["key"] == "nightly-1" for v in answers)
    assert all(v["state"] == "running" for v in answers if v["repeat"])
    assert keys(env) == {"nightly-1": ("a", turn, None)}


def test_a_repeat_after_the_turn_completed_names_the_same_turn(env: Env) -> None:
    new(env, "a", "exit 0")
    code, first = wake(env, "a", "--key", "k", "go", "--window", "5")
    assert (code, first["verdict"], first["repeat"], first["state"]) == (
        0,
        "completed",
        False,
        None,
    ), first
    code, again = wake(env, "a", "--key", "k", "go", "--window", "5")
    assert (code, again["verdict"], again["turn"], again["rc"]) == (
        0,
        "completed",
        first["turn"],
        0,
    )
    assert again["repeat"] is True and again["state"] == "complete"
    text = env.run("wake", "a", "--key", "k", "go")
    assert text.returncode == 0
    assert re.fullmatch(
        rf"a: completed turn {first['turn']}( pid \d+)? rc=0"
        r" \(repeat of key k: it ended complete\)\n",
        text.stdout,
    ), text.stdout
    assert count(env, "turns", "a") == 1


def test_a_key_reused_for_another_prompt_or_options_is_refused(env: Env) -> None:
    """Issue 38, item 2: `wake api --key K <another prompt>` answered with the
    first turn as a repeat. A key names one wake: the same prompt and options
    repeat it; another prompt, or other turn options, is refused (exit 3),
    with the turn the key names, and nothing starts."""
    new(env, "a", "exit 0")
    code, first = wake(env, "a", "--key", "K", "go", "--window", "5")
    assert code == 0 and first["repeat"] is False, first
    said = f"spex: key 'K' was used for a different prompt (turn {first['turn']})"
    for other in (["go", "on"], ["go", "--timeout", "30"], ["go", "--fresh"], ["-m", "go "]):
        r = env.run("wake", "a", "--key", "K", *other, "--window", "5")
        assert r.returncode == 3 and r.stdout == "", (other, r.stdout)
        assert r.stderr.startswith(said + " ("), (other, r.stderr)
    # The window says how to wake, not what the turn is: still a repeat.
    code, again = wake(env, "a", "--key", "K", "-m", "go", "--window", "9")
    assert code == 0 and again["repeat"] is True and again["turn"] == first["turn"]
    assert count(env, "turns", "a") == 1
    # A key that names a queued prompt alike.
    new(env, "b", "sleep 30")
    assert wake(env, "b", "go", "--window", "5")[0] == 0
    code, queued = wake(env, "b", "--queue", "--key", "Q", "later")
    assert code == 0 and queued["verdict"] == "queued"
    r = env.run("wake", "b", "--queue", "--key", "Q", "sooner")
    assert r.returncode == 3
    assert f"key 'Q' was used for a different prompt (queue entry {queued['queued']})" in r.stderr
    assert wake(env, "b", "--queue", "--key", "Q", "later")[1]["repeat"] is True


def test_a_failed_start_stays_failed_under_its_key(env: Env) -> None:
    """The key names the turn it started, even one that failed: the same
    answer (exit 1); a new key tries again."""
    new(env, "a", "exit 7")
    code, first = wake(env, "a", "--key", "k", "go", "--window", "3")
    assert (code, first["verdict"], first["rc"]) == (1, "failed", 7)
    code, again = wake(env, "a", "--key", "k", "go", "--window", "3")
    assert (code, again["verdict"], again["turn"], again["rc"]) == (1, "failed", first["turn"], 7)
    assert again["repeat"] is True and again["error"]
    assert count(env, "turns", "a") == 1


def held(env: Env) -> tuple[str, Path]:
    """A script whose turn with the prompt `first` runs until the go file
    exists (the command harness passes the prompt as $0): a test gates on
    it, never on a sleep outlasting its checks on a loaded machine."""
    go = env.root / "go"
    return f'if [ "$0" = first ]; then while [ ! -e {go} ]; do sleep 0.05; done; fi', go


def test_a_queued_key_is_queued_once_and_then_names_its_turn(env: Env) -> None:
    script, go = held(env)
    new(env, "a", script)
    assert wake(env, "a", "first", "--window", "0.3")[1]["verdict"] == "confirmed"
    code, queued = wake(env, "a", "--queue", "--key", "q", "second")
    assert (code, queued["verdict"], queued["position"], queued["repeat"]) == (
        0,
        "queued",
        1,
        False,
    )
    code, again = wake(env, "a", "--queue", "--key", "q", "second")
    assert (code, again["verdict"], again["queued"], again["position"]) == (
        0,
        "queued",
        queued["queued"],
        1,
    )
    assert again["repeat"] is True and again["turn"] is None and again["state"] == "queued"
    # Without --queue too: the key names the entry, never a busy refusal.
    code, plain = wake(env, "a", "--key", "q", "second")
    assert (code, plain["verdict"], plain["queued"]) == (0, "queued", queued["queued"])
    assert count(env, "queue") == 1
    go.touch()
    # Launched by the end of the first turn: the key follows the entry into its turn.
    assert retry_until(lambda: count(env, "turns", "a") == 2 and count(env, "queue") == 0, 30)
    code, later = wake(env, "a", "--queue", "--key", "q", "second")
    assert (code, later["verdict"], later["queued"]) == (0, "queued", queued["queued"])
    assert later["turn"] is not None and later["state"] in ("starting", "running", "complete")
    assert keys(env)["q"] == ("a", later["turn"], queued["queued"])
    text = env.run("wake", "a", "--key", "q", "second").stdout
    assert text.startswith(f"a: queued {queued['queued']} (repeat of key q: it became turn ")
    assert count(env, "turns", "a") == 2


def test_a_keyed_after_wake_is_queued_once(env: Env) -> None:
    script, go = held(env)
    new(env, "a", script)
    new(env, "b", "exit 0")
    assert wake(env, "a", "first", "--window", "0.3")[1]["verdict"] == "confirmed"
    code, queued = wake(env, "b", "--after", "a", "--key", "k", "review")
    assert (code, queued["verdict"], queued["repeat"]) == (0, "queued", False), queued
    code, again = wake(env, "b", "--after", "a", "--key", "k", "review")
    assert (code, again["verdict"], again["queued"], again["repeat"]) == (
        0,
        "queued",
        queued["queued"],
        True,
    )
    assert count(env, "queue") == 1
    go.touch()
    # a completes, b's prompt launches: the key names that turn.
    assert retry_until(lambda: count(env, "turns", "b") == 1 and count(env, "queue") == 0, 30)
    later = wake(env, "b", "--after", "a", "--key", "k", "review")[1]
    assert later["turn"] is not None and later["queued"] == queued["queued"]
    assert count(env, "turns", "b") == 1


def test_a_dropped_queue_entry_drops_its_key(env: Env) -> None:
    new(env, "a", "sleep 300")  # still running when the second prompt is queued
    assert wake(env, "a", "first", "--window", "0.3")[1]["verdict"] == "confirmed"
    entry = wake(env, "a", "--queue", "--key", "q", "second")[1]["queued"]
    assert env.run("queue", "rm", entry).returncode == 0
    assert keys(env) == {}
    code, fresh = wake(env, "a", "--queue", "--key", "q", "second")
    assert (code, fresh["verdict"], fresh["repeat"]) == (0, "queued", False)
    assert fresh["queued"] != entry


def test_a_refused_wake_leaves_no_key_and_a_retry_starts_the_turn(env: Env) -> None:
    r = env.run("wake", "nosuch", "--key", "k", "go")
    assert r.returncode == 3 and "no session named 'nosuch'" in r.stderr
    new(env, "a", "sleep 3")
    assert env.run("stop", "a").returncode == 0
    r = env.run("wake", "a", "--key", "k", "go")
    assert r.returncode == 3 and "is stopped" in r.stderr
    assert keys(env) == {} and count(env, "turns") == 0
    assert env.run("resume", "a").returncode == 0
    code, v = wake(env, "a", "--key", "k", "go", "--window", "0.3")
    assert (code, v["verdict"], v["repeat"]) == (0, "confirmed", False), v
    assert keys(env) == {"k": ("a", v["turn"], None)}


def test_a_wake_that_never_launched_gives_its_key_back(env: Env) -> None:
    """The pane runs a person's command: the admission is undone, and so is
    the key; `--force` with the same key then starts the turn."""
    new(env, "a", "sleep 3")
    env.tmux("send-keys", "-t", "=a:0.0", "sleep 30", "Enter")
    assert retry_until(
        lambda: (
            env.tmux("display", "-p", "-t", "=a:0.0", "#{pane_current_command}").stdout.strip()
            == "sleep"
        )
    )
    r = env.run("wake", "a", "--key", "k", "go")
    assert r.returncode == 3 and "pane is running" in r.stderr, r.stderr
    assert keys(env) == {}
    code, v = wake(env, "a", "--key", "k", "go", "--force", "--window", "0.3")
    assert (code, v["verdict"], v["repeat"]) == (0, "confirmed", False), v


def test_a_retried_fanout_starts_no_leg_twice(env: Env) -> None:
    for name in ("a", "b", "c"):
        new(env, name, "sleep 4")
    assert env.run("stop", "c").returncode == 0
    first = env.run("fanout", "a", "b", "c", "-m", "go", "--key", "F", "--window", "0.3", "--json")
    assert first.returncode == 1, first.stderr  # c was refused: stopped
    legs = {leg["session"]: leg for leg in json.loads(first.stdout)["legs"]}
    assert legs["c"]["verdict"] == "refused"
    assert set(keys(env)) == {"F/a", "F/b"}
    assert env.run("resume", "c").returncode == 0
    again = env.run("fanout", "a", "b", "c", "-m", "go", "--key", "F", "--window", "0.3", "--json")
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    retried = {leg["session"]: leg for leg in doc["legs"]}
    assert doc["key"] == "F"
    for name in ("a", "b"):
        assert retried[name]["turn"] == legs[name]["turn"]
        assert retried[name]["repeat"] is True and retried[name]["verdict"] == "confirmed"
    assert retried["c"]["verdict"] == "confirmed" and not retried["c"].get("repeat")
    assert [count(env, "turns", n) for n in ("a", "b", "c")] == [1, 1, 1]
    text = env.run("fanout", "a", "b", "c", "-m", "go", "--key", "F")
    assert text.returncode == 0
    assert text.stdout.count("(repeat of its key: no second turn)") == 3
    assert [count(env, "turns", n) for n in ("a", "b", "c")] == [1, 1, 1]


def test_the_same_key_for_another_session_is_refused(env: Env) -> None:
    new(env, "a", "sleep 3")
    new(env, "b", "sleep 3")
    assert wake(env, "a", "--key", "k", "go", "--window", "0.3")[0] == 0
    r = env.run("wake", "b", "--key", "k", "go")
    assert r.returncode == 3
    assert r.stderr.startswith("spex: key 'k' names a turn of a (")
    assert r.stderr.count("\n") == 1
    assert count(env, "turns", "b") == 0


def test_a_bad_key_is_exit_2_and_changes_nothing(env: Env) -> None:
    new(env, "a", "sleep 3")
    # A NUL cannot reach argv at all; these are what can.
    for bad in ("", "x" * 201, "tab\there", "new\nline", "bell\x07"):
        for argv in (["wake", "a", "--key", bad, "go"], ["fanout", "a", "-m", "go", "--key", bad]):
            r = env.run(*argv)
            assert r.returncode == 2, (bad, r.stderr)
            assert r.stderr.startswith("spex: invalid --key ") and r.stderr.count("\n") == 1
    assert count(env, "turns") == 0 and keys(env) == {}
    assert wake(env, "a", "--key", "x" * 200, "go", "--window", "0.3")[0] == 0
    # Any printable text is a key (this one is refused only because a is busy).
    r = env.run("wake", "a", "--key", "déploiement 1/2", "go")
    assert r.returncode == 3 and "is busy" in r.stderr, r.stderr


def test_a_removed_session_takes_its_keys_along(env: Env) -> None:
    new(env, "a", "exit 0")
    first = wake(env, "a", "--key", "k", "go", "--window", "3")[1]
    assert first["verdict"] == "completed"
    assert env.run("rm", "a").returncode == 0
    assert keys(env) == {}
    new(env, "a", "exit 0")
    code, v = wake(env, "a", "--key", "k", "go", "--window", "3")
    assert (code, v["verdict"], v["repeat"]) == (0, "completed", False)
    assert v["turn"] != first["turn"]


def test_a_pruned_turn_takes_its_key_along(env: Env, tmp_path: Path) -> None:
    spex = env.spex()
    sessions.create(spex, "a", sessions.Spec(harness="demo", cwd=str(tmp_path)))
    made = []
    for n in range(3):
        _, turn, directory, _, _ = admit(spex, WakeRequest("a", b"hello", fresh=True, key=f"k{n}"))
        report.record_exit(spex.store, "a", turn, 0, directory)
        made.append(turn)
    with spex.store.tx() as conn:
        old = time.time() - 200 * 86400
        for n, turn in enumerate(made):
            conn.execute("UPDATE turns SET started_at = ? WHERE id = ?", (old + n, turn))
    (env.home / "config.toml").write_text("[retention]\nkeep_turns = 1\nkeep_days = 90\n")
    r = env.run("prune", "--json")
    assert r.returncode == 0, r.stderr
    assert keys(env) == {"k2": ("a", made[2], None)}


def test_only_the_ledger_writes_wake_keys() -> None:
    """Keys are claimed, moved and dropped by ledger functions only, inside
    the transactions that admit, enqueue, dequeue, drop, prune and remove."""
    from test_ledger import PACKAGE, in_ledger, migration_lines, sql_strings

    writes = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+wake_keys\b", re.IGNORECASE)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        skip = migration_lines(path) if path.name == "store.py" else range(0)
        for line, text in sql_strings(path):
            if line not in skip and writes.search(text):
                found.append((path, line))
    assert found and all(in_ledger(path) for path, _ in found), found
