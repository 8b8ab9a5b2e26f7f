"""`spex fanout` (and a wave across hosts); `spex wave` is in cli/waves.py."""

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
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
from spexsup.errors import Invalid
from spexsup.present.progress import LegsView, PlainLegs, leg_line, summary
from spexsup.present.render import document, print_json, with_iso
from spexsup.present.spend import leg_costs, with_spend

if TYPE_CHECKING:
    from spexsup.conductors.fanout import Plan
    from spexsup.conductors.waves import Pacing, Wave
    from spexsup.core.sessions import Session
    from spexsup.core.spex import Spex

# Whatever the window, a signalled fan-out is gone this long after the first signal.
HARD_EXIT_AFTER = 8.0


class WaitInterrupted(BaseException):
    """The first signal while waiting: stop waiting now (the turns run on)."""


@contextmanager
def signals_for(holder: dict[str, Any]) -> Iterator[None]:
    """While launching, the first SIGINT/SIGTERM aborts the launches not yet
    started (from a thread: the handler must not take the store); while
    waiting, it stops the wait at once. A second signal exits at once with
    its own code, and so does a fan-out still there 8 s after the first."""

    def hard_exit(code: int) -> None:
        wave = holder.get("wave")
        if wave is not None:
            with contextlib.suppress(Exception):
                wave.record_turns()
        os._exit(code)

    def handler(signum: int, frame: object) -> None:
        code = 130 if signum == signal.SIGINT else 143
        if "signal" in holder:
            hard_exit(code)
        holder["signal"], holder["code"] = signum, code
        timer = threading.Timer(HARD_EXIT_AFTER, hard_exit, (code,))
        timer.daemon = True
        timer.start()
        if holder.get("phase") == "wait":
            raise WaitInterrupted
        wave = holder.get("wave")
        if wave is not None:
            threading.Thread(target=wave.abort, daemon=True).start()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@command()
def fanout(
    ctx: decl.Context,
    names: Annotated[
        list[str] | None,
        decl.Argument(
            metavar="NAME…",
            help="Sessions to wake (with --retry-failed: the legs to retry).",
            autocompletion=complete.session_names,
        ),
    ] = None,
    all_: AllOpt = False,
    match: MatchOpt = None,
    message: Annotated[
        str | None, decl.Option("-m", "--message", metavar="TEXT", help="The prompt.")
    ] = None,
    file: PromptFileOpt = None,
    max_concurrent: Annotated[
        int | None,
        decl.Option(
            "--max-concurrent",
            metavar="N",
            help="Launches at once. [default: config.toml's max_concurrent, else 16]",
            show_default=False,
        ),
    ] = None,
    max_running: Annotated[
        int | None,
        decl.Option(
            "--max-running",
            metavar="N",
            help="At most N legs running at once: the others are queued and launch as legs end.",
            show_default=False,
        ),
    ] = None,
    budget: Annotated[
        str | None,
        decl.Option(
            "--budget",
            metavar="USD",
            help="Launch no more legs once the wave's known spend reaches USD (legs run a"
            " few at a time with --max-running: the ended legs' spend is what it sees).",
            show_default=False,
        ),
    ] = None,
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
    wait: Annotated[bool, decl.Option("--wait", help="Also wait for every turn to end.")] = False,
    fresh: Annotated[
        bool,
        decl.Option("--fresh", help="Start new conversations instead of resuming (as wake)."),
    ] = False,
    timeout: TimeoutOpt = None,
    strict: Annotated[
        bool | None,
        decl.Option(
            "--strict/--no-strict",
            help="Any outcome flag (a denied tool, max turns, an agent error, no answer, a"
            " question) fails the turn. --no-strict: a retry drops its wave's --strict.",
            show_default=False,
        ),
    ] = None,
    on_limit: OnLimitOpt = None,
    retry_failed: Annotated[
        str | None,
        decl.Option(
            "--retry-failed",
            metavar="WAVE",
            help="Relaunch the legs of WAVE that did not succeed (a wave id, prefix or last).",
            autocompletion=complete.wave_ids,
        ),
    ] = None,
    on_complete: Annotated[
        str | None,
        decl.Option(
            "--on-complete", metavar="CMD", help="Run CMD (sh -c) once the wave reaches its end."
        ),
    ] = None,
    worktrees: Annotated[
        int | None,
        decl.Option(
            "--worktrees", metavar="N", help="Best of N: N new worktree sessions, one prompt."
        ),
    ] = None,
    repo: RepoOpt = None,
    base: BaseOpt = None,
    prefix: Annotated[
        str | None,
        decl.Option("--prefix", metavar="PREFIX", help="With --worktrees: sessions PREFIX-1…N."),
    ] = None,
    harness: Annotated[
        str | None,
        decl.Option(
            "--harness",
            metavar="HARNESS",
            help="With --worktrees: the harness. [default: config.toml's default_harness;"
            " none: refused]",
        ),
    ] = None,
    worktree_dir: Annotated[
        str | None,
        decl.Option("--worktree-dir", metavar="DIR", help="With --worktrees: make them in DIR."),
    ] = None,
    hosts: Annotated[
        str | None,
        decl.Option(
            "--hosts",
            metavar="HOST,…",
            help="Wake --match/--all sessions on these hosts (local is this machine).",
        ),
    ] = None,
    key: Annotated[
        str | None,
        decl.Option(
            "--key",
            metavar="KEY",
            help="Idempotent: leg SESSION wakes with key KEY/SESSION, so the same fan-out"
            " run again (same KEY) starts no leg twice (see spex wake --key).",
            show_default=False,
        ),
    ] = None,
    sandbox: Annotated[
        bool,
        decl.Option("--sandbox", help="With --worktrees: the new sessions are sandboxed."),
    ] = False,
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
    confirm_window = window_seconds(window)
    other = after_session(after, after_any, [n for n in names or [] if ":" not in n])
    if max_running is not None and not 1 <= max_running <= 1024:
        raise Invalid(f"invalid --max-running {max_running}", hint="between 1 and 1024")
    usd = usd_amount(budget, "--budget") if budget is not None else None
    if other is not None and worktrees is not None:
        raise Invalid("--after and --worktrees: new sessions have nothing to wait for")
    spacing = stagger_seconds(stagger)
    if key is not None:
        from spexsup.turn.keys import validate

        validate(key)
        if worktrees is not None:
            raise Invalid(
                "--key names the legs by session; --worktrees makes new sessions each time",
                hint="give --key to a fan-out over existing sessions",
            )
    seconds = timeout_seconds(timeout)
    models = model_rules(model, fallback)
    check = verify_rules(verify, no_verify, verify_timeout)
    from spexsup.cli.worktree import best_pick

    best = best_pick(keep_best, pick, worktrees, check[0])
    wait = wait or best is not None
    if (
        hosts is not None
        or any(":" in n for n in names or [])
        or (retry_failed or "").startswith("fleet-")
    ):
        if worktrees is not None or on_complete is not None:
            raise Invalid(
                "--worktrees and --on-complete work on one host", hint="spex -H HOST fanout …"
            )
        from spexsup.turn.admit import parse_on_limit

        if on_limit is not None:
            parse_on_limit(on_limit)
        rules = {
            "window": confirm_window,
            "timeout": seconds,
            "strict": strict,
            "on_limit": on_limit,
            "model": models[0],
            "fallback": list(models[1]) if models[1] is not None else None,
            "stagger": spacing,
            "verify": list(check[0]) if check[0] is not None else None,
            "verify_timeout": check[1],
        }
        options = ["--wait"] * wait + ["--fresh"] * fresh
        if key is not None:
            options += ["--key", key]
        if max_concurrent is not None:
            options += ["--max-concurrent", str(max_concurrent)]
        if max_running is not None:
            options += ["--max-running", str(max_running)]
        if usd is not None:
            # Every cent to each host: `:g` kept six digits ($123,456.78 was $123,457).
            options += ["--budget", repr(usd)]
        if other is not None:
            options += ["--after-any" if after_any else "--after", other]
        fleet_fanout(
            ctx,
            names or [],
            hosts,
            all_,
            match,
            message,
            file,
            retry_failed,
            options,
            rules,
            as_json,
        )
        return
    from spexsup.conductors import fanout as plans
    from spexsup.conductors import waves
    from spexsup.core import worktree as wt

    given = plans.Given(
        confirm_window, seconds, strict, on_limit, *models, spacing, *check, fresh=fresh, key=key
    )
    spex = open_spex(ctx)
    defaults = settings(ctx, spex)
    request = wt.Request(None, base, repo, worktree_dir)
    plans.check_best_of_options(worktrees, request, prefix=prefix, harness=harness)

    def read_prompt() -> bytes:
        return prompts.read(None, file, message=message, forms="-m TEXT")

    from spexsup.adapters import sandbox as sandboxes

    policy = sandbox_policy(
        sandbox, sandbox_optional, False, network, allow_write, deny_read, allow_host
    )
    if policy is not None and worktrees is None:
        raise Invalid(
            "--sandbox shapes the sessions --worktrees makes; named sessions keep their own",
            hint="spex edit NAME --sandbox",
        )
    if policy is not None and policy.enabled:
        sandboxes.require_engine()
    if worktrees is not None:
        if names or all_ or match or retry_failed:
            raise Invalid("--worktrees makes its own sessions: name none, no --all/--match")
        from spexsup.cli.worktree import confirm_post_create, ran_post_create

        def made(leg: "Session") -> None:
            ran = ran_post_create(leg.worktree) if leg.worktree else None
            if ran:
                decl.echo(f"spex: {leg.name}: {ran}", err=True)

        best_of = plans.BestOf(worktrees, prefix, harness or defaults.default_harness, policy)
        plan = plans.best_of(
            spex, best_of, request, read_prompt, given, confirm=confirm_post_create, made=made
        )
    elif retry_failed is not None:
        if all_ or match or message is not None or file is not None:
            raise Invalid("--retry-failed takes no prompt and no --all/--match")
        plan = plans.retry(spex, retry_failed, names or [], given)
    else:
        plan = plans.to_sessions(spex, names or [], read_prompt, given, all_=all_, match=match)
    run_wave(
        spex,
        plan,
        max_concurrent=defaults.max_concurrent if max_concurrent is None else max_concurrent,
        on_complete=on_complete,
        wait=wait,
        as_json=as_json,
        pacing=waves.Pacing(max_running, other, after_any is not None, usd),
        keep_best=best,
    )


def run_wave(
    spex: "Spex",
    plan: "Plan",
    *,
    max_concurrent: int | None = None,
    on_complete: str | None = None,
    wait: bool = False,
    as_json: bool = False,
    pacing: "Pacing | None" = None,
    keep_best: str | None = None,
) -> None:
    """Launch the plan's wave and show it: each leg as it settles (a live
    table on a terminal with --wait), then the wave's summary; with
    `keep_best` (the pick), keep the best leg by its check (`bestof.choose`)."""
    from spexsup.conductors import bestof, waves
    from spexsup.core import wavedoc

    if plan.nothing is not None:
        if as_json:
            print_json(
                {
                    "schema_version": wavedoc.SCHEMA_VERSION,
                    "ok": True,
                    "retry_of": plan.retry_of,
                    "wave": None,
                    "legs": [],
                    "message": plan.nothing,
                }
            )
        else:
            decl.echo(plan.nothing)
        return
    targets, retry_failed = plan.targets, plan.retry_of
    live = sys.stdout.isatty() and not as_json
    holder: dict[str, Any] = {"phase": "launch"}
    printed: set[str] = set()
    # --wait: every leg's stage as it changes, a live table on a terminal.
    progress: LegsView | PlainLegs | None = None
    if wait and not as_json:
        progress = PlainLegs(spex.home, costs=leg_costs(spex.home)) if not live else None

    def on_change(doc: dict[str, Any]) -> None:
        if as_json:
            return
        if wait:
            if progress is not None:
                progress.update(doc)
            return
        for leg in doc["legs"]:
            if (
                leg["status"] in (states.LegStatus.DONE, states.LegStatus.ABORTED)
                and leg["session"] not in printed
            ):
                printed.add(leg["session"])
                decl.echo(("  " if live else "") + leg_line(leg))

    def on_create(wave: "Wave") -> None:
        holder["wave"] = wave
        if plan.best_of and plan.request is not None:
            bestof.mark_best_of(wave, plan.request, plan.best_of)
        nonlocal progress
        if not as_json:
            decl.echo(
                f"wave {wave.id}: {len(targets)} leg{'s' * (len(targets) != 1)}"
                + (" (retry)" if retry_failed else "")
            )
        if wait and live and not as_json:
            progress = LegsView(spex.home, wave.doc, costs=leg_costs(spex.home)).__enter__()
        wave.listeners.append(on_change)
        if "signal" in holder:  # a signal that came before the wave existed
            threading.Thread(target=wave.abort, daemon=True).start()

    detached: list[str] = []
    try:
        with signals_for(holder):
            wave = waves.fanout(
                spex,
                targets,
                plan.wake,
                max_concurrent=waves.DEFAULT_MAX_CONCURRENT
                if max_concurrent is None
                else max_concurrent,
                retry_of=retry_failed,
                on_complete=on_complete,
                on_create=on_create,
                pacing=pacing or waves.Pacing(),
            )
            if wait and "signal" not in holder:
                wave.listeners.clear()
                try:
                    # The phase first: a Ctrl-C right after the line below
                    # must stop the wait, not count as one during the launch.
                    holder["phase"] = "wait"
                    if isinstance(progress, LegsView):
                        progress.print("waiting for the turns to end…")
                    elif not as_json:
                        decl.echo("waiting for the turns to end…")
                    wave.wait_turns(None if progress is None else progress.update)
                    holder["phase"] = "done"
                except WaitInterrupted:
                    holder["phase"] = "done"
                    wave.detach()
                    detached = [leg["session"] for leg in wave.running_legs()]
    finally:
        if isinstance(progress, LegsView):
            progress.__exit__()
    doc = with_spend(spex, waves.refresh(spex, wave.id))
    kept = None
    if keep_best is not None and not detached and "signal" not in holder:
        from spexsup.cli.worktree import keep_best_leg

        kept = keep_best_leg(spex, doc, keep_best)
        doc = {**with_spend(spex, waves.refresh(spex, wave.id)), "keep": kept.public()}
    if as_json:
        print_json(document(with_iso(doc)))
    else:
        if wait and not detached and not live:
            # Each leg's end was printed as it came; a leg the last update
            # did not show yet is printed now, never one twice.
            shown = progress.shown if isinstance(progress, PlainLegs) else {}
            for leg in doc["legs"]:
                if leg["session"] not in shown:
                    decl.echo("  " + leg_line(leg))
        from spexsup.present import fit

        for line in fit.for_stdout(summary(doc)):
            decl.echo(line)
        if kept is not None:
            for line in kept.lines:
                decl.echo(line)
        if not detached and "signal" in holder:
            # Interrupted while launching: the legs already launched run on.
            detached = [
                leg["session"]
                for leg in doc["legs"]
                if wavedoc.leg_outcome(leg) == states.LegResult.RUNNING
            ]
        if detached:
            decl.echo(f"stopped waiting; still running: {', '.join(detached)}")
            decl.echo(f"keep waiting with: spex wait {' '.join(detached)}")
            decl.echo(f"stop them with: spex stop {' '.join(detached)}")
    if "signal" in holder:
        raise decl.Exit(holder["code"])
    ok = doc["state"] == states.WaveState.COMPLETE if wait else wavedoc.succeeded(doc)
    if kept is not None:
        ok = kept.ok
    if not ok:
        raise decl.Exit(1)


def fleet_fanout(
    ctx: decl.Context,
    names: list[str],
    hosts: str | None,
    all_: bool,
    match: str | None,
    message: str | None,
    file: str | None,
    retry_failed: str | None,
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
