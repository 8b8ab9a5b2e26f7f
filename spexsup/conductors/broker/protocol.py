"""The maintenance broker's wire protocol (DESIGN §5): frames on inherited fds.

A `spex maint` command inherits exactly three fds: 3 carries requests
(command → broker), 4 responses, 5 is a socketpair carrying the turn token,
the byte 0x01. A request is one JSON line of at most MAX_FRAME bytes; a
response is one JSON line too. This module only validates and builds those
lines: who may send them and what they set in motion is `serve`'s business,
and the client's side is `spexsup.adapters.maint_client`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from spexsup.adapters.procs import Liveness, identity_liveness
from spexsup.ids import NAME_RE

MAX_FRAME = 4096
TOKEN = b"\x01"
BROKER_FDS = "3,4,5"


@dataclass(frozen=True)
class Frame:
    id: str
    op: str
    session: str
    force: bool
    client_pid: int
    client_token: str


class FrameError(Exception):
    def __init__(self, message: str, frame_id: str | None = None) -> None:
        super().__init__(message)
        self.frame_id = frame_id


def parse_frame(line: bytes) -> Frame:
    """Validate one request line; FrameError says why (and the id, if readable)."""
    if len(line) > MAX_FRAME:
        raise FrameError(f"frame longer than {MAX_FRAME} bytes")
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise FrameError("frame is not JSON") from None
    if not isinstance(data, dict):
        raise FrameError("frame is not a JSON object")
    frame_id = data.get("id") if isinstance(data.get("id"), str) else None
    expected = {"v", "id", "op", "session", "force", "client"}
    if set(data) != expected:
        raise FrameError(f"frame fields must be exactly {sorted(expected)}", frame_id)
    if type(data["v"]) is not int or data["v"] != 1:
        raise FrameError("unsupported frame version", frame_id)
    if frame_id is None or not 1 <= len(frame_id) <= 128:
        raise FrameError("id must be a string of 1-128 characters", frame_id)
    if data["op"] not in ("stop", "resume"):
        raise FrameError("op must be stop or resume", frame_id)
    if not isinstance(data["session"], str) or not NAME_RE.fullmatch(data["session"]):
        raise FrameError("invalid session name", frame_id)
    if type(data["force"]) is not bool:
        raise FrameError("force must be a boolean", frame_id)
    client = data["client"]
    if (
        not isinstance(client, dict)
        or set(client) != {"pid", "start_token"}
        or type(client["pid"]) is not int
        or client["pid"] <= 0
        or not isinstance(client["start_token"], str)
        or not client["start_token"].isdigit()
    ):
        raise FrameError("client must be {pid, start_token}", frame_id)
    if identity_liveness(client["pid"], client["start_token"]) is not Liveness.ALIVE:
        raise FrameError("client pid is not live with that start token", frame_id)
    return Frame(
        frame_id, data["op"], data["session"], data["force"], client["pid"], client["start_token"]
    )


def response(
    frame_id: str | None, outcome: str, code: str | None = None, error: str | None = None
) -> dict[str, Any]:
    return {
        "id": frame_id,
        "ok": outcome == "committed",
        "outcome": outcome,
        "code": code,
        "error": error,
    }
