"""What the GETs show (DESIGN §18): the list, a session, the waves, their
fragments for the live updates, the two SSE streams, and the installable
app's manifest and icons. Each reads through `views`; none changes a thing
a reader would not (a read reconciles, as `spex ls` does)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from spexsup import ids
from spexsup.web import icons, views
from spexsup.web.live import event_stream, log_stream
from spexsup.web.site import (
    READ_ONLY,
    Problem,
    in_thread,
    number,
    session_name,
    sse_response,
    web_of,
)


def board_of(request: Request) -> tuple[str, str]:
    """The list's filters: `?state=` (a need, or `attention`) and `?name=`."""
    from spexsup.present.triage import FILTERS

    wanted = request.query_params.get("state", "")
    if wanted not in FILTERS:
        listed = ", ".join(f for f in FILTERS if f)
        raise Problem(400, f"spex: no state {wanted!r} to filter by (one of {listed})")
    return wanted, request.query_params.get("name", "").strip()


async def index(request: Request) -> Response:
    home, (wanted, pattern) = web_of(request).home, board_of(request)

    def read() -> tuple[int, dict[str, Any]]:
        spex = views.spex_for(home)
        since = views.last_event(spex)  # first: what happens after it reaches the page
        return since, views.board(spex, wanted, pattern)

    since, board = await in_thread(read)
    return web_of(request).render(
        request, "list.html", page="list", since=since, title="sessions", **board
    )


async def rows(request: Request) -> Response:
    home, (wanted, pattern) = web_of(request).home, board_of(request)
    board = await in_thread(lambda: views.board(views.spex_for(home), wanted, pattern))
    return web_of(request).render(request, "board.html", **board)


async def login_page(request: Request) -> Response:
    return web_of(request).login(request, 200)


def session_context(request: Request, turn: str | None) -> dict[str, Any]:
    spex = views.spex_for(web_of(request).home)
    since = views.last_event(spex)
    return {"since": since, **views.session(spex, session_name(request), turn)}


async def session_page(request: Request) -> Response:
    name = session_name(request)
    context = await in_thread(session_context, request, request.query_params.get("turn"))
    return web_of(request).render(
        request,
        "session.html",
        page="session",
        session=name,
        title=name,
        tail=views.LOG_TAIL,
        **context,
    )


async def panel(request: Request) -> Response:
    context = await in_thread(session_context, request, None)
    # Its links go where the session page's go: it is shown in that page.
    return web_of(request).render(request, "parts.html", root="../", **context)


async def log_live(request: Request) -> Response:
    name, home = session_name(request), web_of(request).home
    turn = request.query_params.get("turn") or ""
    tail = number(request.query_params.get("tail"))
    await in_thread(lambda: views.turn_state(views.spex_for(home), name, turn))
    tail = views.LOG_TAIL if tail is None else tail
    return sse_response(log_stream(web_of(request).hub, home, name, turn, tail))


async def stop_page(request: Request) -> Response:
    web = web_of(request)
    if web.read_only:
        raise Problem(403, f"spex: {READ_ONLY}")
    name = session_name(request)
    context = await in_thread(session_context, request, None)
    return web.render(request, "stop.html", page="confirm", title=f"stop {name}", **context)


async def wave_list(request: Request) -> Response:
    home = web_of(request).home

    def read() -> tuple[int, list[dict[str, Any]], list[dict[str, str]]]:
        spex = views.spex_for(home)
        return views.last_event(spex), views.wave_list(spex), views.names(spex)

    since, waves, choices = await in_thread(read)
    template = "wavelist.html" if request.query_params.get("fragment") else "waves.html"
    return web_of(request).render(
        request, template, page="waves", since=since, title="waves", waves=waves, choices=choices
    )


async def wave(request: Request) -> Response:
    ident, home = str(request.path_params["ident"]), web_of(request).home

    def read() -> tuple[int, dict[str, Any]]:
        spex = views.spex_for(home)
        return views.last_event(spex), views.wave(spex, ident)

    since, doc = await in_thread(read)
    template = "legs.html" if request.query_params.get("fragment") else "wave.html"
    return web_of(request).render(
        request, template, page="wave", since=since, title=doc["id"], wave=doc
    )


async def event_feed(request: Request) -> Response:
    web = web_of(request)
    since = number(request.headers.get("last-event-id") or request.query_params.get("since") or "0")
    if since is None:
        raise Problem(400, "spex: since is an event id")
    names = tuple(ids.validate_name(n) for n in request.query_params.getlist("session"))
    if web.hub.failed:
        raise Problem(503, f"spex: live updates stopped: {web.hub.failed}")
    return sse_response(event_stream(web.hub, web.home, since, names))


async def manifest(request: Request) -> Response:
    """The web app manifest: its URLs are relative to it, so the app installs
    and opens wherever it is served (`ssh -L`, a reverse proxy's prefix)."""
    return JSONResponse(icons.MANIFEST, media_type="application/manifest+json")


async def icon(request: Request) -> Response:
    body, kind = icons.file(request.url.path.rsplit("/", 1)[1])
    return Response(body, media_type=kind)


ROUTES = [
    Route("/", index),
    Route("/rows", rows),
    Route("/login", login_page, methods=["GET"]),
    Route("/events", event_feed),
    Route("/waves", wave_list),
    Route("/w/{ident}", wave),
    Route("/s/{name}", session_page),
    Route("/s/{name}/panel", panel),
    Route("/s/{name}/log/live", log_live),
    Route("/s/{name}/stop", stop_page, methods=["GET"]),
    Route("/manifest.webmanifest", manifest),
    *(Route(f"/{name}", icon) for name in icons.FILES),
]
