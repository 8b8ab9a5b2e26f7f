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

from spexsup.cli import complete
from spexsup.cli.app import app, open_spex, settings
from spexsup.cli.params import AllOpt, JsonOpt, MatchOpt, NamesArg, PromptFileOpt, WindowOpt
from spexsup.cli.render import document, print_json, table
from spexsup.cli.turns import read_prompt
from spexsup.errors import Invalid

if TYPE_CHECKING:
    from spexsup.waves import Wave

SUCCESS = ("confirmed", "completed")
WaveArg = Annotated[
    str,
    typer.Argument(
        metavar="WAVE",
        help="A wave id, a unique prefix of its random part, last or last~N.",
        autocompletion=complete.wave_ids,
    ),
]


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
    names: NamesArg = None,
    all_: AllOpt = False,
    match: MatchOpt = None,
    message: Annotated[
        str | None, typer.Option("-m", "--message", metavar="TEXT", help="The prompt.")
    ] = None,
    file: PromptFileOpt = None,
    max_concurrent: Annotated[
        int | None,
        typer.Option(
            "--max-concurrent",
            metavar="N",
            help="Launches at once. [default: config.toml's max_concurrent, else 16]",
            show_default=False,
        ),
    ] = None,
    window: WindowOpt = None,
    wait: Annotated[bool, typer.Option("--wait", help="Also wait for every turn to end.")] = False,
    retry_failed: Annotated[
        str | None,
        typer.Option(
            "--retry-failed",
            metavar="WAVE",
            help="Relaunch the legs of WAVE that did not succeed (a wave id, prefix or last).",
            autocompletion=complete.wave_ids,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Wake many sessions with one prompt: a wave, a verdict each.

    \b
    Examples:
      spex fanout --match 'api-*' -m "rebase on main" --wait
      spex fanout a b c -f prompt.md --max-concurrent 4
      spex fanout --retry-failed last
    """
    from spexsup import ids, waves

    spex = open_spex(ctx)
    defaults = settings(ctx, spex)
    if max_concurrent is None:
        max_concurrent = defaults.max_concurrent or waves.DEFAULT_MAX_CONCURRENT
    if retry_failed is not None:
        if names or all_ or match or message is not None or file is not None:
            raise Invalid("--retry-failed takes no sessions and no prompt")
        retry_failed = ids.resolve_wave(spex.store.db, retry_failed)
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
        print_json(document(doc))
    else:
        typer.echo(summary(doc))
    if "signal" in holder:
        raise typer.Exit(holder["code"])
    if doc["state"] != "complete":
        raise typer.Exit(1)


@app.command("waves")
def list_waves(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List fan-out waves, newest first.

    \b
    Examples:
      spex waves
      spex waves --json | jq -r '.[0].id'
    """
    from spexsup import waves

    docs = waves.list_waves(open_spex(ctx))
    if as_json:
        print_json([document(d) for d in docs])
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
def show_wave(ctx: typer.Context, wave: WaveArg, as_json: JsonOpt = False) -> None:
    """Show one wave and its legs.

    \b
    Examples:
      spex wave last
      spex wave 3fa --json
    """
    from spexsup import ids, waves

    spex = open_spex(ctx)
    doc = waves.load(spex, ids.resolve_wave(spex.store.db, wave))
    if as_json:
        print_json(document(doc))
        return
    typer.echo(summary(doc))
    if doc["retry_of"]:
        typer.echo(f"retry of {doc['retry_of']}")
    if doc["retried_by"]:
        typer.echo(f"retried by {', '.join(doc['retried_by'])}")
    for leg in doc["legs"]:
        typer.echo("  " + leg_line(leg))
