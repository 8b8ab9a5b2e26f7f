"""`spex edit`: change a session's settings, spelled as `spex new` spells them."""

from typing import TYPE_CHECKING, Annotated

from spexsup import ids
from spexsup.adapters.harness import verify_argv
from spexsup.cli import complete, decl
from spexsup.cli.decl import command, open_spex
from spexsup.cli.params import (
    DURATION,
    AllowHostOpt,
    AllowWriteOpt,
    DenyReadOpt,
    JsonOpt,
    ModelOpt,
    NameArg,
    NetworkOpt,
    NoSandboxOpt,
    SandboxOpt,
    SandboxOptionalOpt,
    VerifyTimeoutOpt,
    model_rules,
    timeout_seconds,
    verify_rules,
    window_seconds,
)
from spexsup.errors import Invalid
from spexsup.pane.pretty import one_line
from spexsup.present.render import document, edit_lines, print_json

if TYPE_CHECKING:
    from spexsup.core.spex import Spex
    from spexsup.turn.edit import Edited


# `spex edit`'s options: each setting as `spex new` spells it, and the --no-X
# that clears it back to its default.
AfterArg = Annotated[
    list[str] | None,
    decl.Argument(
        metavar="[-- ARGS…]",
        help="The harness's own arguments, replacing the session's; for the command"
        " harness, its command.",
        show_default=False,
    ),
]
EditHarnessOpt = Annotated[
    str | None,
    decl.Option(
        "--harness",
        metavar="HARNESS",
        help="Run another harness: forgets the conversation id (another CLI cannot"
        " resume it) and the old harness's arguments.",
        autocompletion=complete.harness_names,
        show_default=False,
    ),
]
EditCwdOpt = Annotated[
    str | None,
    decl.Option("--cwd", metavar="DIR", help="Working directory (not of a worktree session)."),
]
EditEnvOpt = Annotated[
    list[str] | None,
    decl.Option("--env", metavar="KEY=VALUE", help="Set or override a variable; repeatable."),
]
UnsetEnvOpt = Annotated[
    list[str] | None,
    decl.Option("--unset-env", metavar="KEY", help="Drop a variable; repeatable."),
]
EditWindowOpt = Annotated[
    str | None,
    decl.Option("--window", metavar="DURATION", help=f"Confirmation window, {DURATION}."),
]
NoWindowOpt = Annotated[
    bool,
    decl.Option("--no-window", help="Back to config.toml's window, else the harness's."),
]
EditTimeoutOpt = Annotated[
    str | None,
    decl.Option("--timeout", metavar="DURATION", help=f"End a turn that runs longer, {DURATION}."),
]
NoTimeoutOpt = Annotated[
    bool, decl.Option("--no-timeout", help="No time limit of its own (the harness's).")
]
EditStrictOpt = Annotated[
    bool | None,
    decl.Option(
        "--strict/--no-strict",
        help="Any outcome flag fails a turn / no longer.",
        show_default=False,
    ),
]
NoModelOpt = Annotated[bool, decl.Option("--no-model", help="No model of its own (the harness's).")]
EditFallbackOpt = Annotated[
    str | None,
    decl.Option(
        "--fallback-model",
        metavar="MODEL,…",
        help="The models a turn falls back to, in order ('' for none).",
        show_default=False,
    ),
]
NoFallbackOpt = Annotated[
    bool,
    decl.Option("--no-fallback-model", help="No fallback list of its own (the harness's)."),
]
EditVerifyOpt = Annotated[
    str | None,
    decl.Option(
        "--verify",
        metavar="CMD",
        help="The check its turns run after the harness exits 0 (by sh -c; '' for none).",
        show_default=False,
    ),
]
EditNoVerifyOpt = Annotated[
    bool,
    decl.Option("--no-verify", help="No check of its own (the repository's, else the harness's)."),
]
EditQueueOpt = Annotated[
    bool | None,
    decl.Option(
        "--queue/--no-queue",
        help="spex wake queues its prompt when the session is busy / no longer.",
        show_default=False,
    ),
]
EditOnLimitOpt = Annotated[
    str | None,
    decl.Option(
        "--on-limit",
        metavar="wait[:DURATION]",
        help="On a usage limit, wait in the pane (at most DURATION: 6h, 90m; default 12h).",
    ),
]
NoOnLimitOpt = Annotated[
    bool, decl.Option("--no-on-limit", help="On a usage limit, the turn fails.")
]
ClearArgsOpt = Annotated[
    bool, decl.Option("--clear-args", help="Drop the harness's own arguments.")
]
NoCheckOpt = Annotated[
    bool,
    decl.Option("--no-check", help="Change it even if the harness binary is not found."),
]
DryRunOpt = Annotated[
    bool, decl.Option("--dry-run", help="Print what would change; change nothing.")
]


@command()
def edit(
    ctx: decl.Context,
    name: NameArg,
    after: AfterArg = None,
    harness: EditHarnessOpt = None,
    cwd: EditCwdOpt = None,
    env: EditEnvOpt = None,
    unset_env: UnsetEnvOpt = None,
    window: EditWindowOpt = None,
    no_window: NoWindowOpt = False,
    timeout: EditTimeoutOpt = None,
    no_timeout: NoTimeoutOpt = False,
    strict: EditStrictOpt = None,
    model: ModelOpt = None,
    no_model: NoModelOpt = False,
    fallback: EditFallbackOpt = None,
    no_fallback: NoFallbackOpt = False,
    verify: EditVerifyOpt = None,
    no_verify: EditNoVerifyOpt = False,
    verify_timeout: VerifyTimeoutOpt = None,
    queue: EditQueueOpt = None,
    on_limit: EditOnLimitOpt = None,
    no_on_limit: NoOnLimitOpt = False,
    clear_args: ClearArgsOpt = False,
    no_check: NoCheckOpt = False,
    sandbox: SandboxOpt = False,
    sandbox_optional: SandboxOptionalOpt = False,
    no_sandbox: NoSandboxOpt = False,
    allow_write: AllowWriteOpt = None,
    deny_read: DenyReadOpt = None,
    network: NetworkOpt = None,
    allow_host: AllowHostOpt = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Change a session's settings; its next turn runs with them.

    Options as spex new spells them; a --no-X option clears X back to its
    default. Refused while a turn runs (spex wait or spex stop it first) and
    under a maintenance lease. Everything is checked first: a bad value
    changes nothing. The pane's idle shell keeps its cwd and env until the
    next turn. --json prints the session as spex show --json does (with
    --dry-run: the changes).

    \b
    Examples:
      spex edit api --env API_KEY=… --unset-env DEBUG
      spex edit api --timeout 30m --strict
      spex edit api --cwd ~/src/api-v2 --dry-run
      spex edit api -- --model opus
      spex edit api --harness codex --clear-args
      spex edit tool -- ./my-agent.sh --verbose
      spex edit api --sandbox --allow-host 127.0.0.1:8080
    """
    from spexsup.adapters.sandbox import mode_of
    from spexsup.core.sessions import parse_env
    from spexsup.turn.edit import Edit
    from spexsup.turn.edit import edit as change_session

    ids.validate_name(name)
    argv = ctx.find_root().meta.get("spex.argv", [])
    if after and "--" not in argv:
        raise Invalid(f"unexpected {after[0]!r}", hint="harness arguments go after --")
    if "--" in argv and not after:
        raise Invalid("nothing after --", hint="--clear-args drops the arguments")
    change = Edit(
        harness=harness,
        after=tuple(after) if after else None,
        clear_args=clear_args,
        cwd=cwd,
        env=parse_env(env or []) or None,
        unset_env=tuple(unset_env or ()),
        window=window_seconds(window),
        no_window=no_window,
        timeout=timeout_seconds(timeout),
        no_timeout=no_timeout,
        strict=strict,
        on_limit=on_limit,
        no_on_limit=no_on_limit,
        queue=queue,
        model=model_rules(model, None)[0],
        no_model=no_model,
        fallback=model_rules(None, fallback)[1],
        no_fallback=no_fallback,
        verify=verify_argv(verify, "--verify") if verify is not None else None,
        no_verify=no_verify,
        verify_timeout=verify_rules(None, False, verify_timeout)[1],
        sandbox=mode_of(sandbox, sandbox_optional, no_sandbox),
        network=network,
        allow_write=tuple(allow_write or ()),
        deny_read=tuple(deny_read or ()),
        allow_hosts=tuple(allow_host or ()),
    )
    change.check(name)
    spex = open_spex(ctx)
    done = change_session(spex, name, change, check=not no_check, dry_run=dry_run)
    _say_done(spex, name, done, dry_run=dry_run, as_json=as_json)


def _say_done(spex: "Spex", name: str, done: "Edited", *, dry_run: bool, as_json: bool) -> None:
    """Its notes on stderr, then the changes (or, with --json and no
    --dry-run, the session as spex show --json prints it)."""
    from spexsup.turn.read import describe

    for note in done.notes:
        decl.echo(one_line(f"spex: note: {note}"), err=True)
    if as_json and dry_run:
        print_json(document({"session": name, "dry_run": True, "changes": done.changes}))
    elif as_json:
        (row,) = describe(spex, [name], turns=10, worktree_status=True)
        print_json(row)
    else:
        for line in edit_lines(name, done.changes, dry_run=dry_run):
            decl.echo(line)
