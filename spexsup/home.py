"""The tmux home of a session: one tmux session, one window, one pane.

All of it lives on spexsup's private server (`-L spexsup`, or `SPEXSUP_TMUX`,
or `SPEXSUP_TMUX_SOCKET` for a `-S` path) started with our own config; the
user's default server is never touched. libtmux is imported lazily so that
commands which never touch tmux stay fast.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spexsup.errors import Failed
from spexsup.paths import PACKAGE_DIR
from spexsup.procs import Liveness

if TYPE_CHECKING:
    import libtmux

CONFIG = PACKAGE_DIR / "tmux.conf"


@dataclass(frozen=True)
class PaneInfo:
    session_name: str
    pane_id: str
    pane_pid: int
    pane_dead: bool


@dataclass(frozen=True)
class Census:
    """One `list-panes -a` reading: every home on the server, or why we can't tell.

    `liveness` is DEAD when the server is provably not running (no socket, or
    it refused the connection), UNPROVEN when the query failed some other way.
    """

    liveness: Liveness
    panes: Mapping[str, PaneInfo]
    error: str | None = None

    def home(self, name: str) -> Liveness:
        if self.liveness is not Liveness.ALIVE:
            return self.liveness
        return Liveness.ALIVE if name in self.panes else Liveness.DEAD


_NO_SERVER = ("no server running", "error connecting", "No such file or directory")


class TmuxHome:
    """The private tmux server and the homes on it."""

    def __init__(self, socket_name: str | None = None, socket_path: str | None = None) -> None:
        if socket_path is None and socket_name is None:
            socket_path = os.environ.get("SPEXSUP_TMUX_SOCKET") or None
            socket_name = None if socket_path else os.environ.get("SPEXSUP_TMUX") or "spexsup"
        self.socket_name = socket_name
        self.socket_path = socket_path
        self._server: libtmux.Server | None = None

    @property
    def server(self) -> libtmux.Server:
        if self._server is None:
            import libtmux

            self._server = libtmux.Server(
                socket_name=self.socket_name,
                socket_path=self.socket_path,
                config_file=str(CONFIG),
            )
        return self._server

    def tmux_argv(self) -> list[str]:
        """argv prefix that reaches our server (for exec'ing `tmux attach`)."""
        tmux = shutil.which("tmux") or "tmux"
        where = ["-S", self.socket_path] if self.socket_path else ["-L", str(self.socket_name)]
        return [tmux, *where, "-f", str(CONFIG)]

    def _run(self, *args: str) -> tuple[int, list[str], str]:
        """One tmux command on our server: (rc, stdout lines, stderr).

        A plain subprocess, as libtmux's `Server.cmd` runs it, without
        importing libtmux (~40 ms) into every command that reads the census.
        """
        import subprocess

        try:
            res = subprocess.run(
                [*self.tmux_argv(), *args], capture_output=True, text=True, check=False
            )
        except FileNotFoundError:
            raise Failed("tmux is not installed", hint="install tmux >= 3.2") from None
        out = res.stdout.split("\n")
        while out and not out[-1]:
            out.pop()
        return res.returncode, out, res.stderr.strip()

    def census(self) -> Census:
        rc, out, err = self._run(
            "list-panes",
            "-a",
            "-F",
            "#{session_name}\t#{pane_id}\t#{pane_pid}\t#{pane_dead}\t#{window_index}.#{pane_index}",
        )
        if rc != 0:
            if any(s in err for s in _NO_SERVER):
                return Census(Liveness.DEAD, {}, err)
            return Census(Liveness.UNPROVEN, {}, err or f"tmux exited {rc}")
        panes: dict[str, PaneInfo] = {}
        for line in out:
            parts = line.split("\t")
            if len(parts) != 5:
                continue
            name, pane_id, pid, dead, where = parts
            # The home's pane is the first pane of the first window.
            if name not in panes or where == "0.0":
                panes[name] = PaneInfo(name, pane_id, int(pid or 0), dead == "1")
        return Census(Liveness.ALIVE, panes)

    def pane(self, name: str) -> PaneInfo | None:
        """The home's pane now, or None when the home is missing."""
        rc, out, _ = self._run(
            "display-message",
            "-p",
            "-t",
            f"={name}:0.0",
            "#{pane_id}\t#{pane_pid}\t#{pane_dead}",
        )
        if rc != 0 or not out:
            return None
        pane_id, pid, dead = out[0].split("\t")
        return PaneInfo(name, pane_id, int(pid or 0), dead == "1")

    def create(self, name: str, cwd: str, env: Mapping[str, str]) -> None:
        """Create the home: a detached tmux session with a shell in `cwd`."""
        args = ["new-session", "-d", "-s", name, "-c", cwd, "-x", "200", "-y", "50"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        rc, _, err = self._run(*args)
        if rc != 0 and "duplicate session" not in err:
            raise Failed(f"cannot create the tmux home of {name!r}: {err or rc}")

    def ensure(self, name: str, cwd: str, env: Mapping[str, str]) -> None:
        if self.pane(name) is None:
            self.create(name, cwd, env)

    def respawn(
        self, name: str, cwd: str, env: Mapping[str, str], argv: Sequence[str]
    ) -> int | None:
        """`respawn-pane -k` the home's pane with `argv`; its new pane_pid, or None
        if the home is missing.

        The pane_pid is read in the same tmux call (tmux forks the pane's
        process before it runs the next command), so confirming a turn's
        startup needs no further tmux round trip.
        """
        target = f"={name}:0.0"
        args = ["respawn-pane", "-k", "-t", target, "-c", cwd]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        args += [*argv, ";", "display-message", "-p", "-t", target, "#{pane_pid}"]
        rc, out, err = self._run(*args)
        if rc == 0 and out and out[-1].isdigit():
            return int(out[-1])
        if "can't find" in err or any(s in err for s in _NO_SERVER):
            return None
        raise Failed(f"tmux could not start the turn in {name!r}: {err or out}")

    def respawn_shell(self, name: str, cwd: str) -> int | None:
        """Hand the pane back to a fresh shell, killing whatever runs in it.

        `respawn-pane` with no command would rerun the pane's last command
        (the wrapper), so the shell is named explicitly.
        """
        rc, out, _ = self._run("show-options", "-gv", "default-shell")
        shell = out[0] if rc == 0 and out else os.environ.get("SHELL", "/bin/sh")
        return self.respawn(name, cwd, {}, [shell])

    def kill(self, name: str) -> None:
        self._run("kill-session", "-t", f"={name}")
