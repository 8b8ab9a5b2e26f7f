"""Options and arguments shared by several commands, with their metavars and
completers, and the bounds of the shared time options (`spexsup.durations`)."""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

from spexsup import durations
from spexsup.cli import complete, decl

if TYPE_CHECKING:
    from spexsup.adapters.sandbox import Policy

# "a duration: 90s, 15m, 2h", said once in each time option's help.
DURATION = "a duration: 90s, 15m, 2h"

JsonOpt = Annotated[
    bool, decl.Option("--json", help="Print JSON (schema_version 1); on failure too.")
]
NameArg = Annotated[
    str,
    decl.Argument(metavar="NAME", help="Session name.", autocompletion=complete.session_names),
]
NamesArg = Annotated[
    list[str] | None,
    decl.Argument(metavar="NAME…", help="Session names.", autocompletion=complete.session_names),
]
TurnOpt = Annotated[
    str | None,
    decl.Option(
        "--turn",
        metavar="TURN",
        help="A turn id, a unique prefix of its random part, last or last~N."
        " [default: the current or last turn]",
        autocompletion=complete.turn_ids,
        show_default=False,
    ),
]
AllOpt = Annotated[bool, decl.Option("--all", help="Every session.")]
ColorOpt = Annotated[
    str,
    decl.Option(
        "--color",
        metavar="WHEN",
        help="Colour the state: auto (on a terminal, unless NO_COLOR is set), always, never.",
    ),
]
MatchOpt = Annotated[
    str | None,
    decl.Option("--match", metavar="GLOB", help="Every session whose name matches GLOB."),
]
WindowOpt = Annotated[
    str | None,
    decl.Option(
        "--window",
        metavar="DURATION",
        help=f"Confirmation window, {DURATION}. [default: the session's, else config.toml's window,"
        " else the harness's, else 2]",
        show_default=False,
    ),
]
PromptFileOpt = Annotated[
    str | None,
    decl.Option("-f", "--file", metavar="FILE", help="Read the prompt from FILE, or - for stdin."),
]
MessageOpt = Annotated[
    str | None,
    decl.Option("-m", "--message", metavar="TEXT", help="The prompt, as one argument."),
]
GraceOpt = Annotated[
    str | None,
    decl.Option(
        "--grace",
        metavar="DURATION",
        help=f"Between SIGTERM and SIGKILL, {DURATION}. [default: config.toml's grace, else 5]",
        show_default=False,
    ),
]

# Where a new worktree comes from: `new --worktree` and `fanout --worktrees`.
RepoOpt = Annotated[
    str | None,
    decl.Option("--repo", metavar="DIR", help="For worktrees: the repository. [default: .]"),
]
BaseOpt = Annotated[
    str | None,
    decl.Option("--base", metavar="REF", help="For worktrees: start from REF. [default: HEAD]"),
]

# Honest outcomes (issue 14): wake, fanout, new.
TimeoutOpt = Annotated[
    str | None,
    decl.Option(
        "--timeout",
        metavar="DURATION",
        help=f"End the turn if it runs longer ({DURATION}): SIGTERM to its tree, SIGKILL"
        " after the grace, state timed-out, rc 124. [default: the session's, else the harness's]",
        show_default=False,
    ),
]
StrictOpt = Annotated[
    bool,
    decl.Option(
        "--strict",
        help="Any outcome flag (a denied tool, max turns, an agent error, no answer, a"
        " question) fails the turn.",
    ),
]
ModelOpt = Annotated[
    str | None,
    decl.Option(
        "--model",
        metavar="MODEL",
        help="The model the turn runs (the harness's model flag, or {model} in its argv)."
        " [default: the session's, else the harness's, else the CLI's own]",
        show_default=False,
    ),
]
FallbackOpt = Annotated[
    str | None,
    decl.Option(
        "--fallback-model",
        metavar="MODEL,…",
        help="When the turn fails on a usage limit, a rate limit, overload or an unknown"
        " model before doing any work, run it again on the next of these (resuming the"
        " conversation). [default: the session's, else the harness's fallback]",
        show_default=False,
    ),
]


VerifyOpt = Annotated[
    str | None,
    decl.Option(
        "--verify",
        metavar="CMD",
        help="After the harness exits 0, run CMD (by sh -c) in the turn's cwd, in its pane:"
        " exit 0 -> complete, flag verified; else failed, cause verify (verify.log's last"
        " lines). [default: the session's, else the repository's .spexsup.toml verify, else"
        " the harness's]",
        show_default=False,
    ),
]
NoVerifyOpt = Annotated[
    bool, decl.Option("--no-verify", help="Run no check this time, whatever is configured.")
]
VerifyTimeoutOpt = Annotated[
    str | None,
    decl.Option(
        "--verify-timeout",
        metavar="DURATION",
        help="The check's time limit (30s, 10m, 1h30m); past it the check's processes are"
        " ended and the turn fails, cause verify-timeout. [default: 10m]",
        show_default=False,
    ),
]


KeepBestOpt = Annotated[
    bool,
    decl.Option(
        "--keep-best",
        help="With --worktrees and a check: wait for every leg, keep the first that"
        " passed its check (or see --pick), salvage and remove the others (as spex keep).",
    ),
]
PickOpt = Annotated[
    str | None,
    decl.Option(
        "--pick",
        metavar="first|smallest",
        help="With --keep-best: the first passing leg to end, or the one with the smallest"
        " diff. [default: first]",
        show_default=False,
    ),
]


def verify_rules(
    verify: str | None, no_verify: bool, timeout: str | None
) -> tuple[tuple[str, ...] | None, float | None]:
    """--verify, --no-verify and --verify-timeout, checked: the check's argv
    (None: not given; (): none) and its time limit in seconds (None: not given)."""
    from spexsup import durations
    from spexsup.adapters.harness import verify_argv
    from spexsup.errors import Invalid

    if verify is not None and no_verify:
        raise Invalid("--verify and --no-verify: choose one")
    argv: tuple[str, ...] | None = () if no_verify else None
    if verify is not None:
        argv = verify_argv(verify, "--verify")
        if not argv:
            raise Invalid("--verify: an empty command", hint="--verify 'make test', or --no-verify")
    limit = None
    if timeout is not None:
        limit = durations.parse(timeout, "--verify-timeout", maximum=durations.WEEK)
    return argv, limit


def usd_amount(text: str, option: str) -> float:
    """An amount of US dollars by `usage.amount`'s rule, or Invalid stating it."""
    from spexsup.errors import Invalid
    from spexsup.usage import AMOUNT_RULE, amount

    value = amount(text)
    if value is None:
        raise Invalid(f"invalid {option} {text!r}", hint=AMOUNT_RULE)
    return value


def model_rules(
    model: str | None, fallback: str | None
) -> tuple[str | None, tuple[str, ...] | None]:
    """--model and --fallback-model, checked (None: not given)."""
    from spexsup.adapters.harness import parse_model, parse_models

    return (
        parse_model(model) if model is not None else None,
        parse_models(fallback) if fallback is not None else None,
    )


OnLimitOpt = Annotated[
    str | None,
    decl.Option(
        "--on-limit",
        metavar="wait[:DURATION]",
        help="On a usage limit with a reset time, wait in the pane (at most DURATION: 6h,"
        " 90m, 1d; default 12h) and resume the same conversation."
        " [default: the session's; else the turn fails]",
        show_default=False,
    ),
]

StaggerOpt = Annotated[
    str | None,
    decl.Option(
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
    decl.Option(
        "--key",
        metavar="KEY",
        help="Idempotent: a wake with a KEY already used (in this home) starts nothing and"
        " answers with the turn the first one started (see README, Idempotent wakes).",
        show_default=False,
    ),
]


AfterOpt = Annotated[
    str | None,
    decl.Option(
        "--after",
        metavar="OTHER",
        help="Queue it until OTHER's current turn ends; launch it if that turn ended"
        " complete, else it ends skipped (cause after).",
        autocompletion=complete.session_names,
    ),
]
AfterAnyOpt = Annotated[
    str | None,
    decl.Option(
        "--after-any",
        metavar="OTHER",
        help="As --after, but launch it however OTHER's turn ended.",
        autocompletion=complete.session_names,
    ),
]


def after_session(after: str | None, after_any: str | None, waking: Sequence[str]) -> str | None:
    """The session of --after or --after-any (one of them), never one of `waking`."""
    from spexsup import ids
    from spexsup.errors import Invalid

    if after is not None and after_any is not None:
        raise Invalid("--after and --after-any: choose one")
    other = after or after_any
    if other is not None:
        ids.validate_name(other)
        if other in waking:
            raise Invalid(f"--after {other}: a session cannot wait for its own turn")
    return other


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
    if not decl.confirm(f"{question} ({shown})?"):
        raise Refused(f"{nothing} (not confirmed)", hint="--yes skips the question")


# A session's sandbox (DESIGN §19): `--sandbox`, `--sandbox=optional` (read
# as the hidden --sandbox-optional, see spexsup.cli.sandbox_form), `--no-sandbox`.
SandboxOpt = Annotated[
    bool,
    decl.Option(
        "--sandbox",
        help="Run every turn sandboxed (bubblewrap): writes only to its cwd, a private /tmp"
        " and the harness's state; no secrets, no spex state, only its model's hosts."
        " --sandbox=optional also lets wake --no-sandbox run one turn outside.",
    ),
]
SandboxOptionalOpt = Annotated[bool, decl.Option("--sandbox-optional", hidden=True)]
NoSandboxOpt = Annotated[
    bool, decl.Option("--no-sandbox", help="Run its turns unsandboxed, whatever is configured.")
]
AllowWriteOpt = Annotated[
    list[str] | None,
    decl.Option(
        "--allow-write",
        metavar="PATH",
        help="Sandboxed: PATH is writable too; repeatable.",
        show_default=False,
    ),
]
DenyReadOpt = Annotated[
    list[str] | None,
    decl.Option(
        "--deny-read",
        metavar="PATH",
        help="Sandboxed: PATH is hidden too (besides ~/.ssh, cloud credentials…); repeatable.",
        show_default=False,
    ),
]
NetworkOpt = Annotated[
    str | None,
    decl.Option(
        "--network",
        metavar="allow|none|open",
        help="Sandboxed: what turns reach. allow: the model's hosts and --allow-host ones;"
        " none; open. [default: allow]",
        show_default=False,
    ),
]
AllowHostOpt = Annotated[
    list[str] | None,
    decl.Option(
        "--allow-host",
        metavar="HOST",
        help="Sandboxed: HOST (name, name:port, *.domain) is reachable too; repeatable.",
        show_default=False,
    ),
]


def sandbox_policy(
    sandbox: bool,
    sandbox_optional: bool,
    no_sandbox: bool,
    network: str | None,
    allow_write: list[str] | None,
    deny_read: list[str] | None,
    allow_host: list[str] | None,
) -> "Policy | None":
    """The sandbox options of the sessions a command makes (`new`, `fanout
    --worktrees`), checked: their policy, None when no option said anything
    of a sandbox (see `spexsup.adapters.sandbox.build`)."""
    from spexsup.adapters import sandbox as sandboxes

    return sandboxes.build(
        None,
        mode=sandboxes.mode_of(sandbox, sandbox_optional, no_sandbox),
        network=network,
        allow_write=allow_write or (),
        deny_read=deny_read or (),
        allow_hosts=allow_host or (),
    )
