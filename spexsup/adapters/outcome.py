"""Outcome flags: what the agent really did, read from its structured output.

An agent CLI's exit status is not the whole truth: claude exits 0 when a
tool permission was denied or when it stopped at `--max-turns`, opencode
after an error it never recovered from. Each built-in adapter names a
`parser` here; it reads the turn's JSON events and returns flags:

- `denied:<tool>`       a tool use the permission system refused
- `max-turns`           stopped at its turn limit
- `agent-error:<text>`  the agent reported an error it did not recover from
                        (a failure whatever the exit code: pi and opencode exit
                        0 after their retries give up)
- `no-answer`           no final answer at all
- `asked-question`      the final answer ends with a question to the user

(The wrapper adds `output-lost:<bytes>` for output output.log could not
keep, `describe` words it; see `spexsup.pane.marker`.)

It also reads what the run spent (`spexsup.adapters.meter`, issue 26).

Runs in the exit reporter on every turn end, so it is bounded: the events
that decide (claude's `result`, codex's `turn.*`, opencode's last `text`,
never a `commentary`-phase one, or `error`, pi's `agent_end`) are at the
end of the output, so the log is read backwards in chunks, newest event
first, only lines that carry an event type the parser wants are decoded,
and the scan stops as soon as the parser has what it needs or after
`SCAN_BUDGET` bytes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from spexsup import lazyre
from spexsup.adapters import meter as meters
from spexsup.record import Record
from spexsup.states import OUTPUT_LOST, Flag
from spexsup.usage import BAD_USAGE

CHUNK = 1 << 16
SCAN_BUDGET = 4 << 20
# A single event line longer than this is skipped (never decoded).
LINE_MAX = 1 << 20
TEXT_MAX = 200


class Outcome:
    """What a parser found. `fails` says the flags fail the turn even without
    strict mode: an agent error the run ended on. `error` is then the agent's
    own human line for it (never a JSON document) and `status` the HTTP status
    it names, if any. A plain class: this runs in the exit reporter, which must
    not import `dataclasses`."""

    __slots__ = ("answer", "decided", "error", "fails", "flags", "spent", "status", "whole")

    def __init__(self) -> None:
        self.flags: list[str] = []
        self.answer: str | None = None
        self.fails = False
        self.error: str | None = None
        self.status: int | None = None
        self.spent = meters.Meter()  # what the run spent
        self.decided = False  # pi: the newest assistant message was read
        self.whole = False  # the scan covered the whole output

    def add(self, flag: str) -> None:
        if flag not in self.flags:
            self.flags.append(flag)

    def failed(self, message: object, status: object = None) -> None:
        """The run ended on an agent error: flag it, keep its human line."""
        line = human(message) or "error"
        self.add(f"agent-error:{_one_line(line)}")
        self.fails = True
        if self.error is None:
            self.error = line
            self.status = _status(status, line)


def _one_line(text: object) -> str:
    out = " ".join(str(text).split())
    return out[: TEXT_MAX - 1] + "…" if len(out) > TEXT_MAX else out


def _json_message(value: object) -> str | None:
    """The human message inside a provider's error document: `error.message`,
    `message`, `error` (a string), `detail`, as Anthropic, OpenAI and the
    ChatGPT backend spell it."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        return None
    for key in ("error", "message", "detail", "errorMessage"):
        inner = value.get(key)
        if isinstance(inner, dict | str):
            found = _json_message(inner)
            if found:
                return found
    return None


def human(text: object, limit: int = TEXT_MAX) -> str:
    """An error as a person reads it, on one line: a JSON document (whole, or
    after a prefix such as `API Error: 500 `) is replaced by the message it
    carries; control characters go."""
    if text is None:
        return ""
    if not isinstance(text, str):
        text = _json_message(text) or json.dumps(text, ensure_ascii=False)
    start = text.find("{")
    if start >= 0:
        decoder = json.JSONDecoder()
        try:
            doc, end = decoder.raw_decode(text[start:])
        except ValueError:
            doc, end = None, 0
        message = _json_message(doc)
        if message:
            rest = text[start + end :].strip()
            text = " ".join(x for x in (text[:start].strip(" :"), message, rest) if x)
    text = "".join(c if c.isprintable() else " " for c in text)
    return _one_line(text) if len(text) > limit else " ".join(text.split())


# `API Error: 500 …`, `(429)`, `last status: 429 …`, pi's `503 The engine…`;
# never a port or a count elsewhere in the line.
_STATUS = lazyre.compile(r"(?:^|status:?|error:?|\()\s*([45][0-9]{2})\b", re.IGNORECASE)


def _status(status: object, line: str) -> int | None:
    if isinstance(status, int) and not isinstance(status, bool) and 400 <= status < 600:
        return status
    if isinstance(status, str) and status.isdigit():
        return int(status)
    m = _STATUS.search(line)
    return int(m.group(1)) if m else None


# What an agent error was, from its status and text: the causes a failed end
# names (DESIGN §9). A usage limit is found first, by the harness's patterns.
_RATE = lazyre.compile(r"rate.?limit|too many requests|exceed your account's rate", re.IGNORECASE)
_OVERLOADED = lazyre.compile(
    r"overloaded|service unavailable|temporarily unavailable|high demand", re.IGNORECASE
)
_NO_MODEL = lazyre.compile(
    r"model[_ ]not[_ ]found|ProviderModelNotFound|(?:unknown|invalid) model"
    r"|model\b[^\n]{0,80}\b(?:does not exist|not found|not exist)",
    re.IGNORECASE,
)


def classify(out: Outcome) -> str:
    """`rate-limited`, `overloaded`, `model-not-found`, or `agent-error`."""
    text = out.error or ""
    if out.status == 429 or _RATE.search(text):
        return "rate-limited"
    if out.status in (503, 529) or _OVERLOADED.search(text):
        return "overloaded"
    if _NO_MODEL.search(text) or (out.status == 404 and "model" in text.lower()):
        return "model-not-found"
    return "agent-error"


def lines_backwards(path: Path, budget: int = SCAN_BUDGET) -> Iterator[bytes]:
    """The file's non-empty lines, last first, reading at most `budget` bytes
    from the end. A line cut by the budget (its start not read) is not
    yielded, and a line longer than LINE_MAX is dropped unread."""
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        pos = f.tell()
        floor = max(0, pos - budget)
        rest = b""
        skipping = False  # inside a line longer than LINE_MAX
        while pos > floor:
            step = min(CHUNK, pos - floor)
            pos -= step
            f.seek(pos)
            parts = (f.read(step) + rest).split(b"\n")
            if skipping:
                if len(parts) == 1:
                    rest = b""
                    continue
                parts[-1] = b""
                skipping = False
            rest = parts[0]
            if len(rest) > LINE_MAX:
                rest, skipping = b"", True
            for line in reversed(parts[1:]):
                if line and len(line) <= LINE_MAX:
                    yield line
        if pos == 0 and rest and not skipping:
            yield rest


# A parser gets the events newest first and returns True once it has seen enough.
Parser = Callable[[dict[str, Any], Outcome], bool]


class Spec(Record):
    """Which lines to decode (a cheap substring test before json.loads) and the parser."""

    wanted: tuple[bytes, ...]
    parse: Parser
    finish: Callable[[Outcome], None] | None = None
    # Reads a line it knows from its bytes (True), before any decoding.
    raw: Callable[[bytes, Outcome], bool] | None = None


def _question(out: Outcome) -> None:
    if out.answer is None or not out.answer.strip():
        out.add(Flag.NO_ANSWER)
    elif out.answer.rstrip().endswith("?"):
        out.add(Flag.ASKED_QUESTION)


# --- claude: `--output-format stream-json` ---------------------------------


def _claude(event: dict[str, Any], out: Outcome) -> bool:
    if event.get("type") != "result":
        return False
    meters.claude(event, out.spent)
    subtype = str(event.get("subtype") or "")
    for denial in event.get("permission_denials") or ():
        if isinstance(denial, dict) and denial.get("tool_name"):
            out.add(f"denied:{_one_line(denial['tool_name'])}")
    if subtype == "error_max_turns":
        out.add(Flag.MAX_TURNS)
    elif event.get("is_error") or subtype.startswith("error"):
        why = event.get("result") or (event.get("errors") or [None])[0] or subtype or "error"
        out.failed(why, event.get("api_error_status"))
    result = event.get("result")
    out.answer = result if isinstance(result, str) and not event.get("is_error") else None
    if out.answer is None and not event.get("is_error") and subtype != "error_max_turns":
        out.add(Flag.NO_ANSWER)
    elif out.answer is not None:
        _question(out)
    return True


def _claude_finish(out: Outcome) -> None:
    if not out.flags and out.answer is None:
        out.add(Flag.NO_ANSWER)  # no result event at all


# --- codex: `exec --json` ----------------------------------------------------


def _codex(event: dict[str, Any], out: Outcome) -> bool:
    kind = event.get("type")
    if kind == "turn.failed":
        error = event.get("error") or {}
        message = error.get("message") if isinstance(error, dict) else error
        out.failed(message or "turn failed")
    elif kind == "error" and not out.fails:
        # An error after the last completed turn was not recovered from.
        if out.answer is None:
            out.failed(event.get("message") or "error")
    elif kind == "item.completed":
        item = event.get("item") or {}
        if isinstance(item, dict) and item.get("type") == "agent_message":
            out.answer = str(item.get("text") or "")
            return True
    elif kind == "turn.completed":
        if not out.spent.metered:
            meters.codex(event.get("usage"), out.spent, failed=out.fails)
        out.answer = out.answer or ""
    return False


def _codex_finish(out: Outcome) -> None:
    if not out.fails:
        _question(out)


# --- opencode: `run --format json` ------------------------------------------


# What opencode's tool part says when its permission system refused the call:
# `ask` in a non-interactive run auto-rejects, a rule can deny one command.
_OPENCODE_DENIED = ("The user rejected permission", "The user has specified a rule")


def _commentary(part: dict[str, Any]) -> bool:
    """A text part the model sent on its `commentary` channel: a progress note
    while it works, not its answer. OpenAI's Responses API marks each message
    `phase` `commentary` or `final_answer`; opencode keeps that in the part's
    `metadata` under the provider's key (`{"openai": {"phase": …}}`)."""
    meta = part.get("metadata")
    if not isinstance(meta, dict):
        return False
    return any(isinstance(v, dict) and v.get("phase") == "commentary" for v in meta.values())


def _opencode(event: dict[str, Any], out: Outcome) -> bool:
    # Newest first, to the start: every refused tool call counts, and an
    # error with an answer after it was recovered from.
    kind = event.get("type")
    part = event.get("part") or {}
    if not isinstance(part, dict):
        return False
    if kind == "step_finish":
        meters.opencode(part, out.spent)
    elif kind == "text":
        text = part.get("text")
        if out.answer is None and isinstance(text, str) and text.strip() and not _commentary(part):
            out.answer = text
    elif kind == "tool_use":
        state = part.get("state") or {}
        error = state.get("error") if isinstance(state, dict) else None
        denied = isinstance(error, str) and error.startswith(_OPENCODE_DENIED)
        if denied:
            out.add(f"denied:{_one_line(part.get('tool') or 'tool')}")
        elif part.get("tool") == "task":
            # A subagent: its spend is in its own session, not in this output.
            meta = state.get("metadata") if isinstance(state, dict) else None
            child = meta.get("sessionId") if isinstance(meta, dict) else None
            out.spent.tasks.append(child if isinstance(child, str) and child else None)
    elif kind == "error" and out.answer is None and not out.fails:
        error = event.get("error") or {}
        message: object = None
        status = None
        if isinstance(error, dict):
            data = error.get("data")
            if isinstance(data, dict):
                message, status = data.get("message"), data.get("statusCode")
            message = message or error.get("name")
        out.failed(message or error or "error", status)  # older opencode exits 0 after it
    return False


def _opencode_finish(out: Outcome) -> None:
    # Every step read (the scan saw the whole output) and none left unfinished.
    spent = out.spent
    spent.exact = spent.metered and out.whole and spent.steps == 0
    if not out.fails:
        _question(out)


# --- pi: `--mode json` --------------------------------------------------------


def _pi_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = [
        c.get("text", "") for c in content or () if isinstance(c, dict) and c.get("type") == "text"
    ]
    return "".join(p for p in parts if isinstance(p, str))


def _pi(event: dict[str, Any], out: Outcome) -> bool:
    """`agent_end` (last) holds the run's messages: the newest assistant one
    decides, and their usage is the run's. Without one (the run was cut
    short), each `message_end` back to the start adds its usage, short of
    exact; the newest decides."""
    kind = event.get("type")
    messages: list[Any] = []
    if kind == "message_end":
        messages = [event.get("message")]
    elif kind == "agent_end":
        if out.spent.metered:
            return True  # an older run's end, past the messages already read
        messages = list(reversed(event.get("messages") or []))
    else:
        return False
    assistant = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    for message in assistant:
        meters.pi(message, out.spent)
    if assistant and not out.decided:
        out.decided = True
        message = assistant[0]
        if message.get("stopReason") in ("error", "aborted"):
            # pi exits 0 after its retries give up: the run still failed.
            out.failed(message.get("errorMessage") or message.get("stopReason"))
        else:
            out.answer = _pi_text(message)
    if kind == "agent_end":
        out.spent.metered = out.spent.exact = True
        return True
    return False


def _pi_finish(out: Outcome) -> None:
    if not out.fails:
        _question(out)


PARSERS: dict[str, Spec] = {
    "claude": Spec((b'"result"',), _claude, _claude_finish),
    "codex": Spec(
        (b'"turn.failed"', b'"error"', b'"item.completed"', b'"turn.completed"'),
        _codex,
        _codex_finish,
    ),
    "opencode": Spec(
        (b'"text"', b'"error"', b'"tool_use"', b'"step_finish"'),
        _opencode,
        _opencode_finish,
        lambda line, out: meters.opencode_line(line, out.spent),
    ),
    "pi": Spec((b'"message_end"', b'"agent_end"'), _pi, _pi_finish),
}


def read(output: Path, parser: str | None, budget: int = SCAN_BUDGET) -> Outcome:
    """The outcome flags of a turn's output (its output.log) under `parser` (empty without one)."""
    out = Outcome()
    spec = PARSERS.get(parser or "")
    if spec is None:
        return out
    try:
        out.whole = output.stat().st_size <= budget
        raw = spec.raw
        for line in lines_backwards(output, budget):
            if raw is not None and raw(line, out):
                continue
            if not any(w in line for w in spec.wanted):
                continue
            start = line.find(b"{")
            if start < 0:
                continue
            try:
                event = json.loads(line[start:])
            except ValueError:
                continue
            if isinstance(event, dict) and spec.parse(event, out):
                break
    except OSError:
        return out
    if spec.finish is not None:
        spec.finish(out)
    return out


def describe(flags: list[str]) -> str:
    """`2 tool permissions denied: Write, Bash; stopped at max turns` for a verdict line."""
    denied = [f.split(":", 1)[1] for f in flags if f.startswith("denied:")]
    parts = []
    if denied:
        s = "" if len(denied) == 1 else "s"
        parts.append(f"{len(denied)} tool permission{s} denied: {', '.join(denied)}")
    for f in flags:
        if f == Flag.MAX_TURNS:
            parts.append("stopped at its max turns")
        elif f.startswith("agent-error:"):
            parts.append(f"agent error: {f.split(':', 1)[1]}")
        elif f == Flag.NO_ANSWER:
            parts.append("no final answer")
        elif f == Flag.ASKED_QUESTION:
            parts.append("ended asking a question")
        elif f == Flag.VERIFIED:
            parts.append("verified")
        elif f == Flag.SANDBOXED:
            parts.append("sandboxed")
        elif f.startswith(BAD_USAGE):
            parts.append(f"{f.removeprefix(BAD_USAGE)} was no usage number: unknown")
        elif f == Flag.ORPHANED:
            parts.append("its agent outlived its pane")
        elif f.partition(":")[0] == OUTPUT_LOST:
            lost = f.partition(":")[2]
            amount = _amount(int(lost)) if lost.isdigit() else "some"
            parts.append(f"{amount} of its output could not be written to output.log")
    hosts = [f.split(":", 1)[1] for f in flags if f.startswith("denied-net:")]
    if hosts:
        parts.append(f"sandbox denied {', '.join(hosts)}")
    return "; ".join(parts)


def _amount(size: int) -> str:
    """`812 bytes`, `64.0 kB`, `1.3 MB`: a byte count as a person reads it."""
    if size < 1000:
        return f"{size} byte{'s' * (size != 1)}"
    if size < 1_000_000:
        return f"{size / 1000:.1f} kB"
    return f"{size / 1_000_000:.1f} MB"


# --- usage limits ------------------------------------------------------------

LIMIT_TAIL = 1 << 16
_IN_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "hr": 3600,
    "d": 86400,
    "day": 86400,
}


class UsageLimit(Record):
    """A usage-limit message in a turn's output, and when the limit resets
    (unix seconds) if the message said."""

    reset: float | None
    text: str

    def when(self) -> str:
        if self.reset is None:
            return "reset time not given"
        import time

        return "resets " + time.strftime("%H:%M", time.localtime(self.reset))


def reset_time(kind: str, text: str, now: float) -> float | None:
    """The epoch a reset text names: `epoch` seconds, a `clock` time (the next
    one after `now`, in the named zone if any, on the named date if any), or a
    span `in` from now (`2 hours 5 minutes`, `~47 min`, `19hr`, a bare number
    of seconds as in a Retry-After header, `less than a minute`)."""
    import re as _re

    text = text.strip()
    try:
        if kind == "epoch":
            return float(text)
        if kind == "in":
            if text.isdigit():
                return now + float(text)
            if text.lower() == "less than a minute":
                return now + 60
            total = 0.0
            pairs = _re.findall(r"([0-9]+(?:\.[0-9]+)?)\s*([a-z]+)", text.lower())
            for number, unit in pairs:
                unit = unit.rstrip("s") if unit not in ("s",) else unit
                if unit not in _IN_UNITS:
                    return None
                total += float(number) * _IN_UNITS[unit]
            return now + total if pairs else None
        if kind == "clock":
            return _next_clock(text, now)
    except (ValueError, OverflowError):
        return None
    return None


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
# `[Jul 15 at |May 11th, 2026 |Oct 6, ]3:45 PM|7pm|19:30[ (Area/City)]`
_CLOCK = (
    r"(?:(?P<mon>[A-Za-z]{3})[a-z]*\.? (?P<day>[0-9]{1,2})(?:st|nd|rd|th)?,?"
    r"(?: (?P<year>[0-9]{4}),?)?(?: at)? )?"
    r"(?P<hour>[0-9]{1,2})(?::(?P<minute>[0-9]{2}))?\s*(?P<ampm>[apAP]\.?[mM]\.?)?"
    r"(?:\s*\((?P<zone>[A-Za-z_/+-]+)\))?"
)


def _next_clock(text: str, now: float) -> float | None:
    """The next time after `now` a clock text names. Clocks are printed to the
    minute: a time in the current minute means its end, never tomorrow."""
    import datetime as dt
    import re as _re

    m = _re.fullmatch(_CLOCK, text)
    if m is None:
        return None
    hour, minute = int(m["hour"]), int(m["minute"] or 0)
    if m["ampm"]:
        hour = hour % 12 + (12 if m["ampm"][0].lower() == "p" else 0)
    if hour > 23 or minute > 59:
        return None
    zone: dt.tzinfo | None = None
    if m["zone"]:
        try:
            from zoneinfo import ZoneInfo

            zone = ZoneInfo(m["zone"])
        except (ValueError, KeyError, OSError):
            zone = None
    current = dt.datetime.fromtimestamp(now, zone) if zone else dt.datetime.fromtimestamp(now)
    if m["mon"]:
        if m["mon"].lower() not in _MONTHS:
            return None
        month = _MONTHS.index(m["mon"].lower()) + 1
        year = int(m["year"]) if m["year"] else current.year
        candidate = current.replace(
            year=year, month=month, day=int(m["day"]), hour=hour, minute=minute,
            second=0, microsecond=0,
        )  # fmt: skip
        if not m["year"] and candidate.timestamp() < now - 86400:
            candidate = candidate.replace(year=year + 1)  # `Jan 2` seen on Dec 30
    else:
        candidate = current.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if candidate.timestamp() <= now - 60:
            candidate += dt.timedelta(days=1)
    if now - 60 < candidate.timestamp() <= now:
        candidate += dt.timedelta(minutes=1)
    return candidate.timestamp()


def output_end(output: Path, size: int = LIMIT_TAIL) -> str:
    """The last `size` bytes of a turn's output (its output.log), decoded; "" if there is none.

    Causes and patterns show at the end of the output, and a harness may
    have written megabytes before it: never read it all.
    """
    try:
        with output.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def find_limit(
    output: Path,
    limits: tuple[tuple[str, str], ...],
    now: float,
    timeout: float = 0.25,
    text: str | None = None,
) -> UsageLimit | None:
    """The last usage-limit message (patterns and reset kinds from the harness
    table) in the end of a turn's output (`text`, when read already), or None."""
    if not limits:
        return None
    text = output_end(output) if text is None else text
    if not text:
        return None
    import regex

    for pattern, kind in limits:
        try:
            found = list(regex.finditer(pattern, text, timeout=timeout))
        except (TimeoutError, regex.error):
            continue
        if not found:
            continue
        last = found[-1]
        groups = last.groupdict()
        reset = reset_time(kind, groups["reset"], now) if groups.get("reset") and kind else None
        return UsageLimit(reset, _one_line(last.group(0)))
    return None
