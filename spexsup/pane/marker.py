"""The outcome marker a turn's wrapper writes (DESIGN §2.4).

Grammar, one line, optionally newline-terminated:
`running:<pid>`, `limited:<pid>:<reset_epoch>` (the wrapper waits in the
pane for a usage limit to reset, then runs the harness again resuming the
conversation, back at `running:<pid>`), `verifying:<pid>` (the harness
exited 0 and the turn's verify command runs, still the same wrapper),
`reporting:<pid>:<rc>`, `exit:<rc>:cas:<cas>`.
No file yet is `NONE`; anything else is `INVALID`.
"""

from __future__ import annotations

import enum
import re
from pathlib import Path
from typing import NamedTuple

from spexsup.pane import turndir

_GRAMMAR = re.compile(
    rb"running:(?P<rpid>[0-9]{1,10})"
    rb"|limited:(?P<lpid>[0-9]{1,10}):(?P<reset>[0-9]{1,12})"
    rb"|verifying:(?P<vpid>[0-9]{1,10})"
    rb"|reporting:(?P<ppid>[0-9]{1,10}):(?P<prc>[0-9]{1,3})"
    rb"|exit:(?P<rc>[0-9]{1,3}):cas:(?P<cas>[0-9]{1,3})"
)
MAX_MARKER_BYTES = 64


class Stage(enum.Enum):
    NONE = "none"
    RUNNING = "running"
    LIMITED = "limited"
    VERIFYING = "verifying"
    REPORTING = "reporting"
    EXIT = "exit"
    INVALID = "invalid"


# The stages of a live wrapper before it reports: its pid must be alive.
LIVE = frozenset({Stage.RUNNING, Stage.LIMITED, Stage.VERIFYING})


class Marker(NamedTuple):
    stage: Stage
    pid: int | None = None
    rc: int | None = None
    cas: int | None = None
    text: str = ""
    reset: int | None = None


def parse(raw: bytes) -> Marker:
    body = raw[:-1] if raw.endswith(b"\n") else raw
    m = _GRAMMAR.fullmatch(body)
    text = raw[:MAX_MARKER_BYTES].decode("utf-8", "replace")
    if m is None:
        return Marker(Stage.INVALID, text=text)
    if m["rpid"] is not None:
        return Marker(Stage.RUNNING, pid=int(m["rpid"]), text=text)
    if m["lpid"] is not None:
        return Marker(Stage.LIMITED, pid=int(m["lpid"]), reset=int(m["reset"]), text=text)
    if m["vpid"] is not None:
        return Marker(Stage.VERIFYING, pid=int(m["vpid"]), text=text)
    if m["ppid"] is not None:
        return Marker(Stage.REPORTING, pid=int(m["ppid"]), rc=int(m["prc"]), text=text)
    return Marker(Stage.EXIT, rc=int(m["rc"]), cas=int(m["cas"]), text=text)


def read(turn_dir: Path) -> Marker:
    try:
        with (turn_dir / turndir.OUTCOME).open("rb") as f:
            raw = f.read(MAX_MARKER_BYTES + 1)
    except FileNotFoundError:
        return Marker(Stage.NONE)
    except OSError as e:
        return Marker(Stage.INVALID, text=f"unreadable: {e}")
    if len(raw) > MAX_MARKER_BYTES:
        return Marker(Stage.INVALID, text=raw[:MAX_MARKER_BYTES].decode("utf-8", "replace"))
    return parse(raw)
