"""The typer app and its global options; one module per command group registers on it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spexsup.spex import Spex

app = typer.Typer(
    name="spex",
    help="Supervise coding-agent sessions that live in tmux panes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def root(
    ctx: typer.Context,
    home: Annotated[
        Path | None,
        typer.Option(
            "--home", help="State directory (default: $SPEXSUP_HOME).", show_default=False
        ),
    ] = None,
) -> None:
    ctx.obj = home


def open_spex(ctx: typer.Context) -> Spex:
    root_ctx = ctx.find_root()
    return Spex.open(root_ctx.obj)


# Register the commands (import for their side effect on `app`).
from spexsup.cli import fanout as _fanout  # noqa: E402
from spexsup.cli import maint as _maint  # noqa: E402
from spexsup.cli import sessions as _sessions  # noqa: E402
from spexsup.cli import turns as _turns  # noqa: E402
from spexsup.cli import worktree as _worktree  # noqa: E402

__all__ = ["_fanout", "_maint", "_sessions", "_turns", "_worktree", "app", "open_spex"]
