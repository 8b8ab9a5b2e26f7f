"""`spex hosts [ls]`: the other machines of config.toml, and whether they answer."""

import typer

from spexsup.cli import decl
from spexsup.cli.app import ListingGroup, app
from spexsup.cli.params import JsonOpt
from spexsup.cli.sessions import settings_here
from spexsup.present.render import print_json, table

hosts_app = typer.Typer(cls=ListingGroup, invoke_without_command=True)
app.add_typer(hosts_app, name="hosts")


@hosts_app.callback()
def hosts_group(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """The hosts of config.toml. Bare `spex hosts` lists them, as `spex hosts ls` does.

    \b
    Examples:
      spex hosts ls
      spex hosts ls --json
    """
    if ctx.invoked_subcommand is None:
        _list(ctx, as_json=as_json)


@hosts_app.command("ls")
def list_hosts(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """List the hosts of config.toml: reachable?, their spex version, their sessions.

    Exit 1 when a host cannot be reached.

    \b
    Examples:
      spex hosts ls
      spex hosts ls --json
    """
    _list(ctx, as_json=as_json)


def _list(ctx: decl.Context, *, as_json: bool) -> None:
    from spexsup.adapters import fleet
    from spexsup.paths import resolve_home

    state = resolve_home(ctx.find_root().obj)
    rows = fleet.describe_hosts(settings_here(state), state)
    if as_json:
        print_json(rows)
    elif not rows:
        decl.echo('no hosts (add a [host.NAME] table with ssh = "user@box" to config.toml)')
    else:
        table(
            ["HOST", "SSH", "REACHABLE", "VERSION", "SESSIONS", "ERROR"],
            [
                [
                    r["name"],
                    r["ssh"],
                    "yes" if r["reachable"] else "no",
                    r["version"] or "-",
                    "-" if r["sessions"] is None else str(r["sessions"]),
                    r["error"] or "-",
                ]
                for r in rows
            ],
        )
    if any(not r["reachable"] or r["error"] for r in rows):
        raise decl.Exit(1)
