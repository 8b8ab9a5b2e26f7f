"""Staggered starts (issue 25): launches of one harness kept apart, across
processes, by fan-out, by concurrent wakes and by `up --revive`; a stop or
an abort while a launch waits for its start wins.

The fake harness (`harnesses/stamp.sh`) appends the time it really started
to a file named after its session: the spacing is measured between those,
never between spex's own steps. Only lower bounds on the spacing are
asserted (a loaded machine only makes launches later).
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
from pathlib import Path

from conftest import SPEX, Env, harness, retry_until
from test_turns import show

from spexsup.adapters import stagger
from spexsup.adapters.procs import boot_id

# Launches `--stagger 1s` apart start their harnesses at least this far apart
# (each waits for the one before it to start its harness): only the reading
# of the clock in the pane (`date`) is allowed for.
MIN_GAP = 0.9


def stamps(env: Env) -> Path:
    directory = env.root / "stamps"
    directory.mkdir(exist_ok=True)
    return directory


def harnesses(env: Env, *names: str) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        "".join(f'[harness.{n}]\nfresh = ["{harness("stamp.sh")}", "{{prompt}}"]\n' for n in names)
    )


def new(env: Env, name: str, harness_name: str = "stamp", *more: str) -> None:
    r = env.run("new", name, "--harness", harness_name, "--env", f"STAMP_DIR={stamps(env)}", *more)
    assert r.returncode == 0, r.stderr


def started(env: Env, name: str) -> list[float]:
    path = stamps(env) / name
    return [float(t) for t in path.read_text().split()] if path.exists() else []


def gaps(times: list[float]) -> list[float]:
    ordered = sorted(times)
    return [b - a for a, b in itertools.pairwise(ordered)]


def test_fanout_stagger_spaces_the_harness_starts(env: Env) -> None:
    harnesses(env, "stamp")
    names = [f"s{i}" for i in range(4)]
    for name in names:
        new(env, name)
    r = env.run("fanout", *names, "-m", "go", "--stagger", "1s", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert [leg["verdict"] for leg in doc["legs"]] == ["completed"] * 4, doc
    assert doc["turn_options"]["stagger"] == 1.0
    times = [t for name in names for t in started(env, name)]
    assert len(times) == 4
    assert all(gap >= MIN_GAP for gap in gaps(times)), gaps(times)


def test_retry_failed_keeps_the_waves_stagger(env: Env) -> None:
    harnesses(env, "stamp")
    for name in ("a", "b"):
        new(env, name)
    env.run("stop", "b")  # so its leg is refused, and retried once resumed
    r = env.run("fanout", "a", "b", "-m", "go", "--stagger", "1s", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    assert env.run("resume", "b").returncode == 0
    # The slot a's launch took is at most a second old: b's retried launch,
    # under the same 1 s, waits for what is left of it.
    r = env.run("fanout", "--retry-failed", "last", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    retry = json.loads(r.stdout)
    assert retry["turn_options"]["stagger"] == 1.0
    assert [leg["session"] for leg in retry["legs"]] == ["b"]
    assert gaps([*started(env, "a"), *started(env, "b")])[0] >= MIN_GAP
    # Given with the retry, it wins.
    env.run("stop", "a")
    r = env.run("fanout", "a", "-m", "go", "--stagger", "2s", "--json")
    assert r.returncode == 1
    env.run("resume", "a")
    again = env.run("fanout", "--retry-failed", "last", "--stagger", "0", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["turn_options"]["stagger"] == 0.0


def test_a_fleet_fanout_passes_its_stagger_to_each_host(env: Env) -> None:
    harnesses(env, "stamp")
    for name in ("f1", "f2"):
        new(env, name)
    r = env.run(
        "fanout", "--hosts", "local", "--match", "f*", "-m", "go", "--stagger", "1s", "--json",
        timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    fleet = json.loads(r.stdout)
    assert fleet["turn_options"]["stagger"] == 1.0
    host_wave = json.loads(env.run("wave", fleet["hosts"][0]["wave"], "--json").stdout)
    assert host_wave["turn_options"]["stagger"] == 1.0
    assert gaps([*started(env, "f1"), *started(env, "f2")])[0] >= MIN_GAP


def test_config_stagger_spaces_concurrent_wakes(env: Env) -> None:
    """Separate `spex wake` processes of one harness, started together, take
    their turns one after another."""
    harnesses(env, "stamp")
    names = [f"w{i}" for i in range(3)]
    for name in names:
        new(env, name)
    (env.home / "config.toml").write_text('stagger = "1s"\n')
    wakes = [
        subprocess.Popen(
            [SPEX, "wake", name, "go", "--json"],
            env=env.vars,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    for p in wakes:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, (out, err)
        assert json.loads(out)["verdict"] == "completed"
    times = [t for name in names for t in started(env, name)]
    assert len(times) == 3
    assert all(gap >= MIN_GAP for gap in gaps(times)), gaps(times)


def test_a_queued_prompt_keeps_the_spacing_too(env: Env) -> None:
    """Its dequeuer launches it through the same wake: config.toml's stagger
    holds between the turn before it (2 s of work) and it."""
    harnesses(env, "stamp")
    new(env, "q", "stamp", "--env", "STAMP_SLEEP=2")
    (env.home / "config.toml").write_text('stagger = "3s"\n')
    assert env.run("wake", "q", "first", "--window", "0.5").returncode == 0
    queued = env.run("wake", "q", "--queue", "second", "--json")
    assert queued.returncode == 0 and json.loads(queued.stdout)["verdict"] == "queued"
    assert retry_until(lambda: len(started(env, "q")) == 2, 30)
    assert gaps(started(env, "q"))[0] >= 2.9  # not the 2 s the first turn took
    env.run("stop", "q", "--grace", "1")


def test_a_launch_keeps_its_distance_from_the_harness_started_before_it(env: Env) -> None:
    """The wrapper's steps before the harness may take long (here the home's
    first login shell takes 2 s): the next launch waits for that harness to
    start, not only for its own slot a second after the first."""
    harnesses(env, "stamp")
    new(env, "slow")
    new(env, "fast")
    # Changed after `spex new`: the login shell's cached environment is stale.
    profile = Path(env.vars["HOME"]) / ".profile"
    profile.write_text(profile.read_text() + '[ "$SPEXSUP_SESSION" = slow ] && sleep 2\n')
    (env.home / "config.toml").write_text('stagger = "1s"\n')
    first = subprocess.Popen(
        [SPEX, "wake", "slow", "go"],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        slots = env.home / stagger.DIR / "stamp"
        assert retry_until(lambda: slots.exists() and " slow/" in slots.read_text(), 30)
        r = env.run("wake", "fast", "go")
        assert r.returncode == 0, r.stderr
        out, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 0, (out, err)
    # (Confirmed while its wrapper still waited for the login shell.)
    assert retry_until(lambda: bool(started(env, "slow") and started(env, "fast")), 30)
    (slow,), (fast,) = started(env, "slow"), started(env, "fast")
    assert fast - slow >= MIN_GAP, (slow, fast)


def test_different_harnesses_are_not_spaced_against_each_other(env: Env) -> None:
    harnesses(env, "one", "two")
    new(env, "a", "one")
    new(env, "b", "two")
    r = env.run("fanout", "a", "b", "-m", "go", "--stagger", "5s", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    (ta,), (tb,) = started(env, "a"), started(env, "b")
    assert abs(ta - tb) < 3.0  # spaced, one would have waited 5 s for the other


def test_up_revive_stagger_spaces_the_revived_turns(env: Env) -> None:
    boot = env.root / "boot_id"
    boot.write_text("boot-one\n")
    extra = {"SPEXSUP_BOOT_ID_FILE": str(boot)}
    harnesses(env, "stamp")
    names = [f"r{i}" for i in range(3)]
    for name in names:
        new(env, name, "stamp", "--env", "STAMP_SLEEP=300")
        r = env.run("wake", name, "first", "--window", "0.3", extra=extra)
        assert r.returncode == 0, r.stderr
    env.tmux("kill-server")  # the machine "reboots" (its processes with it)
    boot.write_text("boot-two\n")
    r = env.run("up", "--revive", "--stagger", "1s", "--json", extra=extra)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert sorted(leg["session"] for leg in doc["legs"]) == names
    assert all(leg["verdict"] == "confirmed" for leg in doc["legs"]), doc
    assert doc["turn_options"]["stagger"] == 1.0
    # Confirmed is the wrapper's start: each harness's own stamp may come just after.
    assert retry_until(lambda: all(len(started(env, name)) == 2 for name in names), 30)
    revived = [started(env, name)[1] for name in names]  # each one's second start
    assert all(gap >= MIN_GAP for gap in gaps(revived)), gaps(revived)


def _waiting(env: Env, name: str) -> bool:
    turn = show(env, name)["turn"]
    return turn is not None and turn["state"] == "starting"


def test_a_stop_while_a_wake_waits_for_its_start_wins(env: Env) -> None:
    harnesses(env, "stamp")
    (env.home / "config.toml").write_text('stagger = "1m"\n')
    new(env, "first")
    new(env, "second")
    assert env.run("wake", "first", "go").returncode == 0  # takes the slot: the next is 1 min on
    wake = subprocess.Popen(
        [SPEX, "wake", "second", "go", "--json"],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert retry_until(lambda: _waiting(env, "second"), 30)
        stop = env.run("stop", "second", "--grace", "1")
        assert stop.returncode == 0, stop.stderr
        # Woken by the stop's commit, not by the end of its minute.
        out, err = wake.communicate(timeout=30)
    finally:
        wake.kill()
    assert wake.returncode == 3, (out, err)
    assert "was stopped" in json.loads(out)["error"]
    s = show(env, "second")
    assert s["state"] == "stopped"
    assert s["turn"]["state"] == "aborted"
    assert started(env, "second") == []  # its harness never ran
    assert s["turn"]["pid"] is None


def test_an_interrupted_fanout_aborts_the_legs_still_waiting(env: Env) -> None:
    harnesses(env, "stamp")
    new(env, "a")
    new(env, "b")
    fan = subprocess.Popen(
        [SPEX, "fanout", "a", "b", "-m", "go", "--stagger", "1m", "--json"],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # One leg launched, the other waits a minute for its start.
        assert retry_until(lambda: len(started(env, "a") + started(env, "b")) == 1, 30)
        waiting = "a" if not started(env, "a") else "b"
        assert retry_until(lambda: _waiting(env, waiting), 30)
        fan.send_signal(signal.SIGINT)
        out, err = fan.communicate(timeout=30)
    finally:
        fan.kill()
    assert fan.returncode == 130, (out, err)
    leg = next(leg for leg in json.loads(out)["legs"] if leg["session"] == waiting)
    assert leg["verdict"] == "aborted", leg
    assert show(env, waiting)["turn"]["state"] == "aborted"
    assert started(env, waiting) == []


def test_a_leg_aborted_before_its_launch_shows_no_run_time(env: Env) -> None:
    """A fan-out leg aborted while it waited for its start never ran: `spex
    ls` gives it no run time (it said `ran 3s`, the wait), its JSON `ran` is
    null, while the leg that ran has its own."""
    harnesses(env, "stamp")
    new(env, "a")
    new(env, "b")
    fan = subprocess.Popen(
        [SPEX, "fanout", "a", "b", "-m", "go", "--stagger", "1m", "--json"],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert retry_until(lambda: len(started(env, "a") + started(env, "b")) == 1, 30)
        waiting = "a" if not started(env, "a") else "b"
        assert retry_until(lambda: _waiting(env, waiting), 30)
        fan.send_signal(signal.SIGINT)
        out, err = fan.communicate(timeout=30)
    finally:
        fan.kill()
    assert fan.returncode == 130, (out, err)
    ran = "b" if waiting == "a" else "a"
    assert env.run("wait", ran, "--timeout", "30").returncode == 0
    lines = {line.split()[0]: line for line in env.run("ls").stdout.splitlines()[1:]}
    assert "aborted" in lines[waiting] and ", ran" not in lines[waiting], lines[waiting]
    assert ", ran " in lines[ran], lines[ran]
    shown = env.run("show", waiting).stdout
    assert "aborted" in shown and ", ran" not in shown, shown
    listed = {s["name"]: s["turn"] for s in json.loads(env.run("ls", "--json").stdout)}
    assert listed[waiting]["state"] == "aborted" and listed[waiting]["ran"] is None
    assert listed[ran]["state"] == "complete" and listed[ran]["ran"] >= 0, listed[ran]


def test_bad_stagger_values_are_one_line_errors_that_change_nothing(env: Env) -> None:
    harnesses(env, "stamp")
    new(env, "a")
    for args in (
        ["fanout", "a", "-m", "go", "--stagger", "1x"],
        ["fanout", "a", "-m", "go", "--stagger", "11m"],
        ["fanout", "a", "-m", "go", "--stagger", "-1"],
        ["up", "--revive", "--stagger", "soon"],
        ["up", "a", "--stagger", "1s"],  # no --revive: no turn to space
    ):
        r = env.run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("spex: ") and r.stderr.count("\n") == 1, (args, r.stderr)
        assert "--stagger" in r.stderr
    bad = env.run("fanout", "a", "-m", "go", "--stagger", "1x")
    assert bad.stderr == "spex: invalid --stagger '1x' (a duration: 90s, 15m, 2h, 1h30m)\n"
    (env.home / "config.toml").write_text('stagger = "a while"\n')
    r = env.run("wake", "a", "go")
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "field 'stagger' must be" in r.stderr, r.stderr
    (env.home / "config.toml").write_text("stagger = 601\n")
    r = env.run("fanout", "a", "-m", "go")
    assert r.returncode == 1 and "to 10m" in r.stderr, r.stderr
    (env.home / "config.toml").unlink()
    assert show(env, "a")["turn"] is None  # nothing was admitted
    assert not (env.home / stagger.DIR).exists()  # no launch, no slot taken


def test_reserve_hands_out_slots_spacing_apart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    first = stagger.reserve(home, "h", 10.0, "a/1")
    second = stagger.reserve(home, "h", 10.0, "b/2")
    third = stagger.reserve(home, "h", 10.0, "c/3")
    assert first.before is None
    assert second.at - first.at == 10.0 and third.at - second.at == 10.0
    assert (second.before, second.before_at) == ("a/1", first.at)
    assert (third.before, third.before_at) == ("b/2", second.at)
    other = stagger.reserve(home, "other", 10.0, "d/4")  # its own slots
    assert other.at <= stagger.now() and other.before is None
    path = home / stagger.DIR / "h"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    path.write_text("garbage\n")  # torn or foreign: no last start
    torn = stagger.reserve(home, "h", 10.0, "e/5")
    assert torn.at <= stagger.now() and torn.before is None
    path.write_text(f"{boot_id()} {stagger.now()} ../..\n")  # no turn of ours: no last start
    odd = stagger.reserve(home, "h", 10.0, "f/6")
    assert odd.at <= stagger.now() and odd.before is None
    path.write_text(f"another-boot {stagger.now() + 1000} a/1\n")  # before a reboot: forgotten
    after = stagger.reserve(home, "h", 10.0, "h/8")
    assert after.at <= stagger.now() and after.before is None
    assert stagger.left(stagger.now() - 1) < 0


def test_reserve_refuses_names_that_are_no_file_names(tmp_path: Path) -> None:
    import pytest

    from spexsup.errors import Invalid

    for name in ("../x", "", "a/b", "."):
        with pytest.raises(Invalid):
            stagger.reserve(tmp_path, name, 1.0, "a/1")
    for launch in ("a 1", "../../x", "a/b/c", "a"):
        with pytest.raises(Invalid):
            stagger.reserve(tmp_path, "h", 1.0, launch)
    assert not (tmp_path / stagger.DIR).exists()


def test_no_stagger_takes_no_slot(env: Env) -> None:
    harnesses(env, "stamp")
    new(env, "a")
    assert env.run("wake", "a", "go").returncode == 0
    r = env.run("fanout", "a", "-m", "go", "--stagger", "0", "--json")
    assert r.returncode == 0, r.stderr
    assert not (env.home / stagger.DIR).exists()
    assert len(started(env, "a")) == 2


def test_opencode_is_spaced_by_default(env: Env) -> None:
    """Issue 42, item 4: every `opencode run` opens one SQLite database, so
    its launches are 2 s apart unless `--stagger` or config.toml's `stagger`
    says otherwise (0: none). The built-in opencode's argv is replaced here
    by the stamping harness; its built-in spacing stays."""
    from spexsup.adapters.harness import OPENCODE_STAGGER

    harnesses(env, "opencode")
    names = ["o1", "o2", "o3"]
    for name in names:
        new(env, name, "opencode")
    r = env.run("fanout", *names, "-m", "go", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    times = [t for name in names for t in started(env, name)]
    assert len(times) == 3
    assert all(gap >= OPENCODE_STAGGER - 0.1 for gap in gaps(times)), gaps(times)
    assert (env.home / stagger.DIR / "opencode").exists()
    # `--stagger 0` and config.toml's `stagger = 0` each say none.
    for how in (["--stagger", "0"], []):
        if not how:
            (env.home / "config.toml").write_text('stagger = "0s"\n')
        before = (env.home / stagger.DIR / "opencode").read_bytes()
        r = env.run("fanout", *names, "-m", "go", *how, "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert (env.home / stagger.DIR / "opencode").read_bytes() == before, how
