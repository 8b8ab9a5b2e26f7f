"""`spex wave [ls] | [show] WAVE`: the fan-out waves, this host's and those
across hosts. `spex waves` is the same command under its old name."""

from typing import Annotated

import typer

from spexsup.cli import complete, decl
from spexsup.cli.app import ListingGroup, app
from spexsup.cli.decl import open_spex
from spexsup.cli.fanout import fleet_text, with_counts
from spexsup.cli.params import JsonOpt
from spexsup.present.progress import counts_line, leg_line, story_lines, summary
from spexsup.present.render import document, print_json, table, with_iso
from spexsup.present.spend import with_spend

WaveArg = Annotated[
    str,
    decl.Argument(
        metavar="WAVE",
        help="A wave id, a unique prefix of its random part, last or last~N.",
        autocompletion=complete.wave_ids,
    ),
]


class WaveGroup(ListingGroup):
    default = "show"


wave_app = typer.Typer(cls=WaveGroup, invoke_without_command=True)
app.add_typer(wave_app, name="wave")
app.add_typer(wave_app, name="waves", hidden=True)


@wave_app.callback()
def wave_group(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """Fan-out waves: list them, show one.

    Bare `spex wave` lists them, as `spex wave ls` does; `spex wave W` shows
    one, as `spex wave show W` does. `spex waves` is the same command.

    \b
    Examples:
      spex wave ls
      spex wave last
      spex wave ls --json | jq -r '.[0].id'
    """
    if ctx.invoked_subcommand is None:
        _list(ctx, as_json=as_json)


@wave_app.command("ls")
def list_waves(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """List fan-out waves, newest first: this host's and the fleet waves across hosts.

    \b
    Examples:
      spex wave ls
      spex wave ls --json | jq -r '.[0].id'
      spex wave ls --json | jq -r '.[] | select(.kind == "fleet") | .id'
    """
    _list(ctx, as_json=as_json)


def _list(ctx: decl.Context, *, as_json: bool) -> None:
    from spexsup.adapters import fleet
    from spexsup.conductors import waves
    from spexsup.paths import resolve_home

    spex = open_spex(ctx)
    docs = [{**d, "kind": d.get("kind", "local")} for d in waves.list_waves(spex)]
    docs += [{**d, "kind": "fleet"} for d in fleet.list_docs(resolve_home(ctx.find_root().obj))]
    docs.sort(key=lambda d: float(d.get("created_at") or 0), reverse=True)
    if as_json:
        print_json([document(with_iso(with_counts(d))) for d in docs])
        return
    if not docs:
        decl.echo("no waves yet")
        return
    from spexsup.present import fit

    table(
        ["WAVE", "KIND", "STATE", "LEGS", "RETRY OF"],
        [
            [
                d["id"],
                d["kind"],
                d["state"],
                counts_line(d),
                d.get("retry_of") or "-",
            ]
            for d in docs
        ],
        narrow=fit.WAVE_STEPS,
    )


@wave_app.command("show")
def show_wave(ctx: decl.Context, wave: WaveArg, as_json: JsonOpt = False) -> None:
    """Show one wave and its legs (a fleet-… id: a wave across hosts).

    \b
    Examples:
      spex wave last
      spex wave show 3fa --json
    """
    from spexsup import ids
    from spexsup.conductors import waves

    if wave.startswith("fleet-"):
        from spexsup.adapters import fleet
        from spexsup.paths import resolve_home

        state = resolve_home(ctx.find_root().obj)
        fleet_doc = fleet.load(state, fleet.resolve(state, wave))
        if as_json:
            print_json(document(with_iso(with_counts(fleet_doc))))
        else:
            fleet_text(fleet_doc)
        return
    spex = open_spex(ctx)
    doc = with_spend(spex, waves.load(spex, ids.resolve_wave(spex.store.db, wave)))
    # Retried: each leg's last attempt across the retries (DESIGN §31).
    doc["combined"] = waves.story(spex, doc)
    if doc.get("best_of"):
        from spexsup.conductors.bestof import leg_stat

        for leg in doc["legs"]:
            leg["diffstat"] = leg_stat(spex, leg["session"])
    if as_json:
        print_json(document(with_iso({"id": doc["id"], "kind": doc.get("kind", "local"), **doc})))
        return
    from spexsup.present import fit

    for line in fit.for_stdout(summary(doc)):
        decl.echo(line)
    decl.echo(f"prompt: {doc.get('prompt_head', '')[:80]!r}")
    if doc["retry_of"]:
        decl.echo(f"retry of {doc['retry_of']}")
    if doc["retried_by"]:
        decl.echo(f"retried by {', '.join(doc['retried_by'])}")
    for leg in doc["legs"]:
        decl.echo("  " + leg_line(leg))
        if leg.get("diffstat"):
            decl.echo(f"    {leg['diffstat']}")
    if doc.get("best_of") and doc["best_of"]["kept"]:
        decl.echo(f"kept {doc['best_of']['kept']}")
    if doc["combined"] is not None:
        for line in story_lines(doc):
            decl.echo(line)
