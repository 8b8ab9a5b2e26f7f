"""`spex fanout | waves | wave`."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from spexsup.cli.app import app, open_spex
from spexsup.cli.render import print_json, table
from spexsup.cli.turns import read_prompt
from spexsup.errors import Invalid

if TYPE_CHECKING:
    from spexsup.waves import Wave

SUCCESS = ("confirmed", "completed")
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def leg_line(leg: dict[str, Any]) -> str:
    parts = [f"{leg['session']}: {leg['verdict'] or leg['status']}"]
    if leg["turn"]:
        parts.append(f"turn {leg['turn']}")
    if leg.get("turn_state"):
        parts.append(f"ended {leg['turn_state']}")
    if leg["rc"] is not None:
        parts.append(f"rc={leg['rc']}")
    if leg["error"]:
        parts.append(f"({leg['error']})")
    return " ".join(parts)


def summary(doc: dict[str, Any]) -> str:
    ok = sum(1 for leg in doc["legs"] if leg["verdict"] in SUCCESS)
    return f"wave {doc['id']}: {doc['state']} ({ok}/{len(doc['legs'])} legs ok)"


@contextmanager
def abort_on_signals(holder: dict[str, Any]) -> Iterator[None]:
    """First SIGINT/SIGTERM aborts the wave (from a thread: the handler must not
    take the wave's lock); a second exits at once with what is written."""

    def handler(signum: int, frame: object) -> None:
        code = 130 if signum == signal.SIGINT else 143
        if "signal" in holder:
            os._exit(holder["code"])
        holder["signal"], holder["code"] = signum, code
        wave = holder.get("wave")
        if wave is not None:
            threading.Thread(target=wave.abort, daemon=True).start()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@app.command()
def fanout(
    ctx: typer.Context,
    names: Annotated[list[str] | None, typer.Argument(help="Sessions to wake.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every session.")] = False,
    match: Annotated[str | None, typer.Option("--match", help="Sessions matching GLOB.")] = None,
    message: Annotated[str | None, typer.Option("-m", "--message", help="The prompt.")] = None,
    file: Annotated[
        str | None, typer.Option("-f", "--file", help="Read the prompt from FILE, or - (stdin).")
    ] = None,
    max_concurrent: Annotated[int, typer.Option("--max-concurrent", help="Launches at once.")] = 16,
    window: Annotated[
        float | None, typer.Option("--window", help="Confirmation window in seconds.")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Also wait for every turn to end.")] = False,
    retry_failed: Annotated[
        str | None, typer.Option("--retry-failed", help="Relaunch the failed legs of WAVE.")
    ] = None,
    worktrees: Annotated[
        int | None,
        typer.Option("--worktrees", help="Best of N: N new worktree sessions, one prompt."),
    ] = None,
    repo: Annotated[
        str | None, typer.Option("--repo", help="With --worktrees: the repository (.).")
    ] = None,
    base: Annotated[
        str | None, typer.Option("--base", help="With --worktrees: start from REF (HEAD).")
    ] = None,
    prefix: Annotated[
        str | None, typer.Option("--prefix", help="With --worktrees: sessions PREFIX-1…N.")
    ] = None,
    harness: Annotated[
        str | None, typer.Option("--harness", help="With --worktrees: the harness (demo).")
    ] = None,
    worktree_dir: Annotated[
        str | None, typer.Option("--worktree-dir", help="With --worktrees: make them in DIR.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Wake many sessions with one prompt, as one wave with a verdict per session."""
    from spexsup import waves
    from spexsup import worktree as wt

    spex = open_spex(ctx)
    request = wt.Request(None, base, repo, worktree_dir)
    best_of: list[str] = []
    if worktrees is None and (request != wt.Request() or prefix or harness):
        raise Invalid("--repo, --base, --prefix, --harness and --worktree-dir need --worktrees")
    if worktrees is not None:
        if names or all_ or match or retry_failed:
            raise Invalid("--worktrees makes its own sessions: name none, no --all/--match")
        prompt = read_prompt(message, file)
        best_of = wt.leg_names(prefix or wt.default_prefix(repo), worktrees)
        wt.create_legs(spex, best_of, request, harness=harness, window=window)
        targets = best_of
    elif retry_failed is not None:
        if names or all_ or match or message is not None or file is not None:
            raise Invalid("--retry-failed takes no sessions and no prompt")
        targets, prompt = waves.retry_plan(spex, retry_failed)
        if not targets:
            typer.echo(f"nothing to retry: every leg of wave {retry_failed} succeeded")
            return
    else:
        prompt = read_prompt(message, file)
        targets = waves.select_sessions(spex, names or [], all_=all_, match=match)
    live = sys.stdout.isatty() and not as_json
    holder: dict[str, Any] = {}
    printed: set[str] = set()

    def on_change(doc: dict[str, Any]) -> None:
        if as_json:
            return
        for leg in doc["legs"]:
            if leg["status"] in ("done", "aborted") and leg["session"] not in printed:
                printed.add(leg["session"])
                typer.echo(("  " if live else "") + leg_line(leg))

    def on_create(wave: Wave) -> None:
        holder["wave"] = wave
        if best_of:
            wt.mark_best_of(wave, request, best_of)
        wave.listeners.append(on_change)
        if not as_json:
            typer.echo(
                f"wave {wave.id}: {len(targets)} legs" + (" (retry)" if retry_failed else "")
            )
        if "signal" in holder:  # a signal that came before the wave existed
            threading.Thread(target=wave.abort, daemon=True).start()

    with abort_on_signals(holder):
        wave = waves.fanout(
            spex,
            targets,
            prompt,
            window=window,
            max_concurrent=max_concurrent,
            retry_of=retry_failed,
            on_create=on_create,
        )
        if wait and not wave.aborted.is_set():
            if not as_json:
                typer.echo("waiting for the turns to end…")
            printed.clear()
            wave.wait_turns(None)
    doc = waves.load(spex, wave.id)
    if as_json:
        print_json(doc)
    else:
        typer.echo(summary(doc))
    if "signal" in holder:
        raise typer.Exit(holder["code"])
    if doc["state"] != "complete":
        raise typer.Exit(1)


@app.command("waves")
def list_waves(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List fan-out waves, newest first."""
    from spexsup import waves

    docs = waves.list_waves(open_spex(ctx))
    if as_json:
        print_json(docs)
        return
    if not docs:
        typer.echo("no waves yet")
        return
    table(
        ["WAVE", "STATE", "LEGS", "OK", "RETRY OF"],
        [
            [
                d["id"],
                d["state"],
                str(len(d["legs"])),
                str(sum(1 for leg in d["legs"] if leg["verdict"] in SUCCESS)),
                d["retry_of"] or "-",
            ]
            for d in docs
        ],
    )


@app.command("wave")
def show_wave(ctx: typer.Context, wave: str, as_json: JsonOpt = False) -> None:
    """Show one wave and its legs."""
    from spexsup import waves

    spex = open_spex(ctx)
    doc = waves.load(spex, wave)
    if doc.get("best_of"):
        from spexsup.worktree import leg_stat

        for leg in doc["legs"]:
            leg["diffstat"] = leg_stat(spex, leg["session"])
    if as_json:
        print_json(doc)
        return
    typer.echo(summary(doc))
    if doc["retry_of"]:
        typer.echo(f"retry of {doc['retry_of']}")
    if doc["retried_by"]:
        typer.echo(f"retried by {', '.join(doc['retried_by'])}")
    for leg in doc["legs"]:
        typer.echo("  " + leg_line(leg))
        if leg.get("diffstat"):
            typer.echo(f"    {leg['diffstat']}")
    if doc.get("best_of") and doc["best_of"]["kept"]:
        typer.echo(f"kept {doc['best_of']['kept']}")
