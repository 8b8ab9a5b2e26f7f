"""`spex fanout` (and a wave across hosts); `spex wave` is in cli/waves.py,
the launch and its display in cli/runwave.py."""

from typing import TYPE_CHECKING, Annotated, Any

from spexsup import prompt as prompts
from spexsup import states
from spexsup.cli import complete, decl
from spexsup.cli.decl import command, open_spex, settings
from spexsup.cli.params import (
    AfterAnyOpt,
    AfterOpt,
    AllOpt,
    AllowHostOpt,
    AllowWriteOpt,
    BaseOpt,
    DenyReadOpt,
    FallbackOpt,
    JsonOpt,
    KeepBestOpt,
    MatchOpt,
    ModelOpt,
    NetworkOpt,
    NoVerifyOpt,
    OnLimitOpt,
    PickOpt,
    PromptFileOpt,
    RepoOpt,
    SandboxOptionalOpt,
    StaggerOpt,
    TimeoutOpt,
    VerifyOpt,
    VerifyTimeoutOpt,
    WindowOpt,
    after_session,
    model_rules,
    sandbox_policy,
    stagger_seconds,
    timeout_seconds,
    usd_amount,
    verify_rules,
    window_seconds,
)
from spexsup.cli.runwave import run_wave
from spexsup.errors import Invalid
from spexsup.present.progress import leg_line, summary
from spexsup.present.render import document, print_json, with_iso
from spexsup.record import Record

if TYPE_CHECKING:
    from collections.abc import Callable

    from spexsup.adapters.sandbox import Policy
    from spexsup.conductors.fanout import BestOf, Given, Plan
    from spexsup.conductors.waves import Pacing
    from spexsup.core.sessions import Session
    from spexsup.core.spex import Spex
    from spexsup.core.worktree import Request


# `spex fanout`'s own options (the shared ones are in cli/params.py).
LegsArg = Annotated[
    list[str] | None,
    decl.Argument(
        metavar="NAME…",
        help="Sessions to wake (with --retry-failed: the legs to retry).",
        autocompletion=complete.session_names,
    ),
]
PromptOpt = Annotated[
    str | None, decl.Option("-m", "--message", metavar="TEXT", help="The prompt.")
]
MaxConcurrentOpt = Annotated[
    int | None,
    decl.Option(
        "--max-concurrent",
        metavar="N",
        help="Launches at once. [default: config.toml's max_concurrent, else 16]",
        show_default=False,
    ),
]
MaxRunningOpt = Annotated[
    int | None,
    decl.Option(
        "--max-running",
        metavar="N",
        help="At most N legs running at once: the others are queued and launch as legs end.",
        show_default=False,
    ),
]
WaveBudgetOpt = Annotated[
    str | None,
    decl.Option(
        "--budget",
        metavar="USD",
        help="Launch no more legs once the wave's known spend reaches USD (legs run a"
        " few at a time with --max-running: the ended legs' spend is what it sees).",
        show_default=False,
    ),
]
WaitOpt = Annotated[bool, decl.Option("--wait", help="Also wait for every turn to end.")]
FreshOpt = Annotated[
    bool | None,
    decl.Option(
        "--fresh/--no-fresh",
        help="Start new conversations instead of resuming (as wake). --no-fresh: a retry"
        " resumes them though its wave was --fresh.",
        show_default=False,
    ),
]
LegStrictOpt = Annotated[
    bool | None,
    decl.Option(
        "--strict/--no-strict",
        help="Any outcome flag (a denied tool, max turns, an agent error, no answer, a"
        " question) fails the turn. --no-strict: a retry drops its wave's --strict.",
        show_default=False,
    ),
]
RetryFailedOpt = Annotated[
    str | None,
    decl.Option(
        "--retry-failed",
        metavar="WAVE",
        help="Relaunch the legs of WAVE that did not succeed (a wave id, prefix or last).",
        autocompletion=complete.wave_ids,
    ),
]
OnCompleteOpt = Annotated[
    str | None,
    decl.Option(
        "--on-complete", metavar="CMD", help="Run CMD (sh -c) once the wave reaches its end."
    ),
]
WorktreesOpt = Annotated[
    int | None,
    decl.Option("--worktrees", metavar="N", help="Best of N: N new worktree sessions, one prompt."),
]
PrefixOpt = Annotated[
    str | None,
    decl.Option("--prefix", metavar="PREFIX", help="With --worktrees: sessions PREFIX-1…N."),
]
BestOfHarnessOpt = Annotated[
    str | None,
    decl.Option(
        "--harness",
        metavar="HARNESS",
        help="With --worktrees: the harness. [default: config.toml's default_harness;"
        " none: refused]",
    ),
]
BestOfDirOpt = Annotated[
    str | None,
    decl.Option("--worktree-dir", metavar="DIR", help="With --worktrees: make them in DIR."),
]
HostsOpt = Annotated[
    str | None,
    decl.Option(
        "--hosts",
        metavar="HOST,…",
        help="Wake --match/--all sessions on these hosts (local is this machine).",
    ),
]
LegKeyOpt = Annotated[
    str | None,
    decl.Option(
        "--key",
        metavar="KEY",
        help="Idempotent: leg SESSION wakes with key KEY/SESSION, so the same fan-out"
        " run again (same KEY) starts no leg twice (see spex wake --key).",
        show_default=False,
    ),
]
BestOfSandboxOpt = Annotated[
    bool,
    decl.Option("--sandbox", help="With --worktrees: the new sessions are sandboxed."),
]


@command()
def fanout(
    ctx: decl.Context,
    names: LegsArg = None,
    all_: AllOpt = False,
    match: MatchOpt = None,
    message: PromptOpt = None,
    file: PromptFileOpt = None,
    max_concurrent: MaxConcurrentOpt = None,
    max_running: MaxRunningOpt = None,
    budget: WaveBudgetOpt = None,
    after: AfterOpt = None,
    after_any: AfterAnyOpt = None,
    model: ModelOpt = None,
    fallback: FallbackOpt = None,
    verify: VerifyOpt = None,
    no_verify: NoVerifyOpt = False,
    verify_timeout: VerifyTimeoutOpt = None,
    keep_best: KeepBestOpt = False,
    pick: PickOpt = None,
    window: WindowOpt = None,
    stagger: StaggerOpt = None,
    wait: WaitOpt = False,
    fresh: FreshOpt = None,
    timeout: TimeoutOpt = None,
    strict: LegStrictOpt = None,
    on_limit: OnLimitOpt = None,
    retry_failed: RetryFailedOpt = None,
    on_complete: OnCompleteOpt = None,
    worktrees: WorktreesOpt = None,
    repo: RepoOpt = None,
    base: BaseOpt = None,
    prefix: PrefixOpt = None,
    harness: BestOfHarnessOpt = None,
    worktree_dir: BestOfDirOpt = None,
    hosts: HostsOpt = None,
    key: LegKeyOpt = None,
    sandbox: BestOfSandboxOpt = False,
    sandbox_optional: SandboxOptionalOpt = False,
    allow_write: AllowWriteOpt = None,
    deny_read: DenyReadOpt = None,
    network: NetworkOpt = None,
    allow_host: AllowHostOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Wake many sessions with one prompt: a wave, a verdict each (HOST:NAME on other hosts).

    \b
    Examples:
      spex fanout --match 'api-*' -m "rebase on main" --wait
      spex fanout a b c -f prompt.md --max-concurrent 4
      spex fanout --match 'test-*' -m "run the suite" --max-running 4 --wait
      spex fanout --all -m "review" --max-running 2 --budget 5.00 --wait
      spex fanout review-1 review-2 --after api -m "review what api changed"
      spex fanout --all -m "triage" --model opus --fallback-model sonnet
      spex fanout --match 'claude-*' -m "carry on" --stagger 2s
      spex fanout --retry-failed last
      spex fanout --retry-failed last --timeout 30m --no-strict
      spex fanout --worktrees 3 --repo ~/src/api -m "fix the flaky test"
      spex fanout --worktrees 3 -m "fix it" --verify 'make test' --keep-best
      spex fanout --worktrees 4 --harness claude --sandbox -m "fix the flaky test"
      spex fanout --all -m "start over: summarise the repo" --fresh
      spex fanout box1:api box2:api web -m "rebase on main"
      spex fanout --hosts local,box1 --match 'api-*' -m "rebase on main"
      spex fanout --match 'api-*' -m "rebase on main" --key rebase-2026-12-01
    """
    from spexsup.conductors.fanout import Given

    confirm_window = window_seconds(window)
    other = after_session(after, after_any, [n for n in names or [] if ":" not in n])
    pacing = _pacing(max_running, budget, other, after_any, worktrees)
    spacing = stagger_seconds(stagger)
    _check_key(key, worktrees)
    seconds = timeout_seconds(timeout)
    models = model_rules(model, fallback)
    check = verify_rules(verify, no_verify, verify_timeout)
    best = _best_pick(keep_best, pick, worktrees, check[0])
    wait = wait or best is not None
    given = Given(
        confirm_window, seconds, strict, on_limit, *models, spacing, *check, fresh=fresh, key=key
    )
    legs = Legs(names or [], all_, match, message, file, retry_failed)
    if _across_hosts(legs, hosts):
        if worktrees is not None or on_complete is not None:
            raise Invalid(
                "--worktrees and --on-complete work on one host", hint="spex -H HOST fanout …"
            )
        rules = _fleet_rules(given)
        options = _fleet_options(given, pacing, wait=wait, max_concurrent=max_concurrent)
        fleet_fanout(ctx, legs, hosts, options, rules, as_json)
        return
    from spexsup.conductors import fanout as plans

    spex = open_spex(ctx)
    defaults = settings(ctx, spex)
    where = (base, repo, worktree_dir)
    plans.check_best_of_options(worktrees, where, prefix=prefix, harness=harness)
    policy = sandbox_policy(
        sandbox, sandbox_optional, False, network, allow_write, deny_read, allow_host
    )
    _check_sandbox(policy, worktrees)
    best_of = None
    if worktrees is not None:
        best_of = plans.BestOf(worktrees, prefix, harness or defaults.default_harness, policy)
    run_wave(
        spex,
        _plan(spex, legs, given, best_of, where),
        max_concurrent=defaults.max_concurrent if max_concurrent is None else max_concurrent,
        on_complete=on_complete,
        wait=wait,
        as_json=as_json,
        pacing=pacing,
        keep_best=best,
    )


def _best_pick(
    keep_best: bool, pick: str | None, worktrees: int | None, check: tuple[str, ...] | None
) -> str | None:
    """`--keep-best [--pick first|smallest]`, checked: the pick (None: no --keep-best)."""
    if pick is not None and not keep_best:
        raise Invalid("--pick needs --keep-best")
    if not keep_best:
        return None
    if worktrees is None:
        raise Invalid("--keep-best keeps one leg of a best of N", hint="--worktrees N --keep-best")
    if check == ():
        raise Invalid("--keep-best decides by each leg's check: not with --no-verify")
    from spexsup.conductors.bestof import PICKS

    if pick is not None and pick not in PICKS:
        raise Invalid(f"invalid --pick {pick!r}", hint="first or smallest")
    return pick or "first"


class Legs(Record):
    """Which sessions a fan-out wakes, and with what: the names (HOST:NAME on
    another host), --all, --match, the prompt (-m, -f), or the wave whose
    failed legs to relaunch (--retry-failed)."""

    names: list[str]
    all_: bool
    match: str | None
    message: str | None
    file: str | None
    retry_failed: str | None

    def read_prompt(self) -> bytes:
        return prompts.read(None, self.file, message=self.message, forms="-m TEXT")


def _plan(
    spex: "Spex",
    legs: Legs,
    given: "Given",
    best_of: "BestOf | None",
    where: tuple[str | None, str | None, str | None],
) -> "Plan":
    """The wave's plan: best of N (`best_of`: its sessions made now, their
    worktrees from --base, --repo and --worktree-dir, `where`), a retry, or
    the sessions named or matched."""
    from spexsup.conductors import fanout as plans

    if best_of is not None:
        if legs.names or legs.all_ or legs.match or legs.retry_failed:
            raise Invalid("--worktrees makes its own sessions: name none, no --all/--match")
        # The worktree code only for best of N (see spexsup.conductors.fanout).
        from spexsup.core import worktree as wt

        request = wt.Request(None, *where)
        return _best_of(spex, best_of, request, legs.read_prompt, given)
    if legs.retry_failed is not None:
        if legs.all_ or legs.match or legs.message is not None or legs.file is not None:
            raise Invalid("--retry-failed takes no prompt and no --all/--match")
        return plans.retry(spex, legs.retry_failed, legs.names, given)
    return plans.to_sessions(
        spex, legs.names, legs.read_prompt, given, all_=legs.all_, match=legs.match
    )


def _pacing(
    max_running: int | None,
    budget: str | None,
    other: str | None,
    after_any: str | None,
    worktrees: int | None,
) -> "Pacing":
    """--max-running, --budget and --after (--after-any), checked: when the
    wave's legs launch."""
    from spexsup.conductors.waves import Pacing

    if max_running is not None and not 1 <= max_running <= 1024:
        raise Invalid(f"invalid --max-running {max_running}", hint="between 1 and 1024")
    usd = usd_amount(budget, "--budget") if budget is not None else None
    if other is not None and worktrees is not None:
        raise Invalid("--after and --worktrees: new sessions have nothing to wait for")
    return Pacing(max_running, other, after_any is not None, usd)


def _check_key(key: str | None, worktrees: int | None) -> None:
    """--key: a valid key, for legs that are existing sessions."""
    if key is None:
        return
    from spexsup.turn.keys import validate

    validate(key)
    if worktrees is not None:
        raise Invalid(
            "--key names the legs by session; --worktrees makes new sessions each time",
            hint="give --key to a fan-out over existing sessions",
        )


def _across_hosts(legs: Legs, hosts: str | None) -> bool:
    """A fleet wave: --hosts, a leg named HOST:NAME, or the retry of a fleet wave."""
    return (
        hosts is not None
        or any(":" in n for n in legs.names)
        or (legs.retry_failed or "").startswith("fleet-")
    )


def _fleet_rules(given: "Given") -> dict[str, Any]:
    """The per-turn rules every host's fan-out gets, as a wave's
    `turn_options` holds them (--on-limit checked here, before any host)."""
    if given.on_limit is not None:
        from spexsup.turn.admit import parse_on_limit

        parse_on_limit(given.on_limit)
    return {
        "window": given.window,
        "timeout": given.timeout,
        "strict": given.strict,
        "on_limit": given.on_limit,
        "model": given.model,
        "fallback": list(given.fallback) if given.fallback is not None else None,
        "stagger": given.stagger,
        "verify": list(given.verify) if given.verify is not None else None,
        "verify_timeout": given.verify_timeout,
    }


def _fleet_options(
    given: "Given", pacing: "Pacing", *, wait: bool, max_concurrent: int | None
) -> list[str]:
    """The options of each host's `spex fanout` that are not per-turn rules."""
    fresh = given.fresh
    options = ["--wait"] * wait + ["--fresh"] * bool(fresh) + ["--no-fresh"] * (fresh is False)
    if given.key is not None:
        options += ["--key", given.key]
    if max_concurrent is not None:
        options += ["--max-concurrent", str(max_concurrent)]
    if pacing.max_running is not None:
        options += ["--max-running", str(pacing.max_running)]
    if pacing.budget is not None:
        # Every cent to each host: `:g` kept six digits ($123,456.78 was $123,457).
        options += ["--budget", repr(pacing.budget)]
    if pacing.after is not None:
        options += ["--after-any" if pacing.after_any else "--after", pacing.after]
    return options


def _check_sandbox(policy: "Policy | None", worktrees: int | None) -> None:
    """--sandbox shapes only the sessions --worktrees makes, and needs bwrap."""
    from spexsup.adapters import sandbox as sandboxes

    if policy is not None and worktrees is None:
        raise Invalid(
            "--sandbox shapes the sessions --worktrees makes; named sessions keep their own",
            hint="spex edit NAME --sandbox",
        )
    if policy is not None and policy.enabled:
        sandboxes.require_engine()


def _best_of(
    spex: "Spex",
    best_of: "BestOf",
    request: "Request",
    read_prompt: "Callable[[], bytes]",
    given: "Given",
) -> "Plan":
    """Best of N's plan: its sessions made (each post_create's note said as
    it ran; an untrusted one asked on a terminal)."""
    from spexsup.cli.worktree import confirm_post_create, ran_post_create
    from spexsup.conductors import fanout as plans

    def made(leg: "Session") -> None:
        ran = ran_post_create(leg.worktree) if leg.worktree else None
        if ran:
            decl.echo(f"spex: {leg.name}: {ran}", err=True)

    return plans.best_of(
        spex, best_of, request, read_prompt, given, confirm=confirm_post_create, made=made
    )


def fleet_fanout(
    ctx: decl.Context,
    legs: Legs,
    hosts: str | None,
    options: list[str],
    given: dict[str, Any],
    as_json: bool,
) -> None:
    """A wave across hosts (spexsup.adapters.fleet): one remote fan-out per host.
    `given`: the per-turn options given (None where not), as in a wave's
    `turn_options`; a retry applies the fleet wave's own where not given."""
    from spexsup import config
    from spexsup.adapters import fleet
    from spexsup.paths import resolve_home

    names, all_, match, message, file, retry_failed = legs
    state = resolve_home(ctx.find_root().obj)
    cfg = config.load(state)
    if retry_failed is not None:
        if names or hosts or all_ or match or message is not None or file is not None:
            raise Invalid("--retry-failed takes no names, prompt, --hosts, --all or --match")
        doc = fleet.retry_failed(cfg, state, retry_failed, options=options, given=given)
        if doc is None:
            note = f"nothing to retry: no leg of fleet wave {retry_failed} failed"
            if as_json:
                print_json(
                    document({"ok": True, "retry_of": retry_failed, "wave": None, "legs": []})
                )
            else:
                decl.echo(note)
            return
    else:
        groups: dict[str, list[str] | None] = dict(fleet.group_legs(names))
        if hosts is not None:
            if not (all_ or match):
                raise Invalid("--hosts goes with --all or --match", hint="or name HOST:NAME legs")
            for h in hosts.split(","):
                if h in groups:
                    raise Invalid(f"host {h!r} both named in legs and in --hosts")
                groups[h] = None
        elif all_ or match:
            raise Invalid("--all and --match with HOST:NAME legs need --hosts")
        prompt = prompts.read(None, file, message=message, forms="-m TEXT")
        doc = fleet.fanout(
            cfg, state, groups, prompt, options=options, turn_options=given, match=match
        )
    if as_json:
        print_json(with_iso(with_counts(doc)))
    else:
        fleet_text(doc)
    if doc["state"] != states.WaveState.COMPLETE:
        raise decl.Exit(1)


def fleet_text(doc: dict[str, Any]) -> None:
    """A fleet wave: its legs as `HOST:NAME: verdict …`, then its state and
    its legs by outcome, as a local wave's summary says them."""
    hosts_n = len(doc["hosts"])
    decl.echo(
        f"wave {doc['id']}: {len(doc['legs'])} leg{'s' * (len(doc['legs']) != 1)}"
        f" on {hosts_n} host{'s' * (hosts_n != 1)}" + (" (retry)" if doc["retry_of"] else "")
    )
    for leg in doc["legs"]:
        decl.echo("  " + leg_line({**leg, "session": f"{leg['host']}:{leg['session']}"}))
    from spexsup.present import fit

    for line in fit.for_stdout(summary({**doc, "kind": "fleet"})):
        decl.echo(line)
    if doc["retry_of"]:
        decl.echo(f"retry of {doc['retry_of']}")
    if doc["retried_by"]:
        decl.echo(f"retried by {', '.join(doc['retried_by'])}")


def with_counts(doc: dict[str, Any]) -> dict[str, Any]:
    """A fleet wave's document with its `counts` by outcome, as a local
    wave's has them (`wavedoc.tally`; recorded when it launched)."""
    if "counts" in doc:
        return doc
    from spexsup.core.wavedoc import tally

    return {**doc, "counts": tally(doc)}
