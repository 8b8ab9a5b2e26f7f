"""Other machines over OpenSSH (issue 16, DESIGN §8 "Hosts").

A host is a `[host.NAME]` table in config.toml: `ssh` (a destination or an
alias of ~/.ssh/config), optional `spex` (the command on that host, split
as a shell would; default `spex` on its login PATH), `home` (its state home),
`connect_timeout` (seconds, default 5) and `ssh_options` (extra ssh words).
Nothing runs a service: each command is `ssh … spex … --json`, and the host's
own spex and SQLite stay the truth for its sessions.

Connections are shared (`ControlMaster=auto`, `ControlPersist`) through a
control socket in a 0700 directory under `$XDG_RUNTIME_DIR`, else the state
home. The remote spex's version is checked once per master connection: the
check records the control socket's identity, and a later command through the
same socket skips it.

Prompts and other input go on the remote command's stdin; the ssh command
line carries only names and options. ssh's own failures (exit 255) become
one-line `Failed` errors naming the host; the remote spex's exit code is
passed through unchanged (spex never exits 255 itself).

Imported only by commands that address a host: a local command never pays
for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import durations, lazyre
from spexsup.errors import Failed, Invalid, Refused
from spexsup.paths import ensure_private_dir

if TYPE_CHECKING:
    from spexsup.config import Config

NAME_RE = lazyre.compile(r"[A-Za-z0-9_-]{1,64}")
# `HOST:NAME`: the host part is a config table name, the session part a session name.
ADDRESS_RE = lazyre.compile(r"([A-Za-z0-9_-]{1,64}):([A-Za-z0-9_-]{1,64})")
DEFAULT_CONNECT_TIMEOUT = 5.0
CONTROL_PERSIST = 600
# A dropped connection is noticed within ALIVE_INTERVAL * ALIVE_COUNT seconds.
ALIVE_INTERVAL = 5
ALIVE_COUNT = 3
SSH_FAILED = 255
HOST_KEYS = ("ssh", "spex", "home", "connect_timeout", "ssh_options")
LOCAL = "local"


@dataclass(frozen=True)
class Host:
    name: str
    ssh: str
    spex: tuple[str, ...] = ("spex",)
    home: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    ssh_options: tuple[str, ...] = ()


def parse_hosts(raw: object) -> dict[str, Host]:
    """Validate the raw `[host.NAME]` tables; Failed (exit 1, as any bad
    config) on the first bad one."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise Failed("config.toml: 'host' must be tables: [host.NAME]")
    hosts = {}
    for name, table in raw.items():
        where = f"config.toml: [host.{name}]"
        if not NAME_RE.fullmatch(name) or name == LOCAL:
            raise Failed(f"{where}: a host name is letters, digits, _ and - (and not 'local')")
        if not isinstance(table, dict):
            raise Failed(f"{where} must be a table")
        unknown = sorted(set(table) - set(HOST_KEYS))
        if unknown:
            raise Failed(
                f"{where}: unknown field {unknown[0]!r}", hint=f"known: {', '.join(HOST_KEYS)}"
            )
        ssh = table.get("ssh")
        if (
            not isinstance(ssh, str)
            or not ssh
            or ssh.startswith("-")
            or any(c.isspace() for c in ssh)
        ):
            raise Failed(f"{where}: field 'ssh' must be a destination such as \"user@box\"")
        spex = table.get("spex", "spex")
        words = shlex.split(spex) if isinstance(spex, str) else []
        if not words:
            raise Failed(f"{where}: field 'spex' must be the spex command on that host")
        home = table.get("home")
        if home is not None and (not isinstance(home, str) or not home):
            raise Failed(f"{where}: field 'home' must be a directory on that host")
        timeout = table.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
        try:  # a number of seconds, or a duration string ("5s")
            timeout = durations.parse(timeout, "connect_timeout", minimum=1, maximum=600)
        except Invalid:
            raise Failed(
                f"{where}: field 'connect_timeout' must be seconds or a duration from 1s to 10m"
            ) from None
        options = table.get("ssh_options", [])
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise Failed(f"{where}: field 'ssh_options' must be a list of strings")
        hosts[name] = Host(name, ssh, tuple(words), home, float(timeout), tuple(options))
    return hosts


def configured(config: Config) -> dict[str, Host]:
    return parse_hosts(config.raw.get("host"))


def lookup(config: Config, name: str) -> Host:
    hosts = configured(config)
    host = hosts.get(name)
    if host is None:
        known = ", ".join(hosts) or "none configured"
        raise Refused(f"no host named {name!r}", hint=f"[host.NAME] in config.toml; known: {known}")
    return host


def split_address(word: str) -> tuple[str | None, str]:
    """`box1:api` -> ("box1", "api"); a bare name -> (None, name)."""
    m = ADDRESS_RE.fullmatch(word)
    return (m.group(1), m.group(2)) if m else (None, word)


# -- connection sharing -------------------------------------------------------


def control_dir(state_home: Path) -> Path:
    """A 0700 directory of ours for control sockets, short enough for a unix
    socket path: `$XDG_RUNTIME_DIR/spexsup-ssh`, else the state home's `ssh`,
    else `spexsup-ssh-UID` in the temp dir.

    One that cannot be made is skipped; one that is a symlink, not a
    directory or another user's (in a shared temp dir anyone can plant
    one) is refused, never followed or chmod'ed (see `ensure_private_dir`).
    """

    runtime = os.environ.get("XDG_RUNTIME_DIR")
    candidates = [Path(runtime) / "spexsup-ssh"] if runtime else []
    candidates += [state_home / "ssh", Path(tempfile.gettempdir()) / f"spexsup-ssh-{os.getuid()}"]
    for d in candidates:
        if len(str(d)) > 60:  # sun_path is 108 bytes; the socket's name takes ~30
            continue
        try:
            return ensure_private_dir(d)
        except Failed as e:
            raise Failed(
                f"ssh control sockets: {e.message}", hint="remove it, or set XDG_RUNTIME_DIR"
            ) from None
        except OSError:
            continue
    raise Failed("no directory for ssh control sockets", hint="set XDG_RUNTIME_DIR")


def control_path(host: Host, state_home: Path) -> Path:
    key = "\0".join([host.ssh, *host.ssh_options]).encode()
    return control_dir(state_home) / f"{host.name}-{hashlib.sha256(key).hexdigest()[:10]}"


def ssh_argv(host: Host, state_home: Path, remote: list[str], *, tty: bool = False) -> list[str]:
    """The ssh command running `remote` (argv words) on the host. The words
    are quoted for the remote login shell; none of them is a prompt."""
    timeout = max(1, round(host.connect_timeout))
    return [
        "ssh",
        "-o", "BatchMode=yes",
        "-o", f"ConnectTimeout={timeout}",
        "-o", "ControlMaster=auto",
        "-o", f"ControlPath={control_path(host, state_home)}",
        "-o", f"ControlPersist={CONTROL_PERSIST}",
        "-o", f"ServerAliveInterval={ALIVE_INTERVAL}",
        "-o", f"ServerAliveCountMax={ALIVE_COUNT}",
        "-o", "LogLevel=ERROR",
        *host.ssh_options,
        "-t" if tty else "-T",
        host.ssh,
        "--",
        shlex.join(remote_spex(host, remote)),
    ]  # fmt: skip


def remote_spex(host: Host, args: list[str]) -> list[str]:
    """The host's spex with the host table's `home`, given as SPEXSUP_HOME and
    made on first use (`--create`: a home that does not exist is otherwise
    refused as a typo)."""
    if not host.home:
        return [*host.spex, *args]
    return ["env", f"SPEXSUP_HOME={host.home}", *host.spex, "--create", *args]


def ssh_cause(host: Host, stderr: str, *, connected: bool = False) -> str:
    """ssh's last words as one line naming the host. `connected`: the host
    had answered (its version), so a failure now is a connection lost."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else "ssh exited 255"
    if "Permission denied" in last or "Host key verification failed" in last:
        return f"host {host.name}: ssh refused: {last}"
    lost = ("closed", "Broken pipe", "not responding", "reset", "mux_client")
    if connected or any(word in last for word in lost):
        return f"host {host.name}: connection lost: {last}"
    return f"host {host.name} unreachable: {last}"


# -- the version check ---------------------------------------------------------


def major(version: str) -> str:
    return version.split(".", 1)[0]


def _socket_id(path: Path) -> str | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return f"{st.st_ino}:{st.st_mtime_ns}"


def remote_version(host: Host, state_home: Path) -> str:
    """The host's spex version, asked once per master connection (see the
    module doc). Failed when the host cannot be reached, its spex is missing,
    or its major version differs from ours."""
    from spexsup import __version__

    ctl = control_path(host, state_home)
    record = ctl.with_name(ctl.name + ".version")
    current = _socket_id(ctl)
    if current is not None:
        try:
            seen = json.loads(record.read_text())
            if seen.get("socket") == current and isinstance(seen.get("version"), str):
                return str(seen["version"])
        except (OSError, ValueError):
            pass
    done = subprocess.run(
        ssh_argv(host, state_home, ["--version", "--json"]),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    err = done.stderr.decode(errors="replace")
    if done.returncode == SSH_FAILED:
        raise Failed(ssh_cause(host, err))
    out = done.stdout.decode(errors="replace").strip()
    version = _parse_version(out)
    if done.returncode != 0 or version is None:
        if done.returncode == 127 or "not found" in err:
            raise Failed(
                f"host {host.name}: remote spex not found ({shlex.join(host.spex)})",
                hint=f'set spex = "/path/to/spex" in [host.{host.name}]',
            )
        said = (err.strip().splitlines() or [out or f"exit {done.returncode}"])[-1]
        raise Failed(f"host {host.name}: remote spex did not tell its version: {said}")
    if major(version) != major(__version__):
        raise Failed(
            f"host {host.name} runs spex {version}, this is spex {__version__}:"
            " major versions differ",
            hint="install the same major version on both",
        )
    current = _socket_id(ctl)
    if current is not None:
        from spexsup.paths import write_atomic

        write_atomic(record, json.dumps({"socket": current, "version": version}).encode())
    return version


def _parse_version(out: str) -> str | None:
    try:
        doc = json.loads(out)
        v = doc.get("version") if isinstance(doc, dict) else None
        return v if isinstance(v, str) and v else None
    except ValueError:
        m = re.fullmatch(r"spex (\S+)", out)  # a spex too old to print JSON
        return m.group(1) if m else None


# -- running a command there ---------------------------------------------------


@dataclass
class Answer:
    rc: int
    stdout: bytes
    stderr: bytes

    def document(self) -> Any:
        """The JSON document the remote printed, or None."""
        try:
            return json.loads(self.stdout)
        except ValueError:
            return None


class ConnectionLost(Failed):
    """ssh failed after the host had answered: the command may have run there."""


def call(host: Host, state_home: Path, args: list[str], *, stdin: bytes | None = None) -> Answer:
    """Run `spex ARGS` on the host and collect its output (version checked
    first). ssh failing is Failed naming the host (ConnectionLost once the
    host had answered); any other exit is the remote spex's own and is
    returned."""
    remote_version(host, state_home)
    done = subprocess.run(
        ssh_argv(host, state_home, args),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    if done.returncode == SSH_FAILED:
        cause = ssh_cause(host, done.stderr.decode(errors="replace"), connected=True)
        raise (ConnectionLost if ": connection lost: " in cause else Failed)(cause)
    return Answer(done.returncode, done.stdout, done.stderr)


# A keyed wake or fan-out there whose connection drops is asked again after
# these pauses, under its key: the host answers a repeat with the turns it
# started, never a second one.
KEYED_RETRIES = (0.5, 2.0)


def call_keyed(
    host: Host, state_home: Path, args: list[str], made_key: str, *, stdin: bytes | None = None
) -> Answer:
    """`call` for a `wake` or `fanout` there, under a key: `--key` as given
    in `args` (before any `--`), else `made_key`; asked again after a dropped
    connection (each retry said in a `spex: warning:` line). A spex there
    from before `--key` (exit 2 naming it) is asked once more without the
    made key."""
    import sys
    import time

    end = args.index("--") if "--" in args else len(args)
    given = "--key" in args[:end] or any(w.startswith("--key=") for w in args[:end])
    keyed = args if given else [*args[:end], "--key", made_key, *args[end:]]
    for pause in (*KEYED_RETRIES, None):
        try:
            answer = call(host, state_home, keyed, stdin=stdin)
        except ConnectionLost as e:
            if pause is None:
                raise
            sys.stderr.write(f"spex: warning: {e.message}; asking again (the same key)\n")
            time.sleep(pause)
            continue
        if not given and answer.rc == 2 and b"'--key'" in answer.stderr:
            return call(host, state_home, args, stdin=stdin)
        return answer
    raise AssertionError("unreachable")


def stream(
    host: Host, state_home: Path, args: list[str], *, stdin: bytes | None = None, waiting: str = ""
) -> int:
    """Run `spex ARGS` on the host with its output going straight to ours
    (`log -f`, long commands). Returns the remote exit code; a connection
    that drops meanwhile is Failed, saying what was being waited for."""
    import sys

    remote_version(host, state_home)
    proc = subprocess.Popen(
        ssh_argv(host, state_home, args),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if stdin is not None:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
    assert proc.stderr is not None
    # The remote's stderr passes through as it comes; ssh's own last words are kept.
    tail: list[str] = []
    for raw in proc.stderr:
        line = raw.decode(errors="replace")
        tail = [*tail[-3:], line]
        if not line.startswith(("Shared connection", "Connection to", "client_loop", "Timeout")):
            sys.stderr.write(line)
            sys.stderr.flush()
    rc = proc.wait()
    if rc == SSH_FAILED:
        cause = ssh_cause(host, "".join(tail), connected=True)
        if waiting:
            cause = f"{cause} while {waiting}"
        raise Failed(cause, hint=f"the turn keeps running on {host.name}" if waiting else None)
    return rc


def attach_argv(host: Host, state_home: Path, args: list[str]) -> list[str]:
    """`ssh -t … spex attach NAME`: a terminal on the far pane."""
    remote_version(host, state_home)
    return ssh_argv(host, state_home, ["attach", *args], tty=True)


def check_address(word: str) -> tuple[str | None, str]:
    """`split_address`, refusing a malformed `HOST:NAME`."""
    host, name = split_address(word)
    if host is None and ":" in word:
        raise Invalid(f"invalid address {word!r}", hint="HOST:NAME, both letters, digits, _ and -")
    return host, name
