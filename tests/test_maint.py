"""Maintenance leases with real processes and real fds (DESIGN §5)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import HERE, SPEX, Env, harness, retry_until, signal_a_helper_thread
from hypothesis import given, settings
from hypothesis import strategies as st

from spexsup.adapters.procs import own_identity
from spexsup.conductors.broker.protocol import FrameError, parse_frame

MAINT = HERE / "maint"


def procs(env: Env, cmdline: list[str]) -> list[psutil.Process]:
    """This test's live processes running `cmdline` (other tests run in parallel)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            ours = p.environ().get("TMUX_TMPDIR") == str(env.tmux_tmpdir)
            if ours and p.info["cmdline"] == cmdline and p.status() != "zombie":
                found.append(p)
        except psutil.Error:
            continue
    return found


def status(env: Env) -> dict[str, Any]:
    return json.loads(env.run("maint", "--status", "--json").stdout)  # type: ignore[no-any-return]


def script(env: Env, body: str) -> str:
    path = env.root / f"op-{time.monotonic_ns()}.sh"
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return str(path)


def sleepers(env: Env, *names: str) -> None:
    for n in names:
        assert env.run("new", n, "--", harness("sleeper.sh")).returncode == 0


def background_maint(env: Env, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([SPEX, "maint", *args], env=env.vars, stderr=subprocess.PIPE, text=True)
    assert retry_until(lambda: status(env)["state"] == "active", seconds=20)
    return proc


def test_granted_operations_commit_once_and_exit_code_passes_through(env: Env) -> None:
    sleepers(env, "a", "b")
    assert env.run("wake", "a", "go", "--window", "1").returncode == 0
    out = env.root / "rcs"
    op = script(
        env,
        f"""
spex maint-op stop a; echo "stop=$?" >>{out}
spex maint-op stop a; echo "again=$?" >>{out}
spex maint-op stop b; echo "missing=$?" >>{out}
spex maint-op resume a --force; echo "force=$?" >>{out}
spex maint --status --json >{out}.status
spex maint-op resume a; echo "resume=$?" >>{out}
exit 42
""",
    )
    r = env.run("maint", "--stop", "a", "--resume", "a", "--", op)
    assert r.returncode == 42, r.stderr
    assert out.read_text().split() == ["stop=0", "again=3", "missing=3", "force=3", "resume=0"]
    # In a person's words: what was refused and what to do, no protocol code.
    assert "spex: stop a was already used (the lease grants each operation once)" in r.stderr
    assert "spex: stop b was not granted by this lease (grant it:" in r.stderr
    assert "maintenance_" not in r.stderr
    mid = json.loads(Path(f"{out}.status").read_text())
    assert mid["state"] == "active" and mid["scope"] == ["a"]
    assert [(c["op"], c["state"]) for c in mid["plan"]] == [
        ("stop", "committed"),
        ("resume", "unused"),
    ]
    assert "token" not in json.dumps(mid).replace("start_token", "")
    after = status(env)
    assert after["state"] == "open" and after["epoch"] == 1
    shown = json.loads(env.run("show", "a", "--json").stdout)
    assert shown["state"] == "idle" and shown["turn"]["state"] == "aborted"


def test_leased_sessions_refuse_ordinary_operations(env: Env) -> None:
    sleepers(env, "leased", "free")
    out = env.root / "rcs"
    op = script(
        env,
        f"""
spex wake leased hi --window 1; echo "leased=$?" >>{out}
spex stop leased; echo "stop=$?" >>{out}
spex rm leased; echo "rm=$?" >>{out}
spex wake free hi --window 1; echo "free=$?" >>{out}
""",
    )
    r = env.run("maint", "--stop", "leased", "--", op)
    assert r.returncode == 0, r.stderr
    assert out.read_text().split() == ["leased=3", "stop=3", "rm=3", "free=0"]
    assert "under maintenance lease 1 (" in r.stderr
    # After release, everything works again.
    assert env.run("wake", "leased", "hi", "--window", "1").returncode == 0


def test_all_scope_bars_every_session(env: Env) -> None:
    sleepers(env, "x", "y")
    out = env.root / "rcs"
    op = script(env, f'spex wake y hi --window 1; echo "y=$?" >>{out}\n')
    assert env.run("maint", "--all", "--", op).returncode == 0
    assert out.read_text().split() == ["y=3"]


def test_malformed_frames_change_nothing(env: Env) -> None:
    sleepers(env, "a")
    pid, token = own_identity()
    dead = subprocess.Popen(["true"])
    dead.wait()
    good: dict[str, Any] = {
        "v": 1,
        "id": "x",
        "op": "stop",
        "session": "a",
        "force": False,
        "client": {"pid": pid, "start_token": token},
    }

    def frame(**change: Any) -> str:
        data = {**good, **change}
        return json.dumps({k: v for k, v in data.items() if v is not ...}) + "\n"

    frames = [
        "not json\n",
        "[1, 2]\n",
        frame(v=2, id="ver"),
        frame(v=True, id="bool-ver"),
        frame(op=..., id="missing"),
        frame(extra=1, id="extra"),
        frame(op="delete", id="op"),
        frame(session="a.b", id="name"),
        frame(force="yes", id="force"),
        frame(id=""),
        frame(client={"pid": dead.pid, "start_token": "1"}, id="dead"),
        frame(client={"pid": pid, "start_token": "1"}, id="token"),
        frame(client={"pid": pid}, id="client"),
        "{" + " " * 5000 + "}\n",
        "\xff\xfe\n",
    ]
    frames_file = env.root / "frames.json"
    frames_file.write_text(json.dumps(frames))
    results = env.root / "results.json"
    r = env.run(
        "maint",
        "--stop",
        "a",
        "--",
        sys.executable,
        str(MAINT / "send_frames.py"),
        extra={"FRAMES": str(frames_file), "RESULTS": str(results)},
    )
    assert r.returncode == 0, r.stderr
    replies = json.loads(results.read_text())
    assert len(replies) == len(frames)
    for reply in replies:
        assert reply["code"] == "maintenance_invalid", reply
        assert reply["ok"] is False and reply["outcome"] == "refused"
    assert [r["id"] for r in replies][2:4] == ["ver", "bool-ver"]
    assert replies[10]["id"] == "dead" and "start token" in replies[10]["error"]
    assert json.loads(env.run("show", "a", "--json").stdout)["state"] == "idle"


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(
                    st.sampled_from(["v", "id", "op", "session", "force", "client", "pid", "x"]),
                    inner,
                    max_size=7,
                )
            ),
            max_leaves=12,
        ).map(lambda d: json.dumps(d).encode()),
    )
)
def test_frame_parser_never_crashes(data: bytes) -> None:
    try:
        frame = parse_frame(data)
    except FrameError:
        return
    assert frame.op in ("stop", "resume")


def test_four_concurrent_clients_each_get_their_answer(env: Env) -> None:
    names = ["c1", "c2", "c3", "c4"]
    sleepers(env, *names)
    out = env.root / "out"
    body = "".join(f"spex maint-op stop {n} >{out}.{n} 2>&1 &\n" for n in names) + "wait\n"
    plan = [arg for n in names for arg in ("--stop", n)]
    r = env.run("maint", *plan, "--", script(env, body))
    assert r.returncode == 0, r.stderr
    for n in names:
        assert Path(f"{out}.{n}").read_text() == f"{n}: stopped\n"
        assert json.loads(env.run("show", n, "--json").stdout)["state"] == "stopped"


def test_python_api(env: Env) -> None:
    sleepers(env, "a")
    results = env.root / "results.json"
    r = env.run(
        "maint",
        "--stop",
        "a",
        "--resume",
        "a",
        "--",
        sys.executable,
        str(MAINT / "api_ops.py"),
        extra={"SESSION": "a", "RESULTS": str(results)},
    )
    assert r.returncode == 0, r.stderr
    assert [x["outcome"] for x in json.loads(results.read_text())] == ["committed", "committed"]


def test_maint_op_outside_maint(env: Env) -> None:
    env.run("new", "a", "--harness", "demo")
    r = env.run("maint-op", "stop", "a")
    assert r.returncode == 2
    assert "not inside spex maint" in r.stderr


def test_bad_maint_input(env: Env) -> None:
    env.run("new", "a", "--harness", "demo")
    for args in (
        ["--stop", "a"],
        ["--resume", "a:bogus", "--", "true"],
        ["--stop", "a", "--ttl", "0", "--", "true"],
        ["--", "true"],
        ["--status", "--stop", "a"],
        ["--stop", "a.b", "--", "true"],
        ["--stop", "a", "--stop", "a", "--", "true"],
    ):
        r = env.run("maint", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
    assert status(env)["state"] == "open" and status(env)["epoch"] == 0


def test_no_lease_within_wait_and_the_command_never_runs(env: Env) -> None:
    sleepers(env, "a")
    holder = background_maint(env, "--stop", "a", "--", "sleep", "60")
    try:
        ran = env.root / "ran"
        r = env.run("maint", "--stop", "a", "--wait", "0.3", "--", "touch", str(ran))
        assert r.returncode == 3
        assert "no maintenance lease within" in r.stderr
        assert not ran.exists()
    finally:
        holder.kill()
        holder.wait()


def test_dead_holder_is_recovered_on_the_next_read(env: Env) -> None:
    sleepers(env, "a")
    holder = background_maint(env, "--stop", "a", "--", "sleep", "60")
    assert env.run("wake", "a", "hi").returncode == 3
    holder.kill()
    holder.wait()
    # No daemon: the next operation that reads the lease recovers it.
    assert env.run("wake", "a", "hi", "--window", "1").returncode == 0
    view = status(env)
    assert view["state"] == "open" and view["epoch"] == 1


def test_frozen_holder_past_ttl_kills_its_command_and_does_not_release(env: Env) -> None:
    sleepers(env, "a")
    holder = background_maint(env, "--stop", "a", "--ttl", "1", "--", "sleep", "60")
    assert retry_until(lambda: len(procs(env, ["sleep", "60"])) == 1)  # exec'd after the lease
    holder.send_signal(signal.SIGSTOP)
    time.sleep(1.5)
    # Meanwhile another process reads the lease: the deadline passed.
    assert status(env)["state"] == "open"
    assert env.run("wake", "a", "hi", "--window", "1").returncode == 0
    holder.send_signal(signal.SIGCONT)
    _, err = holder.communicate(timeout=20)
    assert holder.returncode == 1
    assert "authority lost" in err and "lease left for recovery" in err
    assert retry_until(lambda: not procs(env, ["sleep", "60"]))
    assert status(env)["epoch"] == 1


def test_closing_the_request_pipe_loses_authority(env: Env) -> None:
    sleepers(env, "a")
    r = env.run("maint", "--stop", "a", "--", "bash", "-c", "exec 3>&-; exec sleep 30", timeout=20)
    assert r.returncode == 1
    assert "closed the broker request pipe" in r.stderr
    assert not procs(env, ["sleep", "30"])


def test_corrupted_token_loses_authority(env: Env) -> None:
    sleepers(env, "a")
    body = 'head -c1 <&5 >/dev/null; printf "\\x02" >&5; exec sleep 31\n'
    r = env.run("maint", "--stop", "a", "--", script(env, body), timeout=20)
    assert r.returncode == 1
    assert "turn token corrupted" in r.stderr
    assert not procs(env, ["sleep", "31"])


def test_exit_with_a_request_pending(env: Env) -> None:
    sleepers(env, "a")
    r = env.run("maint", "--stop", "a", "--", sys.executable, str(MAINT / "pending.py"))
    assert r.returncode == 1
    assert "request pending" in r.stderr
    # Not released by the wrapper; the next reader's recovery opens it.
    assert status(env)["state"] == "open" and status(env)["epoch"] == 1


def test_draining_waits_for_an_in_flight_wake(env: Env) -> None:
    sleepers(env, "a")
    wake = subprocess.Popen(
        [SPEX, "wake", "a", "go", "--window", "2", "--json"],
        env=env.vars,
        stdout=subprocess.PIPE,
        text=True,
    )
    turns = env.home / "turns" / "a"
    assert retry_until(lambda: turns.exists() and any(turns.iterdir()))
    seen = env.root / "seen.json"
    r = env.run("maint", "--stop", "a", "--", "bash", "-c", f"spex show a --json >{seen}")
    assert r.returncode == 0, r.stderr
    out, _ = wake.communicate(timeout=20)
    assert json.loads(out)["verdict"] == "confirmed"
    # The command only ran once the wake had its verdict.
    assert json.loads(seen.read_text())["turn"]["verdict"] == "confirmed"


def test_contrib_upgrade_script(env: Env) -> None:
    sleepers(env, "api", "web")
    for n in ("api", "web"):
        assert env.run("wake", n, "go", "--window", "1").returncode == 0
    upgraded = env.root / "upgraded"
    r = env.run(
        "maint",
        "--stop",
        "api",
        "--stop",
        "web",
        "--resume",
        "api",
        "--resume",
        "web",
        "--",
        str(HERE.parent / "contrib" / "maint-upgrade.sh"),
        "--run",
        "api",
        "web",
        extra={"UPGRADE_COMMAND": f"touch {upgraded}"},
    )
    assert r.returncode == 0, r.stderr
    assert upgraded.exists()
    for n in ("api", "web"):
        shown = json.loads(env.run("show", n, "--json").stdout)
        assert shown["state"] == "idle" and shown["turn"]["state"] == "aborted"


def test_a_plan_changed_behind_the_holder_loses_authority(env: Env) -> None:
    sleepers(env, "a")
    holder = background_maint(env, "--stop", "a", "--", "sleep", "62")
    spex = env.spex()
    with spex.store.tx() as db:  # someone rewrites the granted plan in the database
        db.execute("UPDATE capabilities SET session = 'other' WHERE op = 'stop'")
    _, err = holder.communicate(timeout=20)
    assert holder.returncode == 1
    assert "authority lost" in err
    assert retry_until(lambda: not procs(env, ["sleep", "62"]))
    view = status(env)
    assert "token_hash" not in view and view["epoch"] == 1


def test_a_refused_operation_returns_its_capability_to_unused(env: Env) -> None:
    sleepers(env, "a")
    out = env.root / "out"
    op = script(
        env,
        f"""
spex maint-op resume a; echo "resume=$?" >>{out}
spex maint --status --json >{out}.status
""",
    )
    r = env.run("maint", "--resume", "a", "--", op)
    assert r.returncode == 0, r.stderr
    assert out.read_text().split() == ["resume=3"]  # a is not stopped
    assert "is not stopped" in r.stderr
    (cap,) = json.loads(Path(f"{out}.status").read_text())["plan"]
    assert (cap["op"], cap["state"]) == ("resume", "unused")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def outsider(env: Env, pid: int, *extra: str) -> dict[str, Any]:
    result = env.root / "outsider.json"
    run = subprocess.run(
        [sys.executable, str(MAINT / "outsider.py"), str(pid), "a", *extra],
        env={**env.vars, "RESULT": str(result)},
        timeout=20,
        check=True,
    )
    assert run.returncode == 0
    return json.loads(result.read_text())  # type: ignore[no-any-return]


def test_an_outsider_on_the_command_fds_is_refused_and_costs_nothing(env: Env) -> None:
    sleepers(env, "a")
    assert env.run("wake", "a", "go", "--window", "1").returncode == 0
    d = env.root / "stage"
    d.mkdir()
    for fifo in ("go1", "go2"):
        os.mkfifo(d / fifo)
    holder = subprocess.Popen(
        [SPEX, "maint", "--stop", "a", "--", sys.executable, str(MAINT / "holder.py")],
        env={**env.vars, "DIR": str(d), "SESSION": "a"},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert retry_until(lambda: (d / "unread").exists(), seconds=20)
    pid = int((d / "pid").read_text())
    # Nobody holds the token: even a frame naming the command itself is refused.
    reply = outsider(env, pid, "forge")
    assert reply["code"] == "maintenance_invalid", reply
    assert "without holding the turn token" in reply["error"]
    (d / "go1").write_text("x")
    assert retry_until(lambda: (d / "held").exists())
    # The command holds the token: a frame from a process outside it is refused.
    reply = outsider(env, pid)
    assert reply["code"] == "maintenance_invalid", reply
    assert "neither the maintenance command nor one of its descendants" in reply["error"]
    assert json.loads(env.run("show", "a", "--json").stdout)["state"] == "running"
    (d / "go2").write_text("x")
    _, err = holder.communicate(timeout=30)
    # The holder's own request is served, and its lease is released as usual.
    assert holder.returncode == 0, err
    assert (d / "outcome").read_text() == "committed"
    assert status(env)["state"] == "open"
    assert json.loads(env.run("show", "a", "--json").stdout)["state"] == "stopped"


def test_what_the_command_leaves_behind_dies_before_release(env: Env) -> None:
    sleepers(env, "a")
    pidfile = env.root / "bg.pid"
    body = (
        f"sleep 123 & echo $! >{pidfile}\n"
        f"setsid sleep 124 >/dev/null 2>&1 3>&- 4>&- 5>&- & echo $! >>{pidfile}\n"
        "exit 0\n"
    )
    r = env.run("maint", "--stop", "a", "--", script(env, body))
    assert r.returncode == 0, r.stderr
    background, escaped = (int(x) for x in pidfile.read_text().split())
    assert not alive(background)
    # A setsid'd child that let go of the broker fds has left the session,
    # the group and the lease: it is not the lease's to kill.
    assert alive(escaped)
    os.kill(escaped, signal.SIGKILL)
    assert status(env)["state"] == "open"


def lease_events(env: Env) -> dict[str, float]:
    """When each lease event happened (the last of each kind)."""
    spex = env.spex()
    try:
        rows = spex.store.db.execute(
            "SELECT kind, at FROM events WHERE kind LIKE 'lease-%' ORDER BY id"
        ).fetchall()
    finally:
        spex.close()
    return {row["kind"]: row["at"] for row in rows}


def test_a_setsid_grandchild_holding_the_broker_fds_dies_before_release(env: Env) -> None:
    sleepers(env, "a")
    d = env.root / "escape"
    d.mkdir()
    escape = [sys.executable, str(MAINT / "escape.py")]
    r = env.run("maint", "--stop", "a", "--", *escape, extra={"DIR": str(d)}, timeout=30)
    assert r.returncode == 0, r.stderr
    grandchild = int((d / "pid").read_text())
    # It left the command's session and group but kept fds 3, 4, 5: it is
    # gone when spex maint returns, and was asked to go while the lease held.
    assert not alive(grandchild)
    term = json.loads((d / "term").read_text())
    assert (term["state"], term["epoch"]) == ("active", 1)
    # It ignored SIGTERM: only the SIGKILL that followed ended it, and the
    # release came after that.
    released = lease_events(env)["lease-released"]
    assert released >= term["at"] + 0.5
    assert status(env)["state"] == "open"


def test_broker_fds_nobody_can_be_killed_for_leave_the_lease_to_recovery(env: Env) -> None:
    sleepers(env, "a")
    path = env.root / "fds.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as inbox:
        inbox.bind(str(path))
        # The command sends its fds 3, 4, 5 here and exits; they stay open in
        # the socket's queue, held by no process.
        r = env.run(
            "maint",
            "--stop",
            "a",
            "--",
            sys.executable,
            str(MAINT / "escape.py"),
            "--in-flight",
            extra={"SOCK": str(path)},
            timeout=30,
        )
        assert r.returncode == 1, r.stderr
        assert "broker fds (3, 4, 5) are still open" in r.stderr
        assert "held by no process we can see" in r.stderr
        assert "lease left for recovery" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        kinds = lease_events(env)
    # Not released by spex maint: the next reader recovered it.
    assert "lease-released" not in kinds
    assert status(env)["state"] == "open"
    assert "lease-recovered" in lease_events(env)


def test_sigkilled_maint_takes_its_command_with_it(env: Env) -> None:
    sleepers(env, "a")
    holder = background_maint(env, "--stop", "a", "--", "sleep", "127")
    # The lease is active before the command is exec'd: wait for the exec.
    assert retry_until(lambda: len(procs(env, ["sleep", "127"])) == 1)
    (command,) = procs(env, ["sleep", "127"])
    holder.kill()
    holder.wait()
    # PR_SET_PDEATHSIG: no reader of the lease is needed for this.
    assert retry_until(lambda: not alive(command.pid), seconds=5)


def test_a_sigterm_on_the_heartbeat_thread_still_ends_the_command(env: Env) -> None:
    # The main thread waits on the command's fds; a SIGTERM the kernel gave
    # the heartbeat's thread must still be forwarded to the command.
    sleepers(env, "a")
    holder = background_maint(env, "--stop", "a", "--", "sleep", "127")
    # The lease is active before the command is exec'd: wait for the exec.
    assert retry_until(lambda: len(procs(env, ["sleep", "127"])) == 1)
    (command,) = procs(env, ["sleep", "127"])
    signal_a_helper_thread(holder.pid, signal.SIGTERM)
    assert holder.wait(timeout=20) == 143
    assert retry_until(lambda: not alive(command.pid), seconds=5)


def test_recovery_kills_what_pdeathsig_cannot_reach(env: Env) -> None:
    sleepers(env, "a")
    pidfile = env.root / "bg.pid"
    body = f"sleep 125 & echo $! >{pidfile}\nwait\n"
    holder = background_maint(env, "--stop", "a", "--", script(env, body))
    assert retry_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "")
    grandchild = int(pidfile.read_text())
    leader = status(env)["command"]["pid"]
    holder.kill()
    holder.wait()
    # The kernel killed the command's leader, not its background job.
    assert retry_until(lambda: not alive(leader), seconds=5)
    assert alive(grandchild)
    # The next reader recovers the lease, and kills the job before releasing.
    assert status(env)["state"] == "open"
    assert not alive(grandchild)
    assert env.run("wake", "a", "hi", "--window", "1").returncode == 0


def test_closing_the_response_pipe_loses_authority(env: Env) -> None:
    sleepers(env, "a")
    r = env.run("maint", "--stop", "a", "--", "bash", "-c", "exec 4>&-; exec sleep 32", timeout=20)
    assert r.returncode == 1
    assert "authority lost: the command closed the broker response pipe (fd 4)" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not procs(env, ["sleep", "32"])


def test_a_request_whose_answer_cannot_be_delivered_loses_authority(env: Env) -> None:
    sleepers(env, "a")
    r = env.run(
        "maint",
        "--stop",
        "a",
        "--",
        sys.executable,
        str(MAINT / "close_replies.py"),
        extra={"SESSION": "a"},
        timeout=20,
    )
    assert r.returncode == 1
    assert "authority lost" in r.stderr and "response pipe (fd 4)" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not procs(env, [sys.executable, str(MAINT / "close_replies.py")])


def test_a_brokered_stop_fits_its_deadline_and_heartbeats_go_on(env: Env) -> None:
    assert env.run("new", "a", "--", harness("ignore_term.sh")).returncode == 0
    assert env.run("wake", "a", "go", "--window", "1").returncode == 0
    holder = background_maint(
        env, "--ttl", "4", "--stop", "a", "--", "spex", "maint-op", "stop", "a"
    )
    # The stop waits out a grace of half its deadline (min(5 s, ttl)), longer
    # than a heartbeat's interval, then SIGKILLs; readers keep recovering the
    # lease meanwhile.
    seen = set()
    while holder.poll() is None:
        view = status(env)
        seen.add((view["epoch"], view["state"], view["revoked"]))
    _, err = holder.communicate()
    assert holder.returncode == 0, err
    assert seen <= {(1, "active", False), (1, "open", False)}, seen
    assert json.loads(env.run("show", "a", "--json").stdout)["state"] == "stopped"


def test_capabilities_match_exactly(env: Env) -> None:
    sleepers(env, "a", "b")
    env.run("stop", "a")
    env.run("stop", "b")
    out = env.root / "rcs"
    op = script(
        env,
        f"""
spex maint-op resume a; echo "plain-on-force=$?" >>{out}
spex maint-op resume b --force; echo "force-on-plain=$?" >>{out}
spex maint-op resume a --force; echo "force=$?" >>{out}
spex maint-op resume b; echo "plain=$?" >>{out}
""",
    )
    r = env.run("maint", "--resume", "a:force", "--resume", "b", "--", op)
    assert r.returncode == 0, r.stderr
    assert out.read_text().split() == ["plain-on-force=3", "force-on-plain=3", "force=0", "plain=0"]


def test_an_unknown_session_in_the_plan_runs_nothing(env: Env) -> None:
    sleepers(env, "a")
    ran = env.root / "ran"
    r = env.run("maint", "--stop", "a", "--resume", "ghost", "--", "touch", str(ran))
    assert r.returncode == 2
    assert r.stderr.startswith("spex: ") and "ghost" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not ran.exists()
    assert status(env)["epoch"] == 0


def test_signals_to_maint_exit_130_and_143(env: Env) -> None:
    sleepers(env, "a")
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        holder = background_maint(env, "--stop", "a", "--", "sleep", "128")
        holder.send_signal(sig)
        _, err = holder.communicate(timeout=20)
        assert holder.returncode == code, err
        assert not procs(env, ["sleep", "128"])
        assert status(env)["state"] == "open"


def test_status_without_a_lease_and_ls_marks_leased_sessions(env: Env) -> None:
    sleepers(env, "a", "b")
    r = env.run("maint", "--status")
    assert r.returncode == 0 and r.stdout.strip() == "no maintenance lease is held"
    assert status(env)["state"] == "open"
    out = env.root / "ls"
    op = script(
        env, f"spex ls --json >{out}.json; spex ls >{out}.txt; spex maint ls >{out}.lease\n"
    )
    assert env.run("maint", "--stop", "a", "--", op).returncode == 0
    rows = {row["name"]: row for row in json.loads(Path(f"{out}.json").read_text())}
    assert rows["a"]["lease"] == {"epoch": 1, "state": "active"}
    assert rows["b"]["lease"] is None
    text = Path(f"{out}.txt").read_text()
    assert "idle (leased)" in text and text.count("(leased)") == 1
    # The scope as words, not a Python list (issue 38, item 15).
    assert "scope: a\n" in Path(f"{out}.lease").read_text()
    assert "(the last one, number 1, has ended)" in env.run("maint", "--status").stdout


def test_a_command_that_exits_at_once_passes_its_exit_code(env: Env) -> None:
    """It may close fd 5 before the first token is written: EPIPE there is its
    exit, not a silent failure of spex maint."""
    sleepers(env, "a")
    for code in (0, 0, 7, 0, 0):
        r = env.run("maint", "--stop", "a", "--", "bash", "-c", f"exit {code}")
        assert (r.returncode, r.stderr) == (code, "")


@contextlib.contextmanager
def frozen_tmux(env: Env) -> Iterator[None]:
    """The test's tmux server, SIGSTOPped: every tmux call of spex hangs."""
    server = int(env.tmux("display-message", "-p", "#{pid}").stdout)
    os.kill(server, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server, signal.SIGCONT)


def wedged(env: Env, *args: str, ttl: str) -> tuple[subprocess.Popen[str], Path]:
    """`spex maint --stop a` running tests/maint/wedged.py, waiting at `go1`.
    tmux calls may hang for a minute (SPEXSUP_TMUX_TIMEOUT): what bounds the
    operation is the broker's own deadline."""
    sleepers(env, "a")
    assert env.run("wake", "a", "go", "--window", "1").returncode == 0
    d = env.root / "wedge"
    d.mkdir()
    for fifo in ("go1", "go2"):
        os.mkfifo(d / fifo)
    wedge = [sys.executable, str(MAINT / "wedged.py")]
    # stderr to a file: a tmux client stuck on the frozen server keeps its
    # parent's pipes open.
    with (env.root / "maint.err").open("w") as err:
        holder = subprocess.Popen(
            [SPEX, "maint", "--ttl", ttl, "--stop", "a", "--resume", "a", "--", *wedge, *args],
            env={**env.vars, "DIR": str(d), "SESSION": "a", "SPEXSUP_TMUX_TIMEOUT": "60"},
            stderr=err,
            text=True,
        )
    assert retry_until(lambda: (d / "ready").exists(), seconds=20)
    return holder, d


def test_a_wedged_operation_is_indeterminate_at_its_deadline(env: Env) -> None:
    holder, d = wedged(env, ttl="2")  # the deadline: min(5 s, ttl)
    with frozen_tmux(env):
        (d / "go1").write_text("x")
        assert retry_until(lambda: (d / "reply").exists(), seconds=8)
        reply = json.loads((d / "reply").read_text())
        assert (reply["outcome"], reply["code"]) == ("indeterminate", "maintenance_deadline")
        assert 1.9 <= reply["elapsed"] <= 3.5, reply
        # Nothing else runs beside it, and asking changes nothing.
        assert reply["after"] == "maintenance_busy"
        view = status(env)
        assert (view["state"], view["revoked"]) == ("active", False)
        assert [c["state"] for c in view["plan"]] == ["inflight", "unused"]  # it still runs
        # Heartbeats go on past the ttl while it does.
        assert retry_until(lambda: status(env)["deadline"] > view["deadline"] + 2.5, seconds=8)
        assert not status(env)["revoked"]
    # tmux answers again: the stop finishes, and its capability says so.
    assert retry_until(lambda: status(env)["plan"][0]["state"] == "committed", seconds=30)
    (d / "go2").write_text("x")
    assert holder.wait(timeout=20) == 0, (env.root / "maint.err").read_text()
    assert status(env)["state"] == "open"
    assert json.loads(env.run("show", "a", "--json").stdout)["state"] == "stopped"


@pytest.mark.parametrize("loss", ["close-token", "revoke"])
def test_authority_lost_mid_operation_ends_the_lease_at_once(env: Env, loss: str) -> None:
    holder, d = wedged(env, "--close-token" if loss == "close-token" else "--hold", ttl="30")
    command = [sys.executable, str(MAINT / "wedged.py")]
    with frozen_tmux(env):
        (d / "go1").write_text("x")
        assert retry_until(lambda: (d / "sent").exists())
        assert retry_until(lambda: status(env)["plan"][0]["state"] == "inflight", seconds=10)
        if loss == "close-token":
            (d / "go2").write_text("x")
            assert retry_until(lambda: (d / "closed").exists())
        else:
            spex = env.spex()
            with spex.store.tx() as db:  # the plan rewritten behind the holder
                db.execute("UPDATE capabilities SET session = 'other' WHERE op = 'stop'")
            spex.close()
        # Not after the operation (it waits a minute for tmux), nor at its
        # 5 s deadline: at once.
        assert holder.wait(timeout=4) == 1
        err = (env.root / "maint.err").read_text()
        assert "authority lost" in err and "lease left for recovery" in err
        if loss == "close-token":
            assert "turn-token channel (fd 5)" in err
        assert retry_until(
            lambda: (
                not procs(env, [*command, "--close-token" if loss == "close-token" else "--hold"])
            ),
            seconds=5,
        )


def test_a_command_that_exits_while_an_operation_runs_leaves_the_lease(env: Env) -> None:
    holder, d = wedged(env, ttl="2")
    with frozen_tmux(env):
        (d / "go1").write_text("x")
        assert retry_until(lambda: (d / "reply").exists(), seconds=8)
        (d / "go2").write_text("x")  # the command exits; the stop still waits for tmux
        assert holder.wait(timeout=10) == 1
    err = (env.root / "maint.err").read_text()
    assert "exited while stop a was still running (lease left for recovery)" in err
    assert "lease-released" not in lease_events(env)
    assert status(env)["state"] == "open"  # recovered by this reader
    assert "lease-recovered" in lease_events(env)
