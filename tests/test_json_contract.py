"""Every command that takes `--json` keeps the README's JSON contract.

The commands are found in the CLI itself (every command and subcommand
with a `--json` option), so a new one fails `test_every_json_command_is_in_the_tables`
until it is given a way to run here. Each is run through the installed
`spex` against real state (sessions with complete, failed and running
turns, a wave, a fleet wave through `local:`, best-of worktree sessions
and their salvage, a lease, a revived turn), and every document it prints
is checked:

- every document (the top-level object, or each element of a top-level
  list, or each line of JSON Lines) has `schema_version: 1`;
- every epoch time (`at`, `*_at`, `limit_reset`, `waiting_until`,
  `deadline`, and any number that looks like one) has its `<key>_iso`
  twin holding the same instant, at any depth, and every `_iso` its epoch;
- a document saying `ok: false` carries `error` and `exit_code` (the
  process's own), but for wake's verdict, which has `verdict` instead;
- through a pipe a document is one line.

Each is also run in a failing way: the error document on stdout (`ok:
false`, `error`, `exit_code` equal to the exit code) and one `spex: …`
line on stderr.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from conftest import SPEX, Env, harness
from test_worktree import make_repo

# --- what is checked -------------------------------------------------------------

# Epoch times named otherwise than `at` / `*_at`.
EPOCH_KEYS = frozenset({"at", "limit_reset", "waiting_until", "deadline"})
# Numbers this large that are not times (none yet: sizes in a test home are small).
NOT_TIMES: frozenset[str] = frozenset()
# 2001-09-09 .. 2286-11-20: a number in here is taken for an epoch time.
EPOCH_RANGE = (1e9, 1e10)


def is_epoch_key(key: str) -> bool:
    return key in EPOCH_KEYS or key.endswith("_at")


def looks_like_epoch(value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and EPOCH_RANGE[0] <= value < EPOCH_RANGE[1]


def iso_instant(text: str) -> float:
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text[:-1] + "+00:00").timestamp()


def time_problems(data: Any, where: str) -> list[str]:
    """Every epoch time without its ISO twin (or with a wrong one), at any depth."""
    found: list[str] = []
    if isinstance(data, list):
        for i, v in enumerate(data):
            found += time_problems(v, f"{where}[{i}]")
        return found
    if not isinstance(data, dict):
        return found
    for key, value in data.items():
        path = f"{where}.{key}"
        found += time_problems(value, path)
        if key.endswith("_iso"):
            base = key.removesuffix("_iso")
            if base not in data:
                found.append(f"{path}: an ISO time without its epoch {base!r}")
            continue
        epoch = is_epoch_key(key) and (value is None or looks_like_epoch(value))
        if not epoch and looks_like_epoch(value) and key not in NOT_TIMES:
            epoch = True  # a time by any other name
        if not epoch:
            continue
        twin = data.get(f"{key}_iso", "missing")
        if twin == "missing":
            found.append(f"{path}: epoch time {value!r} has no {key}_iso")
        elif value is None:
            if twin is not None:
                found.append(f"{path}: null but {key}_iso is {twin!r}")
        elif not isinstance(twin, str) or abs(iso_instant(twin) - float(value)) >= 0.001:
            found.append(f"{path}: {key}_iso {twin!r} is not the instant {value!r}")
    return found


def documents(stdout: str, json_lines: bool) -> list[Any]:
    """The documents printed: each line of JSON Lines, each element of a
    top-level list, or the one object."""
    if json_lines:
        return [json.loads(line) for line in stdout.splitlines() if line.strip()]
    lines = [line for line in stdout.splitlines() if line.strip()]
    # Through a pipe, one compact line per document (several: maint's command printed them).
    parsed = [json.loads(line) for line in lines]
    out: list[Any] = []
    for p in parsed:
        out += p if isinstance(p, list) else [p]
    return out


def contract_problems(r: subprocess.CompletedProcess[str], json_lines: bool) -> list[str]:
    try:
        docs = documents(r.stdout, json_lines)
    except ValueError as e:
        return [f"stdout is not JSON ({e}): {r.stdout[:200]!r}"]
    found = []
    for i, doc in enumerate(docs):
        where = f"doc[{i}]"
        if not isinstance(doc, dict):
            found.append(f"{where}: not an object: {doc!r}"[:200])
            continue
        if doc.get("schema_version") != 1:
            found.append(f"{where}: schema_version is {doc.get('schema_version')!r}")
        found += time_problems(doc, where)
        # ok false is the failure document, but for wake's verdict (its own
        # shape: `verdict`, `error`; the remote renderer and scripts tell a
        # failure document by its exit_code).
        if doc.get("ok") is False:
            if "verdict" not in doc and doc.get("exit_code") != r.returncode:
                found.append(f"{where}: ok false, exit_code {doc.get('exit_code')!r}"
                             f" but the exit code is {r.returncode}")  # fmt: skip
            if not isinstance(doc.get("error"), str) or not doc["error"]:
                found.append(f"{where}: ok false without an error")
    return found


# --- the commands ------------------------------------------------------------------


def json_commands() -> set[str]:
    """Every command path (`hooks ls`) whose command takes `--json`, hidden ones too."""
    import typer

    from spexsup.cli.app import app, register

    register()
    found: set[str] = set()

    def walk(command: Any, path: list[str]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands is not None:
            for name, sub in subcommands.items():
                walk(sub, [*path, name])
            return
        if any("--json" in getattr(p, "opts", ()) for p in command.params):
            found.add(" ".join(path))

    walk(typer.main.get_command(app), [])
    return found


class Call(NamedTuple):
    args: tuple[str, ...]
    codes: tuple[int, ...] = (0,)
    json_lines: bool = False


def call(*args: str, codes: tuple[int, ...] = (0,), json_lines: bool = False) -> Call:
    return Call(args, codes, json_lines)


# `spex --version --json` is the root's, not a command's (another host's spex asks it).
ROOT = "--version"
JSON = "--json"

# How each command is run with real state (the placeholders are filled in
# by the setup below), with the exit codes it may give: a wave or a wait
# with a failed turn exits 1 by design and prints its result.
SUCCESS: dict[str, list[Call]] = {
    ROOT: [call("--version", "--json")],
    "new": [call("new", "fresh", "--json", "--", "{exit0}")],
    "wake": [
        call("wake", "ok", "go", "--json"),
        call("wake", "bad", "go", "--json", codes=(1,)),
    ],
    "wait": [call("wait", "ok", "bad", "--json", codes=(1,)), call("wait", "ok", "--json")],
    "log": [call("log", "bad", "--json")],
    "verify": [
        call("verify", "ok", "--verify", "true", "--json"),
        call("verify", "bad", "--verify", "exit 3", "--json", codes=(1,)),
    ],
    "stop": [call("stop", "sl", "--json"), call("stop", "ok", "fresh", "--json")],
    "resume": [call("resume", "sl", "--json"), call("resume", "--all", "--json")],
    "up": [call("up", "ok", "--json"), call("up", "--all", "--json")],
    "ls": [
        call("ls", "--json"),
        call("ls", "--state", "failed", "--json"),
        call("ls", "--all-hosts", "--json", codes=(1,)),
    ],
    "show": [call("show", "bad", "--json"), call("show", "j-1", "--json")],
    "edit": [
        call("edit", "ok", "--timeout", "5m", "--json"),
        call("edit", "ok", "--timeout", "6m", "--dry-run", "--json"),
    ],
    "top": [call("top", "--json")],
    "rm": [
        call("rm", "fresh", "--dry-run", "--json"),
        call("rm", "fresh", "--json"),
        call("rm", "busy", "ok", "--json", codes=(3,)),
    ],
    "fanout": [
        call("fanout", "ok", "bad", "-m", "hi", "--json", codes=(1,)),
        call("fanout", "ok", "bad", "-m", "hi", "--wait", "--json", codes=(1,)),
        call("fanout", "--retry-failed", "last", "--json", codes=(1,)),
        call("fanout", "--retry-failed", "{complete_wave}", "--json"),
        call("fanout", "local:ok", "local:bad", "-m", "hi", "--json", codes=(1,)),
    ],
    "wave ls": [call("wave", "ls", "--json"), call("wave", "--json")],
    "waves ls": [call("waves", "ls", "--json"), call("waves", "--json")],
    "wave show": [call("wave", "last", "--json"), call("wave", "{fleet_wave}", "--json")],
    "waves show": [call("waves", "show", "last", "--json")],
    "cost": [call("cost", "--json"), call("cost", "--by", "wave", "--since", "1d", "--json")],
    "maint": [
        call("maint", "--status", "--json"),
        call("maint", "ls", "--json"),
        call("maint", "--stop", "sl", "--resume", "sl", "--", "{lease_script}"),
    ],
    # Inside a maint command, as they must run; its stdout is theirs.
    "maint-op stop": [
        call("maint", "--stop", "sl", "--", "{spex}", "maint-op", "stop", "sl", JSON)
    ],
    "maint-op resume": [
        call("maint", "--resume", "sl", "--", "{spex}", "maint-op", "resume", "sl", JSON)
    ],
    "prune": [
        call("prune", "--dry-run", "--json"),
        call("prune", "--json"),
        call("prune", "--salvage", "--dry-run", "--json"),
    ],
    "du": [call("du", "--json")],
    "doctor": [call("doctor", "--json")],
    "harness ls": [call("harness", "ls", "--json")],
    "harness show": [call("harness", "show", "demo", "--json")],
    "hosts ls": [call("hosts", "ls", "--json", codes=(1,)), call("hosts", "--json", codes=(1,))],
    "events": [call("events", "--json", json_lines=True)],
    "hooks ls": [call("hooks", "ls", "--json")],
    "queue ls": [call("queue", "ls", "--json"), call("queue", "ls", "busy", "--json")],
    "queue rm": [call("queue", "rm", "{entry}", "--json")],
    "queue clear": [call("queue", "clear", "busy", "--json")],
    "hooks test": [call("hooks", "test", "1", "--json")],
    "notify ls": [call("notify", "ls", "--json"), call("notify", "--json")],
    "notify test": [call("notify", "test", "gone", "--json", codes=(1,))],
    "schedule add": [call("schedule", "add", "ok", "--every", "1h", "-m", "tick", "--json")],
    "schedule ls": [call("schedule", "ls", "--json"), call("schedule", "ls", "ok", "--json")],
    "schedule run": [
        call("schedule", "run", "{schedule}", "--json"),
        call("schedule", "run", "{busy_schedule}", "--json", codes=(3,)),
    ],
    "schedule rm": [call("schedule", "rm", "{schedule}", "--json")],
    "diff": [call("diff", "j-1", "--json")],
    "keep": [call("keep", "{best_of}", "1", "--json")],
    "trust": [
        call("trust", "{repo}", "--json"),
        call("trust", "--list", "--json"),
        call("trust", "ls", "--json"),
        call("trust", "--revoke", "{repo}", "--json"),
    ],
    "worktree ls": [call("worktree", "ls", "--json"), call("worktree", "--json")],
    "worktree status": [call("worktree", "status", "--json")],
}

# A failing way to run each: an unknown session or id, a bad value, or a
# state home that is not there.
FAILURE: dict[str, list[Call]] = {
    "new": [call("new", "a/b", "--json"), call("new", "ok", "--json", "--", "{exit0}")],
    "wake": [call("wake", "nosuch", "hi", "--json"), call("wake", "ok", "--json")],
    "wait": [call("wait", "nosuch", "--json")],
    "log": [call("log", "nosuch", "--json"), call("log", "ok", "--turn", "zzz", "--json")],
    "verify": [call("verify", "nosuch", "--json"), call("verify", "ok", "--json")],
    "stop": [call("stop", "nosuch", "--json")],
    "resume": [call("resume", "nosuch", "--json")],
    "up": [call("up", "nosuch", "--json"), call("up", "--revive", "nosuch", "--json")],
    "ls": [call("ls", "--state", "bogus", "--json"), call("-H", "far", "ls", "--json")],
    # (far: a host whose ssh is refused, as in the other doors' rows)
    "show": [call("show", "nosuch", "--json"), call("show", "far:x", "--json")],
    "edit": [call("edit", "nosuch", "--timeout", "5m", "--json")],
    "top": [call("--home", "{nohome}", "top", "--json")],
    "rm": [call("rm", "nosuch", "--json")],
    "fanout": [
        call("fanout", "--retry-failed", "wnope", "--json"),
        call("fanout", "ok", "-m", "", "--json"),
    ],
    "wave ls": [call("--home", "{nohome}", "wave", "ls", "--json")],
    "waves ls": [call("--home", "{nohome}", "waves", "--json")],
    "wave show": [call("wave", "wnope", "--json"), call("wave", "bad/id", "--json")],
    "waves show": [call("waves", "show", "wnope", "--json")],
    "cost": [call("cost", "--by", "week", "--json"), call("cost", "--since", "x", "--json")],
    "maint": [call("maint", "--status", "--all", "--json")],
    "maint-op stop": [call("maint-op", "stop", "ok", "--json")],
    "maint-op resume": [call("maint-op", "resume", "ok", "--json")],
    "prune": [call("prune", "--older-than", "xx", "--json")],
    "du": [call("--home", "{nohome}", "du", "--json")],
    "doctor": [call("--home", "{nohome}", "doctor", "--json")],
    "harness ls": [call("--home", "{nohome}", "harness", "ls", "--json")],
    "harness show": [call("harness", "show", "nosuch", "--json")],
    "hosts ls": [call("--home", "{nohome}", "hosts", "--json")],
    "events": [call("events", "--session", "no/such", "--json")],
    "hooks ls": [call("--home", "{nohome}", "hooks", "ls", "--json")],
    "queue ls": [call("queue", "ls", "nosuch", "--json")],
    "queue rm": [call("queue", "rm", "qnothing", "--json")],
    "queue clear": [call("queue", "clear", "nosuch", "--json")],
    "hooks test": [call("hooks", "test", "999", "--json")],
    "notify ls": [call("--home", "{nohome}", "notify", "ls", "--json")],
    "notify test": [call("notify", "test", "nosuch", "--json")],
    "schedule add": [
        call("schedule", "add", "nosuch", "--every", "1h", "-m", "x", "--json"),
        call("schedule", "add", "ok", "--cron", "0 0 30 2 *", "-m", "x", "--json"),
    ],
    "schedule ls": [call("schedule", "ls", "nosuch", "--json")],
    "schedule run": [call("schedule", "run", "snothing", "--json")],
    "schedule rm": [call("schedule", "rm", "snothing", "--json")],
    "diff": [call("diff", "nosuch", "--json")],
    "keep": [call("keep", "wnope", "1", "--json")],
    "trust": [call("trust", "{root}/nowhere", "--json")],
    "worktree ls": [call("worktree", "ls", "nosuch", "--json")],
    "worktree status": [call("worktree", "status", "nosuch", "--json")],
}


def test_every_json_command_is_in_the_tables() -> None:
    found = json_commands()
    assert set(SUCCESS) - {ROOT} == found, (
        f"commands with --json but no way to run them here: {sorted(found - set(SUCCESS))};"
        f" in the table but without --json: {sorted(set(SUCCESS) - {ROOT} - found)}"
    )
    assert set(FAILURE) == found, sorted(found ^ set(FAILURE))


# --- the state they run against ----------------------------------------------------


def spex_ok(env: Env, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    r = env.run(*args, timeout=timeout)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


# A notify target that cannot be reached: its port refuses at once.
GONE = (
    '[[notify]]\nname = "gone"\nservice = "ntfy"\nurl = "http://127.0.0.1:9/t"\n'
    "attempts = 1\nwindow = 0\n\n"
)
# A host that cannot be reached: its ssh is refused at once.
FAR = '[host.far]\nssh = "127.0.0.1"\nssh_options = ["-p", "1"]\nconnect_timeout = 1\n'


def build_state(env: Env, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Sessions with a complete, a failed and a running turn; a partial wave
    and a complete one; a fleet wave; a best-of-2 wave of worktree sessions
    with a salvage branch; a trusted .spexsup.toml; a hook; an unreachable host."""
    repo = make_repo(env, monkeypatch)  # also: default_harness = "demo"
    with (env.home / "config.toml").open("a") as f:
        f.write('\n[[hook]]\non = ["created"]\nrun = ["true"]\n\n' + GONE + FAR)
    boot = env.root / "boot_id"
    boot.write_text("boot-one\n")
    env.vars["SPEXSUP_BOOT_ID_FILE"] = str(boot)
    spex_ok(env, "new", "ok", "--", harness("exit0.sh"))
    spex_ok(env, "new", "bad", "--", harness("exit7.sh"))
    spex_ok(env, "new", "sl", "--", harness("sleeper.sh"))
    spex_ok(env, "new", "busy", "--", harness("sleeper.sh"))
    spex_ok(env, "wake", "ok", "go")
    assert env.run("wake", "bad", "go").returncode == 1
    spex_ok(env, "wake", "sl", "go", "--window", "0.3")
    spex_ok(env, "wake", "busy", "go", "--window", "0.3")
    # Two prompts queued behind busy's running turn: one to remove, one to clear.
    queued = json.loads(spex_ok(env, "wake", "busy", "--queue", "later", "--json").stdout)
    spex_ok(env, "wake", "busy", "--queue", "later still")
    # Schedules (on the fake crontab): one to fire and remove, one whose session is busy.
    schedule = spex_ok(env, "schedule", "add", "ok", "--cron", "0 0 1 1 *", "-m", "hi", "--json")
    busy_schedule = spex_ok(env, "schedule", "add", "busy", "--every", "1d", "-m", "hi", "--json")
    complete = json.loads(spex_ok(env, "fanout", "ok", "-m", "again", "--json").stdout)["id"]
    best = spex_ok(
        env, "fanout", "--worktrees", "2", "--repo", str(repo.path), "--prefix", "j",
        "-m", "try", "--window", "1", "--json",
    )  # fmt: skip
    spex_ok(env, "wait", "j-1", "j-2", "--timeout", "60")
    # Written after the worktrees were made: spex trust reads it.
    (repo.path / ".spexsup.toml").write_text('post_create = ["true"]\n')
    (repo.worktree("j-1") / "answer.txt").write_text("the answer\n")
    (repo.worktree("j-2") / "draft.txt").write_text("a draft\n")
    # A wave with a failed leg last, for --retry-failed last.
    assert env.run("fanout", "ok", "bad", "-m", "hi").returncode == 1
    fleet = env.run("fanout", "local:ok", "-m", "hi", "--json")
    assert fleet.returncode == 0, fleet.stderr
    assert env.run("fanout", "bad", "-m", "hi").returncode == 1
    # The maintenance command: the lease's view while held, then each operation.
    lease_script = env.root / "lease.sh"
    lease_script.write_text(
        "#!/bin/sh\n"
        "spex maint --status --json\n"
        "spex maint-op stop sl --json\n"
        "spex maint-op resume sl --json\n"
    )
    lease_script.chmod(0o755)
    return {
        "exit0": harness("exit0.sh"),
        "complete_wave": complete,
        "best_of": json.loads(best.stdout)["id"],
        "fleet_wave": json.loads(fleet.stdout)["id"],
        "repo": str(repo.path),
        "lease_script": str(lease_script),
        "spex": SPEX,
        "root": str(env.root),
        "nohome": str(env.root / "nohome"),
        "entry": queued["queued"],
        "schedule": json.loads(schedule.stdout)["id"],
        "busy_schedule": json.loads(busy_schedule.stdout)["id"],
    }


def filled(c: Call, values: dict[str, str]) -> tuple[str, ...]:
    return tuple(a.format(**values) for a in c.args)


# Hundreds of spex commands: minutes on a loaded 2-core machine.
@pytest.mark.timeout(600)
def test_every_document_keeps_the_contract(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    values = build_state(env, monkeypatch)
    problems: list[str] = []
    # Those that change what the others read run last, in an order each
    # finds what it needs (sl stopped for a resume; keep removes j-2).
    last = ["schedule rm", "queue rm", "queue clear", "stop", "maint-op resume", "maint-op stop"]
    last += ["resume"]
    last += ["keep", "rm"]
    order = [k for k in SUCCESS if k not in last] + last
    for key in order:
        for c in SUCCESS[key]:
            args = filled(c, values)
            r = env.run(*args, timeout=180)
            shown = "spex " + " ".join(args)
            if r.returncode not in c.codes:
                problems.append(f"{shown}: exit {r.returncode}, not {c.codes}: {r.stderr.strip()}")
            if not r.stdout.strip():
                problems.append(f"{shown}: printed nothing")
                continue
            problems += [f"{shown}: {p}" for p in contract_problems(r, c.json_lines)]
            single = not c.json_lines and "maint" not in args[:1]
            if single and len(r.stdout.splitlines()) != 1:
                problems.append(f"{shown}: {len(r.stdout.splitlines())} lines through a pipe")
    # The salvage branch keep made, in both of its listings.
    for args in (("worktree", "status", "--json"), ("prune", "--salvage", "--dry-run", "--json")):
        r = env.run(*args)
        assert "spex/salvage/j-2" in r.stdout, r.stdout
        problems += [f"spex {' '.join(args)}: {p}" for p in contract_problems(r, False)]
    # A reboot: up --revive re-wakes the interrupted turn and prints its wave.
    spex_ok(env, "wake", "sl", "go", "--window", "0.3")
    env.tmux("kill-server")
    Path(env.vars["SPEXSUP_BOOT_ID_FILE"]).write_text("boot-two\n")
    # (the second finds nothing left to revive: its own document)
    for want in ("legs", "revived"):
        r = env.run("up", "--revive", "--json", timeout=120)
        assert r.returncode == 0 and want in json.loads(r.stdout), (r.stdout, r.stderr)
        problems += [f"spex up --revive --json: {p}" for p in contract_problems(r, False)]
    assert problems == [], "\n".join(problems)


# Hundreds of spex commands: minutes on a loaded 2-core machine.
@pytest.mark.timeout(600)
def test_every_failure_is_the_error_document(env: Env) -> None:
    spex_ok(env, "new", "ok", "--", harness("exit0.sh"))
    (env.home / "config.toml").write_text(FAR)
    values = {"exit0": harness("exit0.sh"), "root": str(env.root), "nohome": str(env.root / "no")}
    problems: list[str] = []
    for calls in FAILURE.values():
        for c in calls:
            args = filled(c, values)
            r = env.run(*args)
            shown = "spex " + " ".join(args)
            if r.returncode == 0:
                problems.append(f"{shown}: exit 0 (meant to fail)")
                continue
            lines = r.stderr.splitlines()
            if len(lines) != 1 or not lines[0].startswith("spex: "):
                problems.append(f"{shown}: stderr is not one spex: line: {r.stderr!r}")
            try:
                doc = json.loads(r.stdout)
            except ValueError:
                problems.append(f"{shown}: stdout is no JSON document: {r.stdout!r}")
                continue
            if not isinstance(doc, dict) or len(r.stdout.splitlines()) != 1:
                problems.append(f"{shown}: not one object on one line: {r.stdout!r}")
                continue
            want = {"schema_version": 1, "ok": False, "exit_code": r.returncode}
            got = {k: doc.get(k) for k in want}
            if got != want:
                problems.append(f"{shown}: {got} (want {want})")
            error = doc.get("error")
            if not isinstance(error, str) or not error or error not in r.stderr:
                problems.append(f"{shown}: error {error!r} is not stderr's {r.stderr!r}")
    assert problems == [], "\n".join(problems)


def test_the_checker_finds_what_it_looks_for() -> None:
    """The checks themselves can fail: each kind of gap is named."""
    good = {
        "schema_version": 1,
        "created_at": 1796164695.97,
        "created_at_iso": "2026-12-01T22:38:15.970Z",
    }
    assert time_problems(good, "d") == []
    assert time_problems({"x": [{"at": 1796164695.0}]}, "d") == [
        "d.x[0].at: epoch time 1796164695.0 has no at_iso"
    ]
    assert time_problems({"deadline": None}, "d") == [
        "d.deadline: epoch time None has no deadline_iso"
    ]
    assert time_problems({"when": 1796164695.0}, "d") == [
        "d.when: epoch time 1796164695.0 has no when_iso"
    ]
    wrong = {"ended_at": 1796164695.0, "ended_at_iso": "2026-12-01T22:38:16.970Z"}
    assert "is not the instant" in time_problems(wrong, "d")[0]
    assert "without its epoch" in time_problems({"seen_iso": "2026-12-01T22:38:16.970Z"}, "d")[0]
    bare = subprocess.CompletedProcess([], 1, '[{"ok": false, "error": "x"}]\n', "")
    assert contract_problems(bare, False) == [
        "doc[0]: schema_version is None",
        "doc[0]: ok false, exit_code None but the exit code is 1",
    ]
