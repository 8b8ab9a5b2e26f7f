"""`spex worktree status | diff | keep`."""

import sys
from typing import Annotated, Any

import typer

from spexsup.cli.app import app, open_spex
from spexsup.cli.render import print_json

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]

worktree_app = typer.Typer(help="Git worktrees of worktree sessions.", no_args_is_help=True)
app.add_typer(worktree_app, name="worktree")


def status_line(w: dict[str, Any]) -> str:
    """One line for a worktree: path, branch, and what it holds."""
    line = f"{w['path']} on {w['branch']}"
    if w.get("error"):
        return f"{line}: {w['error']}"
    if w["state"] == "missing":
        return f"{line}: worktree missing"
    if w.get("ahead") is not None:
        line += f", {w['ahead']} ahead / {w['behind']} behind base"
    return line + f", {w['unsaved'] or 'nothing unsaved'}"


@worktree_app.command("status")
def status(
    ctx: typer.Context,
    names: Annotated[list[str] | None, typer.Argument(help="Sessions (default: all).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per worktree session: branch, ahead/behind base, dirty and untracked
    counts, unsaved work, last commit."""
    from spexsup import sessions, worktree

    for n in names or []:
        sessions.validate_name(n)
    rows = worktree.status_rows(open_spex(ctx), names or [])
    if as_json:
        print_json(rows)
        return
    if not rows:
        typer.echo("no worktree sessions (create one with: spex new NAME --worktree)")
        return

    for r in rows:
        typer.echo(f"{r['name']}: {r['branch']} in {r['path']}")
        if r.get("error"):
            typer.echo(f"  {r['error']}")
        elif r["state"] == "missing":
            typer.echo("  worktree missing (removed behind spex)")
        else:
            typer.echo(
                f"  {r['ahead']} ahead, {r['behind']} behind base;"
                f" {r['modified']} modified, {r['untracked']} untracked"
            )
            typer.echo(f"  last commit: {r['last_commit'] or '-'}")
        if not r.get("error"):
            typer.echo(f"  unsaved: {r['unsaved'] or 'nothing'}")


@app.command()
def diff(
    ctx: typer.Context,
    name: str,
    turn: Annotated[str | None, typer.Option("--turn", help="Turn id (default: latest).")] = None,
    stat: Annotated[bool, typer.Option("--stat", help="Only the diffstat.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show what a turn changed in its git working tree (from its start to its end:
    the next turn's start, or now for the latest turn)."""
    from spexsup import sessions, worktree

    sessions.validate_name(name)
    r = worktree.turn_range(open_spex(ctx), name, turn)
    if as_json:
        print_json({**r.public(), "files": worktree.diff_files(r)})
        return
    sys.stdout.flush()
    rc = worktree.show_diff(r, stat=stat)
    if rc != 0:
        raise typer.Exit(1)


@app.command()
def keep(
    ctx: typer.Context,
    wave: str,
    leg: Annotated[str, typer.Argument(help="The leg to keep: its session, or 1…N.")],
    force: Annotated[
        bool, typer.Option("--force", help="Stop other legs' running turns first.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Keep one leg of a best-of-N wave; remove the others (salvaging unsaved work)."""
    from spexsup import worktree

    outcomes = worktree.keep(open_spex(ctx), wave, leg, force=force)
    if as_json:
        print_json([o.public() for o in outcomes])
    else:
        for o in outcomes:
            typer.echo(f"{o.session}: {o.outcome}" + "".join(f"\n  {d}" for d in o.detail))
    worst = max(o.exit_code for o in outcomes)
    if worst:
        raise typer.Exit(worst)
