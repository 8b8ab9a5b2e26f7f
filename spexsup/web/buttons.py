"""What the POSTs do (DESIGN §18): sign in, and the buttons (wake or queue,
stop, resume, drop a queued prompt, fan out, retry a wave's failed legs),
each the `spex` command itself (`actions`).

A browser's POST answers 303 to the page that shows what changed, and the
command's line rides along as a banner (a sealed cookie the page spends):
a refresh reloads that page and sends nothing again. A script asking for
JSON gets the command's own document and an HTTP status for its exit code.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from spexsup import ids
from spexsup.core import sessions
from spexsup.errors import Invalid, Refused, UnknownSession
from spexsup.web import actions, views
from spexsup.web.site import (
    Problem,
    Said,
    changing,
    in_thread,
    read_form,
    root_of,
    session_name,
    status_of,
    wants_json,
    web_of,
)


async def login(request: Request) -> Response:
    web = web_of(request)
    form = await read_form(request)
    if not web.keys.token_ok(form.get("token", "")):
        return web.login(request, 401, "that is not this server's token")
    # Where the page asked to go, as the browser saw it (a local path: with
    # a reverse proxy's prefix), else the root.
    target = form.get("next", "") or "./"
    if not target.startswith(("/", "./")) or target.startswith("//") or "\\" in target:
        target = "./"
    response = RedirectResponse(target, 303)
    response.set_cookie(
        web.keys.cookie_name, web.keys.cookie_value, httponly=True, samesite="strict", path="/"
    )
    return response


def word(text: str) -> bool:
    """An id as a command's argument takes it: letters, digits and inner
    dashes (never read as an option)."""
    return bool(text) and text.isascii() and text.replace("-", "").isalnum() and text[0] != "-"


def known(request: Request, name: str) -> bool:
    try:
        sessions.get(views.spex_for(web_of(request).home), name)
    except UnknownSession:
        return False
    return True


async def answered(request: Request, answer: actions.Answer, then: str) -> Response:
    """The answer to a button: 303 to `then` (relative to the root) with the
    banner, or the document for JSON; `X-Spex-Exit-Code` either way."""
    web, status = web_of(request), status_of(answer.exit_code)
    name = request.path_params.get("name")
    gone = (
        name is not None
        and answer.exit_code == Refused.exit_code
        and not await in_thread(known, request, name)
    )
    if gone:
        status = 404  # no such session, as its GET says (not 409, a state's refusal)
    if wants_json(request):
        response: Response = JSONResponse(answer.doc, status)
    elif gone:  # no page to show it on: the line alone
        message = answer.line or f"spex: exited {answer.exit_code}"
        response = web.render(request, "error.html", 404, page="error", message=message)
    else:
        response = RedirectResponse(root_of(request.scope["path"]) + then, 303)
        web.tell(response, Said(answer.ok, answer.line, answer.notes))
    response.headers["x-spex-exit-code"] = str(answer.exit_code)
    return response


async def wake(request: Request) -> Response:
    web, name = web_of(request), session_name(request)
    form = await read_form(request)
    changing(web, request, form)
    # What the person typed, as the text box holds it: a form sends its
    # line breaks as CRLF (HTML's rule), the box had LF.
    prompt = form.get("prompt", "").replace("\r\n", "\n").encode("utf-8", "surrogateescape")
    queue, fresh = bool(form.get("queue")), bool(form.get("fresh"))
    answer = await in_thread(lambda: actions.wake(web.home, name, prompt, queue=queue, fresh=fresh))
    return await answered(request, answer, f"s/{name}")


async def stop(request: Request) -> Response:
    web, name = web_of(request), session_name(request)
    form = await read_form(request)
    changing(web, request, form)
    if form.get("confirm") != "yes":
        from spexsup.web.pages import session_context

        context = await in_thread(session_context, request, None)
        return web.render(request, "stop.html", 400, page="confirm", **context)
    return await answered(request, await in_thread(actions.stop, web.home, name), f"s/{name}")


async def resume(request: Request) -> Response:
    web, name = web_of(request), session_name(request)
    form = await read_form(request)
    changing(web, request, form)
    answer = await in_thread(actions.resume, web.home, name)
    return await answered(request, answer, f"s/{name}")


async def drop(request: Request) -> Response:
    """A queued prompt of this session removed (`spex queue rm ID`)."""
    web, name = web_of(request), session_name(request)
    form = await read_form(request)
    changing(web, request, form)
    entry = form.get("id", "")
    if not word(entry):
        raise Problem(400, "spex: id names a queued prompt (spex queue ls)")
    ours = await in_thread(lambda: [q["id"] for q in views.queued(views.spex_for(web.home), name)])
    if entry not in ours:  # `queue rm` takes any session's: this page drops its own only
        hint = f"spex queue ls {name}"
        answer = actions.refusal(Refused(f"{name} has no queued prompt {entry}", hint=hint))
    else:
        answer = await in_thread(actions.drop, web.home, entry)
    return await answered(request, answer, f"s/{name}")


async def fanout(request: Request) -> Response:
    """One prompt to the sessions ticked (`spex fanout NAME… -f -`)."""
    web = web_of(request)
    form = await read_form(request)
    changing(web, request, form)
    names = [ids.validate_name(n) for n in form.getlist("session")]
    prompt = form.get("prompt", "").replace("\r\n", "\n").encode("utf-8", "surrogateescape")
    if not names:
        answer = actions.refusal(Invalid("no session ticked", hint="tick the sessions to wake"))
    else:
        answer = await in_thread(actions.fanout, web.home, names, prompt)
    made = (answer.doc or {}).get("id")  # a wave was made, whatever its legs did
    return await answered(request, answer, f"w/{made}" if made else "waves")


async def retry(request: Request) -> Response:
    """A new wave of this wave's failed legs (`spex fanout --retry-failed`)."""
    web, ident = web_of(request), str(request.path_params["ident"])
    if not word(ident):
        raise Problem(400, f"spex: {ident!r} is no wave id (spex wave ls)")
    form = await read_form(request)
    changing(web, request, form)
    answer = await in_thread(actions.retry, web.home, ident)
    made = (answer.doc or {}).get("id")
    return await answered(request, answer, f"w/{made}" if made else "waves")


ROUTES = [
    Route("/login", login, methods=["POST"]),
    Route("/s/{name}/stop", stop, methods=["POST"]),
    Route("/s/{name}/wake", wake, methods=["POST"]),
    Route("/s/{name}/resume", resume, methods=["POST"]),
    Route("/s/{name}/queue/drop", drop, methods=["POST"]),
    Route("/waves/fanout", fanout, methods=["POST"]),
    Route("/w/{ident}/retry", retry, methods=["POST"]),
]
