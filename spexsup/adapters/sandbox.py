"""Sandboxed sessions (DESIGN §19): the policy a session keeps, and the
bubblewrap command line that holds one turn's harness to it.

The engine is bubblewrap (`bwrap`), run directly, not through Anthropic's
`srt`: srt starts Node, its two proxies and their socat bridges for every
command it wraps (1.4-2.2 s a turn on a 2-core machine, against 10-20 ms
for bwrap), and it keeps the host's `/tmp` visible, where tmux's sockets
live. What srt adds on Linux beyond bwrap is its allow-list proxy; spex has
its own (`spexsup.pane.netgate`), one per turn, reached only over a Unix
socket bound into the sandbox, as srt's is.

A turn's sandbox: the whole file system read-only, less what the policy
hides (`deny_read`: secrets, spex's state home and tmux sockets, other
sessions' worktrees); writable only the session's cwd, a private `/tmp`,
the harness's own state directories and `allow_write`; its own PID, IPC
and (unless `network = open`) network namespaces; a new session (no
terminal to inject keys into). Nothing in it outlives its turn: when the
harness exits, bubblewrap's init ends every process of the namespace.

Imports only the standard library: the launcher loads it for every
sandboxed turn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from spexsup import lazyre
from spexsup.errors import Invalid, Refused
from spexsup.record import Record
from spexsup.states import Flag

ENGINE = "bwrap"
# The line that installs the engine (and the bridge the network gate needs).
INSTALL = "apt-get install bubblewrap socat"


class Mode(StrEnum):
    """Whether a session's turns run sandboxed."""

    OFF = "off"
    ON = "on"
    # Sandboxed, but one turn may run without (`spex wake --no-sandbox`).
    OPTIONAL = "optional"


class Network(StrEnum):
    """What a sandboxed turn may reach."""

    # The harness's model hosts, base URLs in its environment, --allow-host.
    ALLOW = "allow"
    NONE = "none"
    OPEN = "open"


# Read by nobody in a sandbox unless the session says otherwise (`~` is the
# user's home; a path that does not exist is skipped).
DEFAULT_DENY_READ = (
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.config/gcloud",
    "~/.azure",
    "~/.kube",
    "~/.docker/config.json",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/gh",
    "~/.password-store",
    "~/.mozilla",
    "~/.config/google-chrome",
    "~/.config/chromium",
    "~/.config/BraveSoftware",
    "~/.local/share/keyrings",
    # Sockets are reached on a read-only file system too: the runtime
    # directory holds the session bus (whose systemd runs any command
    # outside) and spex's own ssh control masters (a shell on each host).
    "$XDG_RUNTIME_DIR",
    "$SSH_AUTH_SOCK",
)


class Policy(Record):
    """A session's sandbox, as it keeps it (the `sandbox` column, JSON)."""

    mode: Mode = Mode.OFF
    network: Network = Network.ALLOW
    allow_write: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.mode is not Mode.OFF

    def as_json(self) -> dict[str, Any]:
        return {
            "mode": str(self.mode),
            "network": str(self.network),
            "allow_write": list(self.allow_write),
            "deny_read": list(self.deny_read),
            "allow_hosts": list(self.allow_hosts),
        }

    def dumps(self) -> str:
        return json.dumps(self.as_json(), sort_keys=True)

    @classmethod
    def loads(cls, text: str | None) -> Policy | None:
        """The stored policy; None when the session never said (inherit)."""
        if not text:
            return None
        doc = json.loads(text)
        return cls(
            Mode(doc.get("mode", "off")),
            Network(doc.get("network", "allow")),
            tuple(doc.get("allow_write", ())),
            tuple(doc.get("deny_read", ())),
            tuple(doc.get("allow_hosts", ())),
        )


def _tempdir() -> str:
    import tempfile  # (only a plan pays for it: `spex ls` and `show` do not)

    return tempfile.gettempdir()


def turn_policy(
    own: Policy | None, harness_on: bool, configured: str | None, name: str, unsandboxed: bool
) -> Policy:
    """The sandbox a turn of session `name` runs in: the session's own policy
    (`own`), else the harness's default, else config.toml's `sandbox`, else
    none. `unsandboxed` (wake --no-sandbox) is Refused unless it is optional."""
    policy = own
    if policy is None:
        policy = Policy(Mode("on" if harness_on else configured or "off"))
    if unsandboxed and policy.mode is Mode.ON:
        raise Refused(
            f"session {name!r} is sandboxed: no turn of it runs outside",
            hint=f"spex edit {name} --sandbox=optional allows --no-sandbox",
        )
    if unsandboxed:
        return policy._replace(mode=Mode.OFF)
    return policy


def engine() -> str | None:
    """The bubblewrap binary on PATH, or None."""
    import shutil

    return shutil.which(ENGINE)


def expand(path: str, env: Mapping[str, str], user_home: Path) -> Path | None:
    """`~` and `$VAR` expanded; None when a variable it names is unset."""
    text = path
    if text.startswith("$"):
        var, _, rest = text[1:].partition("/")
        value = env.get(var)
        if not value:
            return None
        text = value + ("/" + rest if rest else "")
    if text == "~" or text.startswith("~/"):
        text = str(user_home) + text[1:]
    return Path(os.path.normpath(text)) if text.startswith("/") else None


def _under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


class Plan(Record):
    """What one turn runs under: the policy resolved to paths and hosts."""

    policy: Policy
    cwd: Path
    writable: tuple[Path, ...]
    hidden: tuple[Path, ...]
    hosts: tuple[str, ...]
    # A path the probe must fail to create, and one it must fail to read.
    probe_write: Path
    probe_read: Path
    # State files shown writable at another path too (source, where), and the
    # variables that make the harness look for them there (see `relocate`).
    binds: tuple[tuple[Path, Path], ...] = ()
    setenv: tuple[tuple[str, str], ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            **self.policy.as_json(),
            "writable": [str(p) for p in self.writable],
            "hidden": [str(p) for p in self.hidden],
            "hosts": list(self.hosts) if self.policy.network is Network.ALLOW else None,
        }


class Needs(Record):
    """What a turn's harness needs from its sandbox: its state directories
    (writable), the hosts it talks to (its model hosts and the session's
    base URLs' hosts: `spexsup.pane.netgate.base_url_hosts`), and the state
    files it rewrites by a rename (see `relocate`)."""

    write: Sequence[str] = ()
    hosts: Sequence[str] = ()
    relocate: Sequence[tuple[str, str, str]] = ()


def plan(
    policy: Policy,
    needs: Needs,
    *,
    cwd: Path,
    spex_home: Path,
    turn_dir: Path,
    env: Mapping[str, str],
    other_worktrees: Sequence[Path] = (),
    user_home: Path | None = None,
) -> Plan:
    """Resolve `policy` for a turn in `cwd` whose harness `needs` what it
    says. `env` is the session's (for `$VAR` paths)."""
    home = user_home or Path.home()
    env = {**os.environ, **env}

    def paths(entries: Iterable[str]) -> list[Path]:
        out = []
        for entry in entries:
            p = expand(entry, env, home)
            if p is not None and p not in out:
                out.append(p)
        return out

    writable = [cwd, *paths(needs.write), *paths(policy.allow_write)]
    tmux_dir = Path(os.environ.get("TMUX_TMPDIR") or "/tmp")
    hidden = [
        *paths(DEFAULT_DENY_READ),
        *paths(policy.deny_read),
        spex_home,
        tmux_dir,
        Path(f"/run/user/{os.getuid()}"),
        Path(_tempdir()) / f"spexsup-ssh-{os.getuid()}",
        *(w for w in other_worktrees if w != cwd),
    ]
    # /tmp is the sandbox's own (a tmpfs): nothing under it needs hiding.
    hidden = [h for h in dict.fromkeys(hidden) if not _under(h, [Path("/tmp")])]
    hosts = [*needs.hosts, *policy.allow_hosts]
    binds, setenv = relocate(needs.relocate, env, home)
    return Plan(
        policy,
        cwd,
        tuple(dict.fromkeys(writable)),
        tuple(hidden),
        tuple(dict.fromkeys(hosts)),
        _probe_target(turn_dir.name, home, cwd, writable),
        turn_dir / "outcome",
        binds,
        setenv,
    )


def relocate(
    entries: Iterable[tuple[str, str, str]], env: Mapping[str, str], home: Path
) -> tuple[tuple[tuple[Path, Path], ...], tuple[tuple[str, str], ...]]:
    """A state file a harness rewrites by renaming a temp file over it, in a
    directory the sandbox keeps read-only (claude's `~/.claude.json`, in
    `~`): a bind of the file alone refuses the temp file (read-only) and
    the rename (a mount point). Each `(VAR, DIR, FILE)`, unless `env` sets
    VAR, sets VAR=DIR in the sandbox, where the harness then looks for the
    file (`DIR/<its name>`: DIR is writable, so the temp file and the lock
    are), and shows FILE there: the rename fails on the mount point and
    the harness writes the file in place (claude does, on EBUSY)."""
    binds: list[tuple[Path, Path]] = []
    setenv: list[tuple[str, str]] = []
    for var, directory, file in entries:
        if env.get(var):
            continue
        where, source = expand(directory, env, home), expand(file, env, home)
        if where is None or source is None:
            continue
        setenv.append((var, str(where)))
        # A file not made yet is made in DIR, where later turns find it.
        if source.is_file():
            binds.append((source, where / source.name))
    return tuple(binds), tuple(setenv)


def _probe_target(turn: str, home: Path, cwd: Path, writable: Sequence[Path]) -> Path:
    """A path outside every writable one, in a directory that exists."""
    off_limits = [*writable, Path("/tmp"), Path("/dev"), Path("/proc")]
    for parent in (home, cwd.parent, *cwd.parents, Path("/usr")):
        if parent.is_dir() and not _under(parent, off_limits):
            return parent / f".spex-sandbox-probe-{turn}"
    return Path("/usr") / f".spex-sandbox-probe-{turn}"


def bwrap_argv(plan: Plan, binary: str = ENGINE) -> list[str]:
    """bubblewrap and its options, up to (not including) `--`.

    Mounts go shallow to deep, so a deeper one wins: a writable worktree
    inside a hidden directory shows, a secret inside a writable cwd stays
    hidden; at one depth the hiding comes last."""
    argv = [binary, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
    # Run by root, bubblewrap keeps every capability inside, with which a
    # mount undoes the sandbox (`mount -o remount,rw /`, `umount ~/.ssh`).
    argv += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
    if plan.policy.network is not Network.OPEN:
        argv.append("--unshare-net")
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    argv += ["--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    mounts: list[tuple[int, int, list[str]]] = [
        (len(path.parts), 0, ["--bind", str(path), str(path)])
        for path in plan.writable
        if path.exists()
    ]
    for source, where in plan.binds:
        if where.parent.is_dir():
            mounts.append((len(where.parts), 0, ["--bind", str(source), str(where)]))
    for path in plan.hidden:
        if path.is_dir():
            mounts.append((len(path.parts), 1, ["--tmpfs", str(path)]))
        elif path.exists():
            mounts.append((len(path.parts), 1, ["--ro-bind", "/dev/null", str(path)]))
    for _, _, words in sorted(mounts, key=lambda m: (m[0], m[1])):
        argv += words
    # A hidden directory is an empty one that cannot be written either: a
    # write there fails as a write outside does, rather than vanishing with
    # the tmpfs. Last, so deeper mounts could still make their mount points.
    for path in plan.hidden:
        if path.is_dir():
            argv += ["--remount-ro", str(path)]
    argv += ["--unsetenv", "TMUX", "--unsetenv", "TMUX_PANE", "--setenv", "SPEXSUP_SANDBOX", "1"]
    for var, value in plan.setenv:
        argv += ["--setenv", var, value]
    argv += ["--chdir", str(plan.cwd)]
    return argv


def prepare_writable(plan: Plan) -> None:
    """Create the harness state directories that do not exist yet: a bind
    mount needs its source (a file entry, `~/.claude.json`, is left alone)."""
    for path in plan.writable:
        if not path.exists() and not path.suffix:
            path.mkdir(parents=True, exist_ok=True)


def failure(turn_dir: Path) -> str | None:
    """Why the turn's sandbox could not be proven (`sandbox-failed`, by the
    wrapper: the harness never ran), or None."""
    try:
        why = (turn_dir / "sandbox-failed").read_text(errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError:
        why = ""
    return f"sandbox: {why or 'not proven'} - turn NOT started"


def flags(turn_dir: Path) -> list[str]:
    """A proven sandbox's flags: `sandboxed`, then what it denied the turn
    (`denied-net:HOST`, from the gate's `denied-net`, at most 20)."""
    if not (turn_dir / "sandbox-held").exists():
        return []
    try:
        text = (turn_dir / "denied-net").read_text(errors="replace")
    except OSError:
        text = ""
    hosts = dict.fromkeys(line.strip() for line in text.splitlines() if line.strip())
    return [Flag.SANDBOXED, *(f"denied-net:{h}" for h in list(hosts)[:20])]


def shown(doc: dict[str, Any] | None) -> list[tuple[str, str]]:
    """`spex show`'s sandbox lines: the mode and where it comes from, then
    (sandboxed) the network, what its turns may write, what they cannot
    read, and the hosts they reach."""
    if not doc:
        return []
    source = {"session": "", "harness": " (the harness's default)", "config": " (config.toml)"}
    if doc["mode"] == "off":
        return [("sandbox", "no" + source.get(doc.get("source", ""), ""))]
    mode = "yes" if doc["mode"] == "on" else "optional (wake --no-sandbox allowed)"
    cells = [("sandbox", mode + source.get(doc.get("source", ""), ""))]
    if "writable" not in doc:
        return cells
    home = str(Path.home())

    def tilde(paths: list[str]) -> str:
        return ", ".join("~" + p[len(home) :] if p.startswith(home + "/") else p for p in paths)

    network = doc["network"]
    if network == "allow":
        network = "allow: " + (", ".join(doc["hosts"]) or "nothing")
    engine = doc.get("engine")
    cells += [
        ("  network", network),
        ("  writes", tilde(doc["writable"]) + ", a private /tmp"),
        ("  hidden", tilde(doc["hidden"]) or "-"),
        ("  engine", engine or f"bwrap NOT installed ({INSTALL})"),
    ]
    return cells


HOST_RE = lazyre.compile(
    r"(?:\*\.)?[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})(?::[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?"
)


def _path_entry(text: str, option: str) -> str:
    """A path as a policy keeps it: `~/…` and `$VAR/…` as given (expanded
    per turn), anything else absolute."""
    if not text or "\0" in text or "\n" in text:
        raise Invalid(f"{option}: not a path: {text!r}", hint=f"{option} ~/data or {option} /srv/x")
    if text == "~" or text.startswith(("~/", "$")):
        return text
    return os.path.normpath(Path(text).absolute())


def _host_entry(text: str) -> str:
    if not HOST_RE.fullmatch(text):
        raise Invalid(
            f"--allow-host: not a host: {text!r}",
            hint="a name, name:port, *.domain, or [v6]:port (api.example.com, 127.0.0.1:8080)",
        )
    return text.lower()


def mode_of(sandbox: bool, optional: bool, no_sandbox: bool) -> Mode | None:
    """The mode `--sandbox`, `--sandbox=optional` and `--no-sandbox` say;
    None when none was given."""
    if (sandbox or optional) and no_sandbox:
        raise Invalid("--sandbox and --no-sandbox: choose one")
    if optional:
        return Mode.OPTIONAL
    if sandbox:
        return Mode.ON
    return Mode.OFF if no_sandbox else None


def build(
    base: Policy | None,
    *,
    mode: Mode | None = None,
    network: str | None = None,
    allow_write: Sequence[str] = (),
    deny_read: Sequence[str] = (),
    allow_hosts: Sequence[str] = (),
) -> Policy | None:
    """`base` (a session's policy, None for a new one) changed by a command's
    sandbox options; None when nothing was said of a sandbox at all. The
    lists add to the base's. Raises Invalid for a bad value, or for
    paths and hosts given to a session that is not sandboxed."""
    if network is not None and network not in {n.value for n in Network}:
        raise Invalid(f"--network: {network!r} is none of allow, none, open", hint="--network none")
    details = bool(allow_write or deny_read or allow_hosts or network)
    if mode is None and not details:
        return base
    policy = base or Policy()
    if mode is not None:
        policy = policy._replace(mode=mode)
    if details and policy.mode is Mode.OFF:
        raise Invalid(
            "--allow-write, --deny-read, --network and --allow-host shape a sandbox:"
            " the session has none",
            hint="add --sandbox",
        )
    return policy._replace(
        network=Network(network) if network is not None else policy.network,
        allow_write=tuple(
            dict.fromkeys(
                [*policy.allow_write, *(_path_entry(p, "--allow-write") for p in allow_write)]
            )
        ),
        deny_read=tuple(
            dict.fromkeys([*policy.deny_read, *(_path_entry(p, "--deny-read") for p in deny_read)])
        ),
        allow_hosts=tuple(dict.fromkeys([*policy.allow_hosts, *map(_host_entry, allow_hosts)])),
    )


def require_engine() -> None:
    """Refused (exit 3) with the line that installs it when bwrap is missing."""
    if engine() is None:
        raise Refused(
            "sandboxed sessions need bubblewrap (bwrap), which is not installed here",
            hint=f"{INSTALL} (as root)",
        )
