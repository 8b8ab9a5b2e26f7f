"""`spex help [COMMAND…]`: the help of spex, or of one command (`spex help
worktree status` is `spex worktree status --help`).

The entry point turns `help WORDS…` into `WORDS… --help` before typer parses
it (`spexsup.cli._dispatch`), so that an unknown command gets typer's own
"did you mean"; this registration puts `help` in the command list and the
completion.
"""

from typing import Annotated

import typer

from spexsup.cli import decl
from spexsup.cli.decl import command


@command("help")
def help_(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None,
        decl.Argument(
            metavar="[COMMAND]…", help="A command (a group's: two words).", show_default=False
        ),
    ] = None,
) -> None:
    """Show the help of spex, or of one command.

    \b
    Examples:
      spex help
      spex help wake
      spex help worktree status
    """
    decl.echo(ctx.find_root().get_help())
