"""`spex maint` and `spex maint-op`."""

from typing import Annotated

import typer

from spexsup.cli import complete, decl
from spexsup.cli.app import app
from spexsup.cli.decl import command, open_spex
from spexsup.cli.params import JsonOpt
from spexsup.errors import Invalid
from spexsup.present.render import document, print_json, with_iso


@command(context_settings={"allow_interspersed_args": False})
def maint(
    ctx: decl.Context,
    command: Annotated[
        list[str] | None,
        decl.Argument(metavar="-- CMD ARGS…", help="The command to run.", show_default=False),
    ] = None,
    stop: Annotated[
        list[str] | None,
        decl.Option(
            "--stop",
            metavar="NAME",
            help="Grant: stop NAME once; repeatable.",
            autocompletion=complete.session_names,
        ),
    ] = None,
    resume: Annotated[
        list[str] | None,
        decl.Option(
            "--resume",
            metavar="NAME[:force]",
            help="Grant: resume NAME once (:force to force it); repeatable.",
            autocompletion=complete.session_names,
        ),
    ] = None,
    all_: Annotated[bool, decl.Option("--all", help="Lease every session.")] = False,
    ttl: Annotated[
        str,
        decl.Option(
            "--ttl", metavar="DURATION", help="Lease time to live, a duration: 90s, 15m, 2h."
        ),
    ] = "30s",
    wait: Annotated[
        str,
        decl.Option(
            "--wait",
            metavar="DURATION",
            help="Wait this long for the lease, a duration: 90s, 15m, 2h.",
        ),
    ] = "30s",
    status: Annotated[
        bool, decl.Option("--status", help="Show the lease (as spex maint ls does).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run CMD under a lease granting exactly the listed operations.

    `spex maint ls` (or --status) shows the lease.

    \b
    Examples:
      spex maint --stop api --resume api -- ./upgrade.sh
      spex maint --all --ttl 1m -- ./backup.sh
      spex maint ls --json
    """
    from spexsup import durations
    from spexsup.conductors.broker.holder import Maintenance
    from spexsup.conductors.broker.serve import run
    from spexsup.state import lease

    if command and command[0] == "ls" and "--" not in ctx.find_root().meta.get("spex.argv", []):
        # `spex maint ls [--json]` shows the lease, as --status does (a
        # command named ls comes after --, as every command does). Words
        # after the first are not parsed as options here: read them.
        if set(command[1:]) - {"--json"}:
            raise Invalid(f"spex maint ls takes only --json, not {' '.join(command[1:])!r}")
        status, as_json, command = True, as_json or "--json" in command, None

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
            decl.echo(f"no maintenance lease is held{last}")
            return
        holder = view["holder"]["pid"] if view["holder"] else "-"
        decl.echo(f"maintenance lease {view['epoch']}: {view['state']} (held by pid {holder})")
        scope = view["scope"]
        decl.echo("scope: " + (", ".join(scope) if isinstance(scope, list) else str(scope)))
        for cap in view["plan"]:
            force = ":force" if cap["force"] else ""
            decl.echo(f"  {cap['op']} {cap['session']}{force}: {cap['state']}")
        return
    plan = lease.parse_plan(stop or [], resume or [])
    maint = Maintenance(spex, plan, all_sessions=all_, ttl=ttl_s, wait=wait_s)
    # On stderr: stdout belongs to the command. One line per change, no escapes.
    maint.on_wait = lambda what: decl.echo(f"spex: {what}", err=True)
    code = run(maint, command or [])
    raise decl.Exit(code)


maint_op = typer.Typer(help="Inside a spex maint command: ask the broker for a granted operation.")
app.add_typer(maint_op, name="maint-op", hidden=True)


def _committed(name: str, what: str, as_json: bool) -> None:
    if as_json:
        print_json(document({"ok": True, "session": name, "outcome": "committed"}))
    else:
        decl.echo(f"{name}: {what}")


@maint_op.command("stop")
def op_stop(name: Annotated[str, decl.Argument(metavar="NAME")], as_json: JsonOpt = False) -> None:
    """Stop NAME (granted by --stop NAME)."""
    from spexsup.adapters import maint_client

    maint_client.run("stop", name)
    _committed(name, "stopped", as_json)


@maint_op.command("resume")
def op_resume(
    name: Annotated[str, decl.Argument(metavar="NAME")],
    force: Annotated[bool, decl.Option("--force", help="Needs --resume NAME:force.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Resume NAME (granted by --resume NAME)."""
    from spexsup.adapters import maint_client

    maint_client.run("resume", name, force)
    _committed(name, "resumed", as_json)


internal = typer.Typer(help="Used by spex itself.")
app.add_typer(internal, name="internal", hidden=True)


@internal.command("turn-exit")
def turn_exit(
    session: Annotated[str, decl.Argument(metavar="SESSION")],
    turn: Annotated[str, decl.Argument(metavar="TURN")],
    rc: Annotated[int, decl.Argument(metavar="RC")],
) -> None:
    """The turn wrapper's exit reporter (answered before typer loads; see cli/internal.py)."""
    from spexsup.cli import internal as fast

    raise decl.Exit(fast.fast_path(["internal", "turn-exit", session, turn, str(rc)]) or 0)


@internal.command("dequeue")
def dequeue(ctx: decl.Context, name: Annotated[str, decl.Argument(metavar="NAME")]) -> None:
    """Launch NAME's next queued prompt if NAME is free (started detached by
    the process that records an end, and by readers; see spexsup.turn.queue)."""
    from spexsup.turn.queue import dequeue as launch_next

    launch_next(open_spex(ctx), name, keep=True)


@internal.command("schedule-fire")
def schedule_fire(ctx: decl.Context, schedule: Annotated[str, decl.Argument(metavar="ID")]) -> None:
    """Fire schedule ID for the slot it is due in (what its systemd timer or
    crontab line runs; see spexsup.turn.scheduled)."""
    from spexsup.cli.schedule import engine_fire

    engine_fire(ctx, schedule)
