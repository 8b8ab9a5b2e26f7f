"""A notification's words (DESIGN §26): one event, or a window's summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup.core.notify import SUMMARY_LINES, URGENT, Target, words_of
from spexsup.errors import clip
from spexsup.state import events
from spexsup.states import Cause, EventKind

if TYPE_CHECKING:
    import sqlite3


@dataclass(frozen=True)
class Message:
    title: str
    body: str
    link: str | None
    urgent: bool


def _what(db: sqlite3.Connection | None, event: Mapping[str, Any]) -> str:
    word = words_of(db, event)[0]
    payload = event.get("payload") or {}
    if word == EventKind.WAVE_ENDED:
        counts = payload.get("counts") or {}
        told = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()) if n)
        return f"wave {payload.get('wave', '?')} ended {payload.get('state', '')}".strip() + (
            f" ({told})" if told else ""
        )
    if word == "check-failed":
        return f"check failed (exit {payload.get('verify_rc', event.get('rc'))})"
    if word == Cause.USAGE_LIMIT:
        return "hit a usage limit"
    if word == "queue-empty":
        return "queue ran dry"
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

    urgent = any(words_of(db, e)[0] in URGENT for e in batch)
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
        word = words_of(db, e)[0]
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
