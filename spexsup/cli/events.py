"""`spex events`, `spex hooks ls | test`, `spex status-line`."""

import json
import re
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from spexsup.cli import complete, decl
from spexsup.cli.app import ListingGroup, app
from spexsup.cli.decl import command, open_spex
from spexsup.cli.params import JsonOpt
from spexsup.errors import Invalid
from spexsup.present.render import document, print_json
from spexsup.states import EventKind

if TYPE_CHECKING:
    import sqlite3


SINCE_HINT = "an event id, a duration ago (90s, 15m, 2h) or a time (2026-12-01T09:30Z)"


def since_of(text: str | None) -> tuple[int | None, float | None]:
    """`--since`: an event id (digits), a duration with a unit meaning that
    long ago, or an ISO-8601 time; (id, None) or (None, seconds ago). A bare
    decimal is none of them."""
    from spexsup import durations

    if text is None:
        return None, None
    if re.fullmatch(r"\s*-?[0-9]+\s*", text):
        if int(text) < 0:
            raise Invalid(f"invalid --since {text.strip()}", hint="an event id, 0 or more")
        return int(text), None
    if re.fullmatch(r"\s*[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+(Z|[+-][0-9:]+)?\s*", text):
        from datetime import UTC, datetime

        try:
            at = datetime.fromisoformat(text.strip())
        except ValueError:
            raise Invalid(f"invalid --since {text!r}", hint=SINCE_HINT) from None
        if at.tzinfo is None:
            at = at.astimezone()  # a time without a zone is local, as `date` prints it
        return None, max(0.0, datetime.now(UTC).timestamp() - at.timestamp())
    if not re.search(r"[smhdw]\s*$", text):
        raise Invalid(f"invalid --since {text!r}", hint=SINCE_HINT)
    return None, durations.parse(text, "--since", allow_zero=True, maximum=None)


def event_line(row: "sqlite3.Row") -> str:
    """`#42 2026-11-30T14:50:00.123Z failed api turn T rc=1 (rate-limited): message`"""
    from spexsup import ids

    line = f"#{row['id']} {ids.iso(row['at'])} {row['kind']}"
    if row["session"]:
        line += f" {row['session']}"
    if row["turn"]:
        line += f" turn {row['turn']}"
    if row["rc"] is not None:
        line += f" rc={row['rc']}"
    if row["cause"]:
        line += f" ({row['cause']})"
    payload = json.loads(row["payload"] or "{}")
    for key in ("wave", "epoch"):
        if key in payload:
            line += f" {key} {payload[key]}"
    if isinstance(payload.get("changes"), dict):  # `edited`: which settings
        line += f" {', '.join(payload['changes'])}"
    if row["kind"] == EventKind.WAVE_ENDED and payload.get("state"):
        line += f" {payload['state']}"
        amount = (payload.get("cost") or {}).get("amount")
        if amount is not None:
            from spexsup import usage

            line += " · " + usage.from_json(payload).cost_text()
    if payload.get("retry_of"):
        line += f" retry of {payload['retry_of']}"
    if row["error"] or payload.get("note"):
        line += f": {row['error'] or payload['note']}"
    from spexsup.pane.pretty import one_line

    return one_line(line)


@command()
def events(
    ctx: decl.Context,
    follow: Annotated[
        bool, decl.Option("-f", "--follow", help="Keep printing events as they commit.")
    ] = False,
    since: Annotated[
        str | None,
        decl.Option(
            "--since",
            metavar="ID|DURATION",
            help="Only events after event ID (resume a follower where it stopped); says so"
            " when some of those were pruned. Or those of the last DURATION (90s, 15m, 2h),"
            " or since a time (2026-12-01T09:30Z).",
            show_default=False,
        ),
    ] = None,
    tail: Annotated[
        int | None,
        decl.Option(
            "-n",
            "--tail",
            metavar="N",
            min=0,
            help="Only the last N events (of those asked for), then --follow's.",
            show_default=False,
        ),
    ] = None,
    session: Annotated[
        list[str] | None,
        decl.Option(
            "--session",
            metavar="NAME",
            help="Only events of session NAME; repeatable.",
            autocompletion=complete.session_names,
        ),
    ] = None,
    kind: Annotated[
        list[str] | None,
        decl.Option("--kind", metavar="KIND", help="Only events of kind KIND; repeatable."),
    ] = None,
    as_json: Annotated[
        bool,
        decl.Option("--json", help="One JSON object per line (schema_version 1)."),
    ] = False,
) -> None:
    """Print the event log: every transition of turns, sessions, waves and leases.

    \b
    Kinds: launched confirmed completed failed aborted lost interrupted
    timed-out created removed stopped resumed pane-recreated
    conversation-gone edited wave-started wave-ended lease-acquired
    lease-released lease-recovered.
    The last 100000 events are kept.

    \b
    Examples:
      spex events --session api --kind failed
      spex events --follow --json
      spex events --follow --since 1234
      spex events --since 1h --kind failed
      spex events -n 20 --session api
      spex events --since 2026-12-01T09:30Z
    """
    from spexsup.ids import validate_name
    from spexsup.state import events as log

    after, ago = since_of(since)
    kinds = tuple(dict.fromkeys(log.kind_of(k) for k in kind or ()))
    for k in kinds:
        if k not in log.KINDS:
            raise Invalid(f"unknown event kind {k!r}", hint=f"one of: {', '.join(log.KINDS)}")
    names = tuple(validate_name(n) for n in dict.fromkeys(session or ()))
    spex = open_spex(ctx)
    spex.resume_hooks()
    if ago is not None:
        after = log.id_before(spex.store.db, time.time() - ago)
    if tail is not None:
        start = log.tail_start(spex.store.db, tail, sessions=names, kinds=kinds)
        after = start if after is None else max(after, start)
    gone = log.pruned_after(spex.store.db, after) if after is not None and ago is None else None
    if gone is not None:
        # Asked for by id and no longer there: a follower resuming after a
        # prune must not take the gap for quiet.
        first, last = gone
        note = (
            f"events {first}..{last} were pruned" if first < last else f"event {first} was pruned"
        )
        if as_json:
            doc = {"schema_version": 1, "pruned": {"first": first, "last": last}, "note": note}
            sys.stdout.write(json.dumps(doc) + "\n")
        else:
            sys.stderr.write(f"spex: {note} (the oldest kept is {last + 1})\n")
        sys.stdout.flush()
    for row in log.follow(spex.store, after or 0, sessions=names, kinds=kinds, forever=follow):
        text = json.dumps(log.as_json(row)) if as_json else event_line(row)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


hooks_app = typer.Typer(cls=ListingGroup, invoke_without_command=True)
app.add_typer(hooks_app, name="hooks")


@hooks_app.callback()
def hooks_group(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """Notification hooks: [[hook]] tables in config.toml, run once per event.

    Bare `spex hooks` lists them, as `spex hooks ls` does.

    \b
    Examples:
      spex hooks ls
      spex hooks test 42
    """
    if ctx.invoked_subcommand is None:
        hooks_ls(ctx, as_json=as_json)


@hooks_app.command("ls")
def hooks_ls(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """List the hooks as spex reads them from config.toml.

    Each one's name, the events it runs on, its argv or URL, its timeout and
    session globs.

    Exit 1, naming the table and field, when a hook is broken (spex doctor
    names them all).

    \b
    Examples:
      spex hooks ls
      spex hooks ls --json
    """
    from spexsup.core import hooks
    from spexsup.pane.pretty import one_line

    spex = open_spex(ctx)
    found = hooks.load(spex.home)
    if as_json:
        print_json(document({"hooks": [hooks.describe(h, n) for n, h in enumerate(found, 1)]}))
        return
    if not found:
        decl.echo("no hooks")
    for number, h in enumerate(found, 1):
        does = f"run {json.dumps(list(h.run))}" if h.run is not None else f"url {h.url}"
        only = f" sessions {','.join(h.sessions)}" if h.sessions else ""
        decl.echo(
            one_line(f"#{number} {h.key}: on {','.join(h.on)}{only}: {does} timeout {h.timeout:g}s")
        )


@hooks_app.command("test")
def hooks_test(
    ctx: decl.Context,
    event: Annotated[
        int,
        decl.Argument(
            metavar="EVENT",
            help="An event id, as spex events prints it (a hook is named with --hook).",
        ),
    ],
    hook: Annotated[
        str | None,
        decl.Option(
            "--hook",
            metavar="HOOK",
            help="Only this hook, as spex hooks ls shows it: its name, #N or N.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the hooks that match one event now, and say how each went.

    Runs them in the foreground, unclaimed (they may have run before); what
    they print goes to hooks.log in the state directory, as always.

    \b
    Examples:
      spex hooks test 42
      spex hooks test 42 --hook '#1'
      spex events --kind failed --json | tail -1
    """
    from spexsup.core import hooks

    spex = open_spex(ctx)
    results = hooks.test(spex.home, spex.store, event, hook)
    if as_json:
        runs: list[dict[str, Any]] = [
            {"hook": h.key, "ok": o.ok, "detail": o.detail} for h, o in results
        ]
        print_json(document({"ok": all(o.ok for _, o in results), "event": event, "hooks": runs}))
    else:
        for h, o in results:
            from spexsup.pane.pretty import one_line

            decl.echo(one_line(f"hook {h.key}: {'ok' if o.ok else 'failed'}, {o.detail}"))
    if not all(o.ok for _, o in results):
        raise decl.Exit(1)


@command("status-line")
def status_line(
    ctx: decl.Context,
    fmt: Annotated[
        str | None,
        decl.Option(
            "--format",
            metavar="TEMPLATE",
            help="Fields {running} {ok} {failed} {stopped} {attention}."
            " [default: spex: 2 running, 3 ok, 1 failed: api]",
            show_default=False,
        ),
    ] = None,
) -> None:
    """One line of session counts for a tmux status bar, read without SQLite.

    \b
    In ~/.tmux.conf:
      set -g status-right '#(spex status-line) %H:%M'
      set -g status-interval 5

    \b
    Examples:
      spex status-line
      spex status-line --format '{failed} failed: {attention}'
    """
    from spexsup.adapters import statusline

    home = ctx.find_root().obj
    try:
        values = statusline.read(statusline.home_dir(str(home) if home else None))
        decl.echo(statusline.render(values, fmt))
    except statusline.UnknownField as e:
        fields = ", ".join("{" + f + "}" for f in statusline.FIELDS)
        raise Invalid(f"unknown field {{{e}}} in --format", hint=f"fields: {fields}") from None
