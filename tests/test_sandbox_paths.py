"""Every way a turn starts runs it under its session's sandbox policy, and
every way of setting that policy holds (DESIGN §19): a queued prompt, a
schedule's firing, a fan-out leg, `spex edit`, config.toml; `spex show`
prints the policy, `spex doctor` runs the probe, `--strict` fails a turn
that was denied something. Real bubblewrap, real tmux; the agent is
tests/harnesses/escape.sh's `where`, which says its PID namespace and
whether it could read a secret.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from conftest import Env
from test_sandbox import (  # the sandbox's fixture and helpers
    completed_sandboxed,
    http_server,
    new,
    sbx,  # noqa: F401 (a fixture)
    show,
    tried,
    wait,
    wake,
)

HOST_PID_NS = str(Path("/proc/self/ns/pid").readlink())


def secret(env: Env) -> None:
    ssh = Path(env.vars["HOME"]) / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    (ssh / "id_rsa").write_text("key\n")


def sandboxed(work: Path, turn: dict[str, Any]) -> bool:
    """The turn ran in its sandbox: flagged so, in a PID namespace of its
    own, and the secret was out of its reach. Reads (and clears) its tries."""
    seen = tried(work)
    (work / "tried").unlink()
    inside = f"pid-ns {HOST_PID_NS}" not in seen and seen["read"] != 0
    assert inside == ("sandboxed" in turn["flags"]), (seen, turn)
    return inside


def test_queue_schedule_and_fanout_run_under_the_sessions_policy(sbx: Env) -> None:  # noqa: F811
    secret(sbx)
    work = new(sbx, "a", "--sandbox")

    r = sbx.run("wake", "a", "where", "--queue", "--json")
    assert r.returncode == 0, r
    turn = wait(sbx, "a")
    completed_sandboxed(turn)
    assert sandboxed(work, turn)

    r = sbx.run("schedule", "add", "a", "--every", "1h", "-m", "where")
    assert r.returncode == 0, r
    [entry] = json.loads(sbx.run("schedule", "ls", "--json").stdout)
    assert sbx.run("schedule", "run", entry["id"]).returncode == 0
    turn = wait(sbx, "a")
    assert sandboxed(work, turn)

    r = sbx.run("fanout", "a", "-m", "where", "--wait", "--json")
    assert r.returncode == 0, r
    turn = wait(sbx, "a")
    assert sandboxed(work, turn)


def test_edit_turns_the_sandbox_off_and_on(sbx: Env) -> None:  # noqa: F811
    secret(sbx)
    work = new(sbx, "a", "--sandbox")
    assert sbx.run("edit", "a", "--no-sandbox").returncode == 0
    assert show(sbx, "a")["sandbox"]["mode"] == "off"
    v = wake(sbx, "a", "where")
    assert not sandboxed(work, v)
    assert sbx.run("edit", "a", "--sandbox", "--network", "none").returncode == 0
    doc = show(sbx, "a")["sandbox"]
    assert (doc["mode"], doc["network"]) == ("on", "none"), doc
    v = wake(sbx, "a", "where")
    assert sandboxed(work, v)


def test_config_sandbox_true_sandboxes_a_session_made_without_the_flag(sbx: Env) -> None:  # noqa: F811
    secret(sbx)
    sbx.home.mkdir(parents=True, exist_ok=True)
    (sbx.home / "config.toml").write_text("sandbox = true\n")
    work = new(sbx, "c")
    assert "sandbox      yes (config.toml)" in sbx.run("show", "c").stdout
    v = wake(sbx, "c", "where")
    assert sandboxed(work, v)
    # A session's own word wins over config.toml's.
    work = new(sbx, "d", "--no-sandbox")
    v = wake(sbx, "d", "where")
    assert not sandboxed(work, v)


def test_show_prints_the_effective_policy_and_doctor_runs_the_probe(sbx: Env) -> None:  # noqa: F811
    home = Path(sbx.vars["HOME"])
    extra = sbx.root / "cache"
    extra.mkdir()
    work = new(
        sbx,
        "a",
        "--sandbox",
        "--allow-write",
        str(extra),
        "--deny-read",
        str(home / "notes"),
        "--allow-host",
        "example.org",
    )
    doc = show(sbx, "a")["sandbox"]
    assert (doc["mode"], doc["network"]) == ("on", "allow"), doc
    assert str(work) in doc["writable"] and str(extra) in doc["writable"], doc
    assert {str(home / ".ssh"), str(home / "notes"), str(sbx.home)} <= set(doc["hidden"]), doc
    assert "example.org" in doc["hosts"], doc
    text = sbx.run("show", "a").stdout
    assert re.search(r"^sandbox +yes$", text, re.M), text
    assert str(extra) in text and "example.org" in text, text

    r = sbx.run("doctor")
    [line] = [ln for ln in r.stdout.splitlines() if re.match(r"^\S+ +sandbox\b", ln)]
    assert line.split()[0] == "ok" and "bubblewrap" in line, r.stdout


def test_strict_fails_a_turn_that_was_denied_a_host(sbx: Env) -> None:  # noqa: F811
    seen: list[int] = []
    with http_server(seen) as ok, http_server(seen) as bad:
        ports = ["--env", f"OK_PORT={ok}", "--env", f"BAD_PORT={bad}"]
        new(sbx, "a", "--sandbox", "--allow-host", f"127.0.0.1:{ok}", *ports)
        r = sbx.run("wake", "a", "net", "--strict", "--json", "--window", "30")
        v = json.loads(r.stdout)
    assert r.returncode == 1, r
    assert v["verdict"] == "failed" and f"denied-net:127.0.0.1:{bad}" in v["flags"], v
    assert bad not in seen
    turn = show(sbx, "a")["turn"]
    assert turn["state"] == "failed" and "sandboxed" in turn["flags"], turn
    # Named in ls too.
    [row] = json.loads(sbx.run("ls", "--json").stdout)
    assert "sandboxed" in row["turn"]["flags"], row


def test_a_revived_turn_runs_in_the_sandbox(sbx: Env) -> None:  # noqa: F811
    """`spex up --revive` after a reboot interrupted a turn: the new turn
    runs under the session's policy as every other start does."""
    secret(sbx)
    boot = sbx.root / "boot_id"
    boot.write_text("boot-one\n")
    sbx.vars["SPEXSUP_BOOT_ID_FILE"] = str(boot)
    work = new(sbx, "a", "--sandbox")
    v = wake(sbx, "a", "daemon", window="0.3")
    assert v["verdict"] == "confirmed", v
    sbx.tmux("kill-server")
    boot.write_text("boot-two\n")
    r = sbx.run("up", "--revive", "-m", "where", "--json")
    assert r.returncode == 0, r
    turn = wait(sbx, "a")
    assert turn["turn"] != v["turn"], turn
    completed_sandboxed(turn)
    seen = tried(work)
    assert f"pid-ns {HOST_PID_NS}" not in seen and seen["read"] != 0, seen
