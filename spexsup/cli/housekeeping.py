"""`spex prune | du`: retention by hand, and where the state home's bytes go."""

import sys
from typing import TYPE_CHECKING, Annotated

from spexsup import ids
from spexsup.cli import complete, decl
from spexsup.cli.decl import command, open_spex, settings
from spexsup.cli.params import JsonOpt, confirm_many
from spexsup.errors import Invalid
from spexsup.present.render import document, print_json, table

if TYPE_CHECKING:
    from spexsup.core.salvage import Salvage
    from spexsup.core.spex import Spex


@command()
def prune(
    ctx: decl.Context,
    dry_run: Annotated[
        bool, decl.Option("--dry-run", help="Print what would go; change nothing.")
    ] = False,
    older_than: Annotated[
        str | None,
        decl.Option(
            "--older-than",
            metavar="AGE",
            help="Also remove what is older than AGE, a duration: 30d, 12h, 2w, 0s, in place"
            " of [retention] keep_days; with --salvage, only branches older than AGE."
            " [default: keep_days, else 90d]",
            show_default=False,
        ),
    ] = None,
    session: Annotated[
        list[str] | None,
        decl.Option(
            "--session",
            metavar="NAME",
            help="Prune only this session's turns (waves and events stay); repeatable.",
            autocompletion=complete.session_names,
        ),
    ] = None,
    salvage: Annotated[
        bool,
        decl.Option(
            "--salvage",
            help="Delete salvage branches (spex/salvage/…) instead: all, or those older than"
            " --older-than AGE, of --session NAME; turns, waves and events stay.",
        ),
    ] = False,
    yes: Annotated[
        bool, decl.Option("--yes", "-y", help="With --salvage on a terminal: do not ask first.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Remove old turns, waves and events as config.toml's [retention] says.

    Keeps keep_turns turns per session (default 500), anything younger than
    keep_days (90), keep_waves waves (1000) and keep_events events (100000).
    Never removes a current or running turn, a session's last turn, or what a
    maintenance lease or a running wave refers to. Writers also prune, at
    most once an hour and a little at a time ([retention] auto = false: never).

    --salvage deletes the branches spex rm --salvage and spex keep made
    (spex worktree ls lists them) and nothing else; each deleted one is
    printed with its commit, which git branch BRANCH COMMIT brings back. On
    a terminal it asks first (--yes skips the question).

    \b
    Examples:
      spex prune --dry-run
      spex prune --older-than 30d
      spex prune --session api --session web --json
      spex prune --salvage --older-than 2w --dry-run
    """
    from spexsup import durations
    from spexsup.core import retention

    for name in session or []:
        ids.validate_name(name)
    older = None
    if older_than is not None:
        older = durations.parse(older_than, "--older-than", allow_zero=True, maximum=None)
    if yes and not salvage:
        raise Invalid("--yes goes with --salvage", hint="spex prune asks nothing otherwise")
    spex = open_spex(ctx)
    if salvage:
        _prune_salvage(
            spex, older, older_than, session or [], dry_run=dry_run, yes=yes, as_json=as_json
        )
        return
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
    if done.usage:
        parts.append(f"{done.usage} usage row{'s' * (done.usage != 1)}")
    if done.orphans:
        parts.append(f"{done.orphans} orphaned entr{'ies' if done.orphans != 1 else 'y'}")
    freed = retention.human_bytes(done.bytes)
    decl.echo(f"{verb} {', '.join(parts)}; {'would free' if dry_run else 'freed'} {freed}")
    for name, count in sorted(done.turns.items()):
        decl.echo(f"  {name}: {count} turn{'s' * (count != 1)}")


@command()
def du(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """Show the state home's disk use by session, waves and database, and what prune frees.

    \b
    Examples:
      spex du
      spex du --json | jq '.sessions | sort_by(.bytes) | reverse | .[0]'
    """
    from spexsup.core import retention

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
    decl.echo(f"waves     {use['waves']['count']}, {size(use['waves']['bytes'])}")
    decl.echo(f"database  {size(use['database_bytes'])}")
    if use["orphans"]["count"]:
        decl.echo(
            f"orphans   {use['orphans']['count']}, {size(use['orphans']['bytes'])}"
            " (left by an interrupted prune; spex prune removes them)"
        )
    decl.echo(f"total     {size(use['total_bytes'])}  ({use['home']})")
    p = use["prunable"]
    decl.echo(
        f"prunable  {p['turns']} turns, {p['waves']} waves, {p['events']} events,"
        f" {size(p['bytes'])} (spex prune)"
    )


def _prune_salvage(
    spex: "Spex",
    older: float | None,
    older_than: str | None,
    sessions: list[str],
    *,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """`spex prune --salvage`: list, ask, delete, say each as git does."""
    from spexsup.core import salvage

    found = salvage.find(spex, sessions=sessions, older_than=older)
    nothing = "no salvage branches" + (f" older than {older_than}" if older_than else "")
    if dry_run:
        if as_json:
            rows = [{**s.public(), "outcome": "would-delete", "why": None} for s in found]
            print_json(document({"dry_run": True, "salvage": rows}))
            return
        for s in found:
            decl.echo(f"would delete {s.branch} ({s.short}) in {s.repo}")
        if not found:
            decl.echo(nothing)
        return
    if found and not yes and sys.stdin.isatty() and sys.stdout.isatty():
        _confirm_salvage(found)
    done = salvage.delete(spex, found)
    salvage.forget_deleted(spex)
    if as_json:
        print_json(document({"dry_run": False, "salvage": [d.public() for d in done]}))
    elif not done:
        decl.echo(nothing)
    for d in done:
        s = d.salvage
        if d.outcome == "kept":
            decl.echo(f"spex: kept {s.branch} in {s.repo}: {d.why}", err=True)
        elif as_json:
            continue
        elif d.outcome == "deleted":
            decl.echo(f"deleted {s.branch} (was {s.short}) in {s.repo}")
        else:
            decl.echo(f"forgot {s.branch} (was {s.short}): {d.why}")
    if any(d.outcome == "kept" for d in done):
        raise decl.Exit(1)


def _confirm_salvage(found: "list[Salvage]") -> None:
    """Ask on the terminal; anything but y or yes (EOF, Ctrl-C too) deletes nothing."""
    names = [s.branch for s in found]
    many = f"{len(names)} salvage branch" + ("es" if len(names) != 1 else "")
    confirm_many(f"delete {many}", names, nothing="deleted nothing")
