"""A session's pane (one tmux session, one window, one pane) and the server.

All of it lives on spexsup's private server (`-L spexsup`, or `SPEXSUP_TMUX`,
or `SPEXSUP_TMUX_SOCKET` for a `-S` path) started with our own config; the
user's default server is never touched. (The module's name is from when the
pane was the session's "home": now only the state directory, DESIGN §24.)
libtmux is imported lazily: commands that never touch tmux stay fast.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from spexsup.adapters.launchbatch import Ran, launches
from spexsup.adapters.login import base_env
from spexsup.adapters.procs import Liveness
from spexsup.errors import Failed, Refused
from spexsup.paths import PACKAGE_DIR, wrapper_path, write_atomic
from spexsup.record import Record

if TYPE_CHECKING:
    import subprocess

    import libtmux

CONFIG = PACKAGE_DIR / "tmux.conf"


# How long a tmux command may take before the server counts as not
# answering (SPEXSUP_TMUX_TIMEOUT overrides it, in seconds).
TMUX_TIMEOUT = 5.0
# The clean-up after a signal gets this short bound: it ends spex in a second or two.
HURRIED = 1.0
_hurry = False


def hurry() -> None:
    """A signal is ending spex: every tmux call from now on gets HURRIED."""
    global _hurry
    _hurry = True


def tmux_timeout() -> float:
    try:
        value = float(os.environ.get("SPEXSUP_TMUX_TIMEOUT", "") or TMUX_TIMEOUT)
    except ValueError:
        value = TMUX_TIMEOUT
    value = value if 0 < value <= 600 else TMUX_TIMEOUT
    return min(value, HURRIED) if _hurry else value


class TmuxTimeout(Failed):
    """The tmux server did not answer one command in time (frozen, wedged)."""

    def __init__(self, where: str, limit: float) -> None:
        super().__init__(
            f"tmux server {where} did not answer in {limit:g} s",
            hint="is it stopped (kill -CONT) or overloaded? nothing was changed in tmux",
        )


class PaneInfo(Record):
    session_name: str
    pane_id: str
    pane_pid: int
    pane_dead: bool
    # Our tags (empty when unset): the session's owner (state home +
    # incarnation), the turn that last claimed the pane. When a client last
    # attached, when spex last put a shell or a turn in it (epoch s; 0: never).
    owner: str = ""
    turn: str = ""
    last_attached: int = 0
    shell_at: int = 0


class Census(Record):
    """One `list-panes -a` reading: every session's pane on the server, or why we can't tell.

    `liveness` is DEAD when the server is provably not running (no socket, or
    it refused the connection), UNPROVEN when the query failed some other way.
    """

    liveness: Liveness
    panes: Mapping[str, PaneInfo]
    error: str | None = None


_NO_SERVER = ("no server running", "error connecting", "No such file or directory")


class TmuxHome:
    """The private tmux server and the sessions' panes on it."""

    def __init__(
        self,
        socket_name: str | None = None,
        socket_path: str | None = None,
        *,
        home: Path | None = None,
        fallback: str | None = None,
    ) -> None:
        """The server named by the arguments, else by `SPEXSUP_TMUX_SOCKET` (a
        path) or `SPEXSUP_TMUX` (a name), else `fallback` (the shared socket
        of a state home made by an older spex), else the state home's own server
        `spexsup-<digest of its real path>`, so two state homes never share one."""
        if socket_path is None and socket_name is None:
            socket_path = os.environ.get("SPEXSUP_TMUX_SOCKET") or None
            socket_name = None if socket_path else os.environ.get("SPEXSUP_TMUX") or fallback
            if socket_path is None and socket_name is None:
                socket_name = default_socket(home) if home is not None else "spexsup"
        self.socket_name = socket_name
        self.socket_path = socket_path
        self.home = home
        self._server: libtmux.Server | None = None
        # The tmux clients this process started (see prefetch.EarlyCensus).
        self.clients = 0
        self._counting = threading.Lock()

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

    def where(self) -> str:
        """The server as tmux's own flags spell it (`-L NAME` or `-S PATH`)."""
        return f"-S {self.socket_path}" if self.socket_path else f"-L {self.socket_name}"

    def tmux_argv(self) -> list[str]:
        """argv prefix that reaches our server (for exec'ing `tmux attach`)."""
        import shutil

        return [shutil.which("tmux") or "tmux", *self._flags()]

    def _flags(self) -> list[str]:
        where = ["-S", self.socket_path] if self.socket_path else ["-L", str(self.socket_name)]
        return [*where, "-f", str(CONFIG)]

    def _run(self, *args: str) -> Ran:
        """One tmux command on our server: (rc, stdout lines, stderr).

        A plain subprocess, as libtmux's `Server.cmd` runs it, without
        importing libtmux (~40 ms) into every command that reads the census.
        Bounded: a server that does not answer within `tmux_timeout()` (a
        frozen or wedged server) is TmuxTimeout, never a hang. The bound is
        on the client process, not its pipes: a client of a frozen server
        can leave them open after it is killed, so they are never waited on.
        """
        return self._end(self._begin(*args))

    def _begin(self, *args: str) -> subprocess.Popen[str]:
        """A tmux client running `args` from now (`_end` waits for it)."""
        import subprocess

        with self._counting:
            self.clients += 1
        try:
            return subprocess.Popen(
                # Found on the PATH by Popen (base_env keeps it): shutil.which
                # would cost every command that reads the census its import.
                ["tmux", *self._flags(), *args],
                # The client that starts the server gives it its environment.
                env=base_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except FileNotFoundError:
            raise Failed("tmux is not installed", hint="install tmux >= 3.2") from None

    def _end(self, proc: subprocess.Popen[str]) -> Ran:
        import subprocess

        limit = tmux_timeout()
        try:
            stdout, stderr = proc.communicate(timeout=limit)
        except BaseException as e:  # the time limit, or a signal ending spex
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(1)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            if isinstance(e, subprocess.TimeoutExpired):
                raise TmuxTimeout(self.where(), limit) from None
            hurry()
            raise
        out = stdout.split("\n")
        while out and not out[-1]:
            out.pop()
        return proc.returncode, out, stderr.strip()

    def census(self, only: str | None = None) -> Census:
        """Every pane; `only` (a session name): that session's panes alone."""
        return self.census_of(self.census_begin(only))

    def census_begin(self, only: str | None = None) -> subprocess.Popen[str]:
        """The census's tmux client, running from now (`census_of` reads it)."""
        return self._begin(
            "list-panes",
            "-a",
            *(("-f", f"#{{==:#{{session_name}},{only}}}") if only else ()),
            "-F",
            "#{session_name}\t#{pane_id}\t#{pane_pid}\t#{pane_dead}"
            "\t#{window_index}.#{pane_index}\t#{@spex_owner}\t#{@spex_turn}",
        )

    def census_of(self, client: subprocess.Popen[str]) -> Census:
        try:
            rc, out, err = self._end(client)
        except TmuxTimeout as e:
            # A reader still answers from the store: liveness is unproven.
            return Census(Liveness.UNPROVEN, {}, e.message)
        if rc != 0:
            if any(s in err for s in _NO_SERVER):
                return Census(Liveness.DEAD, {}, err)
            return Census(Liveness.UNPROVEN, {}, err or f"tmux exited {rc}")
        panes: dict[str, PaneInfo] = {}
        for line in out:
            parts = line.split("\t")
            if len(parts) != 7:
                continue
            name, pane_id, pid, dead, where, owner, turn = parts
            # The session's pane is the first pane of the first window.
            if name not in panes or where == "0.0":
                panes[name] = PaneInfo(name, pane_id, int(pid or 0), dead == "1", owner, turn)
        return Census(Liveness.ALIVE, panes)

    def pane(self, name: str) -> PaneInfo | None:
        """The session's pane now, or None when it is missing.

        tmux 3.3 answers `display-message -t =MISSING:0.0` with exit 0 and
        empty fields, so the session's own name is read back as the proof.
        """
        fields = (
            "#{session_name}\t#{pane_id}\t#{pane_pid}\t#{pane_dead}\t#{@spex_owner}\t#{@spex_turn}"
            "\t#{session_last_attached}\t#{@spex_shell_at}"
        )
        rc, out, _ = self._run("display-message", "-p", "-t", f"={name}:0.0", fields)
        if rc != 0 or not out:
            return None
        parts = out[0].split("\t")
        if len(parts) != 8 or parts[0] != name:
            return None
        _, pane_id, pid, dead, owner, turn, attached, shell_at = parts
        numbers = [int(v) if v.isdigit() else 0 for v in (pid, attached, shell_at)]
        return PaneInfo(name, pane_id, numbers[0], dead == "1", owner, turn, *numbers[1:])

    def kept_outcome(self, name: str) -> str:
        """The outcome marker a turn's wrapper kept in the pane (`TURN MARKER`)
        when the disk had no room for it (shell/turn.sh), or ''."""
        rc, out, _ = self._run("display-message", "-p", "-t", f"={name}:0.0", "#{@spex_outcome}")
        return out[0] if rc == 0 and out else ""

    def create(self, name: str, cwd: str, owner: str, shell_env: Path | None = None) -> bool:
        """Create the pane, a detached tmux session with a shell in `cwd`, tagged `owner`.

        The shell exports the session's env from the file `shell_env` (see
        `shell_argv`): a value on tmux's command line would stay readable by
        every local user in the argv of the server that client became. The
        tag is set in the same tmux call, so no reader ever sees the pane
        untagged. True if this call created it, False if it was already ours
        (another process made it first); a session of that name that is not
        ours is refused.
        """
        args = ["new-session", "-d", "-s", name, "-c", cwd, "-x", "200", "-y", "50"]
        if shell_env is not None:
            args += ["--", *shell_argv(shell_env)]
        args += [";", "set-option", "-t", f"={name}:", "@spex_owner", owner]
        args += [";", "set-option", "-p", "-t", f"={name}:0.0", "@spex_shell_at", _now()]
        for conf in self.user_configs():
            args += [";", "source-file", "-q", str(conf)]
        rc, _, err = self._run(*args)
        if rc == 0:
            return True
        if "duplicate session" in err:
            pane = self.pane(name)
            if pane is not None and pane.owner == owner:
                return False
            if pane is not None and not pane.owner and self._proves_ours(pane):
                self._run("set-option", "-t", f"={name}:", "@spex_owner", owner)
                return False
            raise Refused(
                f"tmux session {name!r} on this server belongs to "
                + (
                    f"another spex home or incarnation ({pane.owner})"
                    if pane and pane.owner
                    else "someone else (it is not tagged by spex)"
                ),
                hint=f"rename or kill it: tmux {self.where()} kill-session -t ={name}",
            )
        raise Failed(f"cannot create the tmux pane of {name!r}: {err or rc}")

    def user_configs(self) -> list[Path]:
        """The user's tmux.conf files for our server, read after our own:
        `~/.config/spexsup/tmux.conf`, then `$SPEXSUP_HOME/tmux.conf`."""
        config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        candidates = [config_home / "spexsup" / "tmux.conf"]
        if self.home is not None:
            candidates.append(self.home / "tmux.conf")
        return [c for c in candidates if c.is_file()]

    def _proves_ours(self, pane: PaneInfo) -> bool:
        """An untagged pane made by an older spex on the shared socket is
        adopted only when its pane's process names this state home (every
        turn's wrapper, and the shell it leaves, carry SPEXSUP_HOME)."""
        if self.home is None:
            return False
        try:
            environ = Path(f"/proc/{pane.pane_pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return False
        return os.fsencode(f"SPEXSUP_HOME={self.home}") in environ

    def launch(
        self,
        name: str,
        owner: str,
        fence: int,
        turn: str,
        cwd: str,
        env: Mapping[str, str],
        argv: Sequence[str],
        *,
        force: bool = False,
    ) -> Launch:
        """Respawn the session's pane with `argv`, only if it is `owner`'s, no
        launch or stop with a fence >= `fence` has claimed the pane, and
        (unless `force`) the pane is idle: dead, or its foreground process a
        shell (turn.launch waits out a shell still running its rc files).

        The test and the respawn run as one `if-shell -F` inside the tmux
        server, which executes a client's command list without interleaving
        another client's, so a stop that fenced the pane first always wins.
        The pane is tagged with its turn, its screen scrolled into its
        history by a terminal reset (`respawn-pane` clears the screen, not
        the history), its status line says the turn runs, and the new
        pane_pid is read back, all in one call: the wrapper needs no tmux
        client of its own.
        """
        call = launch_call(name, owner, fence, turn, cwd, env, argv, force=force)
        return launch_result(
            name, owner, launches((self.socket_name, self.socket_path), self._run).run(call)
        )

    def fence(self, name: str, owner: str, fence: int) -> None:
        """Bar every launch with a fence <= `fence` from the session's pane (idempotent)."""
        target = f"={name}:0.0"
        mark = _quote_cmd(["set-option", "-p", "-t", target, "@spex_fence", _fence(fence)])
        self._run("if-shell", "-F", "-t", target, _owned_and_below(owner, fence), mark)

    def respawn_shell(
        self, name: str, owner: str, turn: str, cwd: str, shell_env: Path | None = None
    ) -> bool:
        """Hand the pane back to a fresh shell, killing whatever runs in it, but
        only while the pane still belongs to `turn` (never to a newer turn).
        The shell exports the session's env from `shell_env`, as `create`'s.

        `respawn-pane` with no command would rerun the pane's last command
        (the wrapper), so the shell is named explicitly. True if respawned.
        """
        rc, out, _ = self._run("show-options", "-gv", "default-shell")
        shell = out[0] if rc == 0 and out else os.environ.get("SHELL", "/bin/sh")
        command = [shell] if shell_env is None else shell_argv(shell_env, shell)
        target = f"={name}:0.0"
        cond = f"#{{&&:#{{==:#{{@spex_owner}},{owner}}},#{{==:#{{@spex_turn}},{turn}}}}}"
        taken = " ; ".join(
            [
                _quote_cmd(["respawn-pane", "-k", "-t", target, "-c", cwd, "--", *command]),
                _quote_cmd(["set-option", "-p", "-t", target, "@spex_shell_at", _now()]),
                _quote_cmd(["display-message", "-p", "-t", target, "respawned"]),
            ]
        )
        rc, out, _ = self._run("if-shell", "-F", "-t", target, cond, taken)
        return rc == 0 and bool(out) and out[-1] == "respawned"

    def kill(self, name: str, owner: str) -> None:
        """Kill the pane's tmux session, only if it is `owner`'s (never a newer incarnation's)."""
        kill = _quote_cmd(["kill-session", "-t", f"={name}:"])
        self._run("if-shell", "-F", "-t", f"={name}:", f"#{{==:#{{@spex_owner}},{owner}}}", kill)


def outer_argv(argv: Sequence[str], window: str | None = None) -> list[str]:
    """What runs `argv` in the user's own tmux (the server $TMUX names, not
    ours), for a command run inside it: in a popup of 90% of the screen that
    closes when `argv` ends, or with `window`, in a new window of that name."""
    import shlex
    import shutil

    outer = shutil.which("tmux") or "tmux"
    if window is not None:
        return [outer, "new-window", "-n", window, shlex.join(argv)]
    return [outer, "display-popup", "-E", "-w", "90%", "-h", "90%", shlex.join(argv)]


def shell_argv(shell_env: Path, shell: str | None = None) -> list[str]:
    """The pane's shell with the env in the file `shell_env` (NUL-separated
    KEY=VALUE, see `write_shell_env`): the wrapper's `--shell` exports it and
    execs `shell` (default: the pane's $SHELL) as a login shell. Always the
    packaged wrapper, never a test's SPEXSUP_WRAPPER."""
    return ["bash", str(wrapper_path()), "--shell", str(shell_env), *([shell] if shell else [])]


def write_shell_env(path: Path, env: Mapping[str, str]) -> Path:
    """Write `env` for `shell_argv` to `path`, 0600 and atomically (a shell
    starting meanwhile reads the old file or the new one, never half)."""
    write_atomic(path, b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    return path


SHELLS = frozenset(
    {"bash", "sh", "dash", "zsh", "fish", "ksh", "mksh", "tcsh", "csh", "ash", "busybox", "nu"}
)


def _now() -> str:
    return str(int(time.time()))


def _stat(pid: int) -> list[bytes]:
    """/proc/<pid>/stat's fields after the command name (state is [0], pgrp [2], tpgid [5])."""
    return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def foreground(pane_pid: int) -> int | None:
    """The pane's foreground process group when it is not the shell's own
    (a job: a person's command, or one zsh's rc files run), else None."""
    try:
        fields = _stat(pane_pid)
        pgrp, tpgid = int(fields[2]), int(fields[5])
    except (OSError, IndexError, ValueError):
        return None
    return tpgid if tpgid > 0 and tpgid != pgrp else None


# How long after spex put a shell in the pane a foreground job may still be
# its rc files (zsh runs them as jobs; pyenv or nvm init can take seconds).
STARTUP_GRACE = 15.0


def after_startup(busy: Launch, attempt: Callable[[], Launch]) -> Launch:
    """A shell spex started moments ago whose foreground is a job may still be
    running its rc files: wait for each such job to end (bounded by
    STARTUP_GRACE from the shell's start) and try again. A person's command
    does not end, so past the grace the pane is busy. Every launch into a
    pane goes through it: a turn's, and a new worktree's post_create."""
    import psutil

    result = busy
    deadline = busy.shell_at + STARTUP_GRACE
    while result.outcome == "busy" and result.pane_pid and time.time() < deadline:
        job = foreground(result.pane_pid)
        if job is not None:
            try:
                psutil.Process(job).wait(timeout=max(0.0, deadline - time.time()))
            except psutil.TimeoutExpired:
                break
            except psutil.Error:
                if foreground(result.pane_pid) == job:
                    break  # a group whose leader is gone: nothing to wait on
        result = attempt()
    return result


def pane_activity(pane: PaneInfo, turns_dir: Path) -> str | None:
    """What a person is running in the pane, or None when it is idle: dead, a
    turn's wrapper (under `turns_dir`) finishing up, or a shell whose
    terminal's foreground process group is its own and that has no job of
    its own (a process in another group, in the foreground or not). A
    command bash's rc files run is in the shell's group, so a shell starting
    up is idle; one sent with `tmux send-keys` while nobody is attached is a
    job like any other.

    Read from /proc, not psutil: it runs on every wake that finds the pane busy.
    """
    if pane.pane_dead or not pane.pane_pid:
        return None
    pid = pane.pane_pid
    try:
        if os.fsencode(str(turns_dir)) in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
        own = _stat(pid)[2]
    except (OSError, IndexError):
        return None
    if _comm(pid) not in SHELLS:
        return f"{_comm(pid) or 'something'} (pid {pid})"
    job = foreground(pid)
    if job is not None:
        return f"{_comm(job) or 'something'} (pid {job})"
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    for child in map(int, children):
        try:
            fields = _stat(child)
        except (OSError, IndexError):
            continue
        if fields[0] not in (b"Z", b"X") and fields[2] != own:
            return f"{_comm(child) or 'something'} (pid {child})"
    return None


class Launch(Record):
    """What a fenced launch did: `launched` (with the wrapper's pane_pid),
    `fenced` (a stop or a newer launch claimed the pane; `holder` is the
    turn tagged on it), `foreign` (the tmux session of that name is not
    this session's pane; `holder` is its tag), `busy` (a person runs
    something in the pane; `holder` is its command, `pane_pid` the shell's,
    `shell_at` when spex put that shell there), or `missing` (no such pane,
    or no server)."""

    outcome: str
    pane_pid: int | None = None
    holder: str = ""
    shell_at: int = 0


FENCE_DIGITS = 15


def _fence(value: int) -> str:
    # Zero-padded, so tmux's string comparison orders fences numerically.
    return f"{value:0{FENCE_DIGITS}d}"


# A pane a launch may replace without --force (see TmuxHome.launch): dead, or
# its terminal's foreground process is a shell.
_IDLE = "#{||:#{pane_dead},#{m/r:^(" + "|".join(sorted(SHELLS)) + ")$,#{pane_current_command}}}"


def _owned_and_below(owner: str, fence: int) -> str:
    return f"#{{&&:#{{==:#{{@spex_owner}},{owner}}},#{{<:#{{@spex_fence}},{_fence(fence)}}}}}"


def _scroll_into_history(target: str) -> str:
    """The screen into the history (see launch): a terminal reset with
    scroll-on-clear on, set for that moment only when tmux.conf has it off
    (each set-option costs tmux a pass over every session)."""
    reset = _quote_cmd(["send-keys", "-R", "-t", target])
    on = _quote_cmd(["set-option", "-p", "-t", target, "scroll-on-clear", "on"])
    off = _quote_cmd(["set-option", "-p", "-u", "-t", target, "scroll-on-clear"])
    # A flag option is 1 or 0 in a format.
    return _quote_cmd(
        ["if-shell", "-F", "-t", target, "#{scroll-on-clear}", reset, f"{on} ; {reset} ; {off}"]
    )


def launch_call(
    name: str,
    owner: str,
    fence: int,
    turn: str,
    cwd: str,
    env: Mapping[str, str],
    argv: Sequence[str],
    *,
    force: bool = False,
) -> tuple[str, ...]:
    """The tmux command of `TmuxHome.launch` (one `if-shell`, see there)."""
    target = f"={name}:0.0"
    respawn = ["respawn-pane", "-k", "-t", target, "-c", cwd]
    for key, value in env.items():
        respawn += ["-e", f"{key}={value}"]
    respawn += ["--", *argv]
    taken = " ; ".join(
        [
            _quote_cmd(["set-option", "-p", "-t", target, "@spex_fence", _fence(fence)]),
            _quote_cmd(["set-option", "-p", "-t", target, "@spex_turn", turn]),
            # (No @spex_shell_at: the shell comes at the turn's end, and the
            # wrapper says when; each set-option is a pass over every session.)
            _scroll_into_history(target),
            _quote_cmd(respawn),
            _quote_cmd(["set-option", "-p", "-t", target, "@spex_state", f"turn {turn} running"]),
            _quote_cmd(["display-message", "-p", "-t", target, "launched #{pane_pid}"]),
        ]
    )
    state = (
        "refused #{session_name}\t#{@spex_turn}\t#{@spex_owner}"
        f"\t#{{<:#{{@spex_fence}},{_fence(fence)}}}\t#{{pane_current_command}}"
        "\t#{@spex_shell_at}\t#{pane_pid}"
    )
    refused = _quote_cmd(["display-message", "-p", "-t", target, state])
    cond = _owned_and_below(owner, fence)
    if not force:
        cond = f"#{{&&:{cond},{_IDLE}}}"
    return ("if-shell", "-F", "-t", target, cond, taken, refused)


def launch_result(name: str, owner: str, ran: Ran) -> Launch:
    """What the tmux call of `launch_call` said: launched (its pane_pid), or why not."""
    rc, out, err = ran
    last = out[-1] if out else ""
    if rc == 0 and last.startswith("launched ") and last[9:].isdigit():
        return Launch("launched", int(last[9:]))
    if rc == 0 and last.startswith("refused "):
        fields = [*last[8:].split("\t"), "", "", "", "", "", ""][:7]
        session_name, holder, tag, below, command, shell_at, pane_pid = fields
        if session_name != name:
            return Launch("missing")
        if tag != owner:
            return Launch("foreign", holder=tag)
        if below != "1":
            return Launch("fenced", holder=holder)
        return Launch(
            "busy",
            int(pane_pid) if pane_pid.isdigit() else None,
            holder=command,
            shell_at=int(shell_at) if shell_at.isdigit() else 0,
        )
    if any(s in err for s in _NO_SERVER) or "can't find" in err:
        return Launch("missing")
    raise Failed(f"tmux could not start the turn in {name!r}: {err or out}")


def _quote_cmd(argv: Sequence[str]) -> str:
    """One tmux command as a string tmux parses back into exactly `argv`.

    Single quotes take everything literally (no `$`, `~` or `#{}` expansion);
    a single quote itself is closed, escaped and reopened.
    """
    return " ".join("'" + a.replace("'", "'\\''") + "'" for a in argv)


@functools.lru_cache(maxsize=16)
def home_digest(home: Path) -> str:
    """12 hex digits naming a state home by its real path (once per process:
    `ls` tags every session with it)."""
    return _sha256_hex(os.fsencode(os.path.realpath(home)))[:12]


def _sha256_hex(data: bytes) -> str:
    """The interpreter's own sha256: hashlib loads OpenSSL, ~5 ms on every command."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found, unused-ignore]  # 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found, no-redef, unused-ignore]
        except ImportError:
            from hashlib import sha256  # type: ignore[assignment, unused-ignore]
    return str(sha256(data).hexdigest())


def default_socket(home: Path) -> str:
    return f"spexsup-{home_digest(home)[:8]}"


def owner_tag(home: Path, incarnation: str) -> str:
    """The tag of a session's pane: which state home and which incarnation of
    the name made it (hex only, so it is safe inside a tmux format)."""
    return f"{home_digest(home)}-{incarnation}"
