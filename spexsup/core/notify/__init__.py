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

Here: the targets and what they want. `credentials` holds the secrets,
`message` composes, `deliver` sends, `edit` is `spex notify add` and `rm`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import durations, lazyre
from spexsup.errors import Failed, Invalid, clip, unknown_key
from spexsup.state import events
from spexsup.states import Cause, EventKind

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
# What a person must look at: a message with one of these is urgent
# (ntfy priority high, desktop critical).
URGENT = ("failed", "lost", "timed-out", "usage-limit", "check-failed", "interrupted")
WINDOW = 30.0
TIMEOUT = 10.0
ATTEMPTS = 3
BACKOFF = 1.0
SECRETS = "notify-secrets.toml"
PREFIX = "notify:"
# Lines of a summary that name one event each; the rest are counted.
SUMMARY_LINES = 10
NAME_RE = lazyre.compile(r"[\w.-]{1,64}")
NTFY_PRIORITIES = ("min", "low", "default", "high", "urgent", "max", "1", "2", "3", "4", "5")
ENV_RE = lazyre.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
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
            if word in (EventKind.FAILED, Cause.USAGE_LIMIT):
                out.add(EventKind.FAILED)
            elif word == "check-failed":
                out.update((EventKind.VERIFIED, EventKind.FAILED))
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
    """What event `row` is, in `WORDS` (most telling first), and its kind. With
    `db` (inside the recording transaction) `queue-empty` is known too: first
    after a turn that completed, after the kind after one that did not (the
    failure is the news)."""
    kind = events.kind_of(row["kind"])
    words: list[str] = []
    if kind == EventKind.FAILED and row["cause"] == Cause.USAGE_LIMIT:
        words.append(Cause.USAGE_LIMIT.value)
    # A check's failure is the turn's end (`failed`, cause `verify`), or a
    # later `verified` event when the turn had ended already.
    if (kind == EventKind.FAILED and row["cause"] in (Cause.VERIFY, Cause.VERIFY_TIMEOUT)) or (
        kind == EventKind.VERIFIED and row["rc"] != 0
    ):
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
        last = ["queue-empty", kind] if kind == EventKind.COMPLETED else [kind, "queue-empty"]
        return words + last
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
