"""What the web door's routes share (DESIGN §18): the server's settings and
templates (`Web`), the HTTP error a route raises (`Problem`), the banner a
POST's redirect carries (`Said`), the relative root every link starts from,
and reading a form. Imports no route: `pages` and `buttons` import it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anyio.to_thread
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.datastructures import ImmutableMultiDict
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse

from spexsup import ids
from spexsup.record import Record
from spexsup.web import auth
from spexsup.web.live import Broadcaster

TEMPLATES = Path(__file__).resolve().parent / "templates"
# A prompt is at most 1 MiB; percent-encoding may triple it.
MAX_FORM = 3 * 1024 * 1024 + 4096
# Fields in a form: a fan-out names each of its sessions in one.
MAX_FIELDS = 5000
READ_ONLY = "spex serve --read-only: this server changes nothing"


class Problem(Exception):
    """An HTTP error answered with a page (or one line for a non-browser)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Said(Record):
    """A POST's verdict, shown as a banner on the page it redirects to."""

    ok: bool
    line: str
    notes: list[str]

    def packed(self, budget: int = 2700) -> str:
        """As JSON of at most `budget` UTF-8 bytes, to fit a cookie (4 KiB
        with its name, base64's third more and the MAC): the last notes
        dropped first, then the line cut, keeping its start."""
        said = self
        while True:
            text = json.dumps(said._asdict(), ensure_ascii=False, separators=(",", ":"))
            if len(text.encode()) <= budget:
                return text
            if said.notes:
                said = said._replace(notes=said.notes[:-1])
            else:
                said = said._replace(line=said.line[: len(said.line) * 3 // 4 - 1] + "…")


def root_of(path: str) -> str:
    """The relative way from `path` back to the app's root: `./` from `/`,
    `../` from `/s/NAME`, `../../` from `/s/NAME/stop`."""
    depth = path.count("/") - 1
    return "../" * depth if depth > 0 else "./"


class Web:
    """The server's settings and its template environment."""

    def __init__(
        self, home: Path, keys: auth.Keys, *, bound: str, read_only: bool, public: str | None
    ) -> None:
        self.home = home
        self.keys = keys
        self.bound = bound
        self.read_only = read_only
        # `[serve] url`: the address a reverse proxy serves this at (its Host
        # and Origin are this server's too); the pages' links are relative.
        self.public = urlsplit(public) if public else None
        self.hub = Broadcaster(home)
        self.templates = Environment(
            loader=FileSystemLoader(TEMPLATES),
            autoescape=True,  # every value is untrusted text: names, prompts, output
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )

    def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        """`template` with `context`, and what every page has: its nonce, a CSRF
        token, `root` (the way back to `/` from this path, relative, so a
        reverse proxy may serve it under any prefix) and `said`, the banner
        of the POST that redirected here (the cookie is spent)."""
        said = self.said(request) if context.get("page") else None  # a page, not a fragment
        values = {
            "nonce": request.scope["spex"]["nonce"],
            "csrf": self.keys.csrf(),
            "read_only": self.read_only,
            "root": root_of(request.scope["path"]),
            "page": "",
            "since": 0,
            "session": "",
            "title": "spex",
            "said": said,
            **context,
        }
        html = self.templates.get_template(template).render(**values)
        response = HTMLResponse(html, status_code=status)
        if said is not None:
            response.delete_cookie(self.said_cookie, path="/")
        return response

    @property
    def said_cookie(self) -> str:
        return self.keys.cookie_name + "_said"

    def tell(self, response: Response, said: Said) -> Response:
        """Carry `said` to the page `response` redirects to (one showing)."""
        value = self.keys.seal(said.packed())
        response.set_cookie(
            self.said_cookie, value, max_age=120, httponly=True, samesite="strict", path="/"
        )
        return response

    def said(self, request: Request) -> Said | None:
        text = self.keys.unseal(request.cookies.get(self.said_cookie))
        if text is None:
            return None
        try:
            doc = json.loads(text)
            return Said(bool(doc["ok"]), str(doc["line"]), [str(n) for n in doc["notes"]])
        except (ValueError, KeyError, TypeError):
            return None

    def login(self, request: Request, status: int, message: str = "") -> HTMLResponse:
        return self.render(
            request, "login.html", status, page="login", title="token", message=message
        )


# --- forms ----------------------------------------------------------------------


Form = ImmutableMultiDict[str, str]


async def read_form(request: Request) -> Form:
    """An `application/x-www-form-urlencoded` body in UTF-8, bounded. `get`
    gives a field's last value, `getlist` all of them (a fan-out's sessions)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Problem(415, "spex: a form (application/x-www-form-urlencoded) is expected")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise Problem(413, "spex: the form is too large (a prompt is at most 1 MiB)")
    try:
        pairs = parse_qsl(
            body.decode("ascii"), keep_blank_values=True, errors="strict", max_num_fields=MAX_FIELDS
        )
    except (UnicodeError, ValueError):
        raise Problem(400, "spex: the form is not valid UTF-8 form data") from None
    return ImmutableMultiDict(pairs)


def changing(web: Web, request: Request, form: Form) -> None:
    """What every state-changing POST needs: a server that changes things,
    and, for a browser's cookie, this server's CSRF token from a page."""
    if web.read_only:
        raise Problem(403, f"spex: {READ_ONLY}")
    if request.scope["spex"]["auth"] == "cookie" and not web.keys.csrf_ok(form.get("csrf")):
        raise Problem(403, "spex: the form has no valid CSRF token (reload the page)")


def session_name(request: Request) -> str:
    return ids.validate_name(str(request.path_params["name"]))


def status_of(code: int) -> int:
    """The HTTP status of a `spex` exit code (the code itself is in X-Spex-Exit-Code)."""
    return {0: 200, 1: 200, 2: 400, 3: 409}.get(code, 500)


def number(text: str | None) -> int | None:
    """A count or an event id as a URL or header gives it, else None: ASCII
    digits only (`str.isdigit` takes '²', which `int` refuses) and few enough
    of them for `int` and for SQLite."""
    if text and len(text) <= 18 and text.isascii() and text.isdigit():
        return int(text)
    return None


def wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def web_of(request: Request) -> Web:
    web: Web = request.app.state.web
    return web


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a worker thread (the store and the commands block)."""
    return await anyio.to_thread.run_sync(fn, *args)


def sse_response(body: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(
        body, media_type="text/event-stream", headers={"x-accel-buffering": "no"}
    )
