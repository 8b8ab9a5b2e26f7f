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
from typing import NamedTuple

from spexsup.errors import Refused
from spexsup.paths import wrapper_path

NO_SHELL = "no login shell could be resolved (check $SHELL and its rc files)"
NO_SHELL_HINT = "login_shell = false in config.toml, or --no-check"


class Login(NamedTuple):
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
            env={**os.environ, "SPEXSUP_HOME": str(home)},
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
