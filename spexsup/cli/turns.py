"""`spex wake | wait | stop | resume | log`."""

import sys
from typing import TYPE_CHECKING, Annotated, Any

from spexsup import ids
from spexsup import prompt as prompts
from spexsup.cli import complete, decl
from spexsup.cli.decl import command, open_spex, settings
from spexsup.cli.params import (
    AfterAnyOpt,
    AfterOpt,
    AllOpt,
    FallbackOpt,
    GraceOpt,
    JsonOpt,
    KeyOpt,
    MatchOpt,
    MessageOpt,
    ModelOpt,
    NameArg,
    NamesArg,
    NoVerifyOpt,
    OnLimitOpt,
    PromptFileOpt,
    StrictOpt,
    TimeoutOpt,
    TurnOpt,
    VerifyOpt,
    VerifyTimeoutOpt,
    WindowOpt,
    after_session,
    grace_seconds,
    model_rules,
    timeout_seconds,
    usd_amount,
    verify_rules,
    window_seconds,
)
from spexsup.errors import Invalid, UnknownSession
from spexsup.present.render import (
    document,
    one_failed,
    print_json,
    resumed_line,
    stopped_line,
    stopped_lines,
    verdict_line,
    with_iso,
)

if TYPE_CHECKING:
    from spexsup.core.spex import Spex
    from spexsup.turn.request import WakeRequest


# `wake`'s options as a user may spell them before `--`.
WAKE_OPTIONS = (
    "-f",
    "--file",
    "-m",
    "--message",
    "--window",
    "--fresh",
    "--force",
    "--timeout",
    "--strict",
    "--on-limit",
    "--json",
    "--queue",
    "--no-queue",
    "--key",
    "--after",
    "--after-any",
    "--model",
    "--fallback-model",
    "--budget",
    "--verify",
    "--no-verify",
    "--verify-timeout",
    "--no-sandbox",
    "-h",
    "--help",
    "--home",
)
# Those that take a value, which click reads whatever it starts with
# (`--budget -1`): the value is no prompt.
WAKE_VALUED = frozenset(WAKE_OPTIONS) - {
    "--fresh", "--force", "--strict", "--json", "--queue", "--no-queue", "--no-verify", "-h",
    "--help",
}  # fmt: skip


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
        if arg in WAKE_VALUED:
            next(rest, None)
        elif arg.startswith("-") and arg != "-" and arg.split("=", 1)[0] not in WAKE_OPTIONS:
            import difflib

            close = difflib.get_close_matches(arg.split("=", 1)[0], WAKE_OPTIONS, n=1)
            dashed = "a prompt that starts with - goes after --: spex wake NAME -- '-…'"
            raise Invalid(
                f"wake: no such option {arg!r}",
                hint=f"did you mean {close[0]}? {dashed}" if close else dashed,
            )


# What a turn budget can see while the turn runs, by harness (spexsup.pane.budget).
LIVE_COST = {
    "codex": "codex reports its usage only when the turn ends: --budget cannot stop it"
    " while it runs",
    "claude": "claude reports its cost only when the turn ends: with no [pricing] in"
    " config.toml, --budget counts nothing while it runs",
}


def budget_note(ctx: decl.Context, spex: "Spex", name: str) -> None:
    """Say, before the turn starts, when its budget cannot be kept: an
    unknown cost never passes for zero."""
    from spexsup.core.sessions import get

    harness = get(spex, name).harness
    note = LIVE_COST.get(harness)
    if note and not (harness == "claude" and settings(ctx, spex).pricing):
        decl.echo(f"spex: note: {note}", err=True)


def wake_and_report(ctx: decl.Context, request: "WakeRequest", *, as_json: bool) -> None:
    """Wake (`turn.front.wake`: now or queued, as the request's policy says)
    and print the verdict; exit 1 unless it is ok."""
    from spexsup.turn.front import wake as wake_turn

    spex = open_spex(ctx)
    if request.limits.budget is not None:
        budget_note(ctx, spex, request.name)
    verdict = wake_turn(spex, request)
    if as_json:
        print_json(document(with_iso({"ok": verdict.ok, **verdict.as_json()})))
    else:
        # The verdict line names the cause, once: the exit code says it failed.
        decl.echo(verdict_line(request.name, verdict.as_json()))
    if not verdict.ok:
        raise decl.Exit(1)


@command()
def wake(
    ctx: decl.Context,
    name: NameArg,
    text: Annotated[
        list[str] | None,
        decl.Argument(
            metavar="[TEXT]…",
            help="The prompt; several words are joined by one space.",
            show_default=False,
        ),
    ] = None,
    message: MessageOpt = None,
    file: PromptFileOpt = None,
    window: WindowOpt = None,
    fresh: Annotated[
        bool, decl.Option("--fresh", help="Start a new conversation instead of resuming.")
    ] = False,
    force: Annotated[
        bool, decl.Option("--force", help="Replace whatever runs in the pane (vim, a REPL…).")
    ] = False,
    timeout: TimeoutOpt = None,
    strict: StrictOpt = False,
    on_limit: OnLimitOpt = None,
    queue: Annotated[
        bool | None,
        decl.Option(
            "--queue/--no-queue",
            help="If the session is busy or leased, or max_running turns run, keep the prompt"
            " and launch it when it may go (verdict queued, exit 0; see spex queue)."
            " [default: the session's queue (spex new --queue), else config.toml's queue]",
            show_default=False,
        ),
    ] = None,
    key: KeyOpt = None,
    after: AfterOpt = None,
    after_any: AfterAnyOpt = None,
    model: ModelOpt = None,
    fallback: FallbackOpt = None,
    budget: Annotated[
        str | None,
        decl.Option(
            "--budget",
            metavar="USD",
            help="Stop the turn once its known spend reaches USD (what the CLI reports, or"
            " [pricing] estimates; a cost nobody knows is never counted).",
            show_default=False,
        ),
    ] = None,
    verify: VerifyOpt = None,
    no_verify: NoVerifyOpt = False,
    verify_timeout: VerifyTimeoutOpt = None,
    no_sandbox: Annotated[
        bool,
        decl.Option(
            "--no-sandbox",
            help="Run this one turn outside the session's sandbox (only a session made"
            " with --sandbox=optional allows it).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a turn and print its verdict (confirmed, completed, failed, queued).

    The turn continues the agent's conversation (the `conversation` that
    `spex show` prints) unless --fresh starts a new one.

    \b
    Examples:
      spex wake api fix the flaky test
      spex wake api -m "fix the flaky test"
      spex wake api -f prompt.md --window 5
      spex wake api "run the nightly checks" --timeout 15m --strict
      git diff | spex wake api -f - --json
      spex wake api --queue then update the changelog
      spex wake review --after api review what api just changed
      spex wake api --key nightly-2026-12-01 run the nightly checks
      spex wake api --model opus --fallback-model sonnet,haiku fix the flaky test
      spex wake api --verify 'make test' fix the flaky test
    """

    from spexsup.turn.admit import parse_on_limit
    from spexsup.turn.request import Limits, QueuePolicy, WakeRequest

    ids.validate_name(name)
    checked = verify_rules(verify, no_verify, verify_timeout)
    if key is not None:
        from spexsup.turn.keys import validate

        validate(key)
    other = after_session(after, after_any, [name])
    seconds = window_seconds(window)
    prompt = prompts.read(text, file, message=message)
    limit = timeout_seconds(timeout)
    if on_limit is not None:
        parse_on_limit(on_limit)
    limits = Limits(limit, strict, on_limit, *model_rules(model, fallback))
    limits = limits._replace(verify=checked[0], verify_timeout=checked[1], unsandboxed=no_sandbox)
    if budget is not None:
        limits = limits._replace(budget=usd_amount(budget, "--budget"))
    policy = {None: QueuePolicy.INHERIT, True: QueuePolicy.BUSY, False: QueuePolicy.NEVER}
    request = WakeRequest(
        name,
        prompt,
        window=seconds,
        fresh=fresh,
        force=force,
        limits=limits,
        key=key,
        queue=policy[queue],
        after=other,
        after_any=after_any is not None,
    )
    wake_and_report(ctx, request, as_json=as_json)


@command()
def wait(
    ctx: decl.Context,
    names: NamesArg = None,
    all_: AllOpt = False,
    match: MatchOpt = None,
    timeout: Annotated[
        str | None,
        decl.Option(
            "--timeout",
            metavar="DURATION",
            help="Give up after DURATION (exit 124), a duration: 90s, 15m, 2h."
            " [default: wait forever]",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Block until each session's current turn ends: exit 0 when every turn
    ended complete, 1 when any did not (each turn's rc is in the output).

    \b
    Examples:
      spex wait api --timeout 10m
      spex wait --match 'api-*' --json
    """
    from spexsup import durations
    from spexsup.core import sessions
    from spexsup.turn.read import load_turn
    from spexsup.turn.read import wait as wait_for

    limit = None
    if timeout is not None:
        limit = durations.parse(timeout, "--timeout", allow_zero=True, maximum=None)

    spex = open_spex(ctx)
    names = sessions.select(spex, names or [], all_=all_, match=match)
    if as_json:
        ended = wait_for(spex, names, timeout=limit)
        # Each entry is the turn's one JSON shape, plus `turn` (its id) as before.
        print_json([{**load_turn(spex, e.turn), "turn": e.turn} for e in ended if e.turn])
        raise decl.Exit(int(any(e.exit_code for e in ended)))
    from spexsup.present.progress import WaitProgress

    # Each end is printed as it happens; on a terminal a counter line follows.
    progress = WaitProgress(len(names), live=sys.stdout.isatty() and len(names) > 1)
    try:
        ended = wait_for(spex, names, timeout=limit, on_end=progress.ended, on_tick=progress.tick)
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt) or type(e).__name__ == "Signalled":
            still_running_note(spex, names, e)
        raise
    finally:
        progress.close()
    raise decl.Exit(int(any(e.exit_code for e in ended)))


def still_running_note(spex: "Spex", names: list[str], e: BaseException) -> None:
    """What a Ctrl-C on `spex wait` leaves: the turns run on; say which, and
    the one command that stops them (issue 38, item 6)."""
    from spexsup import states

    running = []
    for name in names:
        row = spex.store.db.execute(
            "SELECT t.state FROM sessions s JOIN turns t ON t.id = s.current_turn WHERE s.name = ?",
            (name,),
        ).fetchone()
        if row is not None and row["state"] in states.ACTIVE:
            running.append(name)
    if running:
        e.add_note(
            f"stopped waiting; still running: {', '.join(running)}"
            f" (stop them with: spex stop {' '.join(running)})"
        )


@command()
def stop(
    ctx: decl.Context,
    names: NamesArg = None,
    all_: AllOpt = False,
    match: MatchOpt = None,
    grace: GraceOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Abort the running turn and take no new turns until `spex resume`.

    The turn is killed (SIGTERM to its whole process tree, SIGKILL after the
    grace) and ends `aborted`; it is not paused and does not come back. The
    agent's conversation is kept: the next wake after `spex resume`
    continues it.

    \b
    Examples:
      spex stop api
      spex stop --all --grace 1s
    """
    from spexsup.core import sessions
    from spexsup.errors import SpexError
    from spexsup.turn.stop import DEFAULT_GRACE, stop_each

    seconds = grace_seconds(grace)
    spex = open_spex(ctx)
    chosen = sessions.select(spex, names or [], all_=all_, match=match)
    if seconds is None:
        seconds = settings(ctx, spex).grace
    given = DEFAULT_GRACE if seconds is None else seconds

    def stopped(name: str, aborted: str | None) -> dict[str, Any]:
        said = {"ok": True, "session": name, "state": "stopped", "aborted": aborted}
        return document({**said, "grace": given})

    if names and len(names) == 1:
        # In a thread too: a signal ends the stop's wait, not its kill.
        ((_, aborted),) = stop_each(spex, chosen, grace=given)
        if isinstance(aborted, SpexError):
            raise aborted
        doc = stopped(chosen[0], aborted)
        if as_json:
            print_json(doc)
        else:
            decl.echo(stopped_line(doc))
        return
    # Several: stopped at once, one's failure stopping none of the others
    # (DESIGN §3); each said as it is done, in their order.
    docs = []
    failed: SpexError | None = None
    for name, outcome in stop_each(spex, chosen, grace=given):
        if isinstance(outcome, SpexError):
            failed = failed or outcome
            docs.append(one_failed(name, outcome))
        else:
            docs.append(stopped(name, outcome))
        if not as_json:
            decl.say_each(docs[-1], stopped_lines)
    if as_json:
        print_json(docs)
    if failed is not None:
        raise decl.Exit(failed.exit_code)


@command()
def resume(
    ctx: decl.Context,
    names: Annotated[
        list[str] | None,
        decl.Argument(
            metavar="NAME… [-- PROMPT…]",
            help="Session names; after --, a prompt to wake the one session with.",
            autocompletion=complete.session_names,
            show_default=False,
        ),
    ] = None,
    message: MessageOpt = None,
    file: PromptFileOpt = None,
    all_: AllOpt = False,
    match: MatchOpt = None,
    force: Annotated[
        bool, decl.Option("--force", help="Resume even if an old turn may still run.")
    ] = False,
    window: WindowOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Let stopped sessions take turns again; with a prompt, also wake the one.

    It does not restart the turn that `spex stop` aborted: a wake (or the
    prompt here, given with -m, -f or after --) starts a new turn, which
    continues the agent's conversation. A session that is not stopped is
    left as it is (exit 0). Words that name sessions are never a prompt.

    \b
    Examples:
      spex resume api web docs
      spex resume api -- fix the flaky test
      spex resume api -f next-steps.md
      spex resume --match 'api-*' --force
    """
    from spexsup.core import sessions
    from spexsup.turn.stop import resume as resume_session

    names, prompt = _names_and_prompt(ctx, names or [])
    given = bool(prompt) or message is not None or file is not None
    if given and (all_ or match is not None):
        raise Invalid("a prompt resumes and wakes one session, not --all or --match")
    if given and len(names) != 1:
        raise Invalid(
            "a prompt resumes and wakes one session",
            hint=f"resume them (spex resume {' '.join(names)}),"
            " then wake one (spex wake NAME -m TEXT)",
        )
    seconds = window_seconds(window)
    # Read (and refuse) the prompt before anything changes.
    data = None
    if given:
        data = prompts.read(prompt, file, message=message, forms="-- TEXT… or -m TEXT")
    spex = open_spex(ctx)
    if not given:
        _not_a_prompt(spex, names)
    chosen = sessions.select(spex, names, all_=all_, match=match)
    for n in chosen:
        sessions.get(spex, n)  # every name known before any session changes
    docs = []
    for n in chosen:
        resumed = resume_session(spex, n, force=force, not_stopped_ok=True)
        docs.append(document({"ok": True, "session": n, "resumed": resumed}))
        if not as_json:
            decl.echo(resumed_line(docs[-1]))
    if data is not None:
        from spexsup.turn.request import WakeRequest

        wake_and_report(ctx, WakeRequest(names[0], data, window=seconds), as_json=as_json)
        return
    if as_json:
        print_json(docs[0] if len(names) == 1 else docs)


def _names_and_prompt(ctx: decl.Context, words: list[str]) -> tuple[list[str], list[str]]:
    """`resume`'s words split at `--` (click keeps no trace of it): the names
    before, the prompt after."""
    argv = ctx.find_root().meta.get("spex.argv", [])
    if "--" not in argv:
        return words, []
    after = len(argv) - argv.index("--") - 1
    if after == 0:
        raise Invalid("nothing after --", hint="spex resume NAME -- PROMPT…")
    return words[: len(words) - after], words[len(words) - after :]


def _not_a_prompt(spex: "Spex", names: list[str]) -> None:
    """`resume NAME WORDS…` once woke NAME with WORDS: words that all name
    sessions are sessions to resume; any other word makes the line read two
    ways, and it is refused with both (a prompt comes with --, -m or -f)."""
    if len(names) < 2:
        return
    known = {r["name"] for r in spex.store.db.execute("SELECT name FROM sessions")}
    if names[0] not in known:
        raise UnknownSession(names[0])
    strangers = [w for w in names[1:] if w not in known]
    if not strangers:
        return
    import shlex

    first, rest = names[0], " ".join(names[1:])
    raise Invalid(
        f"'resume {' '.join(names)}' reads two ways: the sessions {', '.join(names)}"
        f" (there is no session {strangers[0]!r}), or {first} woken with the prompt {rest!r}",
        hint=f"to wake it: spex resume {first} -- {shlex.join(names[1:])}",
    )


@command()
def log(
    ctx: decl.Context,
    name: NameArg,
    turn: TurnOpt = None,
    follow: Annotated[bool, decl.Option("-f", "--follow", help="Follow until it ends.")] = False,
    tail: Annotated[
        int | None,
        decl.Option(
            "--tail",
            "-n",
            metavar="LINES",
            min=0,
            help="Start at the last LINES lines (as tail -n). [default: the whole output]",
            show_default=False,
        ),
    ] = None,
    pretty: Annotated[
        bool,
        decl.Option(
            "--pretty",
            help="Render claude/codex/opencode/pi JSON events as text: assistant text, one"
            " line per tool call, errors marked (red on a terminal).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print a turn's output (with --json: its metadata).

    \b
    Examples:
      spex log api -f
      spex log api --turn last~1
      spex log api --turn 3fa --json
      spex log api --tail 20 -f
      spex log api --pretty
    """
    from spexsup import ids
    from spexsup.core import sessions
    from spexsup.turn.read import load_turn
    from spexsup.turn.read import log as turn_log

    ids.validate_name(name)

    spex = open_spex(ctx)
    sessions.get(spex, name)
    if turn is not None:
        turn = ids.resolve_turn(spex.store.db, name, turn)
    if as_json:
        if follow or tail is not None:
            raise Invalid("--json prints the turn's metadata; it does not follow or tail")
        turn = turn or sessions.get(spex, name).current_turn
        if turn is None:
            from spexsup.errors import Refused

            raise Refused(f"session {name!r} has no turn yet")
        print_json(load_turn(spex, turn))
        return
    out = sys.stdout.buffer
    chunks = turn_log(spex, name, turn=turn, follow=follow, tail=tail)
    # A pipe gets the agent's bytes as written (output.log's); a terminal gets
    # them without escapes (no clipboard write, title or screen clear), and
    # --pretty's rendering is made printable wherever it goes: colours stay.
    # Each line within its bound either way (DESIGN §7 "Long lines").
    safe = pretty or sys.stdout.isatty()
    if not pretty:
        from spexsup.pane.lines import Cut

        chunks = Cut().stream(chunks)
    else:
        from spexsup.pane import pretty as renderer
        from spexsup.pane import turndir

        shown = turn or sessions.get(spex, name).current_turn
        parser = (
            turndir.meta(turndir.path(spex.home, name, shown)).get("outcome") if shown else None
        )
        chunks = renderer.render(
            chunks, parser if isinstance(parser, str) else None, color=sys.stdout.isatty()
        )
    from spexsup.pane.pretty import TerminalText

    screen = TerminalText(colours=sys.stdout.isatty()) if safe else None
    for chunk in chunks:
        out.write(screen.feed(chunk) if screen is not None else chunk)
        out.flush()
    if screen is not None:
        out.write(screen.feed(b"", final=True))
        out.flush()
