"""`spex schedule [ls] | add NAME | rm ID… | run ID`: wakes on a clock kept by
a systemd user timer or the user's crontab (see spexsup.turn.scheduled)."""

import time
from typing import Annotated, Any

import typer

from spexsup import prompt as prompts
from spexsup import states
from spexsup.cli import complete, decl
from spexsup.cli.app import SpexGroup, app
from spexsup.cli.decl import open_spex
from spexsup.cli.params import (
    JsonOpt,
    MessageOpt,
    NameArg,
    NamesArg,
    PromptFileOpt,
    StrictOpt,
    TimeoutOpt,
    timeout_seconds,
)
from spexsup.present.render import age, document, print_json, span, table, verdict_line, with_iso


class _InOrder(SpexGroup):
    """The subcommands as registered (add, ls, run, rm), not in the order of
    the top-level commands they share a name with."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)


schedule_app = typer.Typer(cls=_InOrder, invoke_without_command=True)
app.add_typer(schedule_app, name="schedule")

ScheduleArg = Annotated[
    str,
    decl.Argument(
        metavar="ID",
        help="A schedule id, a unique prefix of its random part, last or last~N.",
        autocompletion=complete.schedule_ids,
    ),
]


@schedule_app.callback()
def schedule_group(ctx: decl.Context) -> None:
    """Wake sessions on a clock (a systemd user timer, else the user's crontab).

    Bare `spex schedule` lists them, as `spex schedule ls` does. No spex
    daemon runs: the machine's own timer runs each firing, a keyed wake,
    so a late or doubled firing of one slot never starts two turns.

    \b
    Examples:
      spex schedule add api --every 1h -m "run the checks"
      spex schedule add api --cron '0 9 * * 1-5' -f standup.md --overlap queue
      spex schedule
      spex schedule run 3f2a
      spex schedule rm 3f2a
    """
    if ctx.invoked_subcommand is None:
        _list(ctx, [], as_json=False)


def _list(ctx: decl.Context, names: list[str], *, as_json: bool) -> None:
    from spexsup.core.sessions import get
    from spexsup.turn.scheduled import entries

    spex = open_spex(ctx)
    for n in names:
        get(spex, n)
    found = entries(spex, tuple(names))
    now = time.time()
    docs = [document(s.as_json(spex.home, now)) for s in found]
    if as_json:
        print_json(docs)
        return
    if not found:
        decl.echo("no schedules (spex schedule add NAME --every 1h -m TEXT makes one)")
        return
    rows = [
        [
            d["id"],
            d["session"],
            d["when"],
            f"in {span(max(0.0, d['next_at'] - now))}" if d["next_at"] else "never",
            age(now - d["last_fired_at"]) if d["last_fired_at"] else "-",
            d["last_verdict"] or "-",
            d["engine"],
            d["first_line"] or "",
        ]
        for d in docs
    ]
    headers = ["ID", "SESSION", "WHEN", "NEXT", "LAST", "VERDICT", "ENGINE", "PROMPT"]
    table(headers, rows, squeeze="PROMPT")


@schedule_app.command("add")
def schedule_add(
    ctx: decl.Context,
    name: NameArg,
    every: Annotated[
        str | None,
        decl.Option(
            "--every",
            metavar="DURATION",
            help="Fire at every multiple of DURATION on the clock: minutes that divide an hour"
            " (15m), hours that divide a day (2h), 1d or 1w.",
            show_default=False,
        ),
    ] = None,
    cron: Annotated[
        str | None,
        decl.Option(
            "--cron",
            metavar="EXPR",
            help="Fire when the 5-field cron expression EXPR says ('0 9 * * 1-5'), in the"
            " system's local time.",
            show_default=False,
        ),
    ] = None,
    message: MessageOpt = None,
    file: PromptFileOpt = None,
    overlap: Annotated[
        str,
        decl.Option(
            "--overlap",
            metavar="POLICY",
            help="When the session is busy at a firing: skip it, or queue the prompt"
            " (spex wake --queue).",
            autocompletion=complete.overlap_words,
        ),
    ] = "skip",
    timeout: TimeoutOpt = None,
    strict: StrictOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Schedule a prompt for a session: each firing is a keyed spex wake.

    The prompt is stored in the state home (schedules/ID.prompt); each
    firing runs `spex wake NAME -f schedules/ID.prompt --key sched-ID-SLOT`
    (with --queue for --overlap queue), SLOT being the minute it was due.
    The engine is a systemd user timer where `systemctl --user` works,
    else a line in a marked block of your crontab
    (SPEXSUP_SCHEDULE_ENGINE=systemd|cron chooses).

    \b
    Examples:
      spex schedule add api --every 1h -m "run the checks and fix what fails"
      spex schedule add api --cron '0 9 * * 1-5' -f standup.md
      spex schedule add api --every 15m -m "triage new issues" --overlap queue --timeout 10m
    """
    from spexsup import ids
    from spexsup.adapters import schedule as engines
    from spexsup.errors import Invalid
    from spexsup.turn.request import Limits
    from spexsup.turn.scheduled import add

    ids.validate_name(name)
    cadence = engines.cadence(every, cron)
    if overlap not in engines.OVERLAPS:
        raise Invalid(f"invalid --overlap {overlap!r}", hint="one of: skip, queue")
    limits = Limits(timeout_seconds(timeout), strict, None)
    prompt = prompts.read(None, file, message=message, forms="-m TEXT")
    spex = open_spex(ctx)
    s = add(spex, name, prompt, cadence=cadence, overlap=overlap, limits=limits)
    d = s.as_json(spex.home)
    if as_json:
        print_json(document({"ok": True, **d}))
        return
    nxt = time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(d["next_at"])) if d["next_at"] else "-"
    detail = f"cron '{s.cadence.cron}', " if s.cadence.every is not None else ""
    decl.echo(
        f"{name}: scheduled {s.id} {d['when']} ({detail}next {nxt}; engine {s.engine},"
        f" overlap {s.overlap})"
    )


@schedule_app.command("ls")
def schedule_ls(ctx: decl.Context, names: NamesArg = None, as_json: JsonOpt = False) -> None:
    """List schedules: id, session, when, next and last firing, last verdict.

    \b
    Examples:
      spex schedule ls
      spex schedule ls api --json
    """
    _list(ctx, names or [], as_json=as_json)


@schedule_app.command("run")
def schedule_run(ctx: decl.Context, schedule: ScheduleArg, as_json: JsonOpt = False) -> None:
    """Fire a schedule now, as its timer would (a firing of this minute).

    Its key is sched-ID-SLOT with this minute as SLOT: run twice in one
    minute, or in the minute the timer fired, it starts one turn. Exit as
    spex wake: 0 confirmed, completed or queued, 1 failed, 3 skipped
    (busy, --overlap skip) or refused.

    \b
    Examples:
      spex schedule run 3f2a
      spex schedule run last --json
    """
    from spexsup.turn.scheduled import find

    _fire(ctx, find(open_spex(ctx), schedule).id, due=False, as_json=as_json)


@schedule_app.command("rm")
def schedule_rm(
    ctx: decl.Context,
    schedules: Annotated[
        list[str],
        decl.Argument(
            metavar="ID…",
            help="Schedule ids (or unique prefixes of their random part).",
            autocompletion=complete.schedule_ids,
        ),
    ],
    as_json: JsonOpt = False,
) -> None:
    """Remove schedules: their timer or crontab line, prompt and log.

    \b
    Examples:
      spex schedule rm 3f2a
      spex schedule rm last --json
    """
    from spexsup.turn.scheduled import find, remove

    spex = open_spex(ctx)
    for ref in schedules:
        find(spex, ref)  # every one known before any goes
    gone = [remove(spex, ref) for ref in schedules]
    if as_json:
        print_json([document({"ok": True, "id": s.id, "session": s.session}) for s in gone])
        return
    for s in gone:
        decl.echo(f"{s.session}: removed schedule {s.id} ({s.cadence.describe()})")


def _fire(ctx: decl.Context, schedule: str, *, due: bool, as_json: bool) -> None:
    """A firing, with the environment `add` saw; its line is logged."""
    from spexsup.core.spex import Spex
    from spexsup.turn.scheduled import find, fire, log_firing, restore_env

    s = find(open_spex(ctx), schedule)
    restore_env(s)
    spex = Spex.open(ctx.find_root().obj)  # its tmux server as the environment says now
    fired = fire(spex, s, due=due)
    v = fired.verdict.as_json()
    if v["verdict"] in (states.Verdict.SKIPPED, states.Verdict.REFUSED) or (
        v["turn"] is None and v["error"]
    ):
        line = f"{s.session}: {v['verdict']}: {v['error']}"
    else:
        line = verdict_line(s.session, v)
    log_firing(spex, s.id, f"slot {fired.slot} ({'timer' if due else 'run'}): {line}")
    if as_json:
        doc = {"ok": fired.verdict.ok, "schedule": s.id, "slot": fired.slot, **v}
        print_json(document(with_iso(doc)))
    elif not due:
        decl.echo(line)
    if fired.exit_code:
        raise decl.Exit(fired.exit_code)


def engine_fire(ctx: decl.Context, schedule: str) -> None:
    """What `spex internal schedule-fire ID` runs (the timer's command)."""
    _fire(ctx, schedule, due=True, as_json=False)
