"""The client side of the maintenance broker, for scripts run by `spex maint`.

    from spexsup.adapters.maint_client import request
    reply = request("stop", "api")       # blocks until the broker answers
    if reply.committed: ...

The command inherits fds 3 (requests), 4 (responses) and 5 (the turn token)
and `SPEXSUP_MAINTENANCE_BROKER_FDS=3,4,5`. A request takes the token (one
byte), writes one line, reads one line, and gives the token back, so several
processes of one command can ask concurrently without interleaving.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from dataclasses import dataclass
from typing import Any

from spexsup.adapters.procs import own_identity
from spexsup.errors import Failed, Invalid, Refused, SpexError

REQUEST, RESPONSE, TOKEN_FD = 3, 4, 5
MAX_LINE = 4096
MAX_FOREIGN_REPLIES = 64


class Indeterminate(SpexError):
    """The broker could not say whether the operation happened."""

    exit_code = 1


@dataclass(frozen=True)
class Reply:
    id: str | None
    ok: bool
    outcome: str
    code: str | None
    error: str | None

    @property
    def committed(self) -> bool:
        return self.outcome == "committed"


def _read_line(fd: int) -> bytes:
    # One byte at a time: the next client's reply must stay in the pipe.
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            raise Failed("the maintenance broker went away", hint="is spex maint still running?")
        line += byte
        if len(line) > MAX_LINE + 1:
            raise Failed("the maintenance broker sent an oversize reply")
    return line


def _read_reply(frame_id: str) -> dict[str, Any]:
    """Our reply; lines answering someone else (a stranger writing to the
    broker's pipe without the token is refused on the same pipe) are skipped."""
    for _ in range(MAX_FOREIGN_REPLIES):
        try:
            data = json.loads(_read_line(RESPONSE))
        except ValueError:
            raise Failed("the maintenance broker sent a malformed reply") from None
        if isinstance(data, dict) and data.get("id") == frame_id:
            return data
    raise Failed("the maintenance broker never answered this request")


def request(op: str, session: str, force: bool = False) -> Reply:
    """Ask the broker for one granted operation; raises Invalid outside `spex maint`."""
    if os.environ.get("SPEXSUP_MAINTENANCE_BROKER_FDS") != "3,4,5":
        raise Invalid("not inside spex maint", hint="run it from the command of spex maint -- CMD")
    pid, start_token = own_identity()
    frame_id = secrets.token_hex(8)
    frame = {
        "v": 1,
        "id": frame_id,
        "op": op,
        "session": session,
        "force": force,
        "client": {"pid": pid, "start_token": start_token},
    }
    try:
        token = os.read(TOKEN_FD, 1)
    except OSError as e:
        raise Failed(f"the maintenance broker is unreachable: {e.strerror}") from None
    if not token:
        raise Failed("the maintenance broker went away", hint="is spex maint still running?")
    try:
        os.write(REQUEST, json.dumps(frame).encode() + b"\n")
        data = _read_reply(frame_id)
    except OSError as e:
        raise Failed(f"the maintenance broker went away: {e.strerror}") from None
    finally:
        # If the broker is gone there is nothing to give the token back to.
        with contextlib.suppress(OSError):
            os.write(TOKEN_FD, token)
    reply = Reply(
        data.get("id"),
        bool(data.get("ok")),
        data.get("outcome", ""),
        data.get("code"),
        data.get("error"),
    )
    return reply


def run(op: str, session: str, force: bool = False) -> Reply:
    """`request`, with refusals and indeterminate outcomes raised for the CLI."""
    reply = request(op, session, force)
    if reply.outcome == "committed":
        return reply
    what = f"{op} {session}{' --force' if force else ''}"
    error = reply.error or reply.code or "refused"
    message = error if error.startswith(what) else f"{what}: {error}"
    hint = HINTS.get(reply.code or "")
    if reply.outcome == "indeterminate":
        raise Indeterminate(message, hint=hint)
    if reply.code == "maintenance_invalid":
        raise Invalid(message, hint=hint)
    raise Refused(message, hint=hint)


# What a person does about each refusal (the code itself is for programs:
# `spex maint-op … --json` and the broker's frames carry it).
HINTS = {
    "maintenance_capability_used": "the lease grants each operation once",
    "maintenance_capability_missing": "grant it: spex maint --stop NAME / --resume NAME[:force]",
    "maintenance_busy": "wait for the earlier operation to end",
    "maintenance_deadline": "spex show the session to see where it got to",
}
