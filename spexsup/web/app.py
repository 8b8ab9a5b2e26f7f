"""The web door's routes (DESIGN §18): pages rendered on the server, forms that
POST, and two SSE streams. Parse, call, render, as `cli/` does: the pages
read through `views`, the buttons run the `spex` commands (`actions`), the
streams are `live`'s.

Every request passes `Guard` first: the Host check (DNS rebinding), GET,
HEAD and POST only, a POST's Origin, then the token (the cookie `/login`
set, or `Authorization: Bearer`); and every answer carries headers that
keep it out of frames, caches and other origins (no CORS header, ever),
with a Content-Security-Policy whose per-response nonce is the only way a
script or style runs.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import anyio.to_thread
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spexsup import ids
from spexsup.core import sessions
from spexsup.errors import Invalid, Refused, SpexError, UnknownSession
from spexsup.web import actions, auth, triggers, views
from spexsup.web.live import Broadcaster, event_stream, log_stream

TEMPLATES = Path(__file__).resolve().parent / "templates"
# A prompt is at most 1 MiB; percent-encoding may triple it.
MAX_FORM = 3 * 1024 * 1024 + 4096
READ_ONLY = "spex serve --read-only: this server changes nothing"


class Problem(Exception):
    """An HTTP error answered with a page (or one line for a non-browser)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Web:
    """The server's settings and its template environment."""

    def __init__(self, home: Path, keys: auth.Keys, *, bound: str, read_only: bool) -> None:
        self.home = home
        self.keys = keys
        self.bound = bound
        self.read_only = read_only
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
        values = {
            "nonce": request.scope["spex"]["nonce"],
            "csrf": self.keys.csrf(),
            "read_only": self.read_only,
            "page": "",
            "since": 0,
            "session": "",
            "title": "spex",
            **context,
        }
        html = self.templates.get_template(template).render(**values)
        return HTMLResponse(html, status_code=status)

    def login(self, request: Request, status: int, message: str = "") -> HTMLResponse:
        return self.render(
            request, "login.html", status, page="login", title="token", message=message
        )


# --- the guard ------------------------------------------------------------------

# Referrer-Policy same-origin, not no-referrer: with no-referrer Chromium sends
# a form's POST with `Origin: null`, which the Origin check must refuse.
SECURITY_HEADERS = {
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}


def csp(nonce: str) -> str:
    return (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}';"
        " connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none';"
        " base-uri 'none'"
    )


def cookie_of(headers: Headers, name: str) -> str | None:
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


class Guard:
    """The checks every request passes before any route (see the module doc)."""

    def __init__(self, app: ASGIApp, web: Web) -> None:
        self.app = app
        self.web = web

    def stopping(self) -> None:
        """The server is stopping: end the live streams (from a signal handler)."""
        self.web.hub.end_all()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets here: the connection is refused
        nonce = secrets.token_urlsafe(16)
        scope["spex"] = {"nonce": nonce, "auth": None}

        async def guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for key, value in SECURITY_HEADERS.items():
                    headers[key] = value
                headers["content-security-policy"] = csp(nonce)
            await send(message)

        response = self.refusal(scope)
        if response is not None:
            await response(scope, receive, guarded)
            return
        await self.app(scope, receive, guarded)

    def refusal(self, scope: Scope) -> Response | None:
        if triggers.exempt(scope):
            return None  # a webhook, signed: spexsup.web.triggers checks it
        headers = Headers(scope=scope)
        host = auth.host_name(headers.get("host"))
        if not auth.host_allowed(host, self.web.bound):
            # A page whose DNS name was rebound to this address sends its own name.
            return PlainTextResponse(f"spex: {host or 'no host'!r} is not this server\n", 421)
        method = scope["method"]
        if method not in ("GET", "HEAD", "POST"):
            return PlainTextResponse("spex: GET, HEAD or POST only\n", 405, {"allow": "GET, POST"})
        if method == "POST":
            origin = headers.get("origin")
            site = headers.get("sec-fetch-site")
            if (origin is not None and origin != f"http://{headers.get('host')}") or site not in (
                None,
                "same-origin",
                "none",
            ):
                return PlainTextResponse("spex: a POST from another origin is refused\n", 403)
        if scope["path"] == "/login":
            return None
        keys = self.web.keys
        if keys.cookie_ok(cookie_of(headers, keys.cookie_name)):
            scope["spex"]["auth"] = "cookie"
        elif keys.bearer_ok(headers.get("authorization")):
            scope["spex"]["auth"] = "bearer"
        else:
            request = Request(scope)
            if method == "GET" and "text/html" in headers.get("accept", ""):
                return self.web.login(request, 401)
            return PlainTextResponse(
                "spex: no token (open the URL spex serve printed)\n",
                401,
                {"www-authenticate": "Bearer"},
            )
        return None


# --- forms ----------------------------------------------------------------------


async def read_form(request: Request) -> dict[str, str]:
    """An `application/x-www-form-urlencoded` body in UTF-8, bounded."""
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
            body.decode("ascii"), keep_blank_values=True, errors="strict", max_num_fields=20
        )
    except (UnicodeError, ValueError):
        raise Problem(400, "spex: the form is not valid UTF-8 form data") from None
    return dict(pairs)


def changing(web: Web, request: Request, form: dict[str, str]) -> None:
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


# --- routes ---------------------------------------------------------------------

Handler = Callable[[Request], Awaitable[Response]]


def routes(web: Web) -> list[Route]:
    home = web.home

    async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args)

    async def index(request: Request) -> Response:
        def read() -> tuple[int, dict[str, Any]]:
            spex = views.spex_for(home)
            since = views.last_event(spex)  # first: what happens after it reaches the page
            return since, views.board(spex)

        since, board = await in_thread(read)
        return web.render(request, "list.html", page="list", since=since, title="sessions", **board)

    async def rows(request: Request) -> Response:
        board = await in_thread(lambda: views.board(views.spex_for(home)))
        return web.render(request, "board.html", **board)

    async def login_page(request: Request) -> Response:
        return web.login(request, 200)

    async def login(request: Request) -> Response:
        form = await read_form(request)
        if not web.keys.token_ok(form.get("token", "")):
            return web.login(request, 401, "that is not this server's token")
        target = form.get("next", "/")
        if not target.startswith("/") or target.startswith("//") or "\\" in target:
            target = "/"
        response = RedirectResponse(target, 303)
        response.set_cookie(
            web.keys.cookie_name,
            web.keys.cookie_value,
            httponly=True,
            samesite="strict",
            path="/",
        )
        return response

    def session_context(name: str, turn: str | None) -> dict[str, Any]:
        spex = views.spex_for(home)
        since = views.last_event(spex)
        return {"since": since, **views.session(spex, name, turn)}

    async def session_page(
        request: Request, answer: actions.Answer | None = None, status: int = 200
    ) -> Response:
        name = session_name(request)
        context = await in_thread(session_context, name, request.query_params.get("turn"))
        return web.render(
            request,
            "session.html",
            status,
            page="session",
            session=name,
            title=name,
            flash=answer,
            tail=views.LOG_TAIL,
            **context,
        )

    async def panel(request: Request) -> Response:
        name = session_name(request)
        context = await in_thread(session_context, name, None)
        return web.render(request, "panel.html", **context)

    async def log_live(request: Request) -> Response:
        name = session_name(request)
        turn = request.query_params.get("turn") or ""
        tail = number(request.query_params.get("tail"))
        await in_thread(lambda: views.turn_state(views.spex_for(home), name, turn))
        tail = views.LOG_TAIL if tail is None else tail
        return sse_response(log_stream(web.hub, home, name, turn, tail))

    async def stop_page(request: Request) -> Response:
        if web.read_only:
            raise Problem(403, f"spex: {READ_ONLY}")
        name = session_name(request)
        context = await in_thread(session_context, name, None)
        return web.render(request, "stop.html", page="confirm", title=f"stop {name}", **context)

    def known(name: str) -> bool:
        try:
            sessions.get(views.spex_for(home), name)
        except UnknownSession:
            return False
        return True

    async def answered(request: Request, answer: actions.Answer) -> Response:
        status, name = status_of(answer.exit_code), session_name(request)
        if answer.exit_code == Refused.exit_code and not await in_thread(known, name):
            status = 404  # no such session, as its GET says (not 409, a state's refusal)
        if wants_json(request):
            response: Response = JSONResponse(answer.doc, status)
        else:
            try:
                response = await session_page(request, answer, status)
            except SpexError:  # no page to show it on (an unknown session): the line alone
                message = answer.line or f"spex: exited {answer.exit_code}"
                response = web.render(request, "error.html", status, page="error", message=message)
        response.headers["x-spex-exit-code"] = str(answer.exit_code)
        return response

    async def wake(request: Request) -> Response:
        name = session_name(request)
        form = await read_form(request)
        changing(web, request, form)
        # What the person typed, as the text box holds it: a form sends its
        # line breaks as CRLF (HTML's rule), the box had LF.
        prompt = form.get("prompt", "").replace("\r\n", "\n").encode("utf-8", "surrogateescape")
        answer = await in_thread(
            lambda: actions.wake(
                home, name, prompt, queue=bool(form.get("queue")), fresh=bool(form.get("fresh"))
            )
        )
        return await answered(request, answer)

    async def stop(request: Request) -> Response:
        name = session_name(request)
        form = await read_form(request)
        changing(web, request, form)
        if form.get("confirm") != "yes":
            context = await in_thread(session_context, name, None)
            return web.render(request, "stop.html", 400, page="confirm", **context)
        return await answered(request, await in_thread(actions.stop, home, name))

    async def resume(request: Request) -> Response:
        name = session_name(request)
        form = await read_form(request)
        changing(web, request, form)
        return await answered(request, await in_thread(actions.resume, home, name))

    async def wave_list(request: Request) -> Response:
        def read() -> tuple[int, list[dict[str, Any]]]:
            spex = views.spex_for(home)
            return views.last_event(spex), views.wave_list(spex)

        since, waves = await in_thread(read)
        template = "wavelist.html" if request.query_params.get("fragment") else "waves.html"
        return web.render(request, template, page="waves", since=since, title="waves", waves=waves)

    async def wave(request: Request) -> Response:
        ident = str(request.path_params["ident"])

        def read() -> tuple[int, dict[str, Any]]:
            spex = views.spex_for(home)
            return views.last_event(spex), views.wave(spex, ident)

        since, doc = await in_thread(read)
        template = "legs.html" if request.query_params.get("fragment") else "wave.html"
        return web.render(request, template, page="wave", since=since, title=doc["id"], wave=doc)

    async def event_feed(request: Request) -> Response:
        since = number(
            request.headers.get("last-event-id") or request.query_params.get("since") or "0"
        )
        if since is None:
            raise Problem(400, "spex: since is an event id")
        names = tuple(ids.validate_name(n) for n in request.query_params.getlist("session"))
        if web.hub.failed:
            raise Problem(503, f"spex: live updates stopped: {web.hub.failed}")
        return sse_response(event_stream(web.hub, home, since, names))

    return [
        Route("/", index),
        Route("/rows", rows),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/events", event_feed),
        Route("/waves", wave_list),
        Route("/w/{ident}", wave),
        Route("/s/{name}", session_page),
        Route("/s/{name}/panel", panel),
        Route("/s/{name}/log/live", log_live),
        Route("/s/{name}/stop", stop_page, methods=["GET"]),
        Route("/s/{name}/stop", stop, methods=["POST"]),
        Route("/s/{name}/wake", wake, methods=["POST"]),
        Route("/s/{name}/resume", resume, methods=["POST"]),
    ]


def sse_response(body: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(
        body, media_type="text/event-stream", headers={"x-accel-buffering": "no"}
    )


def create_app(home: Path, keys: auth.Keys, *, bound: str, read_only: bool) -> Guard:
    web = Web(home, keys, bound=bound, read_only=read_only)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(web.hub.start)
        yield

    async def problem(request: Request, exc: Exception) -> Response:
        if isinstance(exc, Problem):
            status, message = exc.status, exc.message
        elif isinstance(exc, SpexError):
            message = f"spex: {exc.line()}"
            status = 404 if isinstance(exc, UnknownSession) else status_of(exc.exit_code)
            if isinstance(exc, Invalid):
                status = 400
        else:
            raise exc
        if wants_json(request) or "text/html" not in request.headers.get("accept", ""):
            return PlainTextResponse(message + "\n", status)
        return web.render(request, "error.html", status, page="error", message=message)

    app = Starlette(
        routes=[*routes(web), triggers.route(home, read_only=read_only)],
        lifespan=lifespan,
        exception_handlers={Problem: problem, SpexError: problem},
    )
    return Guard(app, web)
