"""Fan-out waves through the installed `spex`: verdicts per leg, concurrency,
signals, a killed launcher, retry-failed."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from conftest import FAKES, SPEX, Env, harness, retry_until, signal_a_helper_thread

from spexsup.pane import marker
from spexsup.pane.marker import Stage
from spexsup.present.render import with_iso


def fan(env: Env, *args: str, extra: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    r = env.run("fanout", *args, "--json", extra=extra, timeout=120)
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def unspent(doc: dict[str, Any]) -> dict[str, Any]:
    """A printed wave without what it spent (issue 26; so far: DESIGN §31) and its
    legs' checks (issue 27): printed, not in its file."""
    legs = [
        {k: v for k, v in leg.items() if k not in ("usage", "cost", "so_far", "verify")}
        for leg in doc["legs"]
    ]
    printed = ("usage", "cost", "so_far")
    return {**{k: v for k, v in doc.items() if k not in printed}, "legs": legs}


# Every outcome a wave's `counts` has, zero unless a test says otherwise.
OTHERS = ("complete", "failed", "skipped", "running", "queued", "pending", "aborted", "lost",
          "interrupted", "timed-out")  # fmt: skip


def verdicts(doc: dict[str, Any]) -> dict[str, str]:
    return {leg["session"]: leg["verdict"] for leg in doc["legs"]}


def slow_tmux(env: Env, delay: float) -> dict[str, str]:
    """A `tmux` first on PATH that logs each call with respawn-panes, how many
    (launches made together share a call), and holds it `delay` s."""
    shim_dir = env.root / "shim"
    shim_dir.mkdir(exist_ok=True)
    log = env.root / "respawns"
    real = shutil.which("tmux")
    (shim_dir / "tmux").write_text(
        "#!/bin/bash\n"
        # The launch's respawn-pane travels inside an if-shell argument.
        'n=0; for a in "$@"; do case $a in *respawn-pane*) n=$((n + 1));; esac; done\n'
        'if [ "$n" -gt 0 ]; then\n'
        f'  echo "start $EPOCHREALTIME $n" >>{log}; sleep {delay}\n'
        f'  echo "end $EPOCHREALTIME $n" >>{log}\n'
        "fi\n"
        f'exec {real} "$@"\n'
    )
    (shim_dir / "tmux").chmod(0o755)
    return {"PATH": f"{shim_dir}:{env.vars['PATH']}"}


def max_overlap(log: Path) -> int:
    """The most launches in flight at once (a call may carry several)."""
    events = []
    for line in log.read_text().splitlines():
        kind, stamp, launches = line.split()
        events.append((float(stamp), int(launches) if kind == "start" else -int(launches)))
    now = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        now += step
        peak = max(peak, now)
    return peak


def test_all_legs_confirmed(env: Env) -> None:
    for n in ("a", "b", "c"):
        env.run("new", n, "--", harness("sleeper.sh"))
    code, doc = fan(env, "a", "b", "c", "-m", "go", "--window", "1")
    assert code == 0
    # Launched, not done: the wave is complete only when its turns are.
    assert doc["state"] == "running"
    assert doc["schema_version"] == 1 and doc["prompt_head"] == "go"
    assert doc["cwd"] == str(Path.cwd())
    assert verdicts(doc) == {"a": "confirmed", "b": "confirmed", "c": "confirmed"}
    assert all(leg["turn"] for leg in doc["legs"])
    on_disk = json.loads((env.home / "waves" / f"{doc['id']}.json").read_text())
    # What fanout prints is the wave's file with an ISO twin beside each time
    # (and what it spent so far: nothing recorded, a floor while legs run).
    assert with_iso(on_disk) == unspent(doc)
    assert doc["cost"]["amount"] is None and doc["cost"]["exact"] is False
    assert all(leg["cost"] is None for leg in doc["legs"])
    assert Path(doc["prompt_file"]).read_bytes() == b"go"
    listed = json.loads(env.run("waves", "--json").stdout)
    assert [w["id"] for w in listed] == [doc["id"]]
    shown = env.run("wave", doc["id"])
    assert "running · 3 legs: 0 complete · 0 failed · 0 skipped · 3 running" in shown.stdout
    assert doc["counts"] == {"legs": 3, **dict.fromkeys(OTHERS, 0), "running": 3}, doc["counts"]


def test_mixed_verdicts_busy_and_stopped(env: Env) -> None:
    env.run("new", "ok", "--", harness("exit0.sh"))
    env.run("new", "bad", "--", harness("exit7.sh"))
    env.run("new", "busy", "--", harness("sleeper.sh"))
    env.run("new", "halted", "--", harness("sleeper.sh"))
    assert env.run("wake", "busy", "first", "--window", "1").returncode == 0
    env.run("stop", "halted")
    code, doc = fan(env, "--all", "-m", "go", "--window", "10")
    assert code == 1
    assert doc["state"] == "partial"
    assert verdicts(doc) == {
        "ok": "completed",
        "bad": "failed",
        "busy": "refused",
        "halted": "refused",
    }
    legs = {leg["session"]: leg for leg in doc["legs"]}
    assert legs["bad"]["rc"] == 7 and "exited rc=7" in legs["bad"]["error"]
    assert "busy" in legs["busy"]["error"]
    assert "stopped" in legs["halted"]["error"]


def test_match_and_unknown_names(env: Env) -> None:
    for n in ("web-1", "web-2", "db-1"):
        env.run("new", n, "--", harness("exit0.sh"))
    code, doc = fan(env, "--match", "web-*", "-m", "go", "--window", "10")
    assert code == 0
    assert sorted(verdicts(doc)) == ["web-1", "web-2"]
    code, doc = fan(env, "web-1", "ghost", "-m", "go", "--window", "10")
    assert code == 1
    assert verdicts(doc) == {"web-1": "completed", "ghost": "refused"}


def test_bad_input(env: Env) -> None:
    env.run("new", "a", "--harness", "demo")
    for args in (
        ["a"],
        ["a", "-m", "x", "-f", "-"],
        ["a", "--all", "-m", "x"],
        ["a", "-m", "x", "--max-concurrent", "0"],
        ["a.b", "-m", "x"],
        ["--retry-failed", "bad/id"],
        ["a", "-m", "x", "--window", "-2"],
    ):
        r = env.run("fanout", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("spex: ")
    # A --match that matches nothing is refused, as an unknown session is (3).
    r = env.run("fanout", "--match", "zz*", "-m", "x")
    assert r.returncode == 3 and r.stderr.startswith("spex: no sessions to wake match"), r
    assert json.loads(env.run("waves", "--json").stdout) == []
    assert env.run("wave", "w20200101T000000-000000").returncode == 3
    assert env.run("fanout", "--retry-failed", "w20200101T000000-000000").returncode == 3


def test_max_concurrent_limits_launches(env: Env) -> None:
    names = [f"s{i}" for i in range(6)]
    for n in names:
        env.run("new", n, "--", harness("sleeper.sh"))
    extra = slow_tmux(env, 0.3)
    code, doc = fan(env, *names, "-m", "go", "--window", "1", "--max-concurrent", "2", extra=extra)
    assert code == 0, doc
    # At most 2 in flight: launches made together share one tmux call, and a
    # leg's launch queued behind a call under way goes in the next one.
    assert 1 <= max_overlap(env.root / "respawns") <= 2
    # And without the limit they really do overlap (the measure can see it).
    for n in names:
        env.run("stop", n, "--grace", "1")
        env.run("resume", n)
    (env.root / "respawns").unlink()
    code, doc = fan(env, *names, "-m", "go", "--window", "1", extra=extra)
    assert code == 0
    assert max_overlap(env.root / "respawns") > 2


def wave_on_disk(env: Env) -> dict[str, Any] | None:
    files = list((env.home / "waves").glob("*.json")) if (env.home / "waves").exists() else []
    return json.loads(files[0].read_text()) if files else None


def start_slow_wave(env: Env, legs: int, delay: float) -> subprocess.Popen[str]:
    for i in range(legs):
        env.run("new", f"s{i}", "--", harness("sleeper.sh"))
    extra = slow_tmux(env, delay)
    return subprocess.Popen(
        [SPEX, "fanout", "--all", "-m", "go", "--window", "1", "--max-concurrent", "1", "--json"],
        env={**env.vars, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigint_mid_wave_aborts_unstarted_legs(env: Env) -> None:
    proc = start_slow_wave(env, 5, 0.4)
    assert retry_until(
        lambda: (
            (d := wave_on_disk(env)) is not None
            and any(leg["status"] == "done" for leg in d["legs"])
        ),
        seconds=20,
    )
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["state"] == "aborted"
    statuses = [leg["status"] for leg in doc["legs"]]
    assert "aborted" in statuses and "done" in statuses
    assert all(leg["verdict"] == "confirmed" for leg in doc["legs"] if leg["status"] == "done")
    assert with_iso(wave_on_disk(env)) == unspent(doc)
    # Started turns keep running: they are durable.
    done = [leg["session"] for leg in doc["legs"] if leg["status"] == "done"]
    shown = json.loads(env.run("show", done[0], "--json").stdout)
    assert shown["turn"]["state"] == "running"


def test_sigterm_exits_143_and_second_signal_exits_at_once(env: Env) -> None:
    proc = start_slow_wave(env, 3, 4.0)
    assert retry_until(lambda: (env.root / "respawns").exists(), seconds=20)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert time.monotonic() - started < 3  # did not wait for the 4 s launch in flight
    doc = wave_on_disk(env)
    assert doc is not None and doc["state"] == "aborted"


def test_killed_launcher_leaves_a_parseable_aborted_wave(env: Env) -> None:
    proc = start_slow_wave(env, 4, 0.5)
    assert retry_until(
        lambda: (
            (d := wave_on_disk(env)) is not None
            and any(leg["status"] == "done" for leg in d["legs"])
        ),
        seconds=20,
    )
    proc.kill()
    proc.communicate()
    doc = wave_on_disk(env)
    assert doc is not None and doc["state"] == "launching"  # as it was when killed
    shown = json.loads(env.run("wave", doc["id"], "--json").stdout)
    assert shown["state"] == "aborted"
    assert wave_on_disk(env)["state"] == "aborted"  # type: ignore[index]
    assert "aborted" in env.run("waves").stdout


def test_a_launcher_killed_in_its_legs_windows_leaves_each_launched_leg_its_turn(
    env: Env,
) -> None:
    """A leg's turn goes into the wave's document with the document's next
    write, not before its launch (issue 40): killed (SIGKILL) while its legs
    confirm, the fan-out leaves a document that may not name them yet, and
    every reader finds each launched leg's turn (admission linked it, and
    the launcher's identity names it): unconfirmed, its turn running, never
    aborted."""
    proc = fanout_confirming(env)
    found = [d for name in ("a", "b") for d in (env.home / "turns" / name).iterdir()]
    assert retry_until(lambda: all(marker.read(d).stage is Stage.RUNNING for d in found), 30)
    proc.kill()
    proc.communicate()
    doc = wave_on_disk(env)
    assert doc is not None and doc["state"] == "launching", doc  # as it was when killed
    shown = json.loads(env.run("wave", doc["id"], "--json").stdout)
    legs = {leg["session"]: leg for leg in shown["legs"]}
    for name in ("a", "b"):
        turn = json.loads(env.run("show", name, "--json").stdout)["turn"]
        assert turn["state"] == "running", turn
        assert (legs[name]["turn"], legs[name]["verdict"]) == (turn["id"], "unconfirmed"), shown


def test_retry_failed_links_both_ways(env: Env) -> None:
    env.run("new", "ok", "--", harness("sleeper.sh"))
    env.run("new", "flaky", "--", "bash", "-c", '[ -e "$FLAG" ] && exec sleep 300; exit 3')
    flag = env.root / "flag"
    # A window long enough that the exit lands inside it however loaded the
    # machine is: a harness still starting at 1 s was honestly "confirmed".
    code, first = fan(env, "ok", "flaky", "-m", "go", "--window", "5")
    assert code == 1 and verdicts(first) == {"ok": "confirmed", "flaky": "failed"}
    # Whatever made it fail is fixed.
    env.run("rm", "flaky")
    env.run(
        "new",
        "flaky",
        "--env",
        f"FLAG={flag}",
        "--",
        "bash",
        "-c",
        '[ -e "$FLAG" ] && exec sleep 300; exit 3',
    )
    flag.touch()
    code, second = fan(env, "--retry-failed", first["id"], "--window", "1")
    assert code == 0, second
    assert verdicts(second) == {"flaky": "confirmed"}
    assert second["retry_of"] == first["id"]
    first_now = json.loads(env.run("wave", first["id"], "--json").stdout)
    assert first_now["retried_by"] == [second["id"]]
    r = env.run("fanout", "--retry-failed", second["id"])
    assert r.returncode == 0 and "nothing to retry" in r.stdout


def test_retry_refused_while_launching(env: Env) -> None:
    proc = start_slow_wave(env, 3, 1.0)
    try:
        assert retry_until(lambda: wave_on_disk(env) is not None, seconds=20)
        doc = wave_on_disk(env)
        assert doc is not None
        r = env.run("fanout", "--retry-failed", doc["id"])
        assert r.returncode == 3
        assert "still launching" in r.stderr
    finally:
        proc.kill()
        proc.communicate()


def test_wait_records_each_rc(env: Env) -> None:
    env.run("new", "a", "--", "bash", "-c", "sleep 1.5; exit 0")
    env.run("new", "b", "--", "bash", "-c", "sleep 1.5; exit 4")
    code, doc = fan(env, "a", "b", "-m", "go", "--window", "0.5", "--wait")
    assert code == 1
    legs = {leg["session"]: leg for leg in doc["legs"]}
    assert legs["a"]["turn_state"] == "complete" and legs["a"]["rc"] == 0
    assert legs["b"]["turn_state"] == "failed" and legs["b"]["rc"] == 4
    assert doc["state"] == "partial"


def test_fifty_legs_at_once(env: Env) -> None:
    for i in range(50):
        assert env.run("new", f"s{i}", "--", harness("sleeper.sh")).returncode == 0
    r = env.run("fanout", "--all", "-m", "go", "--window", "2", "--json", timeout=120)
    assert "database is locked" not in r.stderr
    doc = json.loads(r.stdout)
    assert r.returncode == 0, [leg for leg in doc["legs"] if leg["verdict"] != "confirmed"]
    assert len(doc["legs"]) == 50
    rows = json.loads(env.run("ls", "--json").stdout)
    assert all(row["turn"]["state"] == "running" for row in rows)


def until_go(env: Env, name: str, go: Path, rc: int = 0) -> None:
    args = ["new", name, "--env", f"GO={go}", "--env", f"RC={rc}", "--", harness("until_go.sh")]
    assert env.run(*args).returncode == 0


def stored(env: Env, wave: str) -> dict[str, Any]:
    return json.loads((env.home / "waves" / f"{wave}.json").read_text())  # type: ignore[no-any-return]


def test_the_summary_counts_turn_outcomes_after_the_fanout_exited(env: Env) -> None:
    go = env.root / "go"
    for n in ("a", "b", "c"):
        until_go(env, n, go)
    until_go(env, "d", go, rc=3)
    hook = env.root / "hook"
    code, doc = fan(
        env,
        "--all",
        "-m",
        "go",
        "--window",
        "0.5",
        "--on-complete",
        f"env >>{hook}; echo run >>{hook}.runs",
    )
    assert code == 0 and doc["state"] == "running"
    assert env.run("wave", doc["id"]).stdout.startswith(
        f"wave {doc['id']}: running · 4 legs: 0 complete · 0 failed · 0 skipped · 4 running"
    )
    go.touch()
    # The turns' exit reporters move the wave on; no reader is involved.
    assert retry_until(lambda: stored(env, doc["id"])["state"] == "partial", seconds=20)
    assert retry_until(hook.with_suffix(".runs").exists)
    shown = env.run("wave", doc["id"])
    counted = "4 legs: 3 complete · 1 failed · 0 skipped · 0 running"
    assert f"wave {doc['id']}: partial · {counted}" in shown.stdout
    assert "d: confirmed" in shown.stdout and "ended failed rc=3" in shown.stdout
    assert counted in env.run("waves").stdout
    final = json.loads(env.run("wave", doc["id"], "--json").stdout)
    legs = {leg["session"]: leg for leg in final["legs"]}
    assert legs["d"]["verdict"] == "confirmed" and legs["d"]["turn_state"] == "failed"
    assert legs["d"]["rc"] == 3 and legs["a"]["turn_state"] == "complete"
    events = [h["event"] for h in final["history"]]
    assert events[0] == "wave-started" and events[-1] == "wave-ended"
    assert events.count("leg-ended") == 4
    assert all(isinstance(h["at"], float) for h in final["history"])
    env_seen = dict(line.split("=", 1) for line in hook.read_text().splitlines() if "=" in line)
    assert env_seen["SPEXSUP_WAVE"] == doc["id"] and env_seen["SPEXSUP_WAVE_STATE"] == "partial"
    assert (env_seen["SPEXSUP_WAVE_OK"], env_seen["SPEXSUP_WAVE_FAILED"]) == ("3", "1")
    assert "SPEXSUP_TURN" not in env_seen
    env.run("waves")
    assert hook.with_suffix(".runs").read_text() == "run\n"  # claimed once


def test_on_complete_runs_on_every_terminal_path(env: Env) -> None:
    env.run("new", "ok", "--", harness("exit0.sh"))
    env.run("new", "halted", "--", harness("sleeper.sh"))
    env.run("stop", "halted")
    out = env.root / "states"
    hook = f'echo "$SPEXSUP_WAVE_STATE $SPEXSUP_WAVE_LEGS" >>{out}'
    assert fan(env, "ok", "-m", "x", "--window", "5", "--on-complete", hook)[0] == 0
    assert fan(env, "halted", "-m", "x", "--on-complete", hook)[0] == 1
    assert fan(env, "ok", "halted", "-m", "x", "--window", "5", "--on-complete", hook)[0] == 1
    assert retry_until(lambda: out.exists() and len(out.read_text().splitlines()) == 3)
    assert sorted(out.read_text().splitlines()) == ["complete 1", "failed 1", "partial 2"]


def test_a_stop_of_every_leg_at_once_ends_the_wave_and_runs_its_on_complete(env: Env) -> None:
    """`spex stop --all` stops the legs together and moves their wave on
    once they are all stopped, with no reader: its on-complete runs, once."""
    for n in ("a", "b", "c"):
        env.run("new", n, "--", harness("sleeper.sh"))
    out = env.root / "ran"
    hook = f'echo "$SPEXSUP_WAVE_STATE $SPEXSUP_WAVE_LEGS" >>{out}'
    code, doc = fan(env, "a", "b", "c", "-m", "x", "--window", "0.5", "--on-complete", hook)
    assert code == 0, doc
    r = env.run("stop", "--all", "--grace", "1")
    assert r.returncode == 0, r.stderr
    assert retry_until(out.exists, 30)
    assert env.run("waves").returncode == 0
    assert out.read_text() == "failed 3\n"


def test_an_on_complete_whose_claimer_died_runs_once_from_the_next_reader(env: Env) -> None:
    env.run("new", "a", "--", harness("sleeper.sh"))
    out = env.root / "ran"
    code, doc = fan(env, "a", "-m", "x", "--window", "0.5", "--on-complete", f"echo ran >>{out}")
    assert code == 0, doc
    # The stop ends the wave's last leg, claims its on-complete command, and
    # is SIGKILLed right after that commit (the test's fault point).
    r = env.run("stop", "a", "--grace", "1", extra={"SPEXSUP_FAULT": "after-hook-claim"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    time.sleep(0.5)
    assert not out.exists()
    # Any reconciling reader starts it (not only a reader of the wave), once.
    assert env.run("ls").returncode == 0
    assert retry_until(lambda: out.exists(), 30)
    for command in (("ls",), ("waves",), ("wave", doc["id"]), ("show", "a")):
        assert env.run(*command).returncode == 0
    time.sleep(0.5)
    assert out.read_text() == "ran\n"


def test_a_leg_ended_by_a_reader_runs_the_on_complete_without_reading_the_wave(
    env: Env,
) -> None:
    go = env.root / "go"
    until_go(env, "a", go)
    out = env.root / "ran"
    code, doc = fan(env, "a", "-m", "x", "--window", "0.5", "--on-complete", f"echo ran >>{out}")
    assert code == 0, doc
    # The wrapper dies without reporting: only a reader can record the end.
    pane = env.pane_pid("a")
    os.kill(pane, signal.SIGKILL)
    assert env.run("show", "a").returncode == 0
    assert retry_until(lambda: out.exists(), 30)
    assert out.read_text() == "ran\n"


def test_retry_failed_covers_every_failed_end_and_can_be_narrowed(env: Env) -> None:
    go = env.root / "go"
    until_go(env, "ok", go)
    until_go(env, "err", go, rc=5)
    env.run("new", "stopped", "--", harness("sleeper.sh"))
    env.run("new", "lost", "--", harness("sleeper.sh"))
    env.run("new", "early", "--", harness("exit7.sh"))
    code, first = fan(env, "--all", "-m", "go", "--window", "2")
    assert code == 1, first  # `early` failed at launch
    env.run("stop", "stopped")
    env.run("resume", "stopped")
    os.kill(env.pane_pid("lost"), signal.SIGKILL)
    go.touch()
    assert retry_until(
        lambda: json.loads(env.run("wave", first["id"], "--json").stdout)["state"] == "partial",
        seconds=20,
    )
    doc = json.loads(env.run("wave", first["id"], "--json").stdout)
    ends = {leg["session"]: leg["turn_state"] for leg in doc["legs"]}
    assert ends == {
        "early": "failed",
        "err": "failed",
        "lost": "lost",
        "ok": "complete",
        "stopped": "aborted",
    }
    r = env.run("fanout", "--retry-failed", first["id"], "err", "nobody")
    assert r.returncode == 2 and "no leg for nobody" in r.stderr
    code, narrowed = fan(env, "--retry-failed", first["id"], "err", "ok", "--window", "0.5")
    assert [leg["session"] for leg in narrowed["legs"]] == ["err"]
    code, second = fan(env, "--retry-failed", first["id"], "--window", "0.5")
    assert sorted(leg["session"] for leg in second["legs"]) == ["early", "err", "lost", "stopped"]
    linked = json.loads(env.run("wave", first["id"], "--json").stdout)["retried_by"]
    assert linked == [narrowed["id"], second["id"]]
    code, done = fan(env, "ok", "-m", "again", "--window", "0.5")
    r = env.run("fanout", "--retry-failed", done["id"], "--json")
    assert r.returncode == 0, r.stderr
    noop = json.loads(r.stdout)
    assert noop["ok"] is True and noop["legs"] == [] and noop["retry_of"] == done["id"]


def test_a_retry_during_wait_keeps_its_link(env: Env) -> None:
    go_a, go_b = env.root / "go-a", env.root / "go-b"
    until_go(env, "a", go_a)
    until_go(env, "b", go_b, rc=4)
    waiter = subprocess.Popen(
        [SPEX, "fanout", "a", "b", "-m", "go", "--window", "0.5", "--wait", "--json"],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert retry_until(lambda: (d := wave_on_disk(env)) is not None and d["state"] == "running")
    wave = wave_on_disk(env)["id"]  # type: ignore[index]
    go_b.touch()
    assert retry_until(
        lambda: (
            {leg["session"]: leg["turn_state"] for leg in stored(env, wave)["legs"]}["b"]
            == "failed"
        )
    )
    env.run("rm", "b")
    env.run("new", "b", "--", harness("sleeper.sh"))
    code, retry = fan(env, "--retry-failed", wave, "--window", "0.5")
    assert code == 0
    go_a.touch()
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 1, err
    final = json.loads(out)
    assert final["state"] == "partial" and final["retried_by"] == [retry["id"]]
    assert stored(env, wave)["retried_by"] == [retry["id"]]


def spawn(env: Env, *args: str, extra: dict[str, str] | None = None) -> Any:
    import pexpect

    return pexpect.spawn(
        SPEX,
        ["fanout", *args],
        env={**env.vars, **(extra or {})},
        encoding="utf-8",
        timeout=30,
    )


def test_ctrl_c_while_waiting_detaches_at_once(env: Env) -> None:
    for n in ("a", "b"):
        env.run("new", n, "--", harness("sleeper.sh"))
    child = spawn(env, "a", "b", "-m", "go", "--window", "0.5", "--wait")
    child.expect("waiting for the turns to end")
    sent = time.monotonic()
    child.sendintr()
    child.expect("still running: a, b")
    assert time.monotonic() - sent < 1.0
    child.expect("keep waiting with: spex wait a b")
    child.expect("stop them with: spex stop a b")
    child.expect(pexpect_eof())
    child.close()
    assert child.exitstatus == 130
    doc = wave_on_disk(env)
    assert doc is not None and doc["state"] == "running" and doc["detached_at"]
    assert all(leg["verdict"] == "confirmed" for leg in doc["legs"])
    assert json.loads(env.run("show", "a", "--json").stdout)["turn"]["state"] == "running"


def pexpect_eof() -> Any:
    import pexpect

    return pexpect.EOF


def test_ctrl_c_while_launching_aborts_the_rest_without_phantom_turns(env: Env) -> None:
    for i in range(5):
        env.run("new", f"s{i}", "--", harness("sleeper.sh"))
    extra = slow_tmux(env, 1.0)
    child = spawn(env, "--all", "-m", "go", "--window", "0.5", "--max-concurrent", "1", extra=extra)
    spex = env.spex()

    def starting() -> int:
        row = spex.store.db.execute("SELECT count(*) FROM turns WHERE state = 'starting'")
        return int(row.fetchone()[0])

    # One leg is in its (slow) launch, another admitted and queued at the gate.
    assert retry_until(lambda: starting() >= 2, seconds=20)
    child.sendintr()
    child.expect(pexpect_eof())
    child.close()
    assert child.exitstatus == 130
    doc = wave_on_disk(env)
    assert doc is not None and doc["state"] == "aborted"
    assert not [leg for leg in doc["legs"] if leg["status"] == "launching"]
    gated = [leg for leg in doc["legs"] if leg["verdict"] == "aborted" and leg["turn"]]
    assert gated, doc["legs"]
    env.run("ls")  # reconciles: an admitted-but-unlaunched turn is not `lost`
    for leg in gated:
        turn = spex.store.db.execute(
            "SELECT state, error FROM turns WHERE id = ?", (leg["turn"],)
        ).fetchone()
        assert turn["state"] == "aborted", dict(turn)
        assert "aborted before this leg launched" in turn["error"]
        shown = json.loads(env.run("show", leg["session"], "--json").stdout)
        assert shown["state"] != "running"
    states = {r[0] for r in spex.store.db.execute("SELECT state FROM turns")}
    assert "lost" not in states and "starting" not in states


def test_ctrl_c_while_launching_names_the_legs_that_run_on(env: Env) -> None:
    """Issue 38, item 6: legs launched before the Ctrl-C keep running (by
    design); the fan-out says which, and the one command that stops them."""
    for i in range(3):
        env.run("new", f"s{i}", "--", harness("sleeper.sh"))
    extra = slow_tmux(env, 1.0)
    child = spawn(env, "--all", "-m", "go", "--window", "0.3", "--max-concurrent", "1", extra=extra)
    spex = env.spex()

    def count(state: str) -> int:
        row = spex.store.db.execute("SELECT count(*) FROM turns WHERE state = ?", (state,))
        return int(row.fetchone()[0])

    # s0 runs; the next leg is in its (slow) launch.
    assert retry_until(lambda: count("running") == 1 and count("starting") >= 1, seconds=30)
    [running] = [
        r[0] for r in spex.store.db.execute("SELECT session FROM turns WHERE state = 'running'")
    ]
    child.sendintr()
    # The next leg may have started meanwhile: it is named too.
    child.expect(rf"still running: [^\r\n]*\b{running}\b")
    child.expect(rf"stop them with: spex stop [^\r\n]*\b{running}\b")
    child.expect(pexpect_eof())
    child.close()
    assert child.exitstatus == 130


def test_a_second_signal_exits_with_its_own_code_and_keeps_turn_ids(env: Env) -> None:
    proc = start_slow_wave(env, 3, 4.0)
    spex = env.spex()
    # One leg is inside its (4 s) launch.
    assert retry_until(lambda: (env.root / "respawns").exists(), seconds=20)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert time.monotonic() - started < 3
    doc = wave_on_disk(env)
    assert doc is not None
    with_turns = {r[0] for r in spex.store.db.execute("SELECT session FROM turns")}
    for leg in doc["legs"]:
        if leg["session"] in with_turns:
            assert leg["turn"] is not None, leg
    assert not [leg for leg in doc["legs"] if leg["status"] == "launching" and not leg["turn"]]


def fanout_confirming(env: Env) -> subprocess.Popen[str]:
    """`spex fanout a b` whose two legs have launched and sit in 60 s windows."""
    for n in ("a", "b"):
        env.run("new", n, "--", harness("sleeper.sh"))
    proc = subprocess.Popen(
        [SPEX, "fanout", "a", "b", "-m", "go", "--window", "60", "--json"],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    spex = env.spex()
    launched = "SELECT count(*) FROM turns WHERE pid IS NULL AND state = 'starting'"
    assert retry_until(
        lambda: (
            spex.store.db.execute(launched).fetchone()[0] == 2
            and all((env.home / "turns" / n).exists() for n in ("a", "b"))
        ),
        seconds=20,
    )
    return proc


def test_gone_within_ten_seconds_of_the_first_signal(env: Env) -> None:
    proc = fanout_confirming(env)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert time.monotonic() - sent < 10
    doc = wave_on_disk(env)
    assert doc is not None and all(leg["turn"] for leg in doc["legs"])


def test_a_signal_that_lands_on_a_helper_thread_still_stops_it(env: Env) -> None:
    # The kernel may hand Ctrl-C to any thread; Python runs the handler in
    # the main thread, which must not sleep through it (it waits on the legs,
    # each in a 60 s window).
    proc = fanout_confirming(env)
    sent = time.monotonic()
    signal_a_helper_thread(proc.pid, signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert time.monotonic() - sent < 10


# --- a retry runs under the first attempt's rules --------------------------------


def claude_session(env: Env, name: str) -> None:
    """The fake claude (tests/fakes/claude): `[ask]` in the prompt ends the turn
    rc 0 flagged `asked-question`."""
    args = ["new", name, "--harness", "claude", "--cwd", str(env.root)]
    r = env.run(*args, "--env", "FAKE_CLAUDE_LOGGED_IN=1")
    assert r.returncode == 0, r.stderr


def test_retry_of_a_strict_wave_is_strict_unless_told_otherwise(env: Env) -> None:
    claude_session(env, "c")
    code, first = fan(env, "c", "-m", "go [ask]", "--strict", "--window", "10")
    assert code == 1 and verdicts(first) == {"c": "failed"}, first
    assert first["turn_options"] == {
        "window": 10.0,
        "timeout": None,
        "strict": True,
        "on_limit": None,
        "model": None,
        "fallback": None,
        "stagger": None,
        "verify": None,
        "verify_timeout": None,
        "fresh": False,
        "budget": None,
        "unsandboxed": False,
    }
    assert stored(env, first["id"])["turn_options"] == first["turn_options"]
    # No options given: the retry is strict and uses the wave's window.
    code, again = fan(env, "--retry-failed", first["id"])
    assert code == 1 and verdicts(again) == {"c": "failed"}, again
    assert again["legs"][0]["error"] == "strict: ended asking a question"
    assert again["legs"][0]["rc"] == 0 and again["legs"][0]["flags"] == ["asked-question"]
    assert again["turn_options"] == first["turn_options"] and again["retry_of"] == first["id"]
    turn = json.loads(env.run("wait", "c", "--json").stdout)[0]
    assert turn["strict"] is True and turn["state"] == "failed" and turn["cause"] == "strict"
    # Explicit options win: --no-strict lets the flagged turn complete.
    code, relaxed = fan(env, "--retry-failed", again["id"], "--no-strict", "--window", "15")
    assert code == 0 and verdicts(relaxed) == {"c": "completed"}, relaxed
    assert relaxed["legs"][0]["flags"] == ["asked-question"]
    assert relaxed["turn_options"] == {**first["turn_options"], "strict": False, "window": 15.0}
    assert env.run("fanout", "--retry-failed", relaxed["id"]).stdout.startswith("nothing to retry")


def test_retry_of_a_timed_wave_times_out_again(env: Env) -> None:
    env.run("new", "t", "--cwd", str(env.root), "--", harness("sleeper.sh"))
    code, first = fan(env, "t", "-m", "work", "--timeout", "2s", "--window", "0.5", "--wait")
    assert code == 1, first
    leg = first["legs"][0]
    assert leg["turn_state"] == "timed-out" and leg["rc"] == 124, leg
    assert first["turn_options"]["timeout"] == 2.0 and first["turn_options"]["window"] == 0.5
    started = time.monotonic()
    code, again = fan(env, "--retry-failed", first["id"], "--wait")
    assert code == 1, again
    leg = again["legs"][0]
    assert leg["verdict"] == "confirmed" and leg["turn_state"] == "timed-out", leg
    assert leg["rc"] == 124 and again["state"] == "failed"
    assert time.monotonic() - started < 60  # not sleeper.sh's 300 s
    turn = json.loads(env.run("wait", "t", "--json").stdout)[0]
    assert turn["timeout"] == 2.0 and turn["cause"] == "timed-out"
    # An explicit --timeout replaces the wave's.
    code, longer = fan(env, "--retry-failed", again["id"], "--timeout", "1h")
    assert code == 0 and verdicts(longer) == {"t": "confirmed"}, longer
    assert longer["turn_options"] == {**again["turn_options"], "timeout": 3600.0}
    assert json.loads(env.run("show", "t", "--json").stdout)["turn"]["timeout"] == 3600.0
    env.run("stop", "t")


def test_retry_of_an_old_wave_without_recorded_options(env: Env) -> None:
    env.run("new", "bad", "--", harness("exit7.sh"))
    code, first = fan(env, "bad", "-m", "go", "--window", "5")
    assert code == 1
    # A wave written before turn_options existed: the retry runs under none.
    with sqlite3.connect(env.home / "state.db") as db:
        row = db.execute("SELECT doc FROM waves WHERE id = ?", (first["id"],)).fetchone()
        doc = json.loads(row[0])
        del doc["turn_options"]
        db.execute("UPDATE waves SET doc = ? WHERE id = ?", (json.dumps(doc), first["id"]))
    code, again = fan(env, "--retry-failed", first["id"], "--window", "5")
    assert code == 1 and verdicts(again) == {"bad": "failed"}
    assert again["turn_options"] == {
        "window": 5.0,
        "timeout": None,
        "strict": False,
        "on_limit": None,
        "model": None,
        "fallback": None,
        "stagger": None,
        "verify": None,
        "verify_timeout": None,
        "fresh": False,
        "budget": None,
        "unsandboxed": False,
    }


def test_waves_lists_fleet_waves_beside_local_ones(env: Env) -> None:
    claude_session(env, "c")
    code, local = fan(env, "c", "-m", "go", "--window", "10")
    assert code == 0
    # A fleet wave whose only host is this machine (no sshd needed), strict.
    r = env.run(
        "fanout", "--hosts", "local", "--match", "c", "-m", "go [ask]", "--strict",
        "--window", "10", "--json", timeout=120,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    fleet = json.loads(r.stdout)
    assert fleet["kind"] == "fleet" and fleet["legs"][0]["verdict"] == "failed"
    assert fleet["turn_options"]["strict"] is True
    # Its retry runs strict on the host too, and fails again.
    r = env.run("fanout", "--retry-failed", fleet["id"], "--json", timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    retried = json.loads(r.stdout)
    assert retried["retry_of"] == fleet["id"] and retried["turn_options"]["strict"] is True
    assert retried["legs"][0]["error"] == "strict: ended asking a question", retried
    host_wave = stored(env, retried["hosts"][0]["wave"])
    assert host_wave["turn_options"]["strict"] is True
    assert host_wave["retry_of"] == fleet["legs"][0]["wave"]
    listed = json.loads(env.run("waves", "--json").stdout)
    kinds = {w["id"]: w["kind"] for w in listed}
    assert kinds[fleet["id"]] == "fleet" and kinds[retried["id"]] == "fleet"
    assert kinds[local["id"]] == "local"
    assert all(w["schema_version"] == 1 for w in listed)
    assert [w["created_at"] for w in listed] == sorted(
        (w["created_at"] for w in listed), reverse=True
    )
    text = env.run("waves").stdout
    assert text.splitlines()[0].split()[:3] == ["WAVE", "KIND", "STATE"], text
    row = next(line for line in text.splitlines() if line.startswith(retried["id"]))
    assert row.split()[1:3] == ["fleet", "failed"], row
    assert "1 leg on 1 host: 0 complete · 1 failed · 0 skipped · 0 running" in row, row
    assert fleet["id"] in row, row
    assert retried["counts"]["failed"] == 1 and retried["counts"]["legs"] == 1, retried
    row = next(line for line in text.splitlines() if line.startswith(local["id"]))
    assert row.split()[1] == "local", row


def test_a_retry_after_a_gone_conversation_starts_a_new_one(env: Env) -> None:
    """A leg that failed because the CLI no longer knows its conversation is
    not retried into the same failure: the id was cleared, so the retry
    starts a new conversation."""
    env.run("new", "c", "--harness", "claude", "--env", "FAKE_CLAUDE_LOGGED_IN=1")
    woke = json.loads(env.run("wake", "c", "first", "--window", "10", "--json").stdout)
    assert woke["verdict"] == "completed", woke
    # The turn's own reporter stores the id it saw: let it finish first.
    outcome = env.home / "turns" / "c" / woke["turn"] / "outcome"
    assert retry_until(lambda: outcome.read_text().startswith("exit:"), seconds=20)
    with env.spex().store.tx() as db:
        db.execute("UPDATE sessions SET harness_session_id = ? WHERE name = 'c'", ("0" * 36,))
    code, first = fan(env, "c", "-m", "again", "--window", "10")
    assert code == 1 and first["legs"][0]["cause"] == "conversation-gone", first
    code, second = fan(env, "--retry-failed", first["id"], "--window", "10")
    assert code == 0 and verdicts(second) == {"c": "completed"}, second


def epoch_fields(doc: Any, where: str = "") -> list[tuple[str, Any, Any]]:
    """(path, value, its _iso twin) for every `at` / `*_at` field in `doc`."""
    found: list[tuple[str, Any, Any]] = []
    if isinstance(doc, list):
        for i, v in enumerate(doc):
            found += epoch_fields(v, f"{where}[{i}]")
    elif isinstance(doc, dict):
        for k, v in doc.items():
            if (k == "at" or k.endswith("_at")) and not isinstance(v, dict | list | str):
                found.append((f"{where}.{k}", v, doc.get(f"{k}_iso", "MISSING")))
            found += epoch_fields(v, f"{where}.{k}")
    return found


def test_wave_json_has_its_kind_and_an_iso_twin_for_every_time(env: Env) -> None:
    from datetime import UTC, datetime

    for n in ("a", "b"):
        env.run("new", n, "--", harness("exit0.sh"))
    code, doc = fan(env, "a", "b", "-m", "go", "--window", "1", "--wait")
    assert code == 0, doc
    r = env.run("wave", doc["id"], "--json")
    shown = json.loads(r.stdout)
    assert next(iter(shown)) == "schema_version" and shown["schema_version"] == 1
    assert shown["kind"] == "local" and shown["id"] == doc["id"]
    fields = epoch_fields(shown)
    paths = {path for path, _, _ in fields}
    assert {".created_at", ".ended_at", ".legs[0].ended_at", ".history[0].at"} <= paths, paths
    for path, value, twin in fields:
        want = None
        if value is not None:
            want = datetime.fromtimestamp(value, UTC).isoformat(timespec="milliseconds")
            want = want.replace("+00:00", "Z")
        assert twin == want, (path, value, twin)
    # Only the JSON: the text is as it was.
    assert "_iso" not in env.run("wave", doc["id"]).stdout
    r = env.run("wave", "wnosuch", "--json")
    assert r.returncode == 3 and r.stderr.startswith("spex: ")
    assert json.loads(r.stdout)["ok"] is False and json.loads(r.stdout)["exit_code"] == 3


def test_a_wave_of_harnesses_without_usage_shows_no_unknown_spend(env: Env) -> None:
    """Issue 38, item 15: demo and command legs report no usage; the wave's
    summary said `cost ? · tokens unknown`. Nothing was expected: no spend
    is shown, and the JSON's is null. A running leg of them still makes the
    spend unknown until it ends (it may be a harness that reports)."""
    env.run("new", "d", "--harness", "demo")
    env.run("new", "c", "--", "sh", "-c", "echo done")
    r = env.run("fanout", "d", "c", "-m", "hi", "--wait")
    assert r.returncode == 0, r
    assert "unknown" not in r.stdout and "cost" not in r.stdout, r.stdout
    shown = env.run("wave", "last")
    assert "unknown" not in shown.stdout and " · cost" not in shown.stdout, shown.stdout
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    assert (doc["cost"], doc["usage"]) == (None, None), doc


def test_one_count_grammar_for_a_wave_of_mixed_outcomes(env: Env) -> None:
    """Issue 38, item 8: a wave is counted by outcome, one grammar in the
    fan-out's summary, `spex wave` and `spex waves`. Four claude legs, one
    running at a time under a $0.15 budget, each held at its start by a gate
    this test opens: the first completes ($0.09), the second exits 1, the
    third completes ($0.18 spent), the fourth is skipped by the budget."""
    gates = env.root / "gates"
    gates.mkdir()
    shim = env.root / "gated"
    shim.mkdir()
    (shim / "claude").write_text(
        "#!/bin/bash\n"
        f'[ "$1" = --version ] && exec {FAKES}/claude "$@"\n'
        f'gate={gates}/"$SPEXSUP_SESSION"\n'
        'while [ ! -s "$gate" ]; do sleep 0.05; done\n'
        '[ "$(cat "$gate")" = fail ] && exit 1\n'
        f'exec {FAKES}/claude "$@"\n'
    )
    (shim / "claude").chmod(0o755)
    env.login_path(f"{shim}:{env.vars['PATH']}")
    names = ["a", "b", "c", "d"]
    for name in names:
        claude_session(env, name)
    fanout = subprocess.Popen(
        [SPEX, "fanout", *names, "-m", "go", "--max-running", "1", "--budget", "0.15",
         "--window", "0.5", "--wait"],
        env=env.vars, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    started: list[str] = []

    def one_started() -> bool:
        """A leg whose turn started and whose gate is still shut."""
        r = env.run("wave", "last", "--json")
        legs = json.loads(r.stdout)["legs"] if r.returncode == 0 else []
        started[:] = [
            leg["session"]
            for leg in legs
            if leg.get("turn_state") in ("starting", "running")
            and not (gates / leg["session"]).exists()
        ]
        return bool(started)

    try:
        for outcome in ("ok", "fail", "ok"):
            assert retry_until(one_started, seconds=60)
            assert len(started) == 1, started  # --max-running 1
            (gates / started[0]).write_text(outcome)
        out, err = fanout.communicate(timeout=120)
    finally:
        fanout.kill()
    assert fanout.returncode == 1, out + err
    counted = "4 legs: 2 complete · 1 failed · 1 skipped · 0 running"
    summary = out.splitlines()[-1]
    assert summary.startswith("wave ") and f"partial · {counted} · " in summary, out
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    assert doc["counts"] == {
        **dict.fromkeys(OTHERS, 0), "legs": 4, "complete": 2, "failed": 1, "skipped": 1,
    }, doc["counts"]  # fmt: skip
    shown = env.run("wave", "last").stdout
    assert shown.startswith(f"wave {doc['id']}: partial · {counted} · "), shown
    listed = env.run("waves").stdout
    assert f"{counted}" in next(ln for ln in listed.splitlines() if ln.startswith(doc["id"]))
    # Each leg says its end once: `failed turn T rc=1`, never `… ended failed`.
    assert not re.search(r"failed turn \S+ ended failed", shown), shown
    assert "skipped turn" in shown and "ended skipped" not in shown, shown


def test_a_leg_that_failed_inside_its_window_was_launched(env: Env) -> None:
    """Issue 38, item 8: a leg whose turn started and exited 1 within its
    window ran: the launch summary counts it failed (it said `launched 1/2`),
    `counts.launched` has it, and its line says `failed` once, rc once."""
    env.run("new", "bad", "--", "sh", "-c", "exit 1")
    env.run("new", "slow", "--", harness("sleeper.sh"))
    r = env.run("fanout", "bad", "slow", "-m", "go", "--window", "5")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    summary = "running · 2 legs: 0 complete · 1 failed · 0 skipped · 1 running"
    assert lines[-1].startswith("wave ") and summary in lines[-1], lines
    assert "launched" not in r.stdout, r.stdout
    bad = next(ln for ln in lines if ln.startswith("bad: "))
    assert re.fullmatch(r"bad: failed turn \S+ rc=1", bad), bad  # no `ended failed (exited rc=1)`
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    leg = next(leg for leg in doc["legs"] if leg["session"] == "bad")
    # Its JSON is as it was.
    assert (leg["verdict"], leg["rc"], leg["error"]) == ("failed", 1, "exited rc=1"), leg
    ended = [h for h in doc["history"] if h["event"] == "leg-ended"]
    assert [h["session"] for h in ended] == ["bad"], ended
    env.run("stop", "slow")
    doc = json.loads(env.run("wave", "last", "--json").stdout)
    over = next(h for h in doc["history"] if h["event"] == "wave-ended")
    assert over["launched"] == 2 and over["legs"] == 2, over
    assert doc["counts"]["failed"] == 1 and doc["counts"]["aborted"] == 1, doc["counts"]
    assert "2 legs: 0 complete · 1 failed · 0 skipped · 0 running · 1 aborted" in (
        env.run("wave", "last").stdout
    )


def on_a_terminal(env: Env, *args: str) -> list[str]:
    """What `spex ARGS` prints on an 80x24 terminal, colour removed."""
    import pexpect

    child = pexpect.spawn(SPEX, list(args), env=env.vars, dimensions=(24, 80), encoding="utf-8")
    child.expect(pexpect.EOF, timeout=30)
    text = (child.before or "").replace("\r", "")
    return [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in text.splitlines() if ln]


def test_a_waves_lines_fit_80_columns_on_a_terminal_and_stay_whole_in_a_pipe(env: Env) -> None:
    """Issue 38 items 8 and 17: the one count grammar made a wave's summary
    and `wave ls` rows wider than 80 columns; on a terminal the summary wraps
    at a word and the table gives up the retry column, the kind and the
    outcomes no leg had, never the wave or its state. A pipe keeps each
    line whole."""
    for name in ("ok", "bad"):
        env.run("new", name, "--", "bash", "-c", "exit 0" if name == "ok" else "exit 1")
    r = env.run("fanout", "ok", "bad", "-m", "go", "--wait", timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    r = env.run("fanout", "--retry-failed", "last", "--wait", timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    piped = env.run("wave", "last").stdout.splitlines()[0]
    assert len(piped) > 80 and "1 legs" not in piped, piped
    assert "1 leg: 0 complete · 1 failed · 0 skipped · 0 running" in piped, piped
    shown = on_a_terminal(env, "wave", "last")
    assert all(len(ln) <= 80 for ln in shown), shown
    # The summary, wrapped at a word: the same words as the pipe's one line.
    wrapped = shown[: next(i for i, ln in enumerate(shown) if ln.startswith("prompt:"))]
    assert len(wrapped) == 2 and " ".join(ln.strip() for ln in wrapped) == piped, wrapped
    listed = on_a_terminal(env, "wave", "ls")
    assert all(len(ln) <= 80 for ln in listed), listed
    assert listed[0].split() == ["WAVE", "KIND", "STATE", "LEGS"], listed
    assert re.match(r"w\S+ +local +failed +1 leg: 1 failed$", listed[1]), listed
    assert re.match(r"w\S+ +local +partial +2 legs: 1 complete · 1 failed$", listed[2]), listed
    piped_ls = env.run("wave", "ls").stdout.splitlines()
    assert piped_ls[0].split() == ["WAVE", "KIND", "STATE", "LEGS", "RETRY", "OF"], piped_ls


def test_a_retry_repeats_each_legs_argv_and_stdin_byte_for_byte(env: Env) -> None:
    """A `--fresh` wave's retry starts new conversations again (issue 42,
    item 2): every option that shaped a leg is recorded, and the leg and its
    retry ran the harness with the same argv and the same stdin."""
    seen = env.root / "seen"
    seen.mkdir()
    env.home.mkdir(parents=True, exist_ok=True)
    script = harness("argv_stdin.sh")
    (env.home / "harnesses.toml").write_text(
        f'[harness.rec]\nfresh = ["{script}", "{seen}"]\n'
        f'resume = ["{script}", "{seen}", "--resume", "{{session_id}}"]\n'
        "id_pattern = 'conversation: (demo-[0-9a-f]+)'\n"
        'prompt_via = "stdin"\nmodel_flag = "--model"\n'
    )
    for name in ("a", "b"):
        assert env.run("new", name, "--harness", "rec").returncode == 0
        # A conversation to resume: what a retry must not do here.
        _, v = fan(env, name, "-m", "hello", "--window", "10")
        assert v["legs"][0]["verdict"] == "completed", v
        assert json.loads(env.run("show", name, "--json").stdout)["harness_session_id"]
    (seen / "rc").write_text("7\n")
    prompt = "fix it\n  keep \"quotes\", $(not run) `nor this` é ✓ \\ 'q'\n".encode()
    r = env.run("fanout", "a", "b", "-f", "-", "--fresh", "--model", "m1", "--verify", "true",
                "--window", "10", "--json", input=prompt)  # fmt: skip
    first = json.loads(r.stdout)
    assert r.returncode == 1 and verdicts(first) == {"a": "failed", "b": "failed"}, first
    assert all(leg["turn"] and leg["rc"] == 7 for leg in first["legs"]), first["legs"]
    options = first["turn_options"]
    assert options["fresh"] is True and options["model"] == "m1", options
    assert options["verify"] == ["sh", "-c", "true"] and options["unsandboxed"] is False
    assert stored(env, first["id"])["turn_options"] == options
    code, again = fan(env, "--retry-failed", first["id"])
    assert code == 1 and verdicts(again) == {"a": "failed", "b": "failed"}, again
    assert again["turn_options"] == options
    assert all(leg["turn"] for leg in again["legs"]), again
    for leg, retried in zip(first["legs"], again["legs"], strict=True):
        argv = (seen / f"{leg['turn']}.argv").read_bytes()
        assert argv == (seen / f"{retried['turn']}.argv").read_bytes()
        assert b"\0--model\0m1\0" in argv and b"--resume" not in argv  # new conversations
        stdin = (seen / f"{leg['turn']}.stdin").read_bytes()
        assert stdin == prompt == (seen / f"{retried['turn']}.stdin").read_bytes()
    # What a retry of the same wave without the record would do: resume.
    code, resumed = fan(env, "--retry-failed", first["id"], "a", "--no-fresh")
    assert code == 1 and resumed["turn_options"] == {**options, "fresh": False}
    argv = (seen / f"{resumed['legs'][0]['turn']}.argv").read_bytes()
    assert b"\0--resume\0demo-" in argv, argv


def test_a_retried_wave_tells_each_legs_last_attempt(env: Env) -> None:
    """The wave's story in one place (issue 42, item 5): the first wave keeps
    its own state, and its combined view follows each leg to its last
    attempt; the retry's `wave-started` says what it retries, and each
    `wave-ended` carries the wave's usage, cost and outcomes, as a hook sees."""
    seen = env.root / "hooked"
    hook = ["sh", "-c", f'echo "$SPEX_WAVE $SPEX_WAVE_STATE $SPEX_COST $SPEX_RETRY_OF" >>{seen}']
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text(
        f"[[hook]]\nname = 'w'\non = ['wave-ended']\nrun = {json.dumps(hook)}\n"
    )
    claude_session(env, "b")
    # Logged out: its turn fails, spending nothing.
    args = ["new", "a", "--harness", "claude", "--cwd", str(env.root)]
    assert env.run(*args).returncode == 0
    code, first = fan(env, "a", "b", "-m", "go", "--window", "10", "--wait")
    assert code == 1 and first["state"] == "partial", first
    # Whatever made it fail is fixed.
    assert env.run("rm", "a").returncode == 0
    claude_session(env, "a")
    code, retry = fan(env, "--retry-failed", first["id"], "--wait")
    assert code == 0 and retry["state"] == "complete", retry
    shown = json.loads(env.run("wave", first["id"], "--json").stdout)
    assert shown["state"] == "partial" and shown["retried_by"] == [retry["id"]]
    combined = shown["combined"]
    assert combined["state"] == "complete" and combined["waves"] == [first["id"], retry["id"]]
    assert combined["counts"] == {"legs": 2, **dict.fromkeys(OTHERS, 0), "complete": 2}
    legs = {leg["session"]: leg for leg in combined["legs"]}
    assert (legs["a"]["wave"], legs["a"]["attempts"]) == (retry["id"], 2)
    assert legs["a"]["turn"] == retry["legs"][0]["turn"] and legs["a"]["turn_state"] == "complete"
    assert (legs["b"]["wave"], legs["b"]["attempts"]) == (first["id"], 1)
    text = env.run("wave", first["id"]).stdout
    assert "after 1 retry: complete · 2 legs: 2 complete · 0 failed · 0 skipped" in text, text
    assert f"(attempt 2, wave {retry['id']})" in text, text
    assert json.loads(env.run("wave", retry["id"], "--json").stdout)["combined"] is None
    # The events: what the retry retries, and what each wave came to.
    started = events_of(env, "wave-started")
    assert started[-1]["payload"] == {
        "wave": retry["id"], "legs": 1, "retry_of": first["id"], "sessions": ["a"]
    }  # fmt: skip
    assert "retry_of" not in started[0]["payload"]
    ended = {e["payload"]["wave"]: e["payload"] for e in events_of(env, "wave-ended")}
    again = ended[retry["id"]]
    assert again["state"] == "complete" and again["retry_of"] == first["id"]
    assert again["outcomes"] == {"legs": 1, **dict.fromkeys(OTHERS, 0), "complete": 1}
    assert again["counts"]["ok"] == 1 and again["cost"]["amount"] == RUN, again
    assert again["usage"]["models"] and again["cost"]["exact"] is True, again
    once = ended[first["id"]]
    assert once["state"] == "partial" and once["retry_of"] is None
    assert once["outcomes"]["complete"] == 1 and once["outcomes"]["failed"] == 1, once
    assert once["cost"]["amount"] >= RUN, once
    assert retry_until(lambda: seen.exists() and len(seen.read_text().splitlines()) == 2, 30)
    lines = sorted(seen.read_text().splitlines())
    assert f"{retry['id']} complete {RUN} {first['id']}" in lines, lines


# What the fake claude reports for one turn (tests/fixtures/real/claude).
RUN = 0.088119


def events_of(env: Env, kind: str) -> list[dict[str, Any]]:
    r = env.run("events", "--json", "--kind", kind)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]
