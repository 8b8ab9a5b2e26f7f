"""`spex mcp`: serve the Model Context Protocol over stdio (spexsup.doors.mcp_server).

The server and the SDK under it (mcp, pydantic, starlette, anyio) are
imported inside the command: no other command pays for them.
"""

import sys
from typing import Annotated

from spexsup.cli import decl
from spexsup.cli.decl import command, open_spex


@command("mcp")
def mcp_command(
    ctx: decl.Context,
    read_only: Annotated[
        bool,
        decl.Option(
            "--read-only",
            help="Offer only the reading tools (list_sessions, show_session, wait, read_log,"
            " show_wave, events_since, list_queue, list_schedules, cost, diff) and the logs.",
        ),
    ] = False,
) -> None:
    """Serve spex to an agent over MCP (stdio): its tools answer as `spex … --json` does.

    Tools: list_sessions, show_session, wake, wait, read_log, stop, resume,
    fanout, retry_failed, show_wave, events_since, new_session, edit_session,
    remove_sessions, list_queue, drop_queued, list_schedules, add_schedule,
    remove_schedules, cost, diff, keep; resources: each session's log
    (spex://sessions/NAME/log). Each tool runs the command it names and
    returns its JSON document (a list as a JSON array); a refusal or failure
    is a tool error with spex's message and exit code. It serves until stdin
    closes.

    \b
    Examples:
      claude mcp add spex -- spex mcp
      codex mcp add spex -- spex mcp --read-only
      spex --home ~/agents mcp
    """
    spex = open_spex(ctx)  # a broken home or config.toml fails here, before serving
    options = ["--home", str(spex.home)]
    if getattr(sys.modules.get("spexsup.core.spex"), "NO_HOOKS", False):
        options.append("--no-hooks")
    from spexsup.doors.mcp_server import serve

    code = serve(options, read_only=read_only)
    if code:
        raise decl.Exit(code)
