"""`spex new`: a session made, as its options ask (`sessions.Spec`)."""

from typing import TYPE_CHECKING, Annotated

from spexsup import ids
from spexsup.cli import complete, decl
from spexsup.cli.decl import command, open_spex, settings
from spexsup.cli.params import (
    AllowHostOpt,
    AllowWriteOpt,
    BaseOpt,
    DenyReadOpt,
    FallbackOpt,
    JsonOpt,
    ModelOpt,
    NameArg,
    NetworkOpt,
    NoSandboxOpt,
    OnLimitOpt,
    RepoOpt,
    SandboxOpt,
    SandboxOptionalOpt,
    StrictOpt,
    TimeoutOpt,
    VerifyOpt,
    VerifyTimeoutOpt,
    WindowOpt,
    model_rules,
    sandbox_policy,
    timeout_seconds,
    verify_rules,
    window_seconds,
)
from spexsup.errors import Invalid
from spexsup.present.render import argv_word, print_json

if TYPE_CHECKING:
    from spexsup.core.sessions import Session, Spec
    from spexsup.core.spex import Spex
    from spexsup.core.worktree import Request, Setup


@command()
def new(
    ctx: decl.Context,
    name: NameArg,
    command: Annotated[
        list[str] | None,
        decl.Argument(
            metavar="[-- CMD ARGS…]",
            help="A command to run as the harness; each turn appends the prompt to it."
            " With --harness: that harness's own arguments, in every turn.",
            show_default=False,
        ),
    ] = None,
    harness: Annotated[
        str | None,
        decl.Option(
            "--harness",
            metavar="HARNESS",
            help="claude, codex, opencode, pi, demo, command or one from harnesses.toml."
            " [default: config.toml's default_harness; none: refused]",
            autocompletion=complete.harness_names,
            show_default=False,
        ),
    ] = None,
    cwd: Annotated[
        str | None,
        decl.Option(
            "--cwd", metavar="DIR", help="Working directory. [default: here]", show_default=False
        ),
    ] = None,
    env: Annotated[
        list[str] | None,
        decl.Option("--env", metavar="KEY=VALUE", help="Environment of every turn; repeatable."),
    ] = None,
    window: WindowOpt = None,
    worktree: Annotated[
        bool, decl.Option("--worktree", help="Work in a new git worktree and branch.")
    ] = False,
    branch: Annotated[
        str | None,
        decl.Option(
            "--branch",
            metavar="BRANCH",
            help="With --worktree: the new branch. [default: spex/NAME]",
        ),
    ] = None,
    base: BaseOpt = None,
    repo: RepoOpt = None,
    worktree_dir: Annotated[
        str | None,
        decl.Option("--worktree-dir", metavar="DIR", help="With --worktree: make it in DIR/NAME."),
    ] = None,
    timeout: TimeoutOpt = None,
    strict: StrictOpt = False,
    on_limit: OnLimitOpt = None,
    queue: Annotated[
        bool,
        decl.Option(
            "--queue",
            help="spex wake queues its prompt when the session is busy (as wake --queue).",
        ),
    ] = False,
    model: ModelOpt = None,
    fallback: FallbackOpt = None,
    verify: VerifyOpt = None,
    no_verify: Annotated[
        bool,
        decl.Option("--no-verify", help="Its turns run no check, whatever is configured."),
    ] = False,
    verify_timeout: VerifyTimeoutOpt = None,
    sandbox: SandboxOpt = False,
    sandbox_optional: SandboxOptionalOpt = False,
    no_sandbox: NoSandboxOpt = False,
    allow_write: AllowWriteOpt = None,
    deny_read: DenyReadOpt = None,
    network: NetworkOpt = None,
    allow_host: AllowHostOpt = None,
    no_check: Annotated[
        bool,
        decl.Option("--no-check", help="Create it even if the harness binary is not found."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Create a session and its tmux pane (with --worktree: in a new git worktree).

    After --: with no --harness, the command to run (the prompt appended);
    with --harness H, arguments for H, put in its fresh and resumed argv
    before the prompt (see spex harness show H).

    \b
    Examples:
      spex new api --harness claude --cwd ~/src/api
      spex new tool -- ./my-agent.sh --flag
      spex new edit --harness claude -- --permission-mode acceptEdits
      spex new fix --harness claude --worktree --base main
      spex new api --harness claude --verify 'make test' --verify-timeout 20m
      spex new night --harness claude --worktree --sandbox
    """
    from spexsup.adapters.sandbox import require_engine
    from spexsup.core import sessions

    ids.validate_name(name)
    argv = ctx.find_root().meta.get("spex.argv", [])
    if "--" in argv and not command:
        raise Invalid("nothing after --", hint="spex new NAME -- CMD ARGS…")
    request = _worktree_request(worktree, branch, base, repo, worktree_dir)
    rules = _turn_rules(
        window, timeout, strict, on_limit, queue, model, fallback, verify, no_verify, verify_timeout
    )
    policy = sandbox_policy(
        sandbox, sandbox_optional, no_sandbox, network, allow_write, deny_read, allow_host
    )
    if policy is not None and policy.enabled:
        require_engine()
    spex = open_spex(ctx)
    spec = _what_runs(ctx, spex, rules, harness, command)
    variables = sessions.parse_env(env or [])
    spec = spec._replace(cwd=cwd, env=variables, worktree=request, sandbox=policy)
    confirm = _confirm_post_create if worktree else None
    s = sessions.create(spex, name, spec, check=not no_check, confirm=confirm)
    _created(spex, s, as_json=as_json)


def _worktree_request(
    worktree: bool, branch: str | None, base: str | None, repo: str | None, directory: str | None
) -> "Request | None":
    """`new --worktree` and the options that shape it (refused without it)."""
    asked = (branch, base, repo, directory)
    if not worktree and asked != (None,) * 4:
        raise Invalid("--branch, --base, --repo and --worktree-dir need --worktree")
    if not worktree:
        return None
    # (spexsup.core.worktree's dataclasses cost a plain `new` ~5 ms)
    from spexsup.core.worktree import Request

    return Request(*asked)


def _turn_rules(
    window: str | None,
    timeout: str | None,
    strict: bool,
    on_limit: str | None,
    queue: bool,
    model: str | None,
    fallback: str | None,
    verify: str | None,
    no_verify: bool,
    verify_timeout: str | None,
) -> "Spec":
    """The rules a new session's turns keep (its window, time limit, models,
    check…), read and checked: a session spec of those alone."""
    from spexsup.core.sessions import Spec

    seconds = window_seconds(window)
    limit = timeout_seconds(timeout)
    models = model_rules(model, fallback)
    check, check_timeout = verify_rules(verify, no_verify, verify_timeout)
    if on_limit is not None:
        from spexsup.turn.admit import parse_on_limit

        parse_on_limit(on_limit)
    return Spec(
        window=seconds,
        timeout=limit,
        strict=strict,
        on_limit=on_limit,
        queue=queue,
        model=models[0],
        fallback=models[1],
        verify=check,
        verify_timeout=check_timeout,
    )


def _what_runs(
    ctx: decl.Context, spex: "Spex", spec: "Spec", harness: str | None, command: list[str] | None
) -> "Spec":
    """`spec` with the harness and what follows `--`: a command (no
    --harness), or a named harness's own arguments; config.toml's
    default_harness when neither is given."""
    if harness is None and not command:
        harness = settings(ctx, spex).default_harness
    if harness is not None and harness != "command" and command:
        # `--harness H -- ARGS…`: H's own arguments, not a command.
        return spec._replace(harness=harness, harness_args=command)
    return spec._replace(harness=harness, command=command)


def _created(spex: "Spex", s: "Session", *, as_json: bool) -> None:
    """What `new` prints of the session it made (and its post_create's note)."""
    from spexsup.core.sessions import pinned_note
    from spexsup.turn.read import describe

    note = pinned_note(s)
    if note:
        decl.echo(f"spex: note: {note}", err=True)
    if as_json:
        (row,) = describe(spex, [s.name])
        print_json(row)
        return
    line = f"created {s.name} ({' '.join([s.harness, *map(argv_word, s.harness_args)])}) in {s.cwd}"
    if s.worktree is not None:
        from spexsup.cli.worktree import ran_post_create

        ran = ran_post_create(s.worktree)
        if ran:
            decl.echo(ran)
        line += f" on branch {s.worktree.branch} from {s.worktree.base[:12]}"
    decl.echo(line)


def _confirm_post_create(setup: "Setup") -> bool:
    from spexsup.cli.worktree import confirm_post_create

    return confirm_post_create(setup)
