"""Sessions on other hosts, through a real sshd on 127.0.0.1 (tests/sshd.py).

Two "hosts" are two state homes on this machine, reached over ssh as the
dedicated login account; a third host points at a closed port. Every
remote command is compared with what the host's own spex prints for the
same command run there, output and exit code.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import HARNESSES, SPEX, Env, retry_until
from sshd import Sshd, sshd  # noqa: F401  (the fixture)

from spexsup import __version__

PY = sys.executable


@pytest.fixture
def fleet(env: Env, sshd: Sshd) -> Fleet:  # noqa: F811
    return Fleet(env, sshd)


class Fleet:
    """The local spex (env) with hosts box1, box2 (live) and dead (a closed port)."""

    def __init__(self, env: Env, sshd: Sshd) -> None:  # noqa: F811
        self.env = env
        self.sshd = sshd
        self.h1 = sshd.home("h1")
        self.h2 = sshd.home("h2")
        run = sshd.dir / "run"
        run.mkdir(mode=0o700, exist_ok=True)
        env.vars["XDG_RUNTIME_DIR"] = str(run)
        env.home.mkdir(parents=True, exist_ok=True)
        self.write_config()

    def write_config(self, extra: str = "") -> None:
        s = self.sshd
        text = s.host_table("box1", self.h1) + s.host_table("box2", self.h2)
        text += s.host_table("dead", s.dir / "nohome", alias="deadbox")
        text += "connect_timeout = 2\n" + extra
        (self.env.home / "config.toml").write_text(text)

    def spex(self, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[str]:
        return self.env.run(*args, input=input, timeout=90)

    def there(self, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
        """The host's own spex, run there over plain ssh: what 'local' prints on that host."""
        remote = " ".join(["exec", SPEX, "--home", str(home), *map(_q, args)])
        return subprocess.run(
            ["ssh", "-F", str(self.sshd.ssh_config), "-T", "box", remote],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=90,
            check=False,
        )


def _q(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


AGES = re.compile(r"\d+(s|m|h|d) ago(, ran \d+(s|m|h|d))?")


def same(a: subprocess.CompletedProcess[str], b: subprocess.CompletedProcess[str]) -> None:
    """Same exit code, stdout and stderr (ages may tick between the two runs)."""
    assert (a.returncode, AGES.sub("AGE", a.stdout), a.stderr) == (
        b.returncode,
        AGES.sub("AGE", b.stdout),
        b.stderr,
    )


def test_remote_session_commands_match_local(fleet: Fleet) -> None:
    f = fleet
    r = f.spex("-H", "box1", "new", "api", "--cwd", str(f.h1), "--", str(HARNESSES / "exit7.sh"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"created api (command) in {f.h1}\n"
    r = f.spex("wake", "box1:api", "go")
    assert r.returncode == 1
    assert re.fullmatch(r"api: failed turn \S+ rc=7 \(\d+ ms\): .*\n", r.stdout), r.stdout
    assert r.stderr == ""  # the cause is said once, on the verdict line
    j = f.spex("wake", "box1:api", "again", "--json")
    assert j.returncode == 1
    doc = json.loads(j.stdout)
    assert (doc["verdict"], doc["rc"], doc["session"]) == ("failed", 7, "api")
    for args in (
        ["show", "api"],
        ["show", "api", "--color", "always"],
        ["ls"],
        ["ls", "--color=always"],
        ["ls", "--json"],
        ["wait", "api"],
        ["wait", "api", "--json"],
        ["log", "api"],
        ["log", "api", "--json"],
        ["show", "nosuch"],
        ["show", "nosuch", "--json"],
        ["wait", "nosuch"],
        ["log", "api", "--turn", "zzz"],
    ):
        addressed = [f"box1:{a}" if a in ("api", "nosuch") else a for a in args]
        if "ls" in args:
            addressed = ["-H", "box1", *args]
        same(f.spex(*addressed), f.there(f.h1, *args))
    # Coloured here, on request only: a pipe gets no escape by default.
    assert "\x1b[31m" in f.spex("-H", "box1", "ls", "--color", "always").stdout
    assert "\x1b" not in f.spex("-H", "box1", "ls").stdout
    bad = f.spex("-H", "box1", "ls", "--color", "often")
    assert (bad.returncode, bad.stderr) == (
        2,
        "spex: invalid --color 'often' (one of: auto, always, never)\n",
    )
    # A running turn: wake confirms, stop aborts it, rm removes the session.
    r = f.spex("-H", "box1", "new", "long", "--cwd", str(f.h1), "--", str(HARNESSES / "sleeper.sh"))
    assert r.returncode == 0, r.stderr
    r = f.spex("wake", "box1:long", "work", "--window", "0.5")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"long: confirmed turn \S+ pid \d+ \(\d+ ms\)\n", r.stdout), r.stdout
    busy = f.spex("wake", "box1:long", "more")
    assert busy.returncode == 3
    assert busy.stdout == ""
    assert busy.stderr.startswith("spex: ")
    # rm of several is checked there: refused as a whole, or what a dry run would remove.
    for args in (["--all"], ["--all", "--dry-run"], ["--all", "--dry-run", "--force"]):
        same(f.spex("-H", "box1", "rm", *args), f.there(f.h1, "rm", *args))
        same(f.spex("-H", "box1", "rm", *args, "--json"), f.there(f.h1, "rm", *args, "--json"))
    timed = f.spex("wait", "box1:long", "--timeout", "0.2")
    assert timed.returncode == 124, timed.stderr
    same(timed, f.there(f.h1, "wait", "long", "--timeout", "0.2"))
    r = f.spex("stop", "box1:long", "--grace", "1")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(
        r"long: stopped \(turn \S+ aborted; no new turns until spex resume long\)\n", r.stdout
    ), r.stdout
    same(f.spex("stop", "box1:long"), f.there(f.h1, "stop", "long"))
    same(f.spex("wake", "box1:long", "x"), f.there(f.h1, "wake", "long", "x"))
    r = f.spex("rm", "box1:long")
    assert (r.returncode, r.stdout) == (0, "removed long\n")
    same(f.spex("rm", "box1:long"), f.there(f.h1, "rm", "long"))
    same(f.spex("rm", "box1:long", "--json"), f.there(f.h1, "rm", "long", "--json"))
    # Box2 is another host: its own home, its own sessions.
    assert f.spex("-H", "box2", "ls", "--json").stdout.strip() == "[]"


def test_a_remote_stop_of_several_with_one_refused_matches_local(fleet: Fleet) -> None:
    """A stop of several on a host, one of them held by a maintenance lease
    there: the others stopped, the refused one's `spex: NAME: why` line on
    stderr, exit 3, as the host's own spex says it; --json alike."""
    f = fleet
    for name in ("a", "leased", "c"):
        r = f.spex(
            "-H", "box1", "new", name, "--cwd", str(f.h1), "--", str(HARNESSES / "sleeper.sh")
        )
        assert r.returncode == 0, r.stderr
    done = f.h1 / "lease-done"
    hold = f"while [ ! -e {done} ]; do sleep 0.05; done"
    remote = " ".join(
        [
            "exec",
            SPEX,
            "--home",
            str(f.h1),
            "maint",
            "--stop",
            "leased",
            "--",
            "bash",
            "-c",
            _q(hold),
        ]
    )
    holder = subprocess.Popen(
        ["ssh", "-F", str(f.sshd.ssh_config), "-T", "box", remote],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        active = lambda: '"active"' in f.there(f.h1, "maint", "--status", "--json").stdout  # noqa: E731
        assert retry_until(active, seconds=30)
        for extra in ((), ("--json",)):
            here = f.spex("stop", "box1:a", "box1:leased", "box1:c", *extra)
            same(here, f.there(f.h1, "stop", "a", "leased", "c", *extra))
            assert here.returncode == 3, here.stderr
        text = f.spex("stop", "box1:a", "box1:leased", "box1:c")
        assert [line.split(":")[0] for line in text.stdout.splitlines()] == ["a", "c"]
        assert text.stderr.startswith("spex: leased: "), text.stderr
    finally:
        done.touch()
        holder.wait(60)


def test_remote_edit_changes_the_hosts_session(fleet: Fleet) -> None:
    f = fleet
    r = f.spex("-H", "box1", "new", "e", "--cwd", str(f.h1), "--", str(HARNESSES / "exit0.sh"))
    assert r.returncode == 0, r.stderr
    r = f.spex("-H", "box1", "edit", "e", "--timeout", "1h", "--on-limit", "wait:2h")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:2] == ["e: timeout - -> 1h", "e: on-limit - -> wait:2h"]
    shown = json.loads(f.there(f.h1, "show", "e", "--json").stdout)
    assert (shown["timeout"], shown["on_limit"]) == (3600, "wait:2h")
    for args in (
        ["--timeout", "2h", "--dry-run"],
        ["--timeout", "2h", "--dry-run", "--json"],
        ["--window", "soon"],
        ["--window", "soon", "--json"],
        [],
    ):
        same(f.spex("edit", "box1:e", *args), f.there(f.h1, "edit", "e", *args))
    same(f.spex("edit", "box1:nosuch", "--strict"), f.there(f.h1, "edit", "nosuch", "--strict"))
    r = f.spex("edit", "box1:e", "--", str(HARNESSES / "exit7.sh"))
    assert r.returncode == 0, r.stderr
    assert json.loads(f.there(f.h1, "show", "e", "--json").stdout)["command"] == [
        str(HARNESSES / "exit7.sh")
    ]


def test_bad_addresses_and_hosts_are_one_line(fleet: Fleet) -> None:
    f = fleet
    r = f.spex("show", "nohost:api")
    assert (r.returncode, r.stdout) == (3, "")  # unknown, as an unknown session
    assert r.stderr.startswith("spex: no host named 'nohost'") and r.stderr.count("\n") == 1
    r = f.spex("wait", "box1:a", "box2:b")
    assert r.returncode == 2
    assert "one host per command" in r.stderr
    r = f.spex("-H", "box1", "show", "box2:a")
    assert r.returncode == 2
    t = time.monotonic()
    r = f.spex("show", "dead:api", "--json")
    assert time.monotonic() - t < 15
    assert r.returncode == 1
    assert json.loads(r.stdout)["exit_code"] == 1
    assert r.stderr.startswith("spex: host dead unreachable: ")
    assert r.stderr.count("\n") == 1


def test_prompt_arrives_byte_exact_on_stdin_never_in_argv(fleet: Fleet) -> None:
    f = fleet
    got = f.h1 / "got"
    r = f.spex(
        "-H",
        "box1",
        "new",
        "rec",
        "--cwd",
        str(f.h1),
        "--env",
        f"RECORD_TO={got}",
        "--",
        PY,
        str(HARNESSES / "record.py"),
    )
    assert r.returncode == 0, r.stderr
    # An ssh first on PATH that logs its command line, then runs the real one.
    shim = f.env.root / "shim"
    shim.mkdir()
    argv_log = f.env.root / "ssh-argv"
    real = shutil.which("ssh")
    (shim / "ssh").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" >> {argv_log}\nexec {real} "$@"\n', encoding="utf-8"
    )
    (shim / "ssh").chmod(0o755)
    path = {"PATH": f"{shim}:{f.env.vars['PATH']}"}
    prompt = 'secret-7f3a: it\'s "quoted" $(not run) `nor this`\nline two\n\ttab\n'
    r = f.env.run("wake", "box1:rec", prompt, extra=path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert retry_until(got.exists)
    assert got.read_bytes() == prompt.encode()
    # -f - (stdin) and -f FILE too
    binary = b"-starts with a dash\n\xe2\x9c\x93 unicode\n'\"\\\n"
    r = f.env.run("wake", "box1:rec", "-f", "-", input=binary, extra=path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert retry_until(lambda: got.read_bytes() == binary)
    logged = argv_log.read_text()
    assert "secret-7f3a" not in logged
    assert "starts with a dash" not in logged
    assert "-f -" in logged


def test_remote_wake_options_keep_their_values(fleet: Fleet) -> None:
    """`--timeout 30` was forwarded without its value, which became the
    prompt; every option of wake that takes a value keeps it, as locally."""
    f = fleet
    got = f.h1 / "got"
    r = f.spex(
        "new", "box1:rec", "--cwd", str(f.h1), "--env", f"RECORD_TO={got}",
        "--", PY, str(HARNESSES / "record.py"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = f.spex(
        "wake", "box1:rec", "--timeout", "30", "deliver me", "--on-limit", "wait:2h",
        "--window", "10", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["verdict"] == "completed", v
    assert got.read_bytes() == b"deliver me"
    turn = json.loads(f.spex("show", "box1:rec", "--json").stdout)["turns"][0]
    assert turn["timeout"] == 30
    assert (f.h1 / "turns" / "rec" / v["turn"] / "on-limit").read_text().split()[0] == "7200"
    # One prompt grammar there as here: TEXT words joined, -m TEXT, and a
    # resume that wakes with -m.
    r = f.spex("wake", "box1:rec", "two", "words", "--window", "10")
    assert r.returncode == 0, r.stderr
    assert retry_until(lambda: got.read_bytes() == b"two words")
    r = f.spex("wake", "box1:rec", "-m", "as  one", "--window", "10")
    assert r.returncode == 0, r.stderr
    assert retry_until(lambda: got.read_bytes() == b"as  one")
    assert f.spex("stop", "box1:rec").returncode == 0
    r = f.spex("resume", "box1:rec", "-m", "after the stop", "--window", "10")
    assert r.returncode == 0, r.stderr
    assert retry_until(lambda: got.read_bytes() == b"after the stop")
    r = f.spex("wake", "box1:rec", "x", "-m", "y")
    assert r.returncode == 2 and "more than one way" in r.stderr, r.stderr


def test_ls_all_hosts_with_one_host_unreachable(fleet: Fleet) -> None:
    f = fleet
    assert f.spex("-H", "box1", "new", "a", "--cwd", str(f.h1), "--", "true").returncode == 0
    assert f.spex("-H", "box2", "new", "b", "--cwd", str(f.h2), "--", "true").returncode == 0
    assert f.spex("new", "c", "--cwd", str(f.env.root), "--", "true").returncode == 0
    t = time.monotonic()
    r = f.spex("ls", "--all-hosts")
    took = time.monotonic() - t
    assert r.returncode == 1
    assert took < 15, took  # the closed port answers at once; a dead box within its timeout
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["HOST", "NAME", "HARNESS"]
    rows = {ln.split()[0]: ln.split() for ln in lines[1:]}
    assert rows["local"][1] == "c"
    assert rows["box1"][1] == "a"
    assert rows["box2"][1] == "b"
    assert rows["dead"][3] == "unreachable"
    j = json.loads(f.spex("ls", "--hosts", "box1,box2", "--json").stdout)
    assert [(x["host"], x["name"]) for x in j] == [("box1", "a"), ("box2", "b")]
    hosts = f.spex("hosts", "--json")
    assert hosts.returncode == 1
    by = {h["name"]: h for h in json.loads(hosts.stdout)}
    assert by["box1"]["reachable"] and by["box1"]["version"] == __version__
    assert by["box1"]["sessions"] == 1
    assert not by["dead"]["reachable"]
    assert "dead" in by["dead"]["error"]
    r = f.spex("ls", "--hosts", "nope")
    assert r.returncode == 3  # an unknown host: refused, as an unknown session is


def test_fanout_across_hosts_with_a_failing_leg_and_retry(fleet: Fleet) -> None:
    f = fleet
    flaky = f.h2 / "flaky.sh"
    flag = f.h2 / "fail-once"
    flaky.write_text(f'#!/bin/sh\nif [ -e {flag} ]; then rm -f {flag}; exit 5; fi\necho "ok $1"\n')
    flaky.chmod(0o755)
    flag.touch()
    ok = ["--", str(HARNESSES / "exit0.sh")]
    assert f.spex("new", "box1:a", "--cwd", str(f.h1), *ok).returncode == 0
    assert f.spex("-H", "box2", "new", "b", "--cwd", str(f.h2), "--", str(flaky)).returncode == 0
    assert f.spex("new", "c", "--cwd", str(f.env.root), *ok).returncode == 0
    r = f.spex("fanout", "box1:a", "box2:b", "c", "-m", "do it", "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["state"] == "partial"
    legs = {(leg["host"], leg["session"]): leg for leg in doc["legs"]}
    assert set(legs) == {("box1", "a"), ("box2", "b"), ("local", "c")}
    assert legs[("box2", "b")]["verdict"] == "failed"
    assert legs[("box1", "a")]["verdict"] in ("confirmed", "completed")
    assert {h["host"]: h["wave"] is not None for h in doc["hosts"]} == {
        "box1": True,
        "box2": True,
        "local": True,
    }
    saved = json.loads((f.env.home / "fleet" / f"{doc['id']}.json").read_text())
    assert saved["legs"] == doc["legs"]
    r = f.spex("fanout", "--retry-failed", doc["id"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(retry)" in r.stdout
    assert re.search(r"^  box2:b: completed ", r.stdout, re.M), r.stdout
    saved = json.loads((f.env.home / "fleet" / f"{doc['id']}.json").read_text())
    assert len(saved["retried_by"]) == 1
    shown = f.spex("wave", doc["id"])
    assert shown.returncode == 0
    assert f"retried by {saved['retried_by'][0]}" in shown.stdout
    assert re.search(r"^  box2:b: failed ", shown.stdout, re.M), shown.stdout
    # The retry ran on box2 as a retry of box2's own wave.
    waves = json.loads(f.spex("-H", "box2", "waves", "--json").stdout)
    assert waves[0]["retry_of"] == legs[("box2", "b")]["wave"]
    # A leg on a host that cannot be reached fails alone, naming the host.
    r = f.spex("fanout", "box1:a", "dead:x", "-m", "again", "--json")
    doc = json.loads(r.stdout)
    bad = next(leg for leg in doc["legs"] if leg["host"] == "dead")
    assert bad["verdict"] == "failed" and "host dead" in bad["error"]
    # A whole fan-out run on one host (-m becomes stdin there too).
    r = f.spex("-H", "box1", "fanout", "a", "-m", "hi there")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^a: (confirmed|completed) turn ", r.stdout, re.M), r.stdout
    assert f.spex("-H", "box1", "wave", "last", "--json").returncode == 0
    # --hosts with --match: one remote fanout per host.
    r = f.spex("fanout", "--hosts", "box1,box2", "--match", "*", "-m", "all", "--json")
    doc = json.loads(r.stdout)
    assert sorted((leg["host"], leg["session"]) for leg in doc["legs"]) == [
        ("box1", "a"),
        ("box2", "b"),
    ]


def test_a_signalled_fleet_fanout_leaves_at_once(fleet: Fleet) -> None:
    # Each host's fan-out confirms for 60 s; SIGTERM to the local spex ends
    # it now (143), the hosts' turns running on, not after the slowest host.
    f = fleet
    sleeper = ["--", str(HARNESSES / "sleeper.sh")]
    assert f.spex("new", "box1:a", "--cwd", str(f.h1), *sleeper).returncode == 0
    assert f.spex("new", "box2:b", "--cwd", str(f.h2), *sleeper).returncode == 0
    proc = subprocess.Popen(
        [SPEX, "fanout", "box1:a", "box2:b", "-m", "go", "--window", "60", "--json"],
        env=f.env.vars,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    starting = "SELECT count(*) FROM turns WHERE state = 'starting'"

    def launched(home: Path) -> bool:
        db = home / "state.db"
        return db.exists() and sqlite3.connect(db).execute(starting).fetchone()[0] == 1

    assert retry_until(lambda: launched(f.h1) and launched(f.h2), seconds=60)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert time.monotonic() - sent < 5


def test_version_mismatch_is_refused_naming_both(fleet: Fleet) -> None:
    f = fleet
    fake = f.sshd.dir / "oldspex"
    fake.write_text(
        "#!/bin/sh\n"
        'for a; do [ "$a" = --version ] && echo \'{"version": "97.1.0"}\' && exit 0; done\n'
        "echo should-not-run; exit 0\n"
    )
    fake.chmod(0o755)
    (f.env.home / "config.toml").write_text(f.sshd.host_table("old", f.h1, spex=str(fake)))
    r = f.spex("-H", "old", "ls")
    assert r.returncode == 1
    assert r.stdout == ""
    assert "97.1.0" in r.stderr and __version__ in r.stderr
    assert "should-not-run" not in r.stdout + r.stderr
    (f.env.home / "config.toml").write_text(
        f.sshd.host_table("gone", f.h1, spex="/nonexistent/spex")
    )
    r = f.spex("-H", "gone", "ls")
    assert r.returncode == 1
    assert "remote spex not found" in r.stderr and r.stderr.count("\n") == 1


def test_one_connection_is_shared(fleet: Fleet) -> None:
    f = fleet
    before = f.sshd.accepted()
    t = time.monotonic()
    assert f.spex("-H", "box1", "ls", "--json").returncode == 0
    cold = time.monotonic() - t
    warm = []
    for _ in range(3):
        t = time.monotonic()
        assert f.spex("-H", "box1", "ls", "--json").returncode == 0
        warm.append(time.monotonic() - t)
    assert f.sshd.accepted() - before == 1
    assert min(warm) < cold
    ctl = Path(f.env.vars["XDG_RUNTIME_DIR"]) / "spexsup-ssh"
    assert ctl.stat().st_mode & 0o777 == 0o700
    # The version was asked once, for this connection, and recorded with it.
    (record,) = ctl.glob("box1-*.version")
    assert json.loads(record.read_text())["version"] == __version__


def test_a_dropped_connection_is_detected_while_waiting(fleet: Fleet) -> None:
    f = fleet
    r = f.spex("-H", "box1", "new", "long", "--cwd", str(f.h1), "--", str(HARNESSES / "sleeper.sh"))
    assert r.returncode == 0
    assert f.spex("wake", "box1:long", "work", "--window", "0.3").returncode == 0
    for args, there in (
        (["wait", "box1:long"], "wait long --json"),
        (["log", "-f", "box1:long"], "log -f long"),
    ):
        p = subprocess.Popen(
            [SPEX, *args],
            env=f.env.vars,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        # The remote spex is up once its command shows among the login's processes.
        def started(t: str = there) -> bool:
            return any(
                " ".join(f.sshd.cmdline(pr)).endswith(t) for pr in f.sshd.session_processes()
            )

        assert retry_until(started, 20)
        assert f.sshd.drop_connections() > 0  # the server side of the connection dies
        out, err = p.communicate(timeout=60)
        assert p.returncode == 1, (out, err)
        assert "host box1: connection lost" in err, err
        assert "keeps running on box1" in err


def test_attach_runs_ssh_t_to_the_far_pane(fleet: Fleet) -> None:
    import pexpect

    f = fleet
    r = f.spex("-H", "box1", "new", "far", "--cwd", str(f.h1), "--", str(HARNESSES / "sleeper.sh"))
    assert r.returncode == 0
    assert f.spex("wake", "box1:far", "HELLO-FAR-PANE", "--window", "0.3").returncode == 0
    child = pexpect.spawn(
        SPEX,
        ["attach", "box1:far"],
        env={**f.env.vars, "TERM": "xterm"},
        dimensions=(40, 120),
        timeout=30,
        encoding="utf-8",
    )
    try:
        child.expect("HELLO-FAR-PANE")
        child.send("\x01d")  # the private server's prefix (C-a), then detach
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    r = f.spex("show", "box1:far", "--json")
    assert json.loads(r.stdout)["state"] == "running"


def test_a_planted_symlink_at_the_control_socket_fallback_is_refused(env: Env) -> None:
    """No XDG_RUNTIME_DIR and a state home too deep for a socket path: the
    control sockets would go to TMPDIR/spexsup-ssh-UID, where another local
    user can plant a symlink. It is refused, never followed or chmod'ed."""
    tmp = Path(tempfile.mkdtemp(prefix="spx"))
    try:
        target = tmp / "theirs"
        target.mkdir()
        target.chmod(0o755)
        (tmp / f"spexsup-ssh-{os.getuid()}").symlink_to(target)
        home = env.root / ("deep" * 16)
        home.mkdir()
        (home / "config.toml").write_text(
            '[host.far]\nssh = "127.0.0.1"\nssh_options = ["-p", "1"]\nconnect_timeout = 1\n'
        )
        vars_ = {k: v for k, v in env.vars.items() if k != "XDG_RUNTIME_DIR"}
        r = subprocess.run(
            [SPEX, "--home", str(home), "show", "far:api"],
            capture_output=True,
            text=True,
            env={**vars_, "TMPDIR": str(tmp)},
            timeout=60,
            check=False,
        )
        assert r.returncode == 1, r
        assert r.stderr.startswith("spex: ") and r.stderr.count("\n") == 1, r.stderr
        assert "symlink" in r.stderr and f"spexsup-ssh-{os.getuid()}" in r.stderr, r.stderr
        assert stat.S_IMODE(target.stat().st_mode) == 0o755
        assert list(target.iterdir()) == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_host_home_that_does_not_exist_yet_is_made_on_first_use(fleet: Fleet) -> None:
    """A host table's `home` is configured on purpose: unlike a typed
    `--home`, it needs no --create and is made there on first use."""
    f = fleet
    fresh = f.sshd.dir / "fresh-home"
    assert not fresh.exists()
    (f.env.home / "config.toml").write_text(f.sshd.host_table("newbox", fresh))
    r = f.spex("-H", "newbox", "ls", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [] and (fresh / "state.db").exists()


def dropping_host(f: Fleet, command: str) -> tuple[Path, Path]:
    """Host `flaky`: its spex logs each call to `calls` and, the first time it
    runs `command`, does it and then drops the connection before the answer
    arrives (ssh exits 255), leaving `dropped`."""
    calls = f.sshd.dir / "calls"
    dropped = f.sshd.dir / "dropped"
    flaky = f.sshd.dir / "flakyspex"
    flaky.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> {calls}\n'
        f'"{SPEX}" "$@"; rc=$?\n'
        f'case " $* " in *" {command} "*) if [ ! -e {dropped} ]; then : > {dropped}\n'
        '  echo "Connection to box closed by remote host." >&2; exit 255; fi;; esac\n'
        "exit $rc\n"
    )
    flaky.chmod(0o755)
    (f.env.home / "config.toml").write_text(f.sshd.host_table("flaky", f.h1, spex=str(flaky)))
    return calls, dropped


def test_a_wake_whose_connection_drops_is_asked_again_and_starts_one_turn(fleet: Fleet) -> None:
    """The host's spex starts the turn, then the connection drops before its
    answer arrives (ssh exits 255). The wake is asked again under the key
    made here (`host-…`), and the host answers with the turn it started."""
    f = fleet
    calls, dropped = dropping_host(f, "wake")
    r = f.spex("new", "flaky:slow", "--cwd", str(f.h1), "--", str(HARNESSES / "sleeper.sh"))
    assert r.returncode == 0, r.stderr
    r = f.spex("wake", "flaky:slow", "work", "--window", "0.3", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert (v["verdict"], v["repeat"]) == ("confirmed", True), v
    assert v["key"].startswith("host-")
    assert "connection lost" in r.stderr and "asking again" in r.stderr
    # (A host's home is made on first use: each call starts `--create`.)
    said = [c.removeprefix("--create ") for c in calls.read_text().splitlines()]
    wakes = [c for c in said if c.startswith("wake ")]
    assert len(wakes) == 2 and all(f"--key {v['key']}" in c for c in wakes), wakes
    with sqlite3.connect(f.h1 / "state.db") as db:
        assert db.execute("SELECT count(*) FROM turns WHERE session = 'slow'").fetchone() == (1,)
    # A key given here is the one used there.
    dropped.unlink()
    r = f.spex("wake", "flaky:slow", "more", "--key", "mine", "--queue", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert (v["verdict"], v["key"], v["repeat"]) == ("queued", "mine", True), v
    with sqlite3.connect(f.h1 / "state.db") as db:
        assert db.execute("SELECT count(*) FROM queue").fetchone() == (1,)


def test_a_fleet_fanout_whose_connection_drops_is_asked_again_and_starts_each_leg_once(
    fleet: Fleet,
) -> None:
    """The host's fan-out launches its legs, then the connection drops before
    the answer arrives. The fleet asks again under the key it made (the
    fleet wave's id): every leg there is a repeat, no leg runs twice."""
    f = fleet
    calls, _ = dropping_host(f, "fanout")
    for name in ("a", "b"):
        r = f.spex("new", f"flaky:{name}", "--cwd", str(f.h1), "--", str(HARNESSES / "sleeper.sh"))
        assert r.returncode == 0, r.stderr
    r = f.spex("fanout", "flaky:a", "flaky:b", "-m", "work", "--window", "0.3", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert [leg["verdict"] for leg in doc["legs"]] == ["confirmed", "confirmed"], doc
    assert all(leg.get("repeat") for leg in doc["legs"]), doc["legs"]
    assert "connection lost" in r.stderr and "asking again" in r.stderr
    said = [c.removeprefix("--create ") for c in calls.read_text().splitlines()]
    fanouts = [c for c in said if c.startswith("fanout ")]
    assert len(fanouts) == 2 and all(f"--key {doc['id']}" in c for c in fanouts), fanouts
    with sqlite3.connect(f.h1 / "state.db") as db:
        assert db.execute("SELECT count(*) FROM turns").fetchone() == (2,)


def test_a_sandboxed_session_on_another_host_runs_its_turns_in_the_sandbox(
    fleet: Fleet,
) -> None:
    """DESIGN §19: the host's spex keeps the policy and applies it to every
    turn it starts; the verdict brought back says `sandboxed`."""
    f = fleet
    work = f.h1 / "work"
    work.mkdir()
    agent = str(HARNESSES / "escape.sh")
    r = f.spex("new", "box1:s", "--sandbox", "--cwd", str(work), "--", agent)
    assert r.returncode == 0, r.stderr
    r = f.spex("wake", "box1:s", "where", "--json", "--window", "30")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["verdict"] == "completed" and "sandboxed" in v["flags"], v
    host_ns = str(Path("/proc/self/ns/pid").readlink())
    assert f"pid-ns {host_ns}" not in (work / "tried").read_text()
    shown = json.loads(f.spex("show", "box1:s", "--json").stdout)
    assert shown["sandbox"]["mode"] == "on", shown
