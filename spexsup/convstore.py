"""Conversation ids from a CLI's own session store, for a turn whose output
has none (it died before printing it, or printed it nowhere we read).

- pi keeps `~/.pi/agent/sessions/--<cwd, / and : as ->--/<time>_<uuid>.jsonl`
  (`PI_CODING_AGENT_DIR` moves `~/.pi/agent`); the first line is the
  `{"type": "session", "id": …, "cwd": …}` header.
- opencode keeps `$XDG_DATA_HOME/opencode/storage/session/<project>/ses_….json`
  (default `~/.local/share`), each with its `id` and `directory`.

Only sessions written since the turn started (less a second) and for the
session's own working directory count; the newest wins. Bounded: one
directory listing per project, one small read per candidate.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

HEADER_BYTES = 4096


def _pi(cwd: str, since: float) -> str | None:
    agent = os.environ.get("PI_CODING_AGENT_DIR") or str(Path.home() / ".pi" / "agent")
    slug = "--" + cwd.lstrip("/").replace("/", "-").replace(":", "-") + "--"
    best: tuple[float, str] | None = None
    try:
        entries = list(os.scandir(Path(agent).expanduser() / "sessions" / slug))
    except OSError:
        return None
    for entry in entries:
        if not entry.name.endswith(".jsonl"):
            continue
        try:
            mtime = entry.stat().st_mtime
            if mtime < since - 1 or (best and mtime <= best[0]):
                continue
            with Path(entry.path).open("rb") as f:
                header = json.loads(f.readline(HEADER_BYTES))
        except (OSError, ValueError):
            continue
        if isinstance(header, dict) and header.get("type") == "session" and header.get("id"):
            best = (mtime, str(header["id"]))
    return best[1] if best else None


def _opencode(cwd: str, since: float) -> str | None:
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    root = Path(data) / "opencode" / "storage" / "session"
    best: tuple[float, str] | None = None
    try:
        projects = [p.path for p in os.scandir(root) if p.is_dir()]
    except OSError:
        return None
    for project in projects:
        try:
            entries = list(os.scandir(project))
        except OSError:
            continue
        for entry in entries:
            if not (entry.name.startswith("ses_") and entry.name.endswith(".json")):
                continue
            try:
                mtime = entry.stat().st_mtime
                if mtime < since - 1 or (best and mtime <= best[0]):
                    continue
                info = json.loads(Path(entry.path).read_bytes()[:65536])
            except (OSError, ValueError):
                continue
            if isinstance(info, dict) and info.get("directory") == cwd:
                best = (mtime, str(info.get("id") or entry.name[: -len(".json")]))
    return best[1] if best else None


LOOKUPS = {"pi": _pi, "opencode": _opencode}


def lookup(harness: str, cwd: str | None, since: float | None) -> str | None:
    """The id of the newest conversation `harness` stored for `cwd` since `since`."""
    find = LOOKUPS.get(harness)
    if find is None or not cwd or since is None:
        return None
    return find(cwd, since)
