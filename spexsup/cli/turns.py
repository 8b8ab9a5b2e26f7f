"""`spex wake | wait | stop | resume | log`."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from spexsup import sessions, turns
from spexsup.cli.app import app, open_spex
from spexsup.cli.render import print_json
from spexsup.errors import Invalid

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
MAX_PROMPT = 1 << 20


# `wake`'s options as a user may spell them before `--`.
WAKE_OPTIONS = (
    "-f",
    "--file",
    "--window",
    "--fresh",
    "--force",
    "--json",
    "-h",
    "--help",
    "--home",
)


def check_dashed_prompt(argv: list[str]) -> None:
    """Refuse `spex wake NAME "-fix the test"`: click would read it as `-f ix`
    and send the file `ix` as the prompt. A prompt that starts with `-` goes
    after `--`; only the options themselves may start with a dash before it."""
    rest = iter(argv)
    for arg in rest:
        if arg == "--home":
            next(rest, None)
        elif not arg.startswith("-"):
            if arg != "wake":
                return
            break
    else:
        return
    for arg in rest:
        if arg == "--":
            return
        if arg.startswith("-") and arg != "-" and arg.split("=", 1)[0] not in WAKE_OPTIONS:
            raise Invalid(
                f"wake: {arg!r} is not an option",
                hint="a prompt that starts with - goes after --: spex wake NAME -- '-…'",
            )


def read_prompt(text: str | None, file: str | None) -> bytes:
    """The prompt's exact bytes: TEXT, or `-f FILE`, or `-f -` for stdin (≤ 1 MiB)."""
    if (text is None) == (file is None):
        raise Invalid("give the prompt as TEXT or with -f FILE (or -f - for stdin), not both")
    if text is not None:
        data = os.fsencode(text)
    elif file == "-":
        data = sys.stdin.buffer.read(MAX_PROMPT + 1)
    else:
        assert file is not None
        try:
            with Path(file).open("rb") as f:
                data = f.read(MAX_PROMPT + 1)
        except OSError as e:
            raise Invalid(f"cannot read prompt file {file!r}: {e.strerror}") from None
    if len(data) > MAX_PROMPT:
        raise Invalid("the prompt is larger than 1 MiB")
    if not data:
        raise Invalid("the prompt is empty")
    return data


@app.command()
def wake(
    ctx: typer.Context,
    name: str,
    text: Annotated[str | None, typer.Argument(help="The prompt.")] = None,
    file: Annotated[
        str | None, typer.Option("-f", "--file", help="Read the prompt from FILE, or - (stdin).")
    ] = None,
    window: Annotated[
        float | None, typer.Option("--window", help="Confirmation window in seconds.")
    ] = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Start a new conversation instead of resuming.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace whatever runs in the pane (vim, a REPL…).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a turn and print its verdict: confirmed, completed or failed."""
    sessions.validate_name(name)
    prompt = read_prompt(text, file)
    spex = open_spex(ctx)
    verdict = turns.wake(spex, name, prompt, window=window, fresh=fresh, force=force)
    if as_json:
        print_json(verdict.as_json())
    else:
        line = f"{name}: {verdict.verdict} turn {verdict.turn}"
        if verdict.pid:
            line += f" pid {verdict.pid}"
        if verdict.rc is not None:
            line += f" rc={verdict.rc}"
        if verdict.attempts > 1:
            line += f" after {verdict.attempts} attempts"
        line += f" ({verdict.elapsed_ms} ms)"
        typer.echo(line)
        if verdict.error:
            typer.echo(f"spex: {name}: {verdict.error}", err=True)
    if not verdict.ok:
        raise typer.Exit(1)


@app.command()
def wait(
    ctx: typer.Context,
    names: Annotated[list[str], typer.Argument(help="Sessions to wait for.")],
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Give up after S seconds (exit 124).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Block until each session's current turn ends."""
    for n in names:
        sessions.validate_name(n)
    if timeout is not None and not (math.isfinite(timeout) and timeout >= 0):
        raise Invalid(f"invalid timeout {timeout}", hint="a number of seconds, 0 or more")
    from spexsup import control

    ended = control.wait(open_spex(ctx), names, timeout=timeout)
    if as_json:
        print_json([e.as_json() for e in ended])
    else:
        for e in ended:
            rc = "" if e.rc is None else f" rc={e.rc}"
            typer.echo(f"{e.session}: turn {e.turn} {e.state}{rc}")
    raise typer.Exit(int(any(e.exit_code for e in ended)))


@app.command()
def stop(
    ctx: typer.Context,
    name: str,
    grace: Annotated[
        float, typer.Option("--grace", help="Seconds between SIGTERM and SIGKILL.")
    ] = 5.0,
) -> None:
    """Stop the running turn and mark the session stopped."""
    sessions.validate_name(name)
    from spexsup import control

    aborted = control.stop(open_spex(ctx), name, grace=grace)
    typer.echo(f"{name}: stopped" + (f" (turn {aborted} aborted)" if aborted else ""))


@app.command()
def resume(
    ctx: typer.Context,
    name: str,
    force: Annotated[
        bool, typer.Option("--force", help="Resume even if an old turn may still run.")
    ] = False,
) -> None:
    """Leave the stopped state."""
    sessions.validate_name(name)
    from spexsup import control

    control.resume(open_spex(ctx), name, force=force)
    typer.echo(f"{name}: resumed")


@app.command()
def log(
    ctx: typer.Context,
    name: str,
    turn: Annotated[str | None, typer.Option("--turn", help="Turn id (default: latest).")] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Follow until it ends.")] = False,
) -> None:
    """Print a turn's output."""
    sessions.validate_name(name)
    from spexsup import control

    out = sys.stdout.buffer
    for chunk in control.log(open_spex(ctx), name, turn=turn, follow=follow):
        out.write(chunk)
        out.flush()
