"""`spex maint` and `spex maint-op`."""

from typing import Annotated

import typer

from spexsup.cli import complete
from spexsup.cli.app import app, open_spex
from spexsup.cli.params import JsonOpt
from spexsup.cli.render import document, print_json, with_iso
from spexsup.errors import Invalid


@app.command(context_settings={"allow_interspersed_args": False})
def maint(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None,
        typer.Argument(metavar="-- CMD ARGS…", help="The command to run.", show_default=False),
    ] = None,
    stop: Annotated[
        list[str] | None,
        typer.Option(
            "--stop",
            metavar="NAME",
            help="Grant: stop NAME once; repeatable.",
            autocompletion=complete.session_names,
        ),
    ] = None,
    resume: Annotated[
        list[str] | None,
        typer.Option(
            "--resume",
            metavar="NAME[:force]",
            help="Grant: resume NAME once (:force to force it); repeatable.",
            autocompletion=complete.session_names,
        ),
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Lease every session.")] = False,
    ttl: Annotated[
        str,
        typer.Option(
            "--ttl", metavar="DURATION", help="Lease time to live, a duration: 90s, 15m, 2h."
        ),
    ] = "30s",
    wait: Annotated[
        str,
        typer.Option(
            "--wait",
            metavar="DURATION",
            help="Wait this long for the lease, a duration: 90s, 15m, 2h.",
        ),
    ] = "30s",
    status: Annotated[bool, typer.Option("--status", help="Show the lease.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run CMD under a lease granting exactly the listed operations.

    \b
    Examples:
      spex maint --stop api --resume api -- ./upgrade.sh
      spex maint --all --ttl 1m -- ./backup.sh
      spex maint --status --json
    """
    from spexsup import durations, lease
    from spexsup.broker.holder import Maintenance
    from spexsup.broker.serve import run

    ttl_s = durations.parse(ttl, "--ttl", minimum=0.5, maximum=86400)
    wait_s = durations.parse(wait, "--wait", allow_zero=True, maximum=86400)
    spex = open_spex(ctx)
    if status:
        if command or stop or resume or all_:
            raise Invalid("--status takes no command and no plan")
        with spex.store.tx() as db:
            view = lease.status(db)
        if as_json:
            print_json(document(with_iso(view)))
            return
        if view["state"] == "open":
            last = f" (the last one, number {view['epoch']}, has ended)" if view["epoch"] else ""
            typer.echo(f"no maintenance lease is held{last}")
            return
        holder = view["holder"]["pid"] if view["holder"] else "-"
        typer.echo(f"maintenance lease {view['epoch']}: {view['state']} (held by pid {holder})")
        scope = view["scope"]
        typer.echo(f"scope: {', '.join(scope) if isinstance(scope, list) else scope}")
        for cap in view["plan"]:
            force = ":force" if cap["force"] else ""
            typer.echo(f"  {cap['op']} {cap['session']}{force}: {cap['state']}")
        return
    plan = lease.parse_plan(stop or [], resume or [])
    maint = Maintenance(spex, plan, all_sessions=all_, ttl=ttl_s, wait=wait_s)
    # On stderr: stdout belongs to the command. One line per change, no escapes.
    maint.on_wait = lambda what: typer.echo(f"spex: {what}", err=True)
    code = run(maint, command or [])
    raise typer.Exit(code)


maint_op = typer.Typer(help="Inside a spex maint command: ask the broker for a granted operation.")
app.add_typer(maint_op, name="maint-op", hidden=True)


def _committed(name: str, what: str, as_json: bool) -> None:
    if as_json:
        print_json(document({"ok": True, "session": name, "outcome": "committed"}))
    else:
        typer.echo(f"{name}: {what}")


@maint_op.command("stop")
def op_stop(name: Annotated[str, typer.Argument(metavar="NAME")], as_json: JsonOpt = False) -> None:
    """Stop NAME (granted by --stop NAME)."""
    from spexsup import maint_client

    maint_client.run("stop", name)
    _committed(name, "stopped", as_json)


@maint_op.command("resume")
def op_resume(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    force: Annotated[bool, typer.Option("--force", help="Needs --resume NAME:force.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Resume NAME (granted by --resume NAME)."""
    from spexsup import maint_client

    maint_client.run("resume", name, force)
    _committed(name, "resumed", as_json)


internal = typer.Typer(help="Used by spex itself.")
app.add_typer(internal, name="internal", hidden=True)


@internal.command("turn-exit")
def turn_exit(
    session: Annotated[str, typer.Argument(metavar="SESSION")],
    turn: Annotated[str, typer.Argument(metavar="TURN")],
    rc: Annotated[int, typer.Argument(metavar="RC")],
) -> None:
    """The turn wrapper's exit reporter (answered before typer loads; see cli/internal.py)."""
    from spexsup.cli import internal as fast

    raise typer.Exit(fast.fast_path(["internal", "turn-exit", session, turn, str(rc)]) or 0)


@internal.command("dequeue")
def dequeue(ctx: typer.Context, name: Annotated[str, typer.Argument(metavar="NAME")]) -> None:
    """Launch NAME's next queued prompt if NAME is free (started detached by
    the process that records an end, and by readers; see spexsup.turn.queue)."""
    from spexsup.turn.queue import dequeue as launch_next

    launch_next(open_spex(ctx), name)


@internal.command("schedule-fire")
def schedule_fire(
    ctx: typer.Context, schedule: Annotated[str, typer.Argument(metavar="ID")]
) -> None:
    """Fire schedule ID for the slot it is due in (what its systemd timer or
    crontab line runs; see spexsup.turn.scheduled)."""
    from spexsup.cli.schedule import engine_fire

    engine_fire(ctx, schedule)
