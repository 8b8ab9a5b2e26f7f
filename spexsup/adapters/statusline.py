"""`spex status-line`: one line for a tmux status bar, from `events/status`.

A status bar runs this every few seconds, so it reads one small text file
(rewritten by every committed transition, see `events.write_summary`) and
imports nothing beyond `os` and `sys`: no SQLite, no `re`, no `pathlib`
(which imports `re`), no JSON. The file is `key=value` lines: `running`,
`ok`, `failed`, `stopped` (counts) and `attention` (names, space-separated),
then `sum=` (a checksum of the lines before it), then blank padding.

The writer overwrites the file in place rather than renaming a new one over
it: on ext4 a rename over an existing file forces the new file's blocks to
disk, 2-12 ms under I/O load, on the exit reporter's path. A reader that
catches a write half done sees a checksum that does not match and reads
again, so it shows the old summary or the new one, never a mix.
"""

# pathlib imports re, which this module exists to avoid:
# ruff: noqa: PTH100, PTH111, PTH118, PTH123
from __future__ import annotations

import os

FIELDS = ("running", "ok", "failed", "stopped", "attention")
FILE = "status"


class UnknownField(ValueError):
    pass


def home_dir(explicit: str | None) -> str:
    """`paths.resolve_home` without pathlib: --home, SPEXSUP_HOME, XDG_STATE_HOME, ~."""
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    env = os.environ.get("SPEXSUP_HOME")
    if env:
        return os.path.abspath(os.path.expanduser(env))
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.abspath(os.path.join(base, "spexsup"))


def checksum(body: bytes) -> bytes:
    """8 hex digits over `body` (a multiplicative hash: no import for a status bar)."""
    h = len(body)
    for byte in body:
        h = (h * 1000003 ^ byte) & 0xFFFFFFFF
    return b"%08x" % h


def seal(body: bytes) -> bytes:
    """The file's text for the summary lines `body`."""
    return body + b"sum=" + checksum(body) + b"\n"


def unseal(data: bytes) -> bytes | None:
    """The summary lines of the file's text, or None if its checksum is wrong."""
    body, sep, rest = data.rpartition(b"sum=")
    if not sep or rest.split(b"\n", 1)[0] != checksum(body):
        return None
    return body


def read(home: str, tries: int = 5) -> dict[str, str]:
    """The summary's fields; zeros before the first event (or if unreadable)."""
    values = dict.fromkeys(FIELDS[:-1], "0")
    values["attention"] = ""
    body = None
    for _ in range(tries):
        try:
            with open(os.path.join(home, "events", FILE), "rb") as f:
                data = f.read(65536)
        except OSError:
            return values
        body = unseal(data)
        if body is not None:
            break
    # Still torn after `tries` reads (a writer rewriting it nonstop): show what is there.
    text = (data if body is None else body).decode("utf-8", "replace")
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in values:
            values[key] = value
    return values


def render(values: dict[str, str], fmt: str | None = None) -> str:
    """The default line, or `fmt` with `{field}`s filled; UnknownField otherwise."""
    if fmt is None:
        line = f"spex: {values['running']} running, {values['ok']} ok, {values['failed']} failed"
        return line + (f": {values['attention']}" if values["attention"] else "")
    out = []
    at = 0
    while True:
        start = fmt.find("{", at)
        end = fmt.find("}", start + 1) if start >= 0 else -1
        if start < 0 or end < 0:
            out.append(fmt[at:])
            return "".join(out)
        name = fmt[start + 1 : end]
        if name not in values:
            raise UnknownField(name)
        out.append(fmt[at:start] + values[name])
        at = end + 1
