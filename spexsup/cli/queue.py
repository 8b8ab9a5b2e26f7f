"""`spex queue [ls] [NAME…] | rm ID… | clear NAME…`: the prompts `spex wake
--queue` keeps until their session is free."""

import time
from typing import Annotated

import typer

from spexsup.cli import decl
from spexsup.cli.app import SpexGroup, app
from spexsup.cli.decl import open_spex
from spexsup.cli.params import JsonOpt, NamesArg
from spexsup.present.render import age, document, dropped_line, print_json, table

queue_app = typer.Typer(cls=SpexGroup, invoke_without_command=True)
app.add_typer(queue_app, name="queue")


@queue_app.callback()
def queue_group(ctx: decl.Context) -> None:
    """Prompts waiting for their session (spex wake --queue): list, remove, clear.

    Bare `spex queue` lists them all, as `spex queue ls` does.

    \b
    Examples:
      spex queue
      spex queue ls api --json
      spex queue rm q20261201T120000Z-1a2b3c
      spex queue clear api
    """
    if ctx.invoked_subcommand is None:
        _list(ctx, [], as_json=False)


def _list(ctx: decl.Context, names: list[str], *, as_json: bool) -> None:
    from spexsup.core.sessions import get
    from spexsup.turn.queue import entries, positions

    spex = open_spex(ctx)
    for n in names:
        get(spex, n)
    found = entries(spex, tuple(names))
    places = positions(entries(spex))
    if as_json:
        print_json([document(e.as_json(places[e.id])) for e in found])
        return
    if not found:
        decl.echo("no queued prompts (spex wake NAME --queue TEXT queues one)")
        return
    now = time.time()
    rows = [
        [e.id, e.session, str(places[e.id]), age(now - e.created_at), e.first_line or ""]
        for e in found
    ]
    table(["ID", "SESSION", "POS", "QUEUED", "PROMPT"], rows, squeeze="PROMPT")


@queue_app.command("ls")
def queue_ls(ctx: decl.Context, names: NamesArg = None, as_json: JsonOpt = False) -> None:
    """List queued prompts: id, session, position, age and first line.

    \b
    Examples:
      spex queue ls
      spex queue ls api --json
    """
    _list(ctx, names or [], as_json=as_json)


@queue_app.command("rm")
def queue_rm(
    ctx: decl.Context,
    entries: Annotated[
        list[str], decl.Argument(metavar="ID…", help="Queued prompt ids (or unique prefixes).")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Remove queued prompts (they never launch).

    \b
    Examples:
      spex queue rm q20261201T120000Z-1a2b3c
    """
    from spexsup.turn.queue import remove

    spex = open_spex(ctx)
    gone = [remove(spex, e) for e in entries]
    if as_json:
        print_json([document({"ok": True, "id": e.id, "session": e.session}) for e in gone])
        return
    for e in gone:
        decl.echo(dropped_line({"session": e.session, "id": e.id}))


@queue_app.command("clear")
def queue_clear(ctx: decl.Context, names: NamesArg = None, as_json: JsonOpt = False) -> None:
    """Remove every queued prompt of the named sessions.

    \b
    Examples:
      spex queue clear api
    """
    from spexsup.core.sessions import get
    from spexsup.errors import Invalid
    from spexsup.turn.queue import clear

    if not names:
        raise Invalid("name the sessions whose queue to clear")
    spex = open_spex(ctx)
    for n in names:
        get(spex, n)
    docs = []
    for n in names:
        gone = clear(spex, n)
        docs.append(document({"ok": True, "session": n, "removed": [e.id for e in gone]}))
        if not as_json:
            decl.echo(f"{n}: removed {len(gone)} queued prompt{'s' * (len(gone) != 1)}")
    if as_json:
        print_json(docs)
