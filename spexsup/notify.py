"""Notifications (DESIGN §26): `[[notify]]` tables in config.toml, each a target
spoken natively — ntfy, Slack, Discord, Telegram, email over SMTP, the desktop.

A target is a hook of its own kind: `hooks.runnable` hands the hooks' queue
one `hooks.Hook` per target (keyed `notify:NAME`), so a target is claimed
once per event inside the transaction that records it, whatever the number of
racing spex processes, and delivered by the hooks' detached runners, never by
the process that judged the turn. What this module adds:

- which events a target wants (`Target.wants`, at claim time, inside that
  transaction: `queue-empty` asks the queue table as the end commits);
- a window per target (`window`, default `WINDOW`): the first claim opens it,
  and when it closes one runner takes every claim of the target queued by
  then and sends one message (one event) or one summary (many);
- the message: the session, what happened, the cause in one line, the cost
  where known, the session's page when `[serve] url` is set;
- delivery with retries (`ATTEMPTS`, backoff doubling from `BACKOFF`) on an
  HTTP 5xx or 429, a timeout or a refused connection (SMTP: a 4xx reply or a
  dropped connection); a 4xx is final. The outcome (`delivered …`/`failed …`)
  is the claims' `hook_runs.outcome`, which `spex notify ls` reads.

Secrets (a Slack or Discord webhook URL, a Telegram bot token, an ntfy
access token, an SMTP password) are never in config.toml nor in argv: each
comes from the environment (`url_env`, `token_env`, `password_env`) or from
`$SPEXSUP_HOME/notify-secrets.toml`, which must be 0600 (`spex notify add
--secret-stdin` writes it). Messages, logs and `spex notify ls` never show one.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import durations, events
from spexsup.errors import Failed, Invalid, clip, unknown_key
from spexsup.states import EventKind

if TYPE_CHECKING:
    import sqlite3

SERVICES = ("ntfy", "slack", "discord", "telegram", "email", "desktop")
# What a target may subscribe to: these words, or any event kind.
WORDS = (
    "failed",
    "lost",
    "timed-out",
    "usage-limit",
    "check-failed",
    "wave-ended",
    "queue-empty",
)
DEFAULT_ON = WORDS
WINDOW = 30.0
TIMEOUT = 10.0
ATTEMPTS = 3
BACKOFF = 1.0
SECRETS = "notify-secrets.toml"
PREFIX = "notify:"
# Lines of a summary that name one event each; the rest are counted.
SUMMARY_LINES = 10
NAME_RE = re.compile(r"[\w.-]{1,64}")
NTFY_PRIORITIES = ("min", "low", "default", "high", "urgent", "max", "1", "2", "3", "4", "5")
ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# The secret each service needs, and the field naming its variable.
SECRET_OF = {
    "ntfy": ("token", "token_env"),  # optional: an access token for a private server
    "slack": ("url", "url_env"),
    "discord": ("url", "url_env"),
    "telegram": ("token", "token_env"),
    "email": ("password", "password_env"),  # optional: no login without a user
}
COMMON = ("name", "service", "on", "sessions", "window", "timeout", "attempts")
FIELDS: dict[str, tuple[str, ...]] = {
    "ntfy": ("url", "title", "priority", "tags", "click", "token_env"),
    "slack": ("url_env",),
    "discord": ("url_env",),
    "telegram": ("chat_id", "token_env", "api"),
    "email": ("host", "port", "from", "to", "user", "password_env", "starttls", "ssl"),
    "desktop": ("urgency",),
}


@dataclass(frozen=True)
class Target:
    name: str
    service: str
    on: tuple[str, ...]
    sessions: tuple[str, ...]
    window: float
    timeout: float
    attempts: int
    # The service's own fields as written (no secret is ever among them).
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return PREFIX + self.name

    def kinds(self) -> tuple[str, ...]:
        """The event kinds that may carry one of `on` (the claim's cheap filter)."""
        out: set[str] = set()
        for word in self.on:
            if word in ("failed", "usage-limit"):
                out.add(EventKind.FAILED)
            elif word == "check-failed":
                out.add(EventKind.VERIFIED)
            elif word == "queue-empty":
                out.update(events.END_KINDS.values())
            else:
                out.add(word)
        return tuple(sorted(out))

    def wants(self, db: sqlite3.Connection, row: Mapping[str, Any]) -> bool:
        """Inside the transaction recording event `row`: does this target take it?"""
        if self.sessions and not (
            row["session"] and any(fnmatch.fnmatchcase(row["session"], g) for g in self.sessions)
        ):
            return False
        return bool(set(words_of(db, row)) & set(self.on))


def words_of(db: sqlite3.Connection | None, row: Mapping[str, Any]) -> list[str]:
    """What event `row` is, in `WORDS` (most telling first), then its kind. With
    `db` (inside the recording transaction) `queue-empty` is known too."""
    kind = events.kind_of(row["kind"])
    words: list[str] = []
    if kind == EventKind.FAILED and row["cause"] == "usage-limit":
        words.append("usage-limit")
    if kind == EventKind.VERIFIED and row["rc"] != 0:
        words.append("check-failed")
    if (
        db is not None
        and kind in events.END_KINDS.values()
        and row["turn"]
        and db.execute(
            "SELECT 1 FROM events WHERE session = ? AND turn = ? AND kind = ? LIMIT 1",
            (row["session"], row["turn"], EventKind.DEQUEUED),
        ).fetchone()
        and not db.execute("SELECT 1 FROM queue WHERE session = ?", (row["session"],)).fetchone()
    ):
        words.append("queue-empty")
    words.append(kind)
    return words


# --- reading the tables -------------------------------------------------------------


def _strings(value: object) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(v, str) and v and "\0" not in v for v in value):
        return tuple(value)
    return None


def _text(table: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> None:
    if key not in table:
        if required:
            raise Failed(f"{where}: needs {key!r}")
        return
    value = table[key]
    if not isinstance(value, str) or not value or "\0" in value or "\n" in value:
        raise Failed(f"{where}: {key!r} must be a one-line string")


def _url(table: Mapping[str, Any], key: str, where: str) -> None:
    _text(table, key, where)
    if key in table and not re.match(r"https?://[^\s/]+", table[key]):
        raise Failed(f"{where}: {key!r} must be an http:// or https:// URL")


def _service_fields(service: str, table: dict[str, Any], where: str) -> None:
    """The fields of one service, checked (Failed naming the first bad one)."""
    for key in ("url_env", "token_env", "password_env"):
        if key in table and not (isinstance(table[key], str) and ENV_RE.fullmatch(table[key])):
            raise Failed(f"{where}: {key!r} must name an environment variable")
    if service == "ntfy":
        _url(table, "url", where)
        if "url" not in table:
            raise Failed(f"{where}: needs 'url', the topic's URL (https://ntfy.sh/TOPIC)")
        _text(table, "title", where)
        _url(table, "click", where)
        if "priority" in table and str(table["priority"]) not in NTFY_PRIORITIES:
            raise Failed(f"{where}: 'priority' must be 1-5 or one of min, low, default, high, max")
        if "tags" in table and _strings(table["tags"]) is None:
            raise Failed(f"{where}: 'tags' must be a list of strings")
    elif service == "telegram":
        chat = table.get("chat_id")
        if isinstance(chat, bool) or not isinstance(chat, str | int) or chat == "":
            raise Failed(f"{where}: needs 'chat_id', the chat's id or @channel name")
        _url(table, "api", where)
    elif service == "email":
        _text(table, "host", where, required=True)
        _text(table, "from", where, required=True)
        _text(table, "user", where)
        port = table.get("port", 25)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise Failed(f"{where}: 'port' must be a port number")
        to = table.get("to")
        if isinstance(to, str):
            table["to"] = [to]
        elif _strings(to) is None:
            raise Failed(f"{where}: needs 'to', an address or a list of them")
        for key in ("starttls", "ssl"):
            if key in table and not isinstance(table[key], bool):
                raise Failed(f"{where}: {key!r} must be true or false")
    elif service == "desktop" and table.get("urgency", "normal") not in (
        "low",
        "normal",
        "critical",
    ):
        raise Failed(f"{where}: 'urgency' must be low, normal or critical")


def parse_one(source: str, number: int, table: object) -> Target:
    """The `number`th `[[notify]]` table of `source`, or Failed naming it and the field."""
    where = f"{source}: [[notify]] #{number}"
    if not isinstance(table, dict):
        raise Failed(f"{where} must be a table")
    table = dict(table)
    name = table.get("name")
    if not (isinstance(name, str) and NAME_RE.fullmatch(name)):
        raise Failed(f"{where}: needs 'name', 1-64 of letters, digits, _ . -")
    where = f"{source}: [[notify]] {name!r}"
    service = table.get("service")
    if service not in SERVICES:
        raise Failed(f"{where}: 'service' must be one of: {', '.join(SERVICES)}")
    for secret in ("token", "password") + (("url",) if service in ("slack", "discord") else ()):
        if secret in table:
            raise Failed(
                f"{where}: {secret!r} is a secret and config.toml no place for it",
                hint=f"name a variable with '{secret}_env', or use"
                " spex notify add --secret-stdin (a 0600 file)",
            )
    known = (*COMMON, *FIELDS[service])
    for key in sorted(set(table) - set(known)):
        unknown_key(source, key, known, f"[[notify]] {name!r}")
        del table[key]
    on = _strings(table.get("on", list(DEFAULT_ON)))
    if not on:
        raise Failed(f"{where}: 'on' must be a list of event words or kinds")
    for word in on:
        if word not in WORDS and events.kind_of(word) not in events.KINDS:
            import difflib

            close = difflib.get_close_matches(word, (*WORDS, *events.KINDS), n=1)
            raise Failed(
                f"{where}: 'on': unknown event {clip(repr(word))}",
                hint=f"did you mean {close[0]!r}?" if close else ", ".join(WORDS),
            )
    sessions = _strings(table.get("sessions", []))
    if sessions is None:
        raise Failed(f"{where}: 'sessions' must be a list of name globs")
    try:
        window = durations.parse(
            table.get("window", WINDOW), "window", minimum=0, allow_zero=True, maximum=86400
        )
        timeout = durations.parse(
            table.get("timeout", TIMEOUT), "timeout", minimum=0.1, maximum=600
        )
    except Invalid as e:
        raise Failed(f"{where}: {e.line()}") from None
    attempts = table.get("attempts", ATTEMPTS)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 10:
        raise Failed(f"{where}: 'attempts' must be an integer from 1 to 10")
    _service_fields(service, table, where)
    options = {k: v for k, v in table.items() if k not in COMMON}
    return Target(
        name,
        service,
        tuple(events.kind_of(w) for w in on),
        sessions,
        float(window),
        float(timeout),
        attempts,
        options,
    )


def check(raw: object, source: str = "config.toml") -> tuple[list[Target], list[Failed]]:
    """Every `[[notify]]` table checked on its own: the good, and what is wrong
    with each bad one (`spex doctor` names them all). Two tables of one name:
    the second is bad."""
    if not isinstance(raw, list):
        return [], [Failed(f"{source}: notify must be an array of tables ([[notify]])")]
    good: list[Target] = []
    bad: list[Failed] = []
    for number, table in enumerate(raw, 1):
        try:
            target = parse_one(source, number, table)
        except Failed as e:
            bad.append(e)
            continue
        if any(t.name == target.name for t in good):
            bad.append(Failed(f"{source}: two [[notify]] tables named {target.name!r}"))
            continue
        good.append(target)
    return good, bad


def load(home: Path) -> list[Target]:
    """The targets of the config files (the later file's tables win whole);
    Failed on the first bad one."""
    from spexsup import config

    raw = config.load(home).raw.get("notify")
    if not raw:
        return []
    good, bad = check(raw)
    if bad:
        raise bad[0]
    return good


# --- secrets ------------------------------------------------------------------------


def secrets_path(home: Path) -> Path:
    return home / SECRETS


def _secrets_file(home: Path) -> dict[str, Any]:
    """`notify-secrets.toml`, refused unless only its owner can read it."""
    import tomllib

    path = secrets_path(home)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise Failed(f"{path}: cannot read: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or info.st_uid != os.getuid():
            raise Failed(f"{path}: others can read it", hint=f"chmod 600 {path}")
        try:
            data = tomllib.loads(f.read().decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise Failed(f"{path}: {e}") from None
    return data


def secret_source(home: Path, target: Target) -> str | None:
    """Where the target's secret comes from, as `spex notify ls` shows it (never the value)."""
    kind = SECRET_OF.get(target.service)
    if kind is None:
        return None
    variable = target.options.get(kind[1])
    if variable:
        return f"${variable}"
    try:
        if kind[0] in _secrets_file(home).get(target.name, {}):
            return SECRETS
    except Failed:
        return f"{SECRETS} (unreadable)"
    return None


def secret(home: Path, target: Target) -> str | None:
    """The target's secret, from its variable, else the 0600 file; None when it has none."""
    kind = SECRET_OF.get(target.service)
    if kind is None:
        return None
    variable = target.options.get(kind[1])
    if variable:
        value = os.environ.get(variable)
        if not value:
            raise Failed(f"${variable} is not set in the environment that delivers")
        return value
    value = _secrets_file(home).get(target.name, {}).get(kind[0])
    return value if isinstance(value, str) and value else None


def save_secret(home: Path, name: str, key: str, value: str | None) -> None:
    """Set (or, `value` None, drop) one secret of target `name` in the 0600 file."""
    from spexsup.paths import write_atomic

    data = _secrets_file(home)
    entry = dict(data.get(name, {}))
    if value is None:
        entry.pop(key, None)
    else:
        entry[key] = value
    if entry:
        data[name] = entry
    else:
        data.pop(name, None)
    lines = []
    for target, values in sorted(data.items()):
        lines.append(f"[{json.dumps(target)}]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in sorted(values.items()))
        lines.append("")
    write_atomic(secrets_path(home), "\n".join(lines).encode())


def mask(url: str) -> str:
    """A URL as `ls` shows it: scheme and host, the rest hidden but its last two characters."""
    m = re.match(r"(https?://[^/?#]+)(.*)", url)
    if m is None:
        return "…"
    rest = m.group(2)
    return m.group(1) + (f"/…{rest[-2:]}" if len(rest) > 3 else rest)


def destination(target: Target) -> str:
    """Where a target sends, secrets masked."""
    o = target.options
    if target.service == "ntfy":
        return mask(o["url"])
    if target.service == "telegram":
        return f"chat {o['chat_id']}"
    if target.service == "email":
        return f"{', '.join(o['to'])} via {o['host']}:{o.get('port', 25)}"
    if target.service == "desktop":
        return "notify-send"
    return "webhook"


# --- the message --------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    title: str
    body: str
    link: str | None
    urgent: bool


def _what(db: sqlite3.Connection | None, event: Mapping[str, Any]) -> str:
    word = words_of(None, event)[0]
    payload = event.get("payload") or {}
    if word == EventKind.WAVE_ENDED:
        counts = payload.get("counts") or {}
        told = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()) if n)
        return f"wave {payload.get('wave', '?')} ended {payload.get('state', '')}".strip() + (
            f" ({told})" if told else ""
        )
    if word == "check-failed":
        return f"check failed (exit {event.get('rc')})"
    if word == "usage-limit":
        return "hit a usage limit"
    if event["kind"] in events.END_KINDS.values():
        return f"turn {word}"
    return word


def _cause(event: Mapping[str, Any]) -> str:
    text = " ".join(str(event.get("error") or "").split())
    cause = event.get("cause") or ""
    line = f"{cause}: {text}" if cause and text else cause or text
    return clip(line, 200)


def _cost(db: sqlite3.Connection, home: Path, event: Mapping[str, Any]) -> str:
    if not event.get("turn"):
        return ""
    try:
        from spexsup import config, usage

        spend = usage.total(
            db, config.load(home).pricing, where="turn = ?", params=(event["turn"],)
        )
    except Exception:  # the cost is a nicety; the message goes without it
        return ""
    return spend.cost_text() if spend.amount is not None else ""


def serve_url(home: Path) -> str | None:
    """`[serve] url` of config.toml: the public address of `spex serve`."""
    from spexsup import config

    url = config.load(home).serve_url
    return url.rstrip("/") if url else None


def compose(
    db: sqlite3.Connection, home: Path, batch: Sequence[Mapping[str, Any]], base: str | None
) -> Message:
    """One message for one event, one summary for several (oldest first)."""
    from urllib.parse import quote

    urgent = any(words_of(None, e)[0] != EventKind.WAVE_ENDED for e in batch)
    if len(batch) == 1:
        (event,) = batch
        who = event.get("session") or "spex"
        what = _what(db, event)
        lines = [f"{who}: {what}"]
        if event.get("turn"):
            lines[0] += f" ({event['turn']})"
        cause = _cause(event)
        if cause:
            lines.append(f"cause: {cause}")
        cost = _cost(db, home, event)
        if cost:
            lines.append(f"cost: {cost}")
        link = f"{base}/s/{quote(event['session'])}" if base and event.get("session") else base
        if link:
            lines.append(link)
        return Message(f"spex: {who} {what}", "\n".join(lines), link, urgent)
    tally: dict[str, int] = {}
    for e in batch:
        word = words_of(None, e)[0]
        tally[word] = tally.get(word, 0) + 1
    counted = ", ".join(f"{n} {w}" for w, n in sorted(tally.items(), key=lambda i: -i[1]))
    sessions = {e.get("session") for e in batch if e.get("session")}
    title = f"spex: {counted}" + (f" in {len(sessions)} sessions" if len(sessions) > 1 else "")
    lines = [f"{len(batch)} events: {counted}"]
    for e in batch[:SUMMARY_LINES]:
        cause = _cause(e)
        line = f"- {e.get('session') or 'spex'}: {_what(db, e)}"
        lines.append(line + (f" — {cause}" if cause else ""))
    if len(batch) > SUMMARY_LINES:
        lines.append(f"… and {len(batch) - SUMMARY_LINES} more (spex events)")
    if base:
        lines.append(base)
    return Message(title, "\n".join(lines), base, urgent)


def test_message(target: Target, base: str | None) -> Message:
    body = f"spex: a test of notify target {target.name!r} ({target.service})"
    if base:
        body += f"\n{base}"
    return Message(f"spex: test of {target.name}", body, base, False)


# --- delivery -----------------------------------------------------------------------


class Retry(Exception):
    """A failure worth another attempt (a 5xx, a timeout, a refused connection)."""


class Final(Exception):
    """A failure no retry mends (a 4xx, a bad address, a missing secret)."""


def deliver(home: Path, target: Target, message: Message) -> tuple[bool, str]:
    """Send `message` to `target`, up to `target.attempts` times with a backoff
    doubling from `BACKOFF` between them; (delivered, what happened). Never raises."""
    tried = 0
    delay = BACKOFF
    why = ""
    while tried < target.attempts:
        tried += 1
        try:
            detail = _send(home, target, message)
        except Retry as e:
            why = str(e)
            if tried < target.attempts:
                time.sleep(delay)
                delay *= 2
            continue
        except (Final, Failed) as e:
            why = e.line() if isinstance(e, Failed) else str(e)
            return False, f"failed: {why} (attempt {tried} of {target.attempts})"
        except Exception as e:
            return False, f"failed: {type(e).__name__}: {e}"
        return True, f"delivered: {detail} (attempt {tried} of {target.attempts})"
    return False, f"failed: {why} after {tried} attempts"


def _send(home: Path, target: Target, message: Message) -> str:
    o = target.options
    if target.service == "desktop":
        return _desktop(target, message)
    if target.service == "email":
        return _email(home, target, message)
    headers = {"User-Agent": "spexsup-notify"}
    if target.service == "ntfy":
        headers["Title"] = message.title
        priority = o.get("priority", "high" if message.urgent else "default")
        headers["Priority"] = str(priority)
        tags = o.get("tags", ["warning" if message.urgent else "white_check_mark"])
        headers["Tags"] = ",".join(tags)
        click = o.get("click") or message.link
        if click:
            headers["Click"] = click
        token = secret(home, target)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        headers["Content-Type"] = "text/plain; charset=utf-8"
        return _post(o["url"], message.body.encode(), headers, target.timeout)
    headers["Content-Type"] = "application/json"
    if target.service in ("slack", "discord"):
        url = secret(home, target)
        if not url or not re.match(r"https?://", url):
            variable = o.get("url_env") or "url_env"
            raise Final(f"no webhook URL (set ${variable} or use --secret-stdin)")
        text = (
            f"*{message.title}*\n{message.body}"
            if target.service == "slack"
            else (f"**{message.title}**\n{message.body}")
        )
        key = "text" if target.service == "slack" else "content"
        limit = 3000 if target.service == "slack" else 2000
        body = {key: text[:limit]}
        return _post(url, json.dumps(body).encode(), headers, target.timeout)
    token = secret(home, target)  # telegram
    if not token:
        raise Final("no bot token (set token_env or --secret-stdin)")
    api = str(o.get("api", "https://api.telegram.org")).rstrip("/")
    payload = {
        "chat_id": o["chat_id"],
        "text": f"{message.title}\n{message.body}"[:4096],
        "disable_web_page_preview": True,
    }
    return _post(
        f"{api}/bot{token}/sendMessage", json.dumps(payload).encode(), headers, target.timeout
    )


def _post(url: str, data: bytes, headers: dict[str, str], timeout: float) -> str:
    """POST once: `HTTP 200`, or Retry/Final with a line that names no URL
    (it may hold a secret)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return f"HTTP {response.status}"
    except urllib.error.HTTPError as e:
        if e.code >= 500 or e.code == 429:
            raise Retry(f"HTTP {e.code}") from None
        raise Final(f"HTTP {e.code}") from None
    except TimeoutError:
        raise Retry(f"no answer in {timeout:g}s") from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, TimeoutError):
            raise Retry(f"no answer in {timeout:g}s") from None
        reason = getattr(e.reason, "strerror", None) or str(e.reason)
        raise Retry(f"cannot connect: {reason}") from None
    except (OSError, ValueError) as e:
        raise Retry(f"POST failed: {getattr(e, 'strerror', None) or e}") from None


def _email(home: Path, target: Target, message: Message) -> str:
    import smtplib
    import ssl
    from email.message import EmailMessage

    o = target.options
    mail = EmailMessage()
    mail["Subject"] = message.title
    mail["From"] = o["from"]
    mail["To"] = ", ".join(o["to"])
    mail.set_content(message.body)
    port = int(o.get("port", 25))
    try:
        if o.get("ssl"):
            client: smtplib.SMTP = smtplib.SMTP_SSL(
                o["host"], port, timeout=target.timeout, context=ssl.create_default_context()
            )
        else:
            client = smtplib.SMTP(o["host"], port, timeout=target.timeout)
        with client:
            if o.get("starttls"):
                client.starttls(context=ssl.create_default_context())
            if o.get("user"):
                password = secret(home, target)
                if password is None:
                    raise Final("no SMTP password (set password_env or --secret-stdin)")
                client.login(o["user"], password)
            refused = client.send_message(mail)
    except smtplib.SMTPResponseException as e:
        if 400 <= e.smtp_code < 500:
            raise Retry(f"SMTP {e.smtp_code}") from None
        raise Final(f"SMTP {e.smtp_code}") from None
    except smtplib.SMTPRecipientsRefused:
        raise Final("SMTP: every recipient refused") from None
    except (TimeoutError, smtplib.SMTPServerDisconnected) as e:
        raise Retry(f"SMTP: {e or 'no answer'}") from None
    except OSError as e:
        raise Retry(f"SMTP: cannot connect: {e.strerror or e}") from None
    if refused:
        return f"SMTP 250, refused {', '.join(sorted(refused))}"
    return "SMTP 250"


def _desktop(target: Target, message: Message) -> str:
    import subprocess

    urgency = target.options.get("urgency", "critical" if message.urgent else "normal")
    argv = ["notify-send", "--app-name=spex", f"--urgency={urgency}", message.title, message.body]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=target.timeout,
            check=False,
        )
    except FileNotFoundError:
        raise Final("notify-send is not installed (apt install libnotify-bin)") from None
    except subprocess.TimeoutExpired:
        raise Retry(f"notify-send did not end in {target.timeout:g}s") from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise Final(f"notify-send exit {done.returncode}" + (f": {clip(said[-1])}" if said else ""))
    return "notify-send exit 0"


def send(
    home: Path, db: sqlite3.Connection, target: Target, batch: Sequence[Mapping[str, Any]]
) -> tuple[bool, str]:
    """Compose and deliver one message for `batch` (its events, oldest first)."""
    try:
        base = serve_url(home)
    except Failed:
        base = None
    return deliver(home, target, compose(db, home, batch, base))


# --- what spex notify ls shows ------------------------------------------------------


def history(db: sqlite3.Connection, target: Target, recent: int = 3) -> dict[str, Any]:
    """A target's deliveries as `hook_runs` kept them: counts, the last delivery
    and the `recent` last failures (when, which event, why)."""
    rows = db.execute(
        "SELECT event, claimed_at, started_at, outcome FROM hook_runs WHERE hook = ?"
        " ORDER BY claimed_at DESC",
        (target.key,),
    ).fetchall()
    delivered = [r for r in rows if (r["outcome"] or "").startswith("delivered")]
    failed = [r for r in rows if (r["outcome"] or "").startswith("failed")]
    waiting = sum(1 for r in rows if r["outcome"] is None)
    return {
        "delivered": len(delivered),
        "failed": len(failed),
        "waiting": waiting,
        "last_delivered_at": delivered[0]["started_at"] if delivered else None,
        "failures": [
            {"event": r["event"], "at": r["started_at"], "outcome": r["outcome"]}
            for r in failed[:recent]
        ],
    }


def describe(home: Path, target: Target) -> dict[str, Any]:
    """`spex notify ls --json`: one target as read, secrets masked."""
    return {
        "name": target.name,
        "service": target.service,
        "to": destination(target),
        "secret": secret_source(home, target),
        "on": list(target.on),
        "sessions": list(target.sessions),
        "window": target.window,
        "timeout": target.timeout,
        "attempts": target.attempts,
    }


# --- spex notify add / rm -----------------------------------------------------------


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)  # a TOML basic string


def _blocks(text: str) -> list[tuple[int, int, str | None]]:
    """The `[[notify]]` tables of a config text: (first line, end line, name)."""
    import tomllib

    lines = text.splitlines(keepends=True)
    out: list[tuple[int, int, str | None]] = []
    for i, line in enumerate(lines):
        if not re.match(r"\s*\[\[\s*notify\s*\]\]", line):
            continue
        end = i + 1
        while end < len(lines) and not re.match(r"\s*\[", lines[end]):
            end += 1
        try:
            name = tomllib.loads("".join(lines[i + 1 : end])).get("name")
        except tomllib.TOMLDecodeError:
            name = None
        out.append((i, end, name if isinstance(name, str) else None))
    return out


def add(home: Path, table: dict[str, Any], secret_value: str | None) -> Target:
    """Append one `[[notify]]` table to `$SPEXSUP_HOME/config.toml` (and its
    secret to the 0600 file). Checked first against the files as they are:
    Invalid (exit 2) for a bad table or a name in use, Failed for a broken
    config file; either way nothing is written."""
    from spexsup.errors import Refused
    from spexsup.paths import write_atomic

    try:
        target = parse_one("spex notify add", 1, table)
    except Failed as e:
        raise Invalid(e.message.replace("spex notify add: [[notify]] ", ""), hint=e.hint) from None
    if any(t.name == target.name for t in load(home)):
        raise Refused(f"a notify target {target.name!r} exists", hint="spex notify rm it first")
    kind = SECRET_OF.get(target.service)
    if secret_value is not None and kind is None:
        raise Invalid(f"a {target.service} target has no secret")
    needs = target.service in ("slack", "discord", "telegram") or (
        target.service == "email" and target.options.get("user")
    )
    if needs and kind is not None and secret_value is None and not table.get(kind[1]):
        raise Invalid(
            f"a {target.service} target needs its {kind[0]}",
            hint="pipe it to --secret-stdin, or name a variable with --env",
        )
    path = home / "config.toml"
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = ""
    block = "\n[[notify]]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in table.items())
    if secret_value is not None and kind is not None:
        save_secret(home, target.name, kind[0], secret_value)
    write_atomic(path, (text.rstrip("\n") + "\n" + block).lstrip("\n").encode())
    return target


def remove(home: Path, name: str) -> None:
    """Remove target `name`'s table from `$SPEXSUP_HOME/config.toml` and its secret."""
    from spexsup import config
    from spexsup.errors import Refused
    from spexsup.paths import write_atomic

    path = home / "config.toml"
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = ""
    found = [b for b in _blocks(text) if b[2] == name]
    if not found:
        elsewhere = [
            p for p in config.config_files(home)[:1] if p.exists() and name in p.read_text()
        ]
        hint = f"it is in {elsewhere[0]}: edit that file" if elsewhere else "see spex notify ls"
        raise Refused(f"no notify target {name!r} in {path}", hint=hint)
    lines = text.splitlines(keepends=True)
    first, end, _ = found[0]
    kept = "".join(lines[:first] + lines[end:])
    write_atomic(path, (kept.rstrip("\n") + "\n" if kept.strip() else "").encode())
    if secrets_path(home).exists():
        for key in ("url", "token", "password"):
            save_secret(home, name, key, None)
