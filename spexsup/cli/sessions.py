"""`spex new | ls | show | rm | attach | doctor`."""

from __future__ import annotations

import os
import time
from typing import Annotated, Any

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
    worktree: Annotated[
        bool, typer.Option("--worktree", help="Work in a new git worktree and branch.")
    ] = False,
    branch: Annotated[
        str | None, typer.Option("--branch", help="With --worktree: the new branch (spex/NAME).")
    ] = None,
    base: Annotated[
        str | None, typer.Option("--base", help="With --worktree: start from REF (HEAD).")
    ] = None,
    repo: Annotated[
        str | None, typer.Option("--repo", help="With --worktree: the repository (.).")
    ] = None,
    worktree_dir: Annotated[
        str | None,
        typer.Option("--worktree-dir", help="With --worktree: make it in DIR/NAME."),
    ] = None,
) -> None:
    """Create a session and its tmux home (with --worktree: in a new git worktree)."""
    from spexsup.worktree import Request

    sessions.validate_name(name)
    request = Request(branch, base, repo, worktree_dir)
    if not worktree and request != Request():
        raise Invalid("--branch, --base, --repo and --worktree-dir need --worktree")
    spex = open_spex(ctx)
    s = sessions.create(
        spex,
        name,
        harness=harness,
        cwd=cwd,
        env=sessions.parse_env(env or []),
        window=window,
        command=command,
        worktree=request if worktree else None,
    )
    line = f"created {s.name} ({s.harness}) in {s.cwd}"
    if s.worktree is not None:
        line += f" on branch {s.worktree.branch} from {s.worktree.base[:12]}"
    typer.echo(line)


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
            [r["name"], r["harness"], r["state"], turn_cell(r["turn"]), home_cell(r), r["cwd"]]
            for r in rows
        ],
    )


def home_cell(row: dict[str, Any]) -> str:
    wt = row.get("worktree")
    return str(row["home"]) + (", worktree missing" if wt and wt["state"] == "missing" else "")


@app.command()
def show(ctx: typer.Context, name: str, as_json: JsonOpt = False) -> None:
    """Show one session and its recent turns."""
    sessions.validate_name(name)
    (row,) = sessions.describe(open_spex(ctx), [name], turns=10, worktree_status=True)
    if as_json:
        print_json(row)
        return
    typer.echo(f"session   {row['name']}")
    typer.echo(f"harness   {row['harness']}" + (f" {row['command']}" if row["command"] else ""))
    typer.echo(f"state     {row['state']}")
    typer.echo(f"home      {row['home']}")
    typer.echo(f"cwd       {row['cwd']}")
    if row["worktree"]:
        from spexsup.cli.worktree import status_line

        typer.echo(f"worktree  {status_line(row['worktree'])}")
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
    salvage: Annotated[
        bool,
        typer.Option("--salvage", help="Commit a worktree's unsaved work to a branch first."),
    ] = False,
    keep_worktree: Annotated[
        bool, typer.Option("--keep-worktree", help="Leave the worktree and its branch.")
    ] = False,
) -> None:
    """Delete a session and its tmux home (and its worktree, never with unsaved work)."""
    sessions.validate_name(name)
    removal = sessions.remove(
        open_spex(ctx), name, force=force, salvage=salvage, keep_worktree=keep_worktree
    )
    for line in removal.lines() if removal else []:
        typer.echo(f"{name}: {line}")
    typer.echo(f"removed {name}")


@app.command()
def attach(ctx: typer.Context, name: str) -> None:
    """Attach this terminal to the session's pane (detach with C-b d)."""
    sessions.validate_name(name)
    spex = open_spex(ctx)
    s = sessions.get(spex, name)
    sessions.ensure_home(spex, s)
    argv = [*spex.tmux.tmux_argv(), "attach-session", "-t", f"={name}"]
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    spex.close()
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
