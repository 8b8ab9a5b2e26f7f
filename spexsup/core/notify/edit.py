"""`spex notify add` and `rm` (DESIGN §26): a `[[notify]]` table appended to or
cut from `$SPEXSUP_HOME/config.toml`, its secret to or from the 0600 file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from spexsup.core.notify import SECRET_OF, Target, load, parse_one
from spexsup.core.notify.credentials import save_secret, secrets_path
from spexsup.errors import Failed, Invalid


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)  # a TOML basic string


def _blocks(text: str) -> list[tuple[int, int, str | None]]:
    """The `[[notify]]` tables of a config text: (first line, end line, name)."""
    import tomllib

    lines = text.splitlines(keepends=True)
    out: list[tuple[int, int, str | None]] = []
    for i, line in enumerate(lines):
        if not re.match(r"\s*\[\[\s*notify\s*\]\]", line):
            continue
        end = i + 1
        while end < len(lines) and not re.match(r"\s*\[", lines[end]):
            end += 1
        try:
            name = tomllib.loads("".join(lines[i + 1 : end])).get("name")
        except tomllib.TOMLDecodeError:
            name = None
        out.append((i, end, name if isinstance(name, str) else None))
    return out


def add(home: Path, table: dict[str, Any], secret_value: str | None) -> Target:
    """Append one `[[notify]]` table to `$SPEXSUP_HOME/config.toml` (and its
    secret to the 0600 file). Checked first against the files as they are:
    Invalid (exit 2) for a bad table or a name in use, Failed for a broken
    config file; either way nothing is written."""
    from spexsup.errors import Refused
    from spexsup.paths import write_atomic

    try:
        target = parse_one("spex notify add", 1, table)
    except Failed as e:
        raise Invalid(e.message.replace("spex notify add: [[notify]] ", ""), hint=e.hint) from None
    if any(t.name == target.name for t in load(home)):
        raise Refused(f"a notify target {target.name!r} exists", hint="spex notify rm it first")
    kind = SECRET_OF.get(target.service)
    if secret_value is not None and kind is None:
        raise Invalid(f"a {target.service} target has no secret")
    needs = target.service in ("slack", "discord", "telegram") or (
        target.service == "email" and target.options.get("user")
    )
    if needs and kind is not None and secret_value is None and not table.get(kind[1]):
        raise Invalid(
            f"a {target.service} target needs its {kind[0]}",
            hint="pipe it to --secret-stdin, or name a variable with --env",
        )
    path = home / "config.toml"
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = ""
    block = "\n[[notify]]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in table.items())
    if secret_value is not None and kind is not None:
        save_secret(home, target.name, kind[0], secret_value)
    write_atomic(path, (text.rstrip("\n") + "\n" + block).lstrip("\n").encode())
    return target


def remove(home: Path, name: str) -> None:
    """Remove target `name`'s table from `$SPEXSUP_HOME/config.toml` and its secret."""
    from spexsup import config
    from spexsup.errors import Refused
    from spexsup.paths import write_atomic

    path = home / "config.toml"
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = ""
    found = [b for b in _blocks(text) if b[2] == name]
    if not found:
        elsewhere = [
            p for p in config.config_files(home)[:1] if p.exists() and name in p.read_text()
        ]
        hint = f"it is in {elsewhere[0]}: edit that file" if elsewhere else "see spex notify ls"
        raise Refused(f"no notify target {name!r} in {path}", hint=hint)
    lines = text.splitlines(keepends=True)
    first, end, _ = found[0]
    kept = "".join(lines[:first] + lines[end:])
    write_atomic(path, (kept.rstrip("\n") + "\n" if kept.strip() else "").encode())
    if secrets_path(home).exists():
        for key in ("url", "token", "password"):
            save_secret(home, name, key, None)
