"""Schedules (issue 25, item 8): `spex schedule add|ls|rm|run` on a systemd
user timer or the user's crontab, each firing a keyed wake.

Most tests edit the fake crontab of tests/fakes (a file in the test's HOME);
`test_a_real_cron_daemon_fires_a_schedule` edits root's real crontab (its own
marked block, removed at the end) and runs Debian's cron daemon itself when
none is running. systemd units are checked with `systemd-analyze`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import FAKES, SPEX, Env, harness, retry_until

from spexsup.adapters import schedule
from spexsup.errors import Invalid

# A cadence whose due slot stays put for a year: firings of it in one test
# are of one slot, whatever minute they run in.
YEARLY = "0 0 1 1 *"


def add(env: Env, *args: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    r = env.run("schedule", "add", *args, "--json", extra=extra)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def listed(env: Env) -> list[dict[str, Any]]:
    r = env.run("schedule", "ls", "--json")
    assert r.returncode == 0, r.stderr
    docs: list[dict[str, Any]] = json.loads(r.stdout)
    return docs


def fake_table(env: Env) -> str:
    path = Path(env.vars["HOME"]) / ".fake-crontab"
    return path.read_text() if path.exists() else ""


def db(env: Env) -> sqlite3.Connection:
    conn = sqlite3.connect(env.home / "state.db", timeout=5)
    conn.row_factory = sqlite3.Row
    return conn


def turns_of(env: Env, name: str) -> list[sqlite3.Row]:
    with db(env) as conn:
        return conn.execute("SELECT * FROM turns WHERE session = ?", (name,)).fetchall()


def fire(env: Env, schedule_id: str) -> subprocess.CompletedProcess[str]:
    """What the engine runs for a firing."""
    return env.run("internal", "schedule-fire", schedule_id)


def early_in_a_minute() -> None:
    """`schedule run` fires this minute's slot: keep two runs in one minute."""
    second = time.time() % 60
    if second > 50:
        time.sleep(61 - second)


# --- the clock's words ---------------------------------------------------------------


def test_every_maps_to_a_cron_expression_or_is_refused() -> None:
    cases = {
        "1m": "* * * * *",
        "15m": "*/15 * * * *",
        "30m": "*/30 * * * *",
        "1h": "0 * * * *",
        "60m": "0 * * * *",
        "2h": "0 */2 * * *",
        "12h": "0 */12 * * *",
        "1d": "0 0 * * *",
        "24h": "0 0 * * *",
        "1w": "0 0 * * 0",
    }
    for every, cron in cases.items():
        assert schedule.parse_every(every).cron == cron, every
    assert schedule.parse_every("15m").describe() == "every 15m"
    for bad in ("7m", "90m", "5h", "2d", "30s", "0", "2w", "soon", "-1h"):
        with pytest.raises(Invalid, match="invalid --every"):
            schedule.parse_every(bad)


def test_cron_takes_what_debian_cron_reads_and_nothing_else() -> None:
    for good in (
        "* * * * *",
        "0 9 * * 1-5",
        "*/15 9-17 * * mon-fri",
        "0 0 1,15 * 1",
        "5-59/10 * * jan-jun sun",
        "0 0 29 2 *",
        "0 0 * * 7",
    ):
        assert schedule.parse_cron(good).cron == good
    assert schedule.parse_cron("  0   9 * *  1-5 ").cron == "0 9 * * 1-5"
    assert schedule.parse_cron("@daily").cron == "0 0 * * *"
    assert schedule.parse_cron("@hourly").cron == "0 * * * *"
    bad = {
        "* * * *": "4 fields",
        "0 * * * * *": "6 fields",
        "@reboot": "1 fields",
        "5/10 * * * *": "bad minute",
        "61 * * * *": "bad minute",
        "0 24 * * *": "bad hour",
        "0 0 L * *": "bad day-of-month",
        "0 0 30 2 *": "bad day-of-month",
        "0 0 * 13 *": "bad month",
        "0 0 * * 8": "bad day-of-week",
        "0 0 * * 1#2": "bad day-of-week",
        "0 0 ? * *": "bad day-of-month",
        "*/0 * * * *": "bad minute",
    }
    for expr, why in bad.items():
        with pytest.raises(Invalid, match=re.escape(why)):
            schedule.parse_cron(expr)
    with pytest.raises(Invalid, match="give --every or --cron"):
        schedule.cadence(None, None)
    with pytest.raises(Invalid, match="choose one"):
        schedule.cadence("1h", "* * * * *")


def test_a_firing_is_for_the_minute_it_was_due() -> None:
    nine = datetime(2026, 12, 2, 9, 0, tzinfo=schedule.zone()).timestamp()
    cron = "0 9 * * 1-5"  # 2026-12-02 is a Wednesday
    for late in (0, 0.4, 59, 3600, 86399):
        assert schedule.due(cron, nine + late) == nine, late
    assert schedule.due(cron, nine - 1) < nine - 86000
    assert schedule.next_after(cron, nine) == nine + 86400
    assert schedule.slot(nine) == time.strftime("%Y%m%dT%H%MZ", time.gmtime(nine))
    assert schedule.fire_key("sX", nine + 30) == f"sched-sX-{schedule.slot(nine)}"


def test_the_crontab_block_is_this_homes_and_keeps_every_other_line() -> None:
    mine, other = Path("/state/a"), Path("/state/b")
    table = "MAILTO=me\n0 5 * * * backup\n"
    table = schedule.replace_block(table, other, ["* * * * * theirs"])
    table = schedule.replace_block(table, mine, ["* * * * * mine"])
    assert schedule.block_lines(table, mine) == ["* * * * * mine"]
    assert schedule.block_lines(table, other) == ["* * * * * theirs"]
    again = schedule.replace_block(table, mine, ["*/5 * * * * mine too"])
    assert schedule.block_lines(again, mine) == ["*/5 * * * * mine too"]
    gone = schedule.replace_block(again, mine, [])
    assert gone == schedule.replace_block(
        "MAILTO=me\n0 5 * * * backup\n", other, ["* * * * * theirs"]
    )
    assert gone.startswith("MAILTO=me\n0 5 * * * backup\n") and gone.endswith("\n")


def test_a_crontab_line_quotes_for_sh_and_escapes_percent() -> None:
    home = Path("/tmp/a home/100%")
    argv, _ = schedule.firing_argv(home, "sX")
    firing = schedule.Firing(
        "sX", "api", schedule.parse_cron("0 9 * * 1-5"), argv, (), home / "schedules" / "sX.log"
    )
    line = schedule.cron_line(firing)
    assert line.startswith("0 9 * * 1-5 ")
    assert "%" not in line.replace("\\%", "")
    # What cron hands to /bin/sh (every \% back to %) runs our argv exactly.
    command = line[len("0 9 * * 1-5 ") :].replace("\\%", "%")
    out = subprocess.run(
        ["sh", "-c", command.replace(argv[0], "printf '%s\\n'", 1).split(" >>")[0]],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.splitlines() == list(argv[1:])
    with pytest.raises(Invalid, match="newline"):
        schedule.cron_line(firing._replace(log=Path("/tmp/a\nb")))


# --- systemd's units -------------------------------------------------------------


def units(tmp_path: Path, cron: str, home: Path) -> tuple[Path, Path]:
    argv, _ = schedule.firing_argv(home, "s20261202T000000Z-abcdef")
    firing = schedule.Firing(
        "s20261202T000000Z-abcdef",
        "api",
        schedule.parse_cron(cron),
        argv,
        (("PYTHONPATH", "/opt/a b/$x%y"),),
        home / "schedules" / "s20261202T000000Z-abcdef.log",
    )
    written = []
    for name, text in schedule.render_units(firing).items():
        (tmp_path / name).write_text(text)
        written.append(tmp_path / name)
    return written[0], written[1]


def test_rendered_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    for cron in ("*/15 9-17 * * mon-fri", "0 0 1,15 * 1", "* * * * *", YEARLY):
        for home in (tmp_path / "state", tmp_path / "a home" / "100%$x"):
            service, timer = units(tmp_path, cron, home)
            assert service.name.endswith(".service") and timer.name.endswith(".timer")
            r = subprocess.run(
                ["systemd-analyze", "--user", "verify", "--man=no", str(timer), str(service)],
                capture_output=True,
                text=True,
                env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
                check=False,
            )
            # verify says "…, ignoring" for a line it cannot read and still exits 0.
            assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), (cron, home, r)
            text = timer.read_text()
            assert text.count("OnCalendar=") == (2 if cron == "0 0 1,15 * 1" else 1)
            assert "AccuracySec=1s" in text and "Persistent=false" in text


def calendar_times(values: list[str], count: int) -> list[datetime]:
    r = subprocess.run(
        ["systemd-analyze", "calendar", f"--iterations={count}", *values],
        capture_output=True,
        text=True,
        env={**os.environ, "TZ": "UTC"},
        check=True,
    )
    found = re.findall(
        r"(?:Next elapse|Iter\. #\d+): \w+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", r.stdout
    )
    times = sorted({datetime.fromisoformat(t).replace(tzinfo=UTC) for t in found})
    return times[:count]


def test_the_timer_fires_at_the_minutes_cron_would() -> None:
    from cronsim import CronSim

    for cron in (
        "*/15 9-17 * * mon-fri",
        "0 0 1,15 * 1",
        "30 2 * * 0",
        "0 */6 1-7 * *",
        "5-59/20 * * jan,jul *",
        "0 12 * * 7",
    ):
        systemd = calendar_times(schedule.on_calendar(cron), 12)
        start = datetime.fromtimestamp(time.time() - 120, UTC)
        want = []
        for t in CronSim(cron, start):
            want.append(t)
            if len(want) == 60:
                break
        first = want.index(systemd[0])
        assert want[first : first + 12] == systemd, cron


# --- the commands, on the fake crontab -----------------------------------------------


def test_add_ls_rm_keep_the_crontab_block_and_the_record(env: Env) -> None:
    assert env.run("new", "api", "--", harness("exit0.sh")).returncode == 0
    hourly = add(env, "api", "--every", "1h", "-m", "run the checks")
    assert hourly["ok"] is True and hourly["id"].startswith("s")
    assert (hourly["cron"], hourly["every"], hourly["when"]) == ("0 * * * *", 3600.0, "every 1h")
    r = env.run(
        "schedule", "add", "api", "--cron", "0 9 * * 1-5", "-f", "-", "--overlap", "queue",
        "--timeout", "10m", "--strict", "--json", input=b"standup\nsecond line\n",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    standup = json.loads(r.stdout)
    assert standup["options"] == {"timeout": 600.0, "strict": True}
    assert standup["overlap"] == "queue" and standup["first_line"] == "standup"
    assert Path(standup["prompt_file"]).read_bytes() == b"standup\nsecond line\n"
    assert Path(standup["prompt_file"]).stat().st_mode & 0o777 == 0o600
    lines = schedule.block_lines(fake_table(env), env.home)
    assert [line for line in lines if not line.startswith("#")] == [
        line for line in lines if line.startswith(("0 * * * * ", "0 9 * * 1-5 "))
    ]
    assert len(lines) == 4 and f"internal schedule-fire {hourly['id']}" in lines[1]
    assert f"--home {env.home}" in lines[1] and lines[1].endswith(".log 2>&1")
    docs = listed(env)
    assert [d["id"] for d in docs] == [hourly["id"], standup["id"]]
    for d in docs:
        assert d["schema_version"] == 1 and d["engine"] == "cron" and d["last_verdict"] is None
        assert d["next_at"] > time.time() and d["next_at_iso"].endswith("Z")
        assert "PATH" in d["env_keys"] and "SPEXSUP_TMUX" in d["env_keys"]
    text = env.run("schedule").stdout
    assert text.splitlines()[0].split() == [
        "ID", "SESSION", "WHEN", "NEXT", "LAST", "VERDICT", "ENGINE", "PROMPT"
    ]  # fmt: skip
    assert "every 1h" in text and "cron '0 9 * * 1-5'" in text
    # By a prefix of its random part.
    r = env.run("schedule", "rm", hourly["id"].rpartition("-")[2][:4])
    assert r.returncode == 0 and f"api: removed schedule {hourly['id']}" in r.stdout, r
    assert [d["id"] for d in listed(env)] == [standup["id"]]
    assert hourly["id"] not in fake_table(env) and standup["id"] in fake_table(env)
    assert not Path(hourly["prompt_file"]).exists()
    r = env.run("schedule", "rm", "last", "--json")
    assert json.loads(r.stdout) == [
        {"schema_version": 1, "ok": True, "id": standup["id"], "session": "api"}
    ]
    # Its last line gone, the crontab spex made goes too.
    assert not (Path(env.vars["HOME"]) / ".fake-crontab").exists()
    with db(env) as conn:
        kinds = [r["kind"] for r in conn.execute("SELECT kind FROM events ORDER BY id")]
    assert kinds.count("schedule-added") == 2 and kinds.count("schedule-removed") == 2


def test_bad_input_is_one_line_and_changes_nothing(env: Env) -> None:
    assert env.run("new", "api", "--", harness("exit0.sh")).returncode == 0
    add(env, "api", "--cron", YEARLY, "-m", "kept")
    before = fake_table(env)
    files = sorted((env.home / "schedules").iterdir())
    cases = [
        (("add", "api", "--cron", "0 0 30 2 *", "-m", "x"), 2, "bad day-of-month"),
        (("add", "api", "--cron", "* * * *", "-m", "x"), 2, "4 fields"),
        (("add", "api", "--every", "7m", "-m", "x"), 2, "invalid --every '7m'"),
        (("add", "api", "--every", "1h", "--cron", "* * * * *", "-m", "x"), 2, "choose one"),
        (("add", "api", "-m", "x"), 2, "give --every or --cron"),
        (("add", "api", "--every", "1h"), 2, "no prompt given"),
        (("add", "api", "--every", "1h", "-m", "x", "-f", "-"), 2, "more than one way"),
        (("add", "api", "--every", "1h", "-m", ""), 2, "empty"),
        (("add", "api", "--every", "1h", "-m", "x", "--overlap", "never"), 2, "invalid --overlap"),
        (("add", "api", "--every", "1h", "-m", "x", "--timeout", "xx"), 2, "invalid --timeout"),
        (("add", "no/such", "--every", "1h", "-m", "x"), 2, "invalid session name"),
        (("add", "nosuch", "--every", "1h", "-m", "x"), 3, "no session named 'nosuch'"),
        (("rm", "snothing"), 3, "no schedule 'snothing'"),
        (("run", "snothing"), 3, "no schedule 'snothing'"),
        (("ls", "nosuch"), 3, "no session named 'nosuch'"),
    ]
    for args, code, words in cases:
        r = env.run("schedule", *args)
        assert r.returncode == code, (args, r.stderr)
        assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("spex: "), (args, r.stderr)
        assert words in r.stderr, (args, r.stderr)
    r = env.run("schedule", "add", "api", "--every", "1h", "-m", "x", extra={
        "SPEXSUP_SCHEDULE_ENGINE": "at"
    })  # fmt: skip
    assert r.returncode == 2 and "invalid SPEXSUP_SCHEDULE_ENGINE 'at'" in r.stderr, r.stderr
    # The engine refuses the table: nothing is kept.
    r = env.run("schedule", "add", "api", "--every", "1h", "-m", "x", extra={
        "SPEXSUP_FAKE_CRONTAB_FAIL": "1"
    })  # fmt: skip
    assert r.returncode == 1 and "crontab refused the new table" in r.stderr, r.stderr
    assert fake_table(env) == before
    assert sorted((env.home / "schedules").iterdir()) == files
    assert len(listed(env)) == 1


def test_no_engine_is_a_refusal_naming_what_is_missing(env: Env, tmp_path: Path) -> None:
    assert env.run("new", "api", "--", harness("exit0.sh")).returncode == 0
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("tmux", "bash", "sh"):
        found = shutil.which(tool)
        assert found is not None
        (bare / tool).symlink_to(found)
    extra = {"PATH": str(bare), "SPEXSUP_SCHEDULE_ENGINE": ""}
    r = env.run("schedule", "add", "api", "--every", "1h", "-m", "x", extra=extra)
    assert r.returncode == 3, r.stderr
    assert "no engine for schedules: systemctl is not installed" in r.stderr
    assert "crontab is not installed" in r.stderr and "apt-get install cron" in r.stderr
    extra["SPEXSUP_SCHEDULE_ENGINE"] = "cron"
    r = env.run("schedule", "add", "api", "--every", "1h", "-m", "x", extra=extra)
    assert r.returncode == 3 and "crontab is not installed" in r.stderr, r.stderr
    assert listed(env) == [] and not list((env.home / "schedules").glob("*.prompt"))
    d = json.loads(env.run("doctor", "--json", extra=extra).stdout)
    (check,) = [c for c in d["checks"] if c["name"] == "schedules"]
    assert not check["ok"] and "crontab is not installed" in check["detail"]


def test_doctor_names_the_engine(env: Env) -> None:
    d = json.loads(env.run("doctor", "--json").stdout)
    (check,) = [c for c in d["checks"] if c["name"] == "schedules"]
    assert check["detail"].startswith("cron (chosen by SPEXSUP_SCHEDULE_ENGINE)"), check
    assert "schedules: cron" in env.run("doctor").stdout


def test_a_doubled_firing_starts_one_turn(env: Env) -> None:
    assert env.run("new", "api", "--", harness("exit0.sh")).returncode == 0
    s = add(env, "api", "--cron", YEARLY, "-m", "the yearly review")
    first, second = fire(env, s["id"]), fire(env, s["id"])
    assert (first.returncode, first.stdout, second.returncode) == (0, "", 0), (first, second)
    assert len(turns_of(env, "api")) == 1
    (doc,) = listed(env)
    slot = schedule.slot(schedule.due(YEARLY, time.time()))
    assert (doc["last_verdict"], doc["last_slot"], doc["last_repeat"]) == ("completed", slot, True)
    assert doc["last_turn"] == turns_of(env, "api")[0]["id"] and doc["last_fired_at_iso"]
    log = Path(doc["log"]).read_text().splitlines()
    assert len(log) == 2 and all(f"slot {slot} (timer): api: completed turn" in x for x in log)
    assert "repeat of key sched-" in log[1]
    with db(env) as conn:
        fired = conn.execute("SELECT * FROM events WHERE kind = 'schedule-fired'").fetchall()
        keys = conn.execute("SELECT key FROM wake_keys").fetchall()
    payloads = [json.loads(e["payload"]) for e in fired]
    assert [p["key"] for p in payloads] == [f"sched-{s['id']}-{slot}"] * 2
    assert [p["repeat"] for p in payloads] == [False, True]
    assert [k["key"] for k in keys] == [f"sched-{s['id']}-{slot}"]
    # spex schedule run fires this minute's slot: twice in one minute, one turn more.
    early_in_a_minute()
    runs = [env.run("schedule", "run", s["id"], "--json") for _ in range(2)]
    docs = [json.loads(r.stdout) for r in runs]
    assert [r.returncode for r in runs] == [0, 0], runs
    assert docs[0]["slot"] == docs[1]["slot"] == schedule.slot(time.time())
    assert [d["repeat"] for d in docs] == [False, True] and docs[0]["turn"] == docs[1]["turn"]
    assert docs[0]["schema_version"] == 1 and docs[0]["schedule"] == s["id"]
    assert len(turns_of(env, "api")) == 2
    r = env.run("schedule", "run", s["id"])
    assert r.returncode == 0 and "repeat of key sched-" in r.stdout, r


def test_overlap_skip_and_queue_against_a_busy_session(env: Env) -> None:
    assert env.run("new", "sl", "--", harness("sleeper.sh")).returncode == 0
    skip = add(env, "sl", "--cron", YEARLY, "-m", "skipped one")
    queue = add(env, "sl", "--cron", YEARLY, "-m", "queued one", "--overlap", "queue")
    assert env.run("wake", "sl", "work", "--window", "0.3").returncode == 0
    busy = turns_of(env, "sl")[0]["id"]
    r = fire(env, skip["id"])
    assert r.returncode == 3, r
    r = env.run("schedule", "run", skip["id"], "--json")
    assert r.returncode == 3 and json.loads(r.stdout)["verdict"] == "skipped", r
    assert json.loads(r.stdout)["ok"] is False and f"busy with turn {busy}" in r.stdout
    assert "skipped: session 'sl' is busy" in env.run("schedule", "run", skip["id"]).stdout
    for _ in range(2):  # a doubled firing queues once
        assert fire(env, queue["id"]).returncode == 0
    docs = {d["id"]: d for d in listed(env)}
    assert docs[skip["id"]]["last_verdict"] == "skipped" and docs[skip["id"]]["last_turn"] is None
    assert "is busy" in docs[skip["id"]]["last_error"]
    q = docs[queue["id"]]
    assert (q["last_verdict"], q["last_repeat"]) == ("queued", True) and q["last_queued"]
    entries = json.loads(env.run("queue", "ls", "--json").stdout)
    assert [(e["id"], e["first_line"]) for e in entries] == [(q["last_queued"], "queued one")]
    assert [t["id"] for t in turns_of(env, "sl")] == [busy]  # the skip started nothing
    # The stopped session refuses a firing, and says so.
    assert env.run("queue", "clear", "sl").returncode == 0
    assert env.run("stop", "sl", "--grace", "1").returncode == 0
    r = env.run("schedule", "run", skip["id"])
    assert r.returncode == 3 and "refused: " in r.stdout and "is stopped" in r.stdout, r


def test_rm_of_a_session_removes_its_schedules_and_lines(env: Env) -> None:
    for name in ("a", "b"):
        assert env.run("new", name, "--", harness("exit0.sh")).returncode == 0
    a1 = add(env, "a", "--every", "1h", "-m", "one")
    a2 = add(env, "a", "--cron", YEARLY, "-m", "two")
    b1 = add(env, "b", "--every", "15m", "-m", "three")
    # Another home's block in the same crontab stays as it is.
    other = env.root / "other"
    assert (
        env.run("--home", str(other), "--create", "new", "c", "--", harness("exit0.sh")).returncode
        == 0
    )
    r = env.run("--home", str(other), "schedule", "add", "c", "--every", "1h", "-m", "x")
    assert r.returncode == 0, r.stderr
    r = env.run("rm", "a")
    assert r.returncode == 0, r.stderr
    assert f"a: removed schedule {a1['id']} (every 1h)" in r.stdout.splitlines()
    table = fake_table(env)
    assert a1["id"] not in table and a2["id"] not in table and b1["id"] in table
    assert len(schedule.block_lines(table, other)) == 2
    assert [d["id"] for d in listed(env)] == [b1["id"]]
    assert not Path(a1["prompt_file"]).exists() and not Path(a2["prompt_file"]).exists()
    with db(env) as conn:
        gone = conn.execute(
            "SELECT payload FROM events WHERE kind = 'schedule-removed' AND session = 'a'"
        ).fetchall()
    assert len(gone) == 2
    assert all(json.loads(g["payload"])["why"] == "its session was removed" for g in gone)
    # A crontab that cannot be written leaves the session removing, to finish later.
    r = env.run("rm", "b", extra={"SPEXSUP_FAKE_CRONTAB_FAIL": "1"})
    assert r.returncode == 1 and "could not remove its schedules" in r.stderr, r.stderr
    assert b1["id"] in fake_table(env)
    assert env.run("rm", "b").returncode == 0
    assert schedule.block_lines(fake_table(env), env.home) == []


def test_adds_at_once_lose_no_line(env: Env) -> None:
    assert env.run("new", "api", "--", harness("exit0.sh")).returncode == 0
    procs = [
        subprocess.Popen(
            [SPEX, "schedule", "add", "api", "--cron", f"{m} 3 * * *", "-m", f"job {m}"],
            env=env.vars,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for m in range(5)
    ]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    lines = schedule.block_lines(fake_table(env), env.home)
    assert sorted(x.split()[0] for x in lines if not x.startswith("#")) == [
        str(m) for m in range(5)
    ]
    assert len(listed(env)) == 5


def test_a_mark_without_its_pair_is_refused_and_every_byte_of_the_table_kept(
    env: Env,
) -> None:
    """A begin mark of this home with no end mark (a hand edit cut the block)
    made `schedule add` drop every line after it: now it is an error naming
    the line, the crontab is not written, and the doctor fails on it. Once
    mended, the lines outside the block come back byte for byte: CRLF, a
    form feed and a NEL inside a line, a Latin-1 byte, no final newline."""
    assert env.run("new", "api", "--", harness("exit0.sh")).returncode == 0
    path = Path(env.vars["HOME"]) / ".fake-crontab"
    begin, end = (m.encode() for m in schedule.block_marks(env.home))
    mine = b"MAILTO=me\r\n0 5 * * * backup \x0c --page\r\n# caf\xe9 \xc2\x85 n\xc3\xa9\n"
    after = b"30 6 * * * /usr/bin/report\r\n# my last line, no newline"
    damaged = {
        1 + mine.count(b"\n"): mine + begin + b"\n" + after,  # begin, no end
        2 + mine.count(b"\n"): mine + b"# mine\n" + end + b"\n" + after,  # end, no begin
    }
    for line, table in damaged.items():
        path.write_bytes(table)
        r = env.run("schedule", "add", "api", "--every", "1h", "-m", "x")
        assert r.returncode == 1, r
        assert r.stderr.startswith("spex: ") and r.stderr.count("\n") == 1, r.stderr
        assert f"your crontab's line {line} is the " in r.stderr and "crontab -e" in r.stderr
        assert path.read_bytes() == table
        assert listed(env) == [] and not list((env.home / "schedules").glob("*.prompt"))
        d = env.run("doctor")
        assert d.returncode == 1 and f"FAIL  crontab: your crontab's line {line} " in d.stdout
    # Mended by hand: a whole block, the user's lines around it.
    path.write_bytes(mine + begin + b"\n# gone\n" + end + b"\r\n" + after)
    assert env.run("doctor").stdout.count("crontab:") == 0
    s = add(env, "api", "--every", "1h", "-m", "x")
    table = path.read_bytes()
    kept = mine + after + b"\n"
    assert table.startswith(kept) and table.endswith(end + b"\n"), table
    assert table[len(kept) :].startswith(begin + b"\n") and s["id"].encode() in table
    r = env.run("schedule", "rm", s["id"])
    assert r.returncode == 0, r.stderr
    assert path.read_bytes() == kept


# --- a real cron daemon ----------------------------------------------------------


def _real_cron() -> str | None:
    """Why the real-cron test cannot run here, or None."""
    if os.geteuid() != 0:
        return "starts Debian's cron daemon: needs root"
    if shutil.which("cron", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
        return "cron is not installed (apt-get install cron)"
    if shutil.which("crontab", path="/usr/bin:/bin") is None:
        return "crontab is not installed"
    return None


@contextlib.contextmanager
def cron_daemon(env: Env) -> Iterator[None]:
    """A cron daemon for the test: the one running, else Debian's `cron -f`
    started here and stopped (with whatever it started) at the end."""
    if schedule.cron_daemon() is not None:
        yield
        return
    cron = shutil.which("cron", path="/usr/sbin:/usr/bin:/sbin:/bin")
    assert cron is not None
    daemon = subprocess.Popen(
        [cron, "-f"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield
    finally:
        # Let a firing in flight finish (cron waits on its job), then stop it.
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(daemon.pid)
            retry_until(lambda: not proc.children(recursive=True), seconds=30)
        daemon.terminate()
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=10)


@pytest.mark.skipif(_real_cron() is not None, reason=_real_cron() or "")
@pytest.mark.timeout(240)
def test_a_real_cron_daemon_fires_a_schedule(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # The real crontab (root's, shared by every home and test): this home's block only.
    real = os.pathsep.join(p for p in env.vars["PATH"].split(os.pathsep) if p != str(FAKES))
    env.vars["PATH"] = real
    monkeypatch.setenv("PATH", real)

    def forget_block() -> None:
        with schedule.crontab_lock():
            schedule.cron_sync(env.home, [])

    try:
        assert env.run("new", "api", "--", harness("exit0.sh")).returncode == 0
        s = add(env, "api", "--cron", "* * * * *", "-m", "tick")
        table = subprocess.run(["crontab", "-l"], capture_output=True, text=True, check=True)
        assert f"internal schedule-fire {s['id']}" in table.stdout
        with cron_daemon(env):
            started = time.monotonic()
            fired = retry_until(lambda: listed(env)[0]["last_verdict"] is not None, seconds=75)
            took = time.monotonic() - started
            assert env.run("schedule", "rm", s["id"]).returncode == 0  # no firing more
        assert fired, f"no firing in {took:.0f} s"
        assert took < 70 + 5, took
        with db(env) as conn:
            events = conn.execute(
                "SELECT turn, payload FROM events WHERE kind = 'schedule-fired'"
            ).fetchall()
            keyed = conn.execute("SELECT key, turn FROM wake_keys").fetchall()
        # One turn per slot fired (the schedule may have fired again before rm).
        slots = {json.loads(e["payload"])["slot"]: e["turn"] for e in events}
        assert len(slots) == len(events) == len(turns_of(env, "api")) >= 1, events
        assert sorted(k["turn"] for k in keyed) == sorted(slots.values())
        assert all(json.loads(e["payload"])["verdict"] == "completed" for e in events)
        log = (env.home / "schedules").glob("*.log")
        assert not list(log)  # removed with its schedule
        # A session's rm takes its lines out of the real crontab.
        again = add(env, "api", "--cron", YEARLY, "-m", "tock")
        table = subprocess.run(["crontab", "-l"], capture_output=True, text=True, check=True)
        assert again["id"] in table.stdout
        assert env.run("rm", "api").returncode == 0
        after = subprocess.run(["crontab", "-l"], capture_output=True, text=True, check=False)
        assert str(env.home) not in after.stdout
    finally:
        forget_block()


# --- the systemd engine, against a systemctl that records what it is asked -----------

SYSTEMCTL = """#!/bin/sh
# A user manager that answers: records each call, fails `enable` on demand.
echo "$*" >> "$SYSTEMCTL_LOG"
case "$*" in
    "--user show-environment") echo "HOME=$HOME" ;;
    "--user enable --now "*)
        [ -z "${SYSTEMCTL_FAIL-}" ] || { echo "Failed to enable unit" >&2; exit 1; } ;;
esac
"""


def test_systemd_timers_are_written_enabled_and_taken_away(env: Env, tmp_path: Path) -> None:
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "systemctl").write_text(SYSTEMCTL)
    (fake / "systemctl").chmod(0o755)
    calls = tmp_path / "systemctl.log"
    env.vars.update(
        PATH=f"{fake}:{env.vars['PATH']}", SYSTEMCTL_LOG=str(calls), SPEXSUP_SCHEDULE_ENGINE=""
    )
    assert env.run("new", "api", "--", harness("exit0.sh")).returncode == 0
    s = add(env, "api", "--cron", "0 9 * * 1-5", "-m", "standup")
    unit = f"spexsup-{s['id']}"
    assert (s["engine"], s["unit"]) == ("systemd", unit)
    units = Path(env.vars["HOME"]) / ".config" / "systemd" / "user"
    timer = (units / f"{unit}.timer").read_text()
    service = (units / f"{unit}.service").read_text()
    assert "OnCalendar=Mon..Fri *-*-* 09:00:00" in timer and f"Unit={unit}.service" in timer
    assert f'"internal" "schedule-fire" "{s["id"]}"' in service and f'"{env.home}"' in service
    assert f"StandardOutput=append:{s['log']}" in service
    assert calls.read_text().splitlines() == [
        "--user show-environment",
        "--user daemon-reload",
        f"--user enable --now {unit}.timer",
    ]
    assert fake_table(env) == ""  # no crontab line
    assert "schedules: systemd user timers" in env.run("doctor").stdout
    # The timer's command, run as systemd would run it, fires the schedule.
    assert fire(env, s["id"]).returncode == 0 and len(turns_of(env, "api")) == 1
    calls.write_text("")
    assert env.run("rm", "api").returncode == 0
    assert calls.read_text().splitlines() == [
        f"--user disable --now {unit}.timer",
        "--user daemon-reload",
    ]
    assert not list(units.iterdir())
    # A manager that refuses the timer: nothing is kept.
    assert env.run("new", "api", "--", harness("exit0.sh")).returncode == 0
    r = env.run("schedule", "add", "api", "--every", "1h", "-m", "x", extra={"SYSTEMCTL_FAIL": "1"})
    assert r.returncode == 1 and "enable --now" in r.stderr and "Failed to enable" in r.stderr
    assert not list(units.iterdir()) and listed(env) == []
    assert not list((env.home / "schedules").glob("*.prompt"))
