"""The web door (DESIGN §18): its guard and the app. Parse, call, render, as
`cli/` does: `pages` answers the GETs (reading through `views`; the streams
are `live`'s), `buttons` the POSTs (running the `spex` commands through
`actions`); what they share is `site`'s.

Every request passes `Guard` first: the Host check (DNS rebinding), GET,
HEAD and POST only, a POST's Origin, then the token (the cookie `/login`
set, or `Authorization: Bearer`); and every answer carries headers that
keep it out of frames, caches and other origins (no CORS header, ever),
with a Content-Security-Policy whose per-response nonce is the only way a
script or style runs.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio.to_thread
from starlette.applications import Starlette
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spexsup.errors import Invalid, SpexError, UnknownSession
from spexsup.web import auth, buttons, pages, triggers
from spexsup.web.site import Problem, Web, status_of, wants_json

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
        " connect-src 'self'; img-src 'self'; manifest-src 'self'; form-action 'self';"
        " frame-ancestors 'none';"
        " base-uri 'none'"
    )


def cookie_of(headers: Headers, name: str) -> str | None:
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


# What answers without the token: the sign-in, and what a browser fetches
# without its cookie to install the app (the manifest and its icons say
# nothing of this home).
OPEN = frozenset({"/login", "/manifest.webmanifest", "/icon.svg", "/icon-192.png", "/icon-512.png"})


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
        public = self.web.public
        if not auth.host_allowed(host, self.web.bound) and (
            public is None or host != public.hostname
        ):
            # A page whose DNS name was rebound to this address sends its own name.
            return PlainTextResponse(f"spex: {host or 'no host'!r} is not this server\n", 421)
        method = scope["method"]
        if method not in ("GET", "HEAD", "POST"):
            return PlainTextResponse("spex: GET, HEAD or POST only\n", 405, {"allow": "GET, POST"})
        if method == "POST":
            origin = headers.get("origin")
            site = headers.get("sec-fetch-site")
            ours = {f"http://{headers.get('host')}"}
            if public is not None:
                ours.add(f"{public.scheme}://{public.netloc}")
            if (origin is not None and origin not in ours) or site not in (
                None,
                "same-origin",
                "none",
            ):
                return PlainTextResponse("spex: a POST from another origin is refused\n", 403)
        if scope["path"] in OPEN:
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


# --- routes ---------------------------------------------------------------------


def routes(web: Web) -> list[Route]:
    """Every route: what the pages show (`pages`), what their buttons do
    (`buttons`). A door of another kind adds its own module's list here."""
    return [*pages.ROUTES, *buttons.ROUTES]


def create_app(
    home: Path, keys: auth.Keys, *, bound: str, read_only: bool, public: str | None = None
) -> Guard:
    web = Web(home, keys, bound=bound, read_only=read_only, public=public)

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
    app.state.web = web
    return Guard(app, web)
