"""`spex serve`: the web door (spexsup.web), started here.

Starlette, uvicorn and jinja2 are imported inside the command body only:
`spex --help` and every other command never load them.
"""

import socket
import sys
from typing import TYPE_CHECKING, Annotated

from spexsup.cli import decl
from spexsup.cli.decl import command, open_spex
from spexsup.errors import Failed, Invalid

if TYPE_CHECKING:
    from spexsup.web.app import Guard


@command()
def serve(
    ctx: decl.Context,
    host: Annotated[
        str,
        decl.Option(
            "--host",
            metavar="ADDRESS",
            help="Listen on ADDRESS. Anything but 127.0.0.1, localhost or ::1 is said with a"
            " warning: reach it through ssh -L instead.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        decl.Option(
            "--port", metavar="PORT", min=0, max=65535, help="Listen on PORT (0: a free one)."
        ),
    ] = 0,
    read_only: Annotated[
        bool,
        decl.Option(
            "--read-only", help="Show sessions, logs and waves only: no buttons; POSTs get 403."
        ),
    ] = False,
    new_token: Annotated[
        bool,
        decl.Option(
            "--new-token",
            help="Make a new token first (every browser signed in with the old one is out).",
        ),
    ] = False,
) -> None:
    """Serve a web view of every session (live), with wake, stop and resume.

    Prints its URL once, with the token in the part after #; the page moves
    it into a cookie (HttpOnly, SameSite=Strict). Every request (but a signed
    webhook's) needs that cookie or `Authorization: Bearer TOKEN`; every button is a POST that also
    needs the page's CSRF token. The token is kept in $SPEXSUP_HOME/serve.token
    (0600) across restarts. Runs until Ctrl-C; nothing else in spex needs it.

    A webhook signed with the secret of a [trigger.NAME] table in
    config.toml, POSTed to /trigger/NAME, wakes its session once per
    delivery (README: Webhooks that wake agents).

    \b
    Examples:
      spex serve
      spex serve --port 8765 --read-only
      ssh -L 8765:127.0.0.1:8765 box 'spex serve --port 8765'
      curl -H "Authorization: Bearer $(cat ~/.local/state/spexsup/serve.token)" \\
        http://127.0.0.1:8765/rows
    """
    from spexsup.web import auth
    from spexsup.web.app import create_app

    address = host.strip()
    if not address:
        raise Invalid("invalid --host ''", hint="an address: 127.0.0.1, ::1, 0.0.0.0")
    spex = open_spex(ctx)
    token = auth.load_token(spex.home, renew=new_token)
    from spexsup import config

    public = config.load(spex.home).serve_url
    spex.close()
    listener = listen(address.strip("[]"), port)
    bound_port = listener.getsockname()[1]
    if not auth.is_loopback(address.strip("[]")):
        print(
            f"spex: warning: listening on {address}: anyone who can reach it and has the token"
            " can wake and stop your agents (prefer 127.0.0.1 and ssh -L)",
            file=sys.stderr,
        )
    shown = address.strip("[]")
    if shown in ("0.0.0.0", "::"):
        shown = "127.0.0.1" if shown == "0.0.0.0" else "::1"
    where = f"[{shown}]" if ":" in shown else shown
    ro = " (read-only)" if read_only else ""
    print(f"spex serve{ro}: http://{where}:{bound_port}/#token={token}", flush=True)
    asgi = create_app(
        spex.home, auth.Keys(token), bound=address.strip("[]"), read_only=read_only, public=public
    )
    run(listener, asgi)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port): the port is known before the server
    starts (--port 0), and a taken one is one line, exit 1."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise Invalid(f"invalid --host {host!r}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise Failed(f"cannot listen on {host} port {port}: {e.strerror}") from None
    sock.set_inheritable(False)
    return sock


def run(listener: socket.socket, asgi: "Guard") -> None:
    """uvicorn on `listener` until SIGINT/SIGTERM (then the CLI exits 130/143);
    the live streams end first, so the shutdown waits for nothing."""
    import asyncio
    import contextlib
    from types import FrameType

    import uvicorn

    class Server(uvicorn.Server):
        # The loop running main_loop and what wakes it on a signal; until then
        # a signal has nothing to wake (main_loop looks at should_exit first).
        loop: asyncio.AbstractEventLoop | None = None
        exiting: asyncio.Event | None = None

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            asgi.stopping()
            super().handle_exit(sig, frame)
            if self.loop is not None and self.exiting is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed already
                    self.loop.call_soon_threadsafe(self.exiting.set)

        async def main_loop(self) -> None:
            """uvicorn's own wakes ten times a second to see whether a signal
            came: an idle server's main cost. Here the signal wakes it, and it
            wakes once a second to renew the Date header (on_tick at 0 does)."""
            self.exiting = asyncio.Event()
            self.loop = asyncio.get_running_loop()
            while not await self.on_tick(0):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.exiting.wait(), 1.0)

    config = uvicorn.Config(
        asgi,
        log_level="warning",
        access_log=False,  # the token is never in a URL, but a page's address is nobody's log
        lifespan="on",
        timeout_graceful_shutdown=1,  # live streams never end by themselves
        server_header=False,
        proxy_headers=False,
    )
    Server(config).run(sockets=[listener])
