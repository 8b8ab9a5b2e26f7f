"""A notify target's secret (DESIGN §26): from the variable its table names
(`url_env`, `token_env`, `password_env`), else from
`$SPEXSUP_HOME/notify-secrets.toml`, refused unless only its owner can read
it. Nothing here returns a secret for display: `mask` and `destination` are
what `spex notify ls` shows."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from spexsup.core.notify import SECRET_OF, SECRETS, Target
from spexsup.errors import Failed


def secrets_path(home: Path) -> Path:
    return home / SECRETS


def _secrets_file(home: Path) -> dict[str, Any]:
    """`notify-secrets.toml`, refused unless only its owner can read it."""
    return private_toml(secrets_path(home))


def private_toml(path: Path) -> dict[str, Any]:
    """A TOML file of secrets (empty if there is none), refused unless it is
    the user's and only the user's to read (not a symlink either)."""
    import tomllib

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise Failed(f"{path}: cannot read: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or info.st_uid != os.getuid():
            raise Failed(f"{path}: others can read it", hint=f"chmod 600 {path}")
        try:
            data = tomllib.loads(f.read().decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise Failed(f"{path}: {e}") from None
    return data


def secret_source(home: Path, target: Target) -> str | None:
    """Where the target's secret comes from, as `spex notify ls` shows it (never the value)."""
    kind = SECRET_OF.get(target.service)
    if kind is None:
        return None
    variable = target.options.get(kind[1])
    if variable:
        return f"${variable}"
    try:
        if kind[0] in _secrets_file(home).get(target.name, {}):
            return SECRETS
    except Failed:
        return f"{SECRETS} (unreadable)"
    return None


def secret(home: Path, target: Target) -> str | None:
    """The target's secret, from its variable, else the 0600 file; None when it has none."""
    kind = SECRET_OF.get(target.service)
    if kind is None:
        return None
    variable = target.options.get(kind[1])
    if variable:
        value = os.environ.get(variable)
        if not value:
            raise Failed(f"${variable} is not set in the environment that delivers")
        return value
    value = _secrets_file(home).get(target.name, {}).get(kind[0])
    return value if isinstance(value, str) and value else None


def save_secret(home: Path, name: str, key: str, value: str | None) -> None:
    """Set (or, `value` None, drop) one secret of target `name` in the 0600 file."""
    from spexsup.paths import write_atomic

    data = _secrets_file(home)
    entry = dict(data.get(name, {}))
    if value is None:
        entry.pop(key, None)
    else:
        entry[key] = value
    if entry:
        data[name] = entry
    else:
        data.pop(name, None)
    lines = []
    for target, values in sorted(data.items()):
        lines.append(f"[{json.dumps(target)}]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in sorted(values.items()))
        lines.append("")
    write_atomic(secrets_path(home), "\n".join(lines).encode())


def mask(url: str) -> str:
    """A URL as `ls` shows it: scheme and host, the rest hidden but its last two characters."""
    m = re.match(r"(https?://[^/?#]+)(.*)", url)
    if m is None:
        return "…"
    rest = m.group(2)
    return m.group(1) + (f"/…{rest[-2:]}" if len(rest) > 3 else rest)


def destination(target: Target) -> str:
    """Where a target sends, secrets masked."""
    o = target.options
    if target.service == "ntfy":
        return mask(o["url"])
    if target.service == "telegram":
        return f"chat {o['chat_id']}"
    if target.service == "email":
        return f"{', '.join(o['to'])} via {o['host']}:{o.get('port', 25)}"
    if target.service == "desktop":
        return "notify-send"
    return "webhook"


def describe(home: Path, target: Target) -> dict[str, Any]:
    """`spex notify ls --json`: one target as read, secrets masked."""
    return {
        "name": target.name,
        "service": target.service,
        "to": destination(target),
        "secret": secret_source(home, target),
        "on": list(target.on),
        "sessions": list(target.sessions),
        "window": target.window,
        "timeout": target.timeout,
        "attempts": target.attempts,
    }
