"""The outcome marker a turn's wrapper writes (DESIGN §2.4).

Grammar, one line, optionally newline-terminated:
`running:<pid>`, `limited:<pid>:<reset_epoch>` (the wrapper waits in the
pane for a usage limit to reset, then runs the harness again resuming the
conversation, back at `running:<pid>`), `verifying:<pid>` (the harness
exited 0 and the turn's verify command runs, still the same wrapper),
`reporting:<pid>:<rc>`, `exit:<rc>:cas:<cas>`.
The final two may end with `:ran:<ms>` (how long the wrapper ran, from its
start to its end: the turn's run time, whoever records the end and when)
and then `:lost:<bytes>` (output the harness printed that output.log could
not keep, e.g. on a full disk; `?` when the amount is unknown). Markers
without them (an older wrapper) still read, with no run time.
No file yet is `NONE`; anything else is `INVALID`.
"""

from __future__ import annotations

import enum
from pathlib import Path

from spexsup import lazyre
from spexsup.pane import turndir
from spexsup.record import Record
from spexsup.states import OUTPUT_LOST

_GRAMMAR = lazyre.compile(
    rb"running:(?P<rpid>[0-9]{1,10})"
    rb"|limited:(?P<lpid>[0-9]{1,10}):(?P<reset>[0-9]{1,12})"
    rb"|verifying:(?P<vpid>[0-9]{1,10})"
    rb"|(?:reporting:(?P<ppid>[0-9]{1,10}):(?P<prc>[0-9]{1,3})"
    rb"|exit:(?P<rc>[0-9]{1,3}):cas:(?P<cas>[0-9]{1,3}))"
    rb"(?::ran:(?P<ran>[0-9]{1,12}))?(?::lost:(?P<lost>[0-9]{1,15}|\?))?"
)
MAX_MARKER_BYTES = 128
# `lost:?`: some output was not kept, how much is not known.
UNKNOWN_AMOUNT = -1


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


class Marker(Record):
    stage: Stage
    pid: int | None = None
    rc: int | None = None
    cas: int | None = None
    text: str = ""
    reset: int | None = None
    # The wrapper's own run time (seconds) and the output bytes it could not
    # keep (UNKNOWN_AMOUNT: some), as its final marker says.
    ran: float | None = None
    lost: int | None = None


def parse(raw: bytes) -> Marker:
    if not raw:
        # The wrapper's first marker is written into the file it creates
        # (shell/turn.sh, mark_first): empty, its one write has not landed yet.
        return Marker(Stage.NONE)
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
    ran = int(m["ran"]) / 1000 if m["ran"] is not None else None
    lost = None if m["lost"] is None else UNKNOWN_AMOUNT if m["lost"] == b"?" else int(m["lost"])
    if m["ppid"] is not None:
        rc = int(m["prc"])
        return Marker(Stage.REPORTING, pid=int(m["ppid"]), rc=rc, text=text, ran=ran, lost=lost)
    return Marker(Stage.EXIT, rc=int(m["rc"]), cas=int(m["cas"]), text=text, ran=ran, lost=lost)


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


def lost_flag(m: Marker | None) -> str | None:
    """The flag of the output a final marker says its wrapper could not keep
    (`output-lost:<bytes>`, `output-lost` when how much is unknown), or None."""
    if m is None or m.lost is None or m.lost == 0:
        return None
    return OUTPUT_LOST if m.lost == UNKNOWN_AMOUNT else f"{OUTPUT_LOST}:{m.lost}"
