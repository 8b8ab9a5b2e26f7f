"""Sandboxed sessions (DESIGN §19), escaped for real: real bubblewrap, real
tmux, and an agent (tests/harnesses/escape.sh) that tries, one attempt a
case, to get at what is not its own. Each case checks that the attempt was
made and denied, that the turn's verdict is what really happened, and that
nothing of the turn outlives it.

The homes live under /var/tmp, not /tmp: a sandbox has a /tmp of its own,
which would hide a home there whatever the policy said, and prove nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import HERE, Env, end_everything, harness, retry_until

from spexsup.pane import marker
from spexsup.pane.marker import Stage

# A bubblewrap whose policy wrongly lets every write through, or keeps every
# capability (SPEX_LEAK=caps).
LEAKY_ENGINE = HERE / "leaky_engine"


@pytest.fixture
def sbx(env: Env, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    """`env` with its user's home, state home and tmux sockets on a disk of
    the host (as /home and /run are), not in /tmp."""
    root = Path(tempfile.mkdtemp(prefix="spx", dir="/var/tmp"))
    tmux_tmpdir = root / "tmux"
    tmux_tmpdir.mkdir(mode=0o700)
    (root / "home").mkdir()
    (root / "state").mkdir(mode=0o700)
    values = {
        "HOME": str(root / "home"),
        "SPEXSUP_HOME": str(root / "state"),
        "TMUX_TMPDIR": str(tmux_tmpdir),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    e = Env(root, root / "state", tmux_tmpdir, env.socket, {**env.vars, **values})
    e.login_path(env.vars["PATH"])
    try:
        yield e
    finally:
        end_everything(e)
        # Only this test's: another test's, running beside it (pytest -n),
        # must live until that test has looked at it.
        turns = {d.name for d in (root / "state" / "turns").glob("*/*")}
        for proc in daemons():
            with contextlib.suppress(psutil.Error):
                if proc.cmdline()[0].removeprefix("spex-daemon-") in turns:
                    proc.kill()
        shutil.rmtree(root, ignore_errors=True)


def new(env: Env, name: str, *options: str, agent: str = "escape.sh") -> Path:
    """A session of `agent` in a cwd of its own (made here); its cwd."""
    work = env.root / name
    work.mkdir()
    r = env.run("new", name, *options, "--cwd", str(work), "--", harness(agent))
    assert r.returncode == 0, r.stderr
    return work


def wake(env: Env, name: str, attempt: str, *options: str, window: str = "30") -> dict[str, Any]:
    r = env.run("wake", name, attempt, "--json", "--window", window, *options)
    assert r.stdout, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def wait(env: Env, name: str) -> dict[str, Any]:
    """The session's turn once it ended (`spex wait --json`)."""
    r = env.run("wait", name, "--json", "--timeout", "60")
    assert r.stdout, r.stderr
    [turn] = json.loads(r.stdout)
    return turn  # type: ignore[no-any-return]


def show(env: Env, name: str) -> dict[str, Any]:
    return json.loads(env.run("show", name, "--json").stdout)  # type: ignore[no-any-return]


def tried(work: Path) -> dict[str, int]:
    """The agent's tries and their rc (`WHAT rc=N` lines)."""
    found = {}
    for line in (work / "tried").read_text().splitlines():
        what, _, rc = line.rpartition(" rc=")
        found[what] = int(rc)
    return found


def all_failed(work: Path, *names: str) -> None:
    """The agent made each try in `names`, and each failed."""
    seen = tried(work)
    assert sorted(seen) == sorted(names) and all(seen.values()), seen


def daemons(turn: str = "") -> list[psutil.Process]:
    """The daemons escape.sh leaves (`spex-daemon-TURN`, no environment)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if f"spex-daemon-{turn}" in " ".join(proc.cmdline()) and proc.status() != "zombie":
                found.append(proc)
    return found


def of_turn(turn: str) -> list[psutil.Process]:
    """Live processes of the turn: its environment's SPEXSUP_TURN, or a
    daemon it named after it."""
    found = daemons(turn)
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("SPEXSUP_TURN") == turn and proc.status() != "zombie":
                found.append(proc)
    return found


def cmdline(proc: psutil.Process) -> str:
    """Its command line, or "" for one that ended meanwhile (a turn's
    short-lived children, such as the `sleep` of a waiting loop)."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def ended_leaving_nothing(env: Env, name: str, turn: str) -> None:
    """The wrapper recorded the turn's end; once it handed the pane back to
    a shell, no process of the turn is left."""
    directory = env.home / "turns" / name / turn
    assert retry_until(lambda: marker.read(directory).stage is Stage.EXIT, seconds=30)
    # The sandbox's processes were gone before the wrapper could record anything.
    assert daemons(turn) == []
    assert retry_until(lambda: of_turn(turn) == [], seconds=30), of_turn(turn)


def completed_sandboxed(v: dict[str, Any]) -> None:
    """A wake's verdict, or a waited-for turn, that ended complete, rc 0, in its sandbox."""
    done = v["state"] == "complete" if v.get("state") else v["verdict"] == "completed"
    assert (done, v["rc"], v["error"]) == (True, 0, None), v
    assert "sandboxed" in v["flags"], v


def test_writing_bashrc_is_denied(sbx: Env) -> None:
    bashrc = Path(sbx.vars["HOME"]) / ".bashrc"
    bashrc.write_text("# mine\n")
    work = new(sbx, "a", "--sandbox")
    v = wake(sbx, "a", "bashrc")
    assert bashrc.read_text() == "# mine\n"
    # Both tries were made, and both failed: a write, and a remount first.
    all_failed(work, "append", "remount")
    completed_sandboxed(v)
    ended_leaving_nothing(sbx, "a", v["turn"])


def test_reading_the_ssh_key_is_denied(sbx: Env) -> None:
    ssh = Path(sbx.vars["HOME"]) / ".ssh"
    ssh.mkdir(mode=0o700)
    secret = f"-----BEGIN OPENSSH PRIVATE KEY-----\nSPEX-SECRET-{os.urandom(8).hex()}\n"
    (ssh / "id_rsa").write_text(secret)
    (ssh / "id_rsa").chmod(0o600)
    work = new(sbx, "a", "--sandbox")
    v = wake(sbx, "a", "ssh")
    all_failed(work, "read", "uncover")
    # Not a byte of it anywhere the agent could write or print.
    assert not (work / "seen").exists() or "SPEX-SECRET" not in (work / "seen").read_text()
    assert "SPEX-SECRET" not in sbx.run("log", "a").stdout
    completed_sandboxed(v)
    ended_leaving_nothing(sbx, "a", v["turn"])


def test_forging_the_outcome_marker_is_denied_and_the_verdict_is_the_real_exit(
    sbx: Env,
) -> None:
    work = new(sbx, "a", "--sandbox")
    v = wake(sbx, "a", "marker")
    all_failed(work, "outcome", "rename", "uncover")
    # It said exit:0 and exited 3: failed rc=3, in the verdict and the marker.
    assert (v["verdict"], v["rc"]) == ("failed", 3), v
    assert "exited rc=3" in v["error"], v
    assert "sandboxed" in v["flags"], v
    turn = show(sbx, "a")["turn"]
    assert (turn["state"], turn["rc"]) == ("failed", 3), turn
    ended_leaving_nothing(sbx, "a", v["turn"])
    assert marker.read(sbx.home / "turns" / "a" / v["turn"]).rc == 3


def test_writing_the_state_database_is_denied(sbx: Env) -> None:
    work = new(sbx, "a", "--sandbox")
    v = wake(sbx, "a", "statedb")
    all_failed(work, "append", "uncover")
    db = sbx.home / "state.db"
    assert b"SPEX-ESCAPED" not in db.read_bytes()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    completed_sandboxed(v)
    ended_leaving_nothing(sbx, "a", v["turn"])
    assert show(sbx, "a")["turn"]["state"] == "complete"


def test_keys_sent_into_another_sessions_pane_never_arrive(sbx: Env) -> None:
    new(sbx, "other", agent="exit0.sh")
    tty = sbx.tmux("display-message", "-p", "-t", "=other:0.0", "#{pane_tty}").stdout.strip()
    assert tty.startswith("/dev/"), tty
    work = new(sbx, "a", "--sandbox")
    (work / "target").write_text(f"other\n{tty}\n")
    v = wake(sbx, "a", "tmux")
    all_failed(work, "socket-name", "socket-path", "tty")
    completed_sandboxed(v)
    ended_leaving_nothing(sbx, "a", v["turn"])

    def screen() -> str:
        return sbx.tmux("capture-pane", "-p", "-S", "-", "-t", "=other:0.0").stdout

    # What is sent from outside shows there: the screen is where it would be.
    sbx.tmux("send-keys", "-t", "=other:0.0", "echo SPEX-CONTROL", "Enter")
    assert retry_until(lambda: "SPEX-CONTROL" in screen(), seconds=30), screen()
    assert "SPEX-INJECTED" not in screen()


@contextlib.contextmanager
def unix_listener(path: Path, seen: list[str]) -> Iterator[None]:
    """A Unix socket at `path` that records each connection to it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                seen.append(str(path))
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield
    finally:
        server.shutdown(socket.SHUT_RDWR)
        server.close()


def test_the_users_sockets_and_spexs_ssh_masters_are_out_of_reach(sbx: Env) -> None:
    # A socket is reached on a read-only file system too: what listens in
    # the user's runtime directory (the session bus, whose systemd runs any
    # command outside; spex's own ssh control masters, a shell on each host)
    # or at $SSH_AUTH_SOCK must be hidden.
    runtime = sbx.root / "run"
    sockets = {
        "bus": runtime / "bus",
        "ssh-master": runtime / "spexsup-ssh" / "master",
        "ssh-agent": sbx.root / "agent" / "ssh.sock",
    }
    extra = {"XDG_RUNTIME_DIR": str(runtime), "SSH_AUTH_SOCK": str(sockets["ssh-agent"])}
    work = new(sbx, "a", "--sandbox")
    (work / "target").write_text("".join(f"{k} {p}\n" for k, p in sockets.items()))
    seen: list[str] = []
    with contextlib.ExitStack() as stack:
        for path in sockets.values():
            stack.enter_context(unix_listener(path, seen))
        r = sbx.run("wake", "a", "sockets", "--json", "--window", "30", extra=extra)
        v = json.loads(r.stdout)
    all_failed(work, *sockets)
    assert seen == []
    completed_sandboxed(v)
    ended_leaving_nothing(sbx, "a", v["turn"])


def test_the_wrapper_and_another_sessions_agent_survive_kill(sbx: Env) -> None:
    go = sbx.root / "go"
    new(sbx, "other", "--env", f"GO={go}", agent="until_go.sh")
    other = wake(sbx, "other", "work", window="0.3")
    assert other["verdict"] == "confirmed", other
    [agent] = [p for p in of_turn(other["turn"]) if "until_go.sh" in cmdline(p)]
    work = new(sbx, "a", "--sandbox")
    v = wake(sbx, "a", "kill", window="0.3")
    assert v["verdict"] == "confirmed", v
    wrapper = psutil.Process(sbx.pane_pid("a"))
    assert v["turn"] in " ".join(wrapper.cmdline())
    (work / "pids.tmp").write_text(f"{wrapper.pid}\n{agent.pid}\n")
    (work / "pids.tmp").rename(work / "pids")
    end = wait(sbx, "a")
    all_failed(work, "wrapper", "other")
    # The wrapper lived to record the end itself.
    completed_sandboxed(end)
    ended_leaving_nothing(sbx, "a", end["turn"])
    m = marker.read(sbx.home / "turns" / "a" / end["turn"])
    assert (m.rc, m.cas in (0, 3)) == (0, True), m
    assert wrapper.is_running()
    assert agent.is_running() and show(sbx, "other")["turn"]["state"] == "running"
    go.touch()
    assert wait(sbx, "other")["state"] == "complete"


@contextlib.contextmanager
def http_server(seen: list[int]) -> Iterator[int]:
    """A server on 127.0.0.1 that answers `port-N` and records each request."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.server.server_port)  # type: ignore[attr-defined]
            body = f"port-{self.server.server_port}".encode()  # type: ignore[attr-defined]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


def test_only_the_allowed_port_is_reached_and_the_denied_one_is_recorded(sbx: Env) -> None:
    seen: list[int] = []
    with http_server(seen) as ok, http_server(seen) as bad:
        ports = ["--env", f"OK_PORT={ok}", "--env", f"BAD_PORT={bad}"]
        work = new(sbx, "a", "--sandbox", "--allow-host", f"127.0.0.1:{ok}", *ports)
        v = wake(sbx, "a", "net")
        assert tried(work) == {
            f"direct-{ok} port-{ok}": 0,
            f"proxy-{ok} port-{ok}": 0,
            f"direct-{bad} ": 7,  # curl: could not connect
            f"proxy-{bad} ": 22,  # curl --fail: the gate's 403
            "malformed 400": 0,
        }
        assert bad not in seen and seen.count(ok) == 2, seen
    completed_sandboxed(v)
    # What the gate denied, and nothing the agent made up.
    assert [f for f in v["flags"] if f != "sandboxed"] == [f"denied-net:127.0.0.1:{bad}"], v
    assert show(sbx, "a")["turn"]["flags"] == v["flags"]
    ended_leaving_nothing(sbx, "a", v["turn"])


def test_network_none_reaches_not_even_the_allowed_port_and_open_reaches_it(sbx: Env) -> None:
    seen: list[int] = []
    with http_server(seen) as ok, http_server(seen) as bad:
        ports = ["--env", f"OK_PORT={ok}", "--env", f"BAD_PORT={bad}"]
        allow = ["--allow-host", f"127.0.0.1:{ok}"]
        work = new(sbx, "none", "--sandbox", "--network", "none", *allow, *ports)
        v = wake(sbx, "none", "net")
        # No proxy either: nothing but its own loopback, where nothing listens.
        assert tried(work) == {f"direct-{ok} ": 7, f"direct-{bad} ": 7}
        assert seen == []
        completed_sandboxed(v)
        assert not [f for f in v["flags"] if f.startswith("denied-net:")], v
        ended_leaving_nothing(sbx, "none", v["turn"])

        work = new(sbx, "open", "--sandbox", "--network", "open", *ports)
        v = wake(sbx, "open", "net")
        assert tried(work) == {f"direct-{ok} port-{ok}": 0, f"direct-{bad} port-{bad}": 0}
        assert sorted(seen) == sorted([ok, bad]), seen
    completed_sandboxed(v)
    ended_leaving_nothing(sbx, "open", v["turn"])


def test_a_setsid_daemon_does_not_outlive_its_turn(sbx: Env) -> None:
    work = new(sbx, "a", "--sandbox")
    v = wake(sbx, "a", "daemon", window="0.3")
    assert v["verdict"] == "confirmed", v
    # daemon.pid is written at the fork, before the exec that names it.
    assert retry_until(lambda: bool(daemons(v["turn"])), seconds=30)
    # It runs, out of the turn's session and environment.
    [daemon] = daemons(v["turn"])
    assert daemon.environ().get("SPEXSUP_TURN") is None
    assert os.getsid(daemon.pid) != os.getsid(sbx.pane_pid("a"))
    (work / "go").touch()
    end = wait(sbx, "a")
    completed_sandboxed(end)
    ended_leaving_nothing(sbx, "a", v["turn"])
    assert not daemon.is_running()


@pytest.mark.parametrize(
    ("leak", "said", "network"),
    [
        ("write", "the probe: wrote", "allow"),
        ("caps", "the probe: keeps capabilities", "allow"),
        ("read", "the probe: read", "none"),
        ("net", "the probe: shares the host network", "allow"),
        ("pid", "the probe: sees the host processes", "none"),
    ],
)
def test_a_probe_that_succeeds_fails_the_turn_before_the_agent_runs(
    sbx: Env, leak: str, said: str, network: str
) -> None:
    work = new(sbx, "a", "--sandbox", "--network", network, "--env", f"SPEX_LEAK={leak}")
    # The engine the launch finds first on its PATH wrongly allows `leak`.
    path = f"{LEAKY_ENGINE}:{sbx.vars['PATH']}"
    r = sbx.run("wake", "a", "bashrc", "--json", "--window", "30", extra={"PATH": path})
    v = json.loads(r.stdout)
    assert r.returncode == 1, r
    assert (v["verdict"], v["rc"]) == ("failed", 125), v
    assert f"sandbox: {said}" in v["error"], v
    turn = show(sbx, "a")["turn"]
    assert (turn["state"], turn["cause"]) == ("failed", "sandbox"), turn
    assert "sandboxed" not in turn["flags"]
    assert not (work / "ran").exists()
    # The probe's write was taken back.
    assert not list(Path(sbx.vars["HOME"]).glob(".spex-sandbox-probe-*"))
    ended_leaving_nothing(sbx, "a", v["turn"])


def test_a_cwd_inside_a_hidden_directory_stays_writable(sbx: Env) -> None:
    hidden = sbx.root / "hidden"
    (hidden / "work").mkdir(parents=True)
    (hidden / "secret").write_text("SPEX-SECRET\n")
    work = hidden / "work"
    r = sbx.run(
        "new",
        "a",
        "--sandbox",
        "--deny-read",
        str(hidden),
        "--cwd",
        str(work),
        "--",
        harness("escape.sh"),
    )
    assert r.returncode == 0, r.stderr
    v = wake(sbx, "a", "hidden")
    completed_sandboxed(v)
    all_failed(work, "read", "write")
    assert not (hidden / "planted").exists()
    ended_leaving_nothing(sbx, "a", v["turn"])


def without_engine(env: Env) -> str:
    """The test's PATH with bubblewrap gone: each directory that has it
    replaced by one of links to all the rest."""
    dirs = []
    for i, entry in enumerate(env.vars["PATH"].split(":")):
        d = Path(entry)
        if not (d / "bwrap").exists():
            dirs.append(entry)
            continue
        farm = env.root / f"no-engine-{i}"
        farm.mkdir()
        for f in d.iterdir():
            if f.name != "bwrap":
                (farm / f.name).symlink_to(f)
        dirs.append(str(farm))
    path = ":".join(dirs)
    assert shutil.which("bwrap", path=path) is None
    return path


def test_a_missing_engine_refuses_new_and_fails_the_turn(sbx: Env) -> None:
    path = without_engine(sbx)
    work = sbx.root / "x"
    work.mkdir()
    r = sbx.run(
        "new",
        "x",
        "--sandbox",
        "--cwd",
        str(work),
        "--",
        harness("escape.sh"),
        extra={"PATH": path},
    )
    assert r.returncode == 3, r
    assert r.stderr.startswith("spex: sandboxed sessions need bubblewrap"), r.stderr
    assert "apt-get install bubblewrap socat" in r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert sbx.run("show", "x").returncode != 0

    # Made while it was there; gone by the time of the turn.
    work = new(sbx, "a", "--sandbox")
    sbx.login_path(path)
    r = sbx.run("wake", "a", "bashrc", "--json", "--window", "30", extra={"PATH": path})
    v = json.loads(r.stdout)
    assert (r.returncode, v["verdict"], v["rc"]) == (1, "failed", 125), v
    assert "bwrap is not installed" in v["error"], v
    assert show(sbx, "a")["turn"]["cause"] == "sandbox"
    assert not (work / "ran").exists()
    ended_leaving_nothing(sbx, "a", v["turn"])


def test_no_sandbox_runs_one_turn_outside_only_when_the_session_allows_it(sbx: Env) -> None:
    ssh = Path(sbx.vars["HOME"]) / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "id_rsa").write_text("key\n")
    host_ns = Path("/proc/self/ns/pid").readlink()

    work = new(sbx, "o", "--sandbox=optional")
    v = wake(sbx, "o", "where", "--no-sandbox")
    assert (v["verdict"], v["rc"]) == ("completed", 0), v
    assert "sandboxed" not in v["flags"], v
    assert tried(work) == {f"pid-ns {host_ns}": 0, "read": 0}
    ended_leaving_nothing(sbx, "o", v["turn"])
    # Its other turns run in the sandbox.
    (work / "tried").unlink()
    v = wake(sbx, "o", "where")
    completed_sandboxed(v)
    seen = tried(work)
    assert f"pid-ns {host_ns}" not in seen and seen["read"] != 0, seen
    ended_leaving_nothing(sbx, "o", v["turn"])

    work = new(sbx, "s", "--sandbox")
    r = sbx.run("wake", "s", "where", "--no-sandbox", "--window", "30")
    assert r.returncode == 3, r
    assert r.stderr.startswith("spex: session 's' is sandboxed"), r.stderr
    assert "--sandbox=optional" in r.stderr
    assert show(sbx, "s")["turn"] is None
    assert not (work / "ran").exists()
    assert not (sbx.home / "turns" / "s").exists() or not any((sbx.home / "turns" / "s").iterdir())
