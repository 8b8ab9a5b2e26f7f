"""Options and arguments shared by several commands, with their metavars and completers."""

from typing import Annotated

import typer

from spexsup.cli import complete

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON (schema_version 1); on failure too.")
]
NameArg = Annotated[
    str,
    typer.Argument(metavar="NAME", help="Session name.", autocompletion=complete.session_names),
]
NamesArg = Annotated[
    list[str] | None,
    typer.Argument(metavar="NAME…", help="Session names.", autocompletion=complete.session_names),
]
AllOpt = Annotated[bool, typer.Option("--all", help="Every session.")]
MatchOpt = Annotated[
    str | None,
    typer.Option("--match", metavar="GLOB", help="Every session whose name matches GLOB."),
]
WindowOpt = Annotated[
    float | None,
    typer.Option(
        "--window",
        metavar="SECONDS",
        help="Confirmation window. [default: the session's, else config.toml's window,"
        " else the harness's, else 2]",
        show_default=False,
    ),
]
PromptFileOpt = Annotated[
    str | None,
    typer.Option("-f", "--file", metavar="FILE", help="Read the prompt from FILE, or - for stdin."),
]
GraceOpt = Annotated[
    float | None,
    typer.Option(
        "--grace",
        metavar="SECONDS",
        help="Between SIGTERM and SIGKILL. [default: config.toml's grace, else 5]",
        show_default=False,
    ),
]

# Where a new worktree comes from: `new --worktree` and `fanout --worktrees`.
RepoOpt = Annotated[
    str | None,
    typer.Option("--repo", metavar="DIR", help="For worktrees: the repository. [default: .]"),
]
BaseOpt = Annotated[
    str | None,
    typer.Option("--base", metavar="REF", help="For worktrees: start from REF. [default: HEAD]"),
]

# Honest outcomes (issue 14): wake, fanout, new.
TimeoutOpt = Annotated[
    str | None,
    typer.Option(
        "--timeout",
        metavar="DURATION",
        help="End the turn if it runs longer (90s, 15m, 2h): SIGTERM to its tree, SIGKILL"
        " after the grace, state timed-out, rc 124. [default: the session's, else the harness's]",
        show_default=False,
    ),
]
StrictOpt = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Any outcome flag (a denied tool, max turns, an agent error, no answer, a"
        " question) fails the turn.",
    ),
]
OnLimitOpt = Annotated[
    str | None,
    typer.Option(
        "--on-limit",
        metavar="wait[:HOURS]",
        help="On a usage limit with a reset time, wait in the pane (at most HOURS, default 12)"
        " and resume the same conversation. [default: the session's; else the turn fails]",
        show_default=False,
    ),
]
