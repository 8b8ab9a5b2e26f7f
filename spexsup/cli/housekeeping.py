"""`spex prune | du`: retention by hand, and where the state home's bytes go."""

from typing import Annotated

import typer

from spexsup import ids
from spexsup.cli import complete
from spexsup.cli.app import app, open_spex, settings
from spexsup.cli.params import JsonOpt
from spexsup.cli.render import print_json, table


@app.command()
def prune(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would go; change nothing.")
    ] = False,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="AGE",
            help="Also remove what is older than AGE, a duration: 30d, 12h, 2w, 0s, in place"
            " of [retention] keep_days. [default: keep_days, else 90d]",
            show_default=False,
        ),
    ] = None,
    session: Annotated[
        list[str] | None,
        typer.Option(
            "--session",
            metavar="NAME",
            help="Prune only this session's turns (waves and events stay); repeatable.",
            autocompletion=complete.session_names,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove old turns, waves and events as config.toml's [retention] says.

    Keeps keep_turns turns per session (default 500), anything younger than
    keep_days (90), keep_waves waves (1000) and keep_events events (100000).
    Never removes a current or running turn, a session's last turn, or what a
    maintenance lease or a running wave refers to. Writers also prune, at
    most once an hour and a little at a time ([retention] auto = false: never).

    \b
    Examples:
      spex prune --dry-run
      spex prune --older-than 30d
      spex prune --session api --session web --json
    """
    from spexsup import durations, retention

    for name in session or []:
        ids.validate_name(name)
    older = None
    if older_than is not None:
        older = durations.parse(older_than, "--older-than", allow_zero=True, maximum=None)
    spex = open_spex(ctx)
    policy = settings(ctx, spex).retention
    done = retention.prune(
        spex.store,
        spex.home,
        policy,
        dry_run=dry_run,
        older_than=older,
        sessions=list(dict.fromkeys(session)) if session else None,
    )
    if as_json:
        print_json(done.as_json())
        return
    verb = "would remove" if dry_run else "removed"
    total = sum(done.turns.values())
    parts = [f"{total} turn{'s' * (total != 1)}"]
    parts.append(f"{len(done.waves)} wave{'s' * (len(done.waves) != 1)}")
    parts.append(f"{done.events} event{'s' * (done.events != 1)}")
    if done.orphans:
        parts.append(f"{done.orphans} orphaned entr{'ies' if done.orphans != 1 else 'y'}")
    freed = retention.human_bytes(done.bytes)
    typer.echo(f"{verb} {', '.join(parts)}; {'would free' if dry_run else 'freed'} {freed}")
    for name, count in sorted(done.turns.items()):
        typer.echo(f"  {name}: {count} turn{'s' * (count != 1)}")


@app.command()
def du(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Show the state home's disk use by session, waves and database, and what prune frees.

    \b
    Examples:
      spex du
      spex du --json | jq '.sessions | sort_by(.bytes) | reverse | .[0]'
    """
    from spexsup import retention

    spex = open_spex(ctx)
    use = retention.du(spex.store, spex.home, settings(ctx, spex).retention)
    if as_json:
        print_json(use)
        return
    size = retention.human_bytes
    rows = [
        [s["name"], str(s["turns"]), size(s["bytes"]), size(s["log_bytes"])]
        for s in use["sessions"]
    ]
    if rows:
        table(["SESSION", "TURNS", "SIZE", "LOGS"], rows)
    typer.echo(f"waves     {use['waves']['count']}, {size(use['waves']['bytes'])}")
    typer.echo(f"database  {size(use['database_bytes'])}")
    if use["orphans"]["count"]:
        typer.echo(
            f"orphans   {use['orphans']['count']}, {size(use['orphans']['bytes'])}"
            " (left by an interrupted prune; spex prune removes them)"
        )
    typer.echo(f"total     {size(use['total_bytes'])}  ({use['home']})")
    p = use["prunable"]
    typer.echo(
        f"prunable  {p['turns']} turns, {p['waves']} waves, {p['events']} events,"
        f" {size(p['bytes'])} (spex prune)"
    )
