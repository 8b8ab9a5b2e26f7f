"""`spex new | ls | show | rm | attach | doctor`."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from spexsup import sessions
from spexsup.cli.app import app, open_spex
from spexsup.cli.render import age, print_json, table, turn_cell
from spexsup.errors import Invalid

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


@app.command()
def new(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Session name: 1-64 of A-Z a-z 0-9 _ -.")],
    command: Annotated[
        list[str] | None, typer.Argument(help="After --: the command harness's argv.")
    ] = None,
    harness: Annotated[
        str | None, typer.Option("--harness", help="claude, codex, opencode, pi, demo, command.")
    ] = None,
    cwd: Annotated[str | None, typer.Option("--cwd", help="Working directory.")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE, repeatable.")] = None,
    window: Annotated[
        float | None, typer.Option("--window", help="Confirmation window in seconds.")
    ] = None,
) -> None:
    """Create a session and its tmux home."""
    sessions.validate_name(name)
    spex = open_spex(ctx)
    s = sessions.create(
        spex,
        name,
        harness=harness,
        cwd=cwd,
        env=sessions.parse_env(env or []),
        window=window,
        command=command,
    )
    typer.echo(f"created {s.name} ({s.harness}) in {s.cwd}")


@app.command("ls")
def ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List all sessions."""
    rows = sessions.describe(open_spex(ctx))
    if as_json:
        print_json(rows)
        return
    if not rows:
        typer.echo("no sessions (create one with: spex new NAME)")
        return
    table(
        ["NAME", "HARNESS", "STATE", "TURN", "HOME", "CWD"],
        [
            [
                r["name"],
                r["harness"],
                r["state"] + (" (leased)" if r.get("lease") else ""),
                turn_cell(r["turn"]),
                home_cell(r),
                r["cwd"],
            ]
            for r in rows
        ],
    )


def home_cell(row: dict[str, object]) -> str:
    return "missing (spex up)" if row["home"] == "missing" else str(row["home"])


@app.command()
def show(ctx: typer.Context, name: str, as_json: JsonOpt = False) -> None:
    """Show one session and its recent turns."""
    sessions.validate_name(name)
    (row,) = sessions.describe(open_spex(ctx), [name], turns=10)
    if as_json:
        print_json(row)
        return
    typer.echo(f"session   {row['name']}")
    typer.echo(f"harness   {row['harness']}" + (f" {row['command']}" if row["command"] else ""))
    typer.echo(f"state     {row['state']}")
    typer.echo(f"home      {row['home']}")
    typer.echo(f"cwd       {row['cwd']}")
    typer.echo(f"resume id {row['harness_session_id'] or '-'}")
    if row["window"]:
        typer.echo(f"window    {row['window']}s")
    turns = row.get("turns") or []
    if not turns:
        typer.echo("turns     none yet")
        return
    typer.echo("turns:")
    for t in turns:
        rc = "" if t["rc"] is None else f" rc={t['rc']}"
        line = f"  {t['id']}  {t['state']}{rc}  {t['verdict'] or '-'}"
        line += f"  {age(time.time() - t['started_at'])} ago"
        if t["error"]:
            line += f"  ({t['error']})"
        typer.echo(line)


@app.command()
def rm(
    ctx: typer.Context,
    name: str,
    force: Annotated[bool, typer.Option("--force", help="Stop a running turn first.")] = False,
) -> None:
    """Delete a session and its tmux home."""
    sessions.validate_name(name)
    sessions.remove(open_spex(ctx), name, force=force)
    typer.echo(f"removed {name}")


REVIVE_PROMPT = (
    "Your previous turn was interrupted: the machine restarted while you were working."
    " Check the state of your work and continue where you left off."
)


@app.command()
def up(
    ctx: typer.Context,
    names: Annotated[list[str] | None, typer.Argument(help="Sessions (default: --all).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every session.")] = False,
    revive: Annotated[
        bool, typer.Option("--revive", help="Re-wake sessions whose turn a reboot interrupted.")
    ] = False,
    message: Annotated[
        str | None, typer.Option("-m", "--message", help="The prompt for --revive.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Recreate missing tmux homes (never starts a turn); --revive resumes interrupted turns."""
    if names and all_:
        raise Invalid("name the sessions or give --all, not both")
    if not names and not all_ and not revive:
        raise Invalid("name the sessions to bring up, or give --all")
    if message is not None and not revive:
        raise Invalid("-m goes with --revive")
    for n in names or []:
        sessions.validate_name(n)
    spex = open_spex(ctx)
    reports = sessions.up(spex, names)
    if as_json and not revive:
        print_json([r.as_json() for r in reports])
    elif not as_json:
        for r in reports:
            typer.echo(f"{r.name}: {r.status}" + (f" ({r.detail})" if r.detail else ""))
    if revive:
        from spexsup import turns

        turns.reconcile(spex, names)
        targets = [
            r["name"]
            for r in sessions.describe(spex, names)
            if r["turn"] is not None and r["turn"]["state"] == "interrupted"
        ]
        if not targets:
            if as_json:
                print_json({"revived": [], "homes": [r.as_json() for r in reports]})
            else:
                typer.echo("nothing to revive: no turn was interrupted by a reboot")
        else:
            from spexsup.cli.fanout import fanout

            ctx.invoke(
                fanout, ctx=ctx, names=targets, message=message or REVIVE_PROMPT, as_json=as_json
            )
    if not all(r.ok for r in reports):
        raise typer.Exit(1)


@app.command()
def attach(
    ctx: typer.Context,
    name: str,
    read_only: Annotated[
        bool, typer.Option("--read-only", "-r", help="Look without typing into the pane.")
    ] = False,
    window: Annotated[
        bool, typer.Option("--window", help="Inside tmux: open in a new window, not a popup.")
    ] = False,
) -> None:
    """Attach this terminal to the session's pane (detach with C-a d).

    Inside another tmux, the home opens in a popup of that tmux (or a new
    window with --window); detaching returns to where you were.
    """
    import shlex
    import shutil

    sessions.validate_name(name)
    spex = open_spex(ctx)
    s = sessions.get(spex, name)
    sessions.ensure_home(spex, s)
    argv = [
        *spex.tmux.tmux_argv(),
        "attach-session",
        *(["-r"] if read_only else []),
        "-t",
        f"={name}:",
    ]
    spex.close()
    if os.environ.get("TMUX"):
        # Our server inside the user's: the outer tmux runs the attach, with
        # TMUX unset so the inner client does not refuse to nest.
        inner = "env -u TMUX " + shlex.join(argv)
        outer = shutil.which("tmux") or "tmux"
        if window:
            cmd = [outer, "new-window", "-n", f"spex:{name}", inner]
        else:
            cmd = [outer, "display-popup", "-E", "-w", "90%", "-h", "90%", inner]
        os.execvp(cmd[0], cmd)
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    os.execvpe(argv[0], argv, env)


@app.command()
def doctor(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Check tmux, the state directory and the harness binaries."""
    from spexsup.doctor import run_checks

    checks = run_checks(open_spex(ctx))
    if as_json:
        print_json([c.as_json() for c in checks])
    else:
        for c in checks:
            typer.echo(
                f"{'ok  ' if c.ok else 'FAIL' if c.required else 'warn'}  {c.name}: {c.detail}"
            )
    if any(not c.ok and c.required for c in checks):
        raise typer.Exit(1)
