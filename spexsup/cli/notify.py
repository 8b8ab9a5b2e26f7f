"""`spex notify [ls] | add NAME SERVICE | test NAME | rm NAME`: the
notification targets of `[[notify]]` tables (spexsup.core.notify)."""

import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from spexsup.cli import decl
from spexsup.cli.app import ListingGroup, app
from spexsup.cli.decl import open_spex
from spexsup.cli.params import JsonOpt
from spexsup.errors import Invalid, Refused
from spexsup.present.render import age, document, print_json, table, with_iso

if TYPE_CHECKING:
    from spexsup.core.notify import Target

notify_app = typer.Typer(cls=ListingGroup, invoke_without_command=True)
app.add_typer(notify_app, name="notify")

TargetArg = Annotated[
    str, decl.Argument(metavar="NAME", help="A notify target's name, as spex notify ls shows it.")
]


@notify_app.callback()
def notify_group(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """Notifications: ntfy, Slack, Discord, Telegram, email and the desktop.

    Each target is a [[notify]] table in config.toml; bare `spex notify`
    lists them, as `spex notify ls` does.

    \b
    Examples:
      spex notify add phone ntfy --url https://ntfy.sh/my-secret-topic
      printf %s "$SLACK_URL" | spex notify add team slack --secret-stdin
      spex notify test phone
      spex notify ls
    """
    if ctx.invoked_subcommand is None:
        notify_ls(ctx, as_json=as_json)


@notify_app.command("ls")
def notify_ls(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """List the targets: service, destination (secrets masked), where the
    secret comes from, events, window, deliveries and the last failures.

    Exit 1, naming the table and field, when a [[notify]] table is broken.

    \b
    Examples:
      spex notify ls
      spex notify ls --json
    """
    from spexsup.core import notify
    from spexsup.core.notify.credentials import describe

    spex = open_spex(ctx)
    found = notify.load(spex.home)
    docs = [{**describe(spex.home, t), **notify.history(spex.store.db, t)} for t in found]
    if as_json:
        print_json(document({"targets": with_iso(docs)}))
        return
    if not found:
        decl.echo("no notify targets (spex notify add NAME SERVICE adds one)")
        return
    now = time.time()
    rows = [
        [
            d["name"],
            d["service"],
            d["to"],
            d["secret"] or "-",
            f"{d['window']:g}s",
            str(d["delivered"]),
            str(d["failed"]),
            ",".join(d["on"]) + (f" sessions {','.join(d['sessions'])}" if d["sessions"] else ""),
        ]
        for d in docs
    ]
    table(["NAME", "SERVICE", "TO", "SECRET", "WINDOW", "SENT", "FAILED", "ON"], rows, squeeze="ON")
    for d in docs:
        for f in d["failures"]:
            when = age(now - f["at"]) + " ago" if f["at"] else "?"
            decl.echo(f"{d['name']}: event {f['event']}, {when}: {f['outcome']}")


def _secret_from_stdin() -> str:
    if sys.stdin.isatty():
        decl.echo("secret (not echoed), then Enter:", err=True)
        import getpass

        return getpass.getpass("")
    text = sys.stdin.read().strip()
    if not text or "\n" in text:
        raise Invalid("--secret-stdin: give one line on stdin")
    return text


@notify_app.command("add")
def notify_add(
    ctx: decl.Context,
    name: TargetArg,
    service: Annotated[
        str,
        decl.Argument(metavar="SERVICE", help="ntfy, slack, discord, telegram, email or desktop."),
    ],
    url: Annotated[
        str | None,
        decl.Option("--url", metavar="URL", help="ntfy: the topic's URL (https://ntfy.sh/TOPIC)."),
    ] = None,
    chat_id: Annotated[
        str | None, decl.Option("--chat-id", metavar="ID", help="telegram: the chat to write to.")
    ] = None,
    api: Annotated[
        str | None,
        decl.Option("--api", metavar="URL", help="telegram: the Bot API's address.", hidden=True),
    ] = None,
    smtp: Annotated[
        str | None,
        decl.Option("--smtp", metavar="HOST[:PORT]", help="email: the SMTP server (port 25)."),
    ] = None,
    sender: Annotated[
        str | None, decl.Option("--from", metavar="ADDRESS", help="email: the sender.")
    ] = None,
    to: Annotated[
        list[str] | None,
        decl.Option("--to", metavar="ADDRESS", help="email: a recipient; repeatable."),
    ] = None,
    user: Annotated[
        str | None, decl.Option("--user", metavar="USER", help="email: log in as USER.")
    ] = None,
    starttls: Annotated[
        bool, decl.Option("--starttls", help="email: STARTTLS before logging in.")
    ] = False,
    title: Annotated[
        str | None, decl.Option("--title", metavar="TEXT", help="ntfy: a fixed title.")
    ] = None,
    priority: Annotated[
        str | None,
        decl.Option("--priority", metavar="P", help="ntfy: 1-5, or min, low, default, high, max."),
    ] = None,
    tag: Annotated[
        list[str] | None, decl.Option("--tag", metavar="TAG", help="ntfy: a tag; repeatable.")
    ] = None,
    on: Annotated[
        list[str] | None,
        decl.Option(
            "--on",
            metavar="EVENT",
            help="An event word (failed, lost, timed-out, usage-limit, check-failed,"
            " wave-ended, queue-empty) or kind; repeatable. Default: those seven.",
        ),
    ] = None,
    session: Annotated[
        list[str] | None,
        decl.Option("--session", metavar="GLOB", help="Only sessions matching; repeatable."),
    ] = None,
    window: Annotated[
        str | None,
        decl.Option(
            "--window",
            metavar="DURATION",
            help="Gather events this long into one message (default 30s; 0: each at once).",
        ),
    ] = None,
    env: Annotated[
        str | None,
        decl.Option("--env", metavar="NAME", help="Read the secret from this variable."),
    ] = None,
    secret_stdin: Annotated[
        bool,
        decl.Option(
            "--secret-stdin",
            help="Read the secret (webhook URL, bot token, password) from stdin into a 0600 file.",
        ),
    ] = False,
) -> None:
    """Add a notify target: a [[notify]] table appended to config.toml.

    Secrets never go on the command line: a Slack or Discord webhook URL, a
    Telegram bot token, an SMTP password or an ntfy access token come from
    stdin (--secret-stdin, kept in notify-secrets.toml, 0600) or from a
    variable (--env NAME).

    \b
    Examples:
      spex notify add phone ntfy --url https://ntfy.sh/my-secret-topic --priority high
      printf %s "$WEBHOOK" | spex notify add team slack --secret-stdin --on failed
      spex notify add bot telegram --chat-id 12345 --env TELEGRAM_TOKEN
      spex notify add me email --smtp mail.example.com:587 --starttls --from spex@example.com \\
        --to me@example.com --user me --secret-stdin
      spex notify add here desktop --window 0
    """
    from spexsup.core.notify import edit

    _check_service(service, url, env, secret_stdin)
    fields: dict[str, Any] = {"name": name, "service": service, **_when(on, session, window)}
    given: dict[str, Any] = {
        "url": url,
        "chat_id": chat_id,
        "api": api,
        "from": sender,
        "to": to,
        "user": user,
        "starttls": starttls or None,
        "title": title,
        "priority": priority,
        "tags": tag,
        **_smtp_server(smtp),
    }
    fields.update({k: v for k, v in given.items() if v is not None})
    fields.update(_secret_variable(service, env))
    spex = open_spex(ctx)
    secret = _secret_from_stdin() if secret_stdin else None
    _say_added(edit.add(spex.home, fields, secret))


def _check_service(service: str, url: str | None, env: str | None, secret_stdin: bool) -> None:
    """A known service, and its secret from one place, never the command line."""
    from spexsup.core import notify

    if service not in notify.SERVICES:
        raise Invalid(f"unknown service {service!r}", hint=", ".join(notify.SERVICES))
    if url is not None and service in ("slack", "discord"):
        raise Invalid(
            f"a {service} webhook URL is a secret and the command line no place for it",
            hint="pipe it to --secret-stdin, or name a variable with --env",
        )
    if env is not None and secret_stdin:
        raise Invalid("give --env or --secret-stdin, not both")


def _when(on: list[str] | None, session: list[str] | None, window: str | None) -> dict[str, Any]:
    """When the target is told: --on, --session, --window, as its table keeps them."""
    fields: dict[str, Any] = {}
    if on:
        fields["on"] = on
    if session:
        fields["sessions"] = session
    if window is not None:
        fields["window"] = window
    return fields


def _smtp_server(smtp: str | None) -> dict[str, Any]:
    """--smtp HOST[:PORT] as the table's host and port."""
    if smtp is None:
        return {}
    host, _, port = smtp.partition(":")
    if not port:
        return {"host": host}
    if not port.isdigit():
        raise Invalid(f"--smtp: {port!r} is no port number")
    return {"host": host, "port": int(port)}


def _secret_variable(service: str, env: str | None) -> dict[str, Any]:
    """--env NAME: the table's field naming the variable the secret is read from."""
    if env is None:
        return {}
    from spexsup.core import notify

    kind = notify.SECRET_OF.get(service)
    if kind is None:
        raise Invalid(f"a {service} target has no secret")
    return {kind[1]: env}


def _say_added(target: "Target") -> None:
    """What `notify add` made, and how to try it."""
    from spexsup.core.notify import credentials

    decl.echo(
        f"added {target.name} ({target.service}, {credentials.destination(target)}):"
        f" on {','.join(target.on)}, window {target.window:g}s"
    )
    decl.echo(f"try it: spex notify test {target.name}")


@notify_app.command("test")
def notify_test(ctx: decl.Context, name: TargetArg, as_json: JsonOpt = False) -> None:
    """Send a test message to one target now, and say how it went (exit 1 if
    it failed).

    \b
    Examples:
      spex notify test phone
    """
    from spexsup.core import notify
    from spexsup.core.notify import deliver, message

    spex = open_spex(ctx)
    target = next((t for t in notify.load(spex.home) if t.name == name), None)
    if target is None:
        raise Refused(f"no notify target {name!r}", hint="see spex notify ls")
    base = message.serve_url(spex.home)
    ok, detail = deliver.deliver(spex.home, target, message.test_message(target, base))
    if as_json:
        failed = {} if ok else {"error": detail, "exit_code": 1}
        print_json(document({"ok": ok, "name": name, "detail": detail, **failed}))
    else:
        decl.echo(f"{name} ({target.service}): {detail}")
    if not ok:
        raise decl.Exit(1)


@notify_app.command("rm")
def notify_rm(ctx: decl.Context, name: TargetArg) -> None:
    """Remove a target from $SPEXSUP_HOME/config.toml, and its secret.

    \b
    Examples:
      spex notify rm phone
    """
    from spexsup.core.notify import edit

    spex = open_spex(ctx)
    edit.remove(spex.home, name)
    decl.echo(f"removed notify target {name}")
