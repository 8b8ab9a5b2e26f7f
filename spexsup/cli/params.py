"""Options and arguments shared by several commands, with their metavars and
completers, and the bounds of the shared time options (`spexsup.durations`)."""

from typing import Annotated

import typer

from spexsup import durations
from spexsup.cli import complete

# "a duration: 90s, 15m, 2h", said once in each time option's help.
DURATION = "a duration: 90s, 15m, 2h"

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
TurnOpt = Annotated[
    str | None,
    typer.Option(
        "--turn",
        metavar="TURN",
        help="A turn id, a unique prefix of its random part, last or last~N."
        " [default: the current or last turn]",
        autocompletion=complete.turn_ids,
        show_default=False,
    ),
]
AllOpt = Annotated[bool, typer.Option("--all", help="Every session.")]
ColorOpt = Annotated[
    str,
    typer.Option(
        "--color",
        metavar="WHEN",
        help="Colour the state: auto (on a terminal, unless NO_COLOR is set), always, never.",
    ),
]
MatchOpt = Annotated[
    str | None,
    typer.Option("--match", metavar="GLOB", help="Every session whose name matches GLOB."),
]
WindowOpt = Annotated[
    str | None,
    typer.Option(
        "--window",
        metavar="DURATION",
        help=f"Confirmation window, {DURATION}. [default: the session's, else config.toml's window,"
        " else the harness's, else 2]",
        show_default=False,
    ),
]
PromptFileOpt = Annotated[
    str | None,
    typer.Option("-f", "--file", metavar="FILE", help="Read the prompt from FILE, or - for stdin."),
]
MessageOpt = Annotated[
    str | None,
    typer.Option("-m", "--message", metavar="TEXT", help="The prompt, as one argument."),
]
GraceOpt = Annotated[
    str | None,
    typer.Option(
        "--grace",
        metavar="DURATION",
        help=f"Between SIGTERM and SIGKILL, {DURATION}. [default: config.toml's grace, else 5]",
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
        help=f"End the turn if it runs longer ({DURATION}): SIGTERM to its tree, SIGKILL"
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
        help="On a usage limit with a reset time, wait in the pane (at most HOURS, default 12;"
        " or a duration: 90m, 1d)"
        " and resume the same conversation. [default: the session's; else the turn fails]",
        show_default=False,
    ),
]

StaggerOpt = Annotated[
    str | None,
    typer.Option(
        "--stagger",
        metavar="DURATION",
        help=f"Start the turns of one harness at least this far apart ({DURATION}; 0: at"
        " once), so agents that share a login do not all refresh it together."
        " [default: config.toml's stagger, else 0]",
        show_default=False,
    ),
]

KeyOpt = Annotated[
    str | None,
    typer.Option(
        "--key",
        metavar="KEY",
        help="Idempotent: a wake with a KEY already used (in this home) starts nothing and"
        " answers with the turn the first one started (see README, Idempotent wakes).",
        show_default=False,
    ),
]


def window_seconds(text: str | None) -> float | None:
    """--window in seconds: from 0.05s to 1h, as a session's window."""
    if text is None:
        return None
    return durations.parse(text, "--window", minimum=0.05, maximum=3600)


def grace_seconds(text: str | None) -> float | None:
    """--grace in seconds: from 0 (SIGKILL at once) to 1h."""
    if text is None:
        return None
    return durations.parse(text, "--grace", allow_zero=True, maximum=3600)


def timeout_seconds(text: str | None) -> float | None:
    """A turn's --timeout in seconds: more than 0 and at most 7 days."""
    if text is None:
        return None
    return durations.parse(text, "--timeout", maximum=durations.WEEK)


def stagger_seconds(text: str | None) -> float | None:
    """--stagger in seconds: from 0 (no spacing) to config.MAX_STAGGER (10m)."""
    if text is None:
        return None
    from spexsup.config import MAX_STAGGER

    return durations.parse(text, "--stagger", allow_zero=True, maximum=MAX_STAGGER)


def confirm_many(question: str, names: "list[str]", *, nothing: str) -> None:
    """Ask `question (a, b, c and N more)? [y/N]` on the terminal; anything but
    y or yes (EOF, Ctrl-C too) raises Refused: `nothing` (not confirmed)."""
    from spexsup.errors import Refused

    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    try:
        ok = typer.confirm(f"{question} ({shown})?", err=True)
    except typer.Abort:
        typer.echo("", err=True)
        ok = False
    if not ok:
        raise Refused(f"{nothing} (not confirmed)", hint="--yes skips the question")
