"""A real sshd on 127.0.0.1 for the host tests, and two "hosts" behind it.

The daemon runs from the test's own directory: its own host key,
authorized_keys, sshd_config and log (`-E`), on a free port. Logins are as
a dedicated account `spexssh` (created when missing: uid 0 like root, so it
runs this checkout's venv, whose Python may live under /root, but with
/bin/sh as its shell and its own home, so no login runs root's ~/.bashrc).
The hosts are state homes in the test's directory; each has its own tmux
server (the socket name comes from the home).
Teardown kills what the test started, by pid: the daemon's children, the
account's processes that came in through this daemon's port, and the ssh
masters whose control path lies in this test's directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

USER = "spexssh"
USER_HOME = Path("/tmp/spexssh-home")
SPEX = str(Path(sys.executable).parent / "spex")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_user() -> pwd.struct_passwd:
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "-o",
                "-u",
                "0",
                "-g",
                "0",
                "-M",
                "-d",
                str(USER_HOME),
                "-s",
                "/bin/sh",
                USER,
            ],
            check=True,
            capture_output=True,
        )
        # "!" (useradd's default) is a locked account, which sshd refuses without PAM.
        subprocess.run(["usermod", "-p", "*", USER], check=True, capture_output=True)
        entry = pwd.getpwnam(USER)
    if entry.pw_uid != os.getuid() or entry.pw_shell != "/bin/sh":
        raise NoSshd(f"account {USER} exists with another uid or shell (want uid 0, /bin/sh)")
    USER_HOME.mkdir(exist_ok=True)
    os.chown(USER_HOME, entry.pw_uid, entry.pw_gid)
    return entry


@dataclass
class Sshd:
    dir: Path
    port: int
    log: Path
    ssh_config: Path
    pid: int
    uid: int
    gid: int

    def accepted(self) -> int:
        """How many connections sshd has accepted (from its log)."""
        return self.log.read_text(errors="replace").count("Accepted publickey")

    def home(self, name: str) -> Path:
        """A state home owned by the login account."""
        path = self.dir / name
        path.mkdir(mode=0o700, exist_ok=True)
        os.chown(path, self.uid, self.gid)
        return path

    def host_table(self, name: str, home: Path, *, spex: str = SPEX, alias: str = "box") -> str:
        return (
            f"[host.{name}]\n"
            f'ssh = "{alias}"\n'
            f'spex = "{spex}"\n'
            f'home = "{home}"\n'
            f'ssh_options = ["-F", "{self.ssh_config}"]\n'
        )

    def drop_connections(self) -> int:
        """Kill the daemon's per-connection processes: every client sees its
        connection drop. How many were killed."""
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return 0
        conns = []
        for c in children:
            with contextlib.suppress(psutil.Error):
                if c.name() == "sshd":
                    conns.append(c)
        _kill(conns)
        return len(conns)

    @staticmethod
    def cmdline(proc: psutil.Process) -> list[str]:
        """Its command line; [] for a process that has gone meanwhile."""
        try:
            return list(proc.cmdline())
        except psutil.Error:
            return []

    def session_processes(self) -> list[psutil.Process]:
        """The account's processes that came through this daemon."""
        found = []
        for proc in psutil.process_iter(["uids"]):
            try:
                if proc.info["uids"].real != self.uid:
                    continue
                conn = proc.environ().get("SSH_CONNECTION", "")
            except (psutil.Error, AttributeError):
                continue
            if conn.endswith(f" {self.port}"):
                found.append(proc)
        return found


def _kill(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            proc.send_signal(signal.SIGKILL)


class NoSshd(RuntimeError):
    """sshd or root is missing."""


@contextlib.contextmanager
def running() -> Iterator[Sshd]:
    """Start the daemon in a new temp dir; stop it and what came through it after."""
    daemon = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(daemon).exists() or os.geteuid() != 0:
        raise NoSshd("the host tests need sshd and root (make test installs openssh-server)")
    entry = ensure_user()
    base = Path(tempfile.mkdtemp(prefix="spxssh"))
    base.chmod(0o755)  # the login account reaches its homes inside
    port = free_port()
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
    subprocess.run([*keygen, "-f", str(base / "hostkey")], check=True)
    subprocess.run([*keygen, "-f", str(base / "id")], check=True)
    auth = base / "authorized_keys"
    shutil.copy(base / "id.pub", auth)
    auth.chmod(0o644)
    host_pub = (base / "hostkey.pub").read_text().split()
    (base / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    closed = free_port()  # nothing listens there
    (base / "ssh_config").write_text(
        f"Host box\n  HostName 127.0.0.1\n  Port {port}\n"
        f"Host deadbox\n  HostName 127.0.0.1\n  Port {closed}\n"
        "Host *\n"
        f"  User {USER}\n  IdentityFile {base / 'id'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {base / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
    )
    (base / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {base / 'hostkey'}\n"
        f"PidFile {base / 'sshd.pid'}\nAuthorizedKeysFile {auth}\n"
        "StrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        f"AllowUsers {USER}\nLogLevel VERBOSE\nPrintMotd no\nPrintLastLog no\n"
        "PermitRootLogin prohibit-password\nMaxSessions 64\nMaxStartups 64\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = base / "sshd.log"
    proc = subprocess.Popen([daemon, "-D", "-f", str(base / "sshd_config"), "-E", str(log)])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if proc.poll() is not None:
            raise NoSshd(f"sshd exited: {log.read_text(errors='replace') if log.exists() else ''}")
        time.sleep(0.05)
    d = Sshd(base, port, log, base / "ssh_config", proc.pid, entry.pw_uid, entry.pw_gid)
    try:
        yield d
    finally:
        _kill(d.session_processes())
        with contextlib.suppress(psutil.Error):
            _kill(psutil.Process(proc.pid).children(recursive=True))
        proc.kill()
        proc.wait()
        masters = []
        for p in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error, TypeError):
                if any(str(base) in word for word in p.info["cmdline"] or []):
                    masters.append(p)
        _kill([p for p in masters if p.pid != os.getpid()])
        _kill(d.session_processes())
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def sshd() -> Iterator[Sshd]:
    try:
        with running() as d:
            yield d
    except NoSshd as e:
        pytest.fail(str(e))
