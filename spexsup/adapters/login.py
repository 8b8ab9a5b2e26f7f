"""The user's interactive login environment, the one every turn runs in.

The turn wrapper is its one implementation (`shell/turn.sh`, `login_env`):
`"$SHELL" -ilc 'env -0'` detached from any terminal, bounded by
`login_timeout`, cached in the state home until an rc file changes. `spex
new` and `spex doctor` ask the wrapper (`turn.sh --login`), so they see what
a turn will see and share its cache.
"""

from __future__ import annotations

import os
from pathlib import Path

from spexsup.errors import Refused
from spexsup.paths import wrapper_path
from spexsup.record import Record

NO_SHELL = "no login shell could be resolved (check $SHELL and its rc files)"
NO_SHELL_HINT = "login_shell = false in config.toml, or --no-check"


# What a session's environment starts from, of whatever environment the spex
# command that starts tmux or the login shell runs in: what a login gives a
# user (login(1), sshd, pam_env), the desktop session's plumbing a terminal of
# that session has, and spex's own settings. The rest of it (a `make`'s
# MAKELEVEL, a secret exported in the shell that ran `spex new`) would
# otherwise reach every pane, and so every turn, for the server's life, and
# every login shell spex runs (DESIGN §20).
BASE_ENV = frozenset(
    {
        "HOME", "USER", "LOGNAME", "SHELL", "PATH", "MAIL", "LANG", "LANGUAGE", "TZ",
        "TMPDIR", "TMUX_TMPDIR", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY",
        "DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK",
    }
)  # fmt: skip
BASE_ENV_PREFIXES = ("LC_", "XDG_", "SPEXSUP_")


def base_env() -> dict[str, str]:
    """This process's environment cut to BASE_ENV: what every tmux client of
    ours runs with (the first one starts the server with it) and the login
    shell starts from. A command's own SPEXSUP_NO_HOOKS stays its own."""
    return {
        k: v
        for k, v in os.environ.items()
        if (k in BASE_ENV or k.startswith(BASE_ENV_PREFIXES)) and k != "SPEXSUP_NO_HOOKS"
    }


# The rc files whose change makes the cached login environment stale, as
# the wrapper's `login_env` lists them (its cache key: each one's
# `path:mtime:size`); `~/` is the pane's HOME. tests/test_login.py holds the
# two lists to each other.
RC_FILES = (
    "/etc/profile", "/etc/profile.d", "/etc/bash.bashrc", "/etc/zsh/zshenv",
    "/etc/zsh/zprofile", "/etc/zsh/zshrc", "/etc/zsh/zlogin",
    "~/.profile", "~/.bash_profile", "~/.bash_login", "~/.bashrc", "~/.bash_aliases",
    "~/.zprofile", "~/.zshenv", "~/.zshrc", "~/.zlogin", "~/.config/fish/config.fish",
)  # fmt: skip


def rc_stats(home: str) -> str:
    """What `stat -L --printf '%n:%.9Y:%s '` prints for RC_FILES under
    `home` (a missing one: nothing; a symlink: the file it names), the key the
    wrapper's login cache is written under. A launch takes it for the
    wrapper (`turndir.LOGIN_STATS`), which otherwise runs `stat` in a
    subshell: two forks and a process on every turn's start."""
    out = []
    for name in RC_FILES:
        path = home + name[1:] if name.startswith("~/") else name
        try:
            st = Path(path).stat()
        except (OSError, ValueError):
            continue
        seconds, ns = divmod(st.st_mtime_ns, 10**9)
        out.append(f"{path}:{seconds}.{ns:09d}:{st.st_size} ")
    return "".join(out)


class Login(Record):
    path: str
    # The shell and its flags, as run: "/bin/bash -il".
    shell: str
    # How long the shell took when it last ran (a cached answer keeps it).
    seconds: float
    cached: bool


def resolve(home: Path, limit: float) -> Login:
    """The login environment's PATH and where it came from.

    Runs the login shell (at most `limit` seconds, plus the wrapper's own
    start) unless the state home's cache answers. Refused, naming the
    shell, when it fails or runs past `limit`.
    """
    import subprocess

    wrapper = os.environ.get("SPEXSUP_WRAPPER") or str(wrapper_path())
    try:
        r = subprocess.run(
            ["bash", wrapper, "--login", f"{limit:g}"],
            capture_output=True,
            text=True,
            env={**base_env(), "SPEXSUP_HOME": str(home)},
            timeout=limit + 5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Refused(f"cannot resolve the login environment: {e}") from None
    lines = r.stdout.splitlines()
    fields = {k: v for k, _, v in (line.partition(" ") for line in lines) if k.isalpha()}
    shell = fields.get("shell") or "$SHELL"
    if r.returncode == 124:
        raise Refused(
            f"no login shell could be resolved ({shell} ran past login_timeout = {limit:g} s;"
            " check its rc files)",
            hint=NO_SHELL_HINT,
        )
    path = next((line[5:] for line in lines if line.startswith("PATH=")), None)
    if r.returncode != 0 or path is None:
        raise Refused(NO_SHELL, hint=NO_SHELL_HINT)
    try:
        seconds = int(fields.get("ms", "")) / 1000
    except ValueError:
        seconds = 0.0
    return Login(path, shell, seconds, fields.get("source") == "cache")


def rc_file(shell: str | None = None) -> str:
    """The file where a PATH line reaches the login shell `shell` (default
    $SHELL): what a message tells the user to edit."""
    name = Path((shell or os.environ.get("SHELL") or "sh").split()[0]).name
    return {"zsh": "~/.zshrc", "fish": "~/.config/fish/config.fish"}.get(name, "~/.profile")
