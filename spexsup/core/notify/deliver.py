"""Sending a message to a target (DESIGN §26): each service's documented
request, retried with a doubling backoff on what another attempt may mend."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup.core.notify import BACKOFF, Target
from spexsup.core.notify.credentials import secret
from spexsup.core.notify.message import Message, compose, serve_url
from spexsup.errors import Failed, clip
from spexsup.state import events

if TYPE_CHECKING:
    import sqlite3

    from spexsup.state.store import Store


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


def deliver_claims(home: Path, store: Store, ids: list[int], target: Target) -> tuple[bool, str]:
    """The hooks' runner's part: deliver a target's taken claims (`ids`) as one
    message, and say so in hooks.log; (delivered, what happened)."""
    marks = ",".join("?" * len(ids))
    rows = store.db.execute(
        f"SELECT * FROM events WHERE id IN ({marks}) ORDER BY id", tuple(ids)
    ).fetchall()
    if not rows:
        return False, "failed: its events are no longer kept"
    batch = [events.as_json(r) for r in rows]
    started = time.monotonic()
    ok, detail = send(home, store.db, target, batch)
    took = time.monotonic() - started
    more = f" (and {len(batch) - 1} more)" if len(batch) > 1 else ""
    last = batch[-1]
    events.log_line(
        home,
        f"event {last['id']} {last['kind']} {last.get('session') or '-'}"
        f" {target.key}{more}: {detail} ({took:.2f}s)",
    )
    return ok, detail
