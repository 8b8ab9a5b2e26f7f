"""`spex maint` and `spex maint-op`."""

from __future__ import annotations

from typing import Annotated

import typer

from spexsup.cli.app import app, open_spex
from spexsup.cli.render import print_json
from spexsup.errors import Invalid


@app.command(context_settings={"allow_interspersed_args": False})
def maint(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None, typer.Argument(help="After --: the command to run.")
    ] = None,
    stop: Annotated[list[str] | None, typer.Option("--stop", help="Grant: stop NAME.")] = None,
    resume: Annotated[
        list[str] | None, typer.Option("--resume", help="Grant: resume NAME (NAME:force).")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Lease every session.")] = False,
    ttl: Annotated[float, typer.Option("--ttl", help="Lease time to live, seconds.")] = 30.0,
    wait: Annotated[float, typer.Option("--wait", help="Wait this long for the lease.")] = 30.0,
    status: Annotated[bool, typer.Option("--status", help="Show the lease.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (with --status).")] = False,
) -> None:
    """Run CMD under a maintenance lease that grants exactly the listed operations."""
    from spexsup import lease
    from spexsup.broker import Maintenance

    spex = open_spex(ctx)
    if status:
        if command or stop or resume or all_:
            raise Invalid("--status takes no command and no plan")
        with spex.store.tx() as db:
            view = lease.status(db)
        if as_json:
            print_json(view)
            return
        if view["state"] == "open":
            last = f" (last epoch {view['epoch']})" if view["epoch"] else ""
            typer.echo(f"no maintenance lease{last}")
            return
        holder = view["holder"]["pid"] if view["holder"] else "-"
        typer.echo(f"lease epoch {view['epoch']}: {view['state']} (holder pid {holder})")
        typer.echo(f"scope: {view['scope']}")
        for cap in view["plan"]:
            force = ":force" if cap["force"] else ""
            typer.echo(f"  {cap['op']} {cap['session']}{force}: {cap['state']}")
        return
    plan = lease.parse_plan(stop or [], resume or [])
    code = Maintenance(spex, plan, all_sessions=all_, ttl=ttl, wait=wait).run(command or [])
    raise typer.Exit(code)


maint_op = typer.Typer(help="Inside a spex maint command: ask the broker for a granted operation.")
app.add_typer(maint_op, name="maint-op")


@maint_op.command("stop")
def op_stop(name: str) -> None:
    """Stop NAME (granted by --stop NAME)."""
    from spexsup import maint_client

    maint_client.run("stop", name)
    typer.echo(f"{name}: stopped (committed)")


@maint_op.command("resume")
def op_resume(
    name: str,
    force: Annotated[bool, typer.Option("--force", help="Needs --resume NAME:force.")] = False,
) -> None:
    """Resume NAME (granted by --resume NAME)."""
    from spexsup import maint_client

    maint_client.run("resume", name, force)
    typer.echo(f"{name}: resumed (committed)")
