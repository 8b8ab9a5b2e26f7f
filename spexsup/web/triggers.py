"""`POST /trigger/NAME`: a signed webhook wakes a session (DESIGN §29).

A `[trigger.NAME]` table in config.toml says what to wake (`session`, or
`match`, a glob: a fan-out), with what (`prompt`, a template whose `{a.b}`
fields are filled from the JSON body; `{{` and `}}` are braces) and the
secret the sender signs with: from the variable `secret_env` names, in the
server's environment, else `secret` in `[NAME]` of `$SPEXSUP_HOME/
trigger-secrets.toml`, refused unless it is the user's and 0600. `queue`
(true or false) is wake's `--queue`/`--no-queue`.

Two signatures, each compared in constant time (`hmac.compare_digest`):
GitHub's `X-Hub-Signature-256: sha256=HEX`, the HMAC-SHA256 of the body,
whose delivery is `X-GitHub-Delivery`; and the generic `X-Spex-Signature:
sha256=HEX`, the HMAC-SHA256 of `TIMESTAMP.BODY` with `X-Spex-Timestamp`
(Unix seconds) at most WINDOW from now, whose delivery is `X-Spex-Delivery`
(else the signature). `queue` applies to a session's wake, not to a
fan-out. The wake carries `--key trigger-NAME-DELIVERY`: a
redelivery (GitHub redelivers under the same id) starts nothing and answers
with the turn the first one started.

The request is signed, not a browser's: the server's token, the Origin and
the Host checks do not apply (`exempt`; a sender reaches it through a proxy
under another name). Everything is checked before anything runs: an unknown
trigger 404, a missing or wrong signature or a stale timestamp 401, a body
over 1 MiB 413, one that is not JSON 400, a field the prompt names that the
body lacks 422, a read-only server 403; each answer is one `spex: …` line.
The wake itself is `spex wake NAME -f - --key KEY --json` (or `spex fanout
--match GLOB …`), the CLI's own admission and refusals (a busy session 409).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Scope

from spexsup import config, ids, lazyre
from spexsup.errors import Failed, Invalid, SpexError
from spexsup.record import Record
from spexsup.web import actions

PREFIX = "/trigger/"
SECRETS = "trigger-secrets.toml"
MAX_BODY = 1024 * 1024
# How far a generic delivery's timestamp may be from now, in seconds.
WINDOW = 300
KEYS = ("session", "match", "prompt", "secret_env", "queue")
_FIELD = lazyre.compile(r"\{\{|\}\}|\{([^{}]*)\}")
_DELIVERY = lazyre.compile(r"[A-Za-z0-9._:-]{1,100}")
_VARIABLE = lazyre.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Refusal(Exception):
    """A delivery answered with an HTTP status and one line; nothing ran."""

    def __init__(self, status: int, line: str) -> None:
        super().__init__(line)
        self.status = status


class Trigger(Record):
    name: str
    session: str | None
    match: str | None
    prompt: str
    secret_env: str | None
    queue: bool | None


def exempt(scope: Scope) -> bool:
    """A trigger's POST, which its signature authorises (see the module doc)."""
    return scope.get("method") == "POST" and str(scope.get("path", "")).startswith(PREFIX)


def parse(name: str, table: object) -> Trigger:
    """One `[trigger.NAME]` table, checked; Invalid names the field."""
    where = f"[trigger.{name}]"
    if not isinstance(table, dict):
        raise Invalid(f"{where} must be a table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise Invalid(f"{where}: unknown field {unknown[0]!r}", hint=f"one of {', '.join(KEYS)}")
    session, match = table.get("session"), table.get("match")
    if (session is None) == (match is None):
        raise Invalid(f"{where} needs one of session or match")
    if session is not None:
        if not isinstance(session, str):
            raise Invalid(f"{where}: session must be a session's name")
        ids.validate_name(session)
    if match is not None and not (isinstance(match, str) and match):
        raise Invalid(f"{where}: match must be a glob of session names")
    prompt, variable, queue = table.get("prompt"), table.get("secret_env"), table.get("queue")
    if not (isinstance(prompt, str) and prompt.strip()):
        raise Invalid(f"{where} needs a prompt (a template: {{field.path}} from the body)")
    if variable is not None and not (isinstance(variable, str) and _VARIABLE.fullmatch(variable)):
        raise Invalid(f"{where}: secret_env must name an environment variable")
    if queue is not None and not isinstance(queue, bool):
        raise Invalid(f"{where}: queue must be true or false")
    return Trigger(name, session, match, prompt, variable, queue)


def find(home: Path, name: str) -> Trigger:
    """The trigger `name` as config.toml declares it now (read on every delivery)."""
    tables = config.load(home).raw.get("trigger") or {}
    if not isinstance(tables, dict) or name not in tables:
        raise Refusal(404, f"no trigger named {name!r} (a [trigger.{name}] table in config.toml)")
    return parse(name, tables[name])


def secret(home: Path, trigger: Trigger) -> bytes:
    """The trigger's secret: its variable's value, else the 0600 file's."""
    from spexsup.core.notify.credentials import private_toml

    if trigger.secret_env is not None:
        value = os.environ.get(trigger.secret_env)
        if not value:
            raise Failed(f"trigger {trigger.name}: ${trigger.secret_env} is not set for spex serve")
        return value.encode()
    entry = private_toml(home / SECRETS).get(trigger.name)
    value = entry.get("secret") if isinstance(entry, dict) else None
    if not (isinstance(value, str) and value):
        raise Failed(
            f"trigger {trigger.name} has no secret",
            hint=f"secret_env in its table, or secret in [{trigger.name}] of {SECRETS} (0600)",
        )
    return value.encode()


def _signed(header: str, payload: bytes, key: bytes) -> None:
    expected = "sha256=" + hmac.new(key, payload, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), header.strip().encode("latin-1")):
        raise Refusal(401, "the signature does not match this trigger's secret")


def delivery(headers: Any, body: bytes, key: bytes, now: float) -> str:
    """The delivery id of a correctly signed request, else Refusal (401)."""
    github = headers.get("x-hub-signature-256")
    generic = headers.get("x-spex-signature")
    if github is not None:
        _signed(github, body, key)
        ident = headers.get("x-github-delivery") or ""
    elif generic is not None:
        stamp = headers.get("x-spex-timestamp") or ""
        if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12):
            raise Refusal(401, "X-Spex-Timestamp is missing or not Unix seconds")
        _signed(generic, stamp.encode() + b"." + body, key)
        if abs(now - int(stamp)) > WINDOW:
            raise Refusal(401, f"X-Spex-Timestamp is more than {WINDOW}s from now (a replay?)")
        ident = headers.get("x-spex-delivery") or generic.strip().removeprefix("sha256=")
    else:
        raise Refusal(401, "no signature (X-Hub-Signature-256 or X-Spex-Signature)")
    if not _DELIVERY.fullmatch(ident):
        raise Refusal(400, "the delivery id is missing or not 1-100 of A-Z a-z 0-9 . _ : -")
    return ident


def payload(body: bytes, kind: str) -> Any:
    """The JSON document: the body, or GitHub's form `payload=` field."""
    try:
        if kind == "application/x-www-form-urlencoded":
            fields = parse_qs(body.decode("utf-8"), strict_parsing=True)
            return json.loads(fields["payload"][0])
        return json.loads(body)
    except (ValueError, KeyError, UnicodeError):
        raise Refusal(400, "the body is not JSON") from None


def fill(template: str, document: Any) -> str:
    """The prompt: each `{a.b.0}` replaced by that field of the document (a
    string as it is, anything else as JSON); Refusal (422) for one it lacks."""

    def field(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return m.group(0)[0]
        value = document
        for part in m.group(1).strip().split("."):
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                raise Refusal(422, f"the body has no field {m.group(1).strip()!r}")
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    return _FIELD.sub(field, template)


def command(trigger: Trigger, key: str) -> list[str]:
    """The `spex` words that wake what the trigger names (the prompt on stdin)."""
    if trigger.match is not None:
        return ["fanout", "--match", trigger.match, "--key", key, "-f", "-"]
    queue = [] if trigger.queue is None else ["--queue" if trigger.queue else "--no-queue"]
    return ["wake", str(trigger.session), "--key", key, "-f", "-", *queue]


async def _read(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise Refusal(413, "the body is over 1 MiB")
    return body


async def accept(
    home: Path, request: Request, *, read_only: bool
) -> tuple[Trigger, str, str | None]:
    """(the trigger, the delivery id, the prompt; None for GitHub's ping) of a
    delivery that passed every check, else Refusal or SpexError."""
    name = str(request.path_params["name"])
    if not config.NAME_RE.fullmatch(name):
        raise Refusal(404, f"no trigger named {name[:64]!r}")
    if read_only:
        raise Refusal(403, "spex serve --read-only: this server changes nothing")
    body = await _read(request)
    found = await anyio.to_thread.run_sync(find, home, name)
    key = await anyio.to_thread.run_sync(secret, home, found)
    ident = delivery(request.headers, body, key, time.time())
    if request.headers.get("x-github-event") == "ping":  # sent when the hook is made
        return found, ident, None
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return found, ident, fill(found.prompt, payload(body, kind))


def route(home: Path, *, read_only: bool) -> Route:
    """The `/trigger/{name}` route of a server on `home`."""

    async def trigger(request: Request) -> Response:
        try:
            found, ident, prompt = await accept(home, request, read_only=read_only)
        except Refusal as e:
            return PlainTextResponse(f"spex: {e}\n", e.status)
        except SpexError as e:  # the table or its secret: the server's to fix
            return PlainTextResponse(f"spex: {e.line()}\n", 500)
        if prompt is None:
            return JSONResponse({"schema_version": 1, "ok": True, "pong": True})
        words = command(found, f"trigger-{found.name}-{ident}")
        data = prompt.encode("utf-8", "surrogateescape")
        answer = await anyio.to_thread.run_sync(lambda: actions.run_spex(home, words, data))
        doc = answer.doc or {"schema_version": 1, "ok": False, "error": answer.line}
        status = {0: 200, 1: 200, 2: 400, 3: 409}.get(answer.exit_code, 500)
        return JSONResponse(doc, status, {"x-spex-exit-code": str(answer.exit_code)})

    return Route(PREFIX + "{name}", trigger, methods=["POST"])
