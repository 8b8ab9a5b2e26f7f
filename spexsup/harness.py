"""Harness adapters: how each agent CLI runs one headless turn.

An adapter says the argv of a fresh and of a resumed turn, how the prompt is
delivered, where the conversation id shows in the turn's output, its default
confirmation window, and which startup failures are retryable (nothing ran) or
fatal with a cause to name. Built-ins can be overridden or extended in TOML.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from spexsup.errors import Invalid, clip
from spexsup.paths import own_python

PROMPT = "{prompt}"
SESSION_ID = "{session_id}"
# Where a session's own arguments (`spex new NAME --harness H -- ARGS…`) go.
ARGS = "{args}"

# Linux refuses a single argv string of 32 pages or more (MAX_ARG_STRLEN).
MAX_ARG_BYTES = 128 * 1024 - 1


class Fatal(NamedTuple):
    pattern: str
    cause: str


class Limit(NamedTuple):
    """A usage-limit message: `pattern` matches it; its group `reset` (if any)
    holds the reset time, read as `reset` says: "epoch" (unix seconds),
    "clock" (`7pm`, `9:30 AM`, `19:30`, optionally `(Area/City)`), "in"
    (`2 hours 5 minutes`, `5h`, `30m`), or "" (no time given)."""

    pattern: str
    reset: str = ""


RESET_KINDS = ("", "epoch", "clock", "in")

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smh]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
MAX_TIMEOUT = 7 * 86400.0


def parse_duration(text: str | float, what: str = "timeout") -> float:
    """`90s`, `15m`, `2h` (or a bare number of seconds) in seconds; Invalid otherwise."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _DURATION.fullmatch(str(text).strip())
        if m is None:
            raise Invalid(f"invalid {what} {text!r}", hint="a duration: 90s, 15m, 2h")
        value = float(m.group(1)) * _UNITS[m.group(2)]
    if not 0 < value <= MAX_TIMEOUT:
        raise Invalid(f"invalid {what} {text!r}", hint="more than 0 and at most 7 days")
    return value


class Harness(NamedTuple):
    name: str
    fresh: tuple[str, ...]
    resume: tuple[str, ...] | None = None
    # "arg": the prompt is the argv element spelled {prompt}; "stdin": it is
    # fed on stdin; "append" (the command harness only): one last argument.
    # A prompt too big for argv falls back to stdin when `stdin_fallback`,
    # else the wake is refused ("append" never falls back: a command that
    # reads its argument would run with no prompt and "complete").
    prompt_via: str = "arg"
    stdin_fallback: bool = False
    window: float | None = None
    id_pattern: str | None = None
    retryable: tuple[str, ...] = ()
    fatal: tuple[Fatal, ...] = ()
    binary: str | None = None
    version_args: tuple[str, ...] = ("--version",)
    notes: str = ""
    # The structured-output parser for outcome flags (spexsup.outcome.PARSERS).
    outcome: str | None = None
    # Any outcome flag fails the turn; the turn's time limit in seconds.
    strict: bool = False
    timeout: float | None = None
    limited: tuple[Limit, ...] = ()
    # "uuid": the caller chooses a fresh conversation's id ({session_id} in
    # `fresh`, claude's --session-id); spex assigns and stores it at admission.
    assign_id: str | None = None
    # A resume the CLI refused because it no longer knows the id: the stored
    # id is cleared, and the next wake starts a new conversation.
    gone: tuple[str, ...] = ()
    # The session's own arguments, put in both argv forms (see `args_index`);
    # passed verbatim: a `{prompt}` or `{session_id}` in them is not expanded.
    args: tuple[str, ...] = ()

    def pinned(self, path: str) -> Harness:
        """This harness with its binary run as `path` (an absolute path that
        `spex new` found on the caller's PATH only) wherever its argv starts
        with the binary's name."""

        def pin(template: tuple[str, ...] | None) -> tuple[str, ...] | None:
            if template and self.binary and template[0] == self.binary:
                return (path, *template[1:])
            return template

        return self._replace(fresh=pin(self.fresh) or self.fresh, resume=pin(self.resume))

    def argv(
        self, prompt: bytes, session_id: str | None, assigned: str | None = None
    ) -> tuple[list[bytes], bool]:
        """The turn's argv and whether the prompt goes on stdin; a fresh turn of
        a harness that takes a chosen id gets `assigned` as its {session_id}.

        Raises Invalid when the prompt fits neither argv nor stdin.
        """
        template = self.resume if session_id and self.resume else self.fresh
        if template is self.fresh:
            session_id = assigned
        if self.prompt_via == "append":
            # The command harness: the user's argv verbatim (a literal
            # `{prompt}` in it stays as typed), the prompt one last argument.
            if len(prompt) > MAX_ARG_BYTES:
                raise Invalid(
                    f"the prompt is {len(prompt)} bytes, too big for the command's argv",
                    hint=f"at most {MAX_ARG_BYTES} bytes; for more, a harnesses.toml entry"
                    ' with prompt_via = "stdin"',
                )
            return [os.fsencode(a) for a in template] + [prompt], False
        # A template with no {prompt} element takes the prompt on stdin: a
        # built-in's resume form under an override of its fresh one that does.
        on_stdin = self.prompt_via == "stdin" or PROMPT not in template
        if not on_stdin and len(prompt) > MAX_ARG_BYTES:
            if not self.stdin_fallback:
                raise Invalid(
                    f"the prompt is {len(prompt)} bytes, too big for {self.name}'s argv",
                    hint=f"at most {MAX_ARG_BYTES} bytes for this harness",
                )
            on_stdin = True
        at = args_index(template)
        parts = [p for p in template if p != ARGS]
        out: list[bytes] = []
        for i, part in enumerate([*parts, None]):
            if i == at:
                out.extend(os.fsencode(a) for a in self.args)
            if part is None:
                break
            if part == PROMPT:
                if not on_stdin:
                    out.append(prompt)
            else:
                out.append(part.replace(SESSION_ID, session_id or "").encode())
        return out, on_stdin


def args_index(template: Sequence[str]) -> int:
    """Where a session's arguments go in `template` once its `{args}` element
    is dropped: at `{args}`; else before the `--` that ends the options ahead
    of `{prompt}` (the last one before it) or, with no `{prompt}` (a prompt on
    stdin), the template's last `--`; else before `{prompt}`, or before a last
    `-` (codex's "the prompt is on stdin"); else at the end. So an option given
    per session is always parsed as an option."""
    if ARGS in template:
        return list(template).index(ARGS)
    head = list(template[: template.index(PROMPT)]) if PROMPT in template else list(template)
    if "--" in head:
        return len(head) - 1 - head[::-1].index("--")
    if PROMPT not in template and head[-1:] == ["-"]:
        return len(head) - 1
    return len(head)


def shown(template: Sequence[str]) -> list[str]:
    """`template` with `{args}` where a session's arguments go: what
    `spex harness show` prints, itself a template that means the same."""
    if ARGS in template:
        return list(template)
    at = args_index(template)
    return [*template[:at], ARGS, *template[at:]]


def command_harness(command: Sequence[str]) -> Harness:
    """`spex new NAME -- CMD…`: CMD with the prompt appended as one last argument."""
    return Harness(name="command", fresh=tuple(command), prompt_via="append")


_DEMO = tuple(own_python("spexsup.demo_agent"))
# Conversation-store and lock errors that mean nothing ran: safe to retry.
_LOCKED = (r"database is locked", r"SQLITE_BUSY")

# Usage-limit messages, as the CLIs print them (sources next to each pattern).
# A reset `clock` as printed: `7pm`, `3:45 PM`, `2:50am (Asia/Muscat)`,
# `Jul 15 at 12am (Australia/Melbourne)`, `May 11th, 2026 1:36 PM`.
_CLOCK = (
    r"(?:[A-Z][a-z]{2,8}\.? [0-9]{1,2}(?:st|nd|rd|th)?,?(?: [0-9]{4},?)?(?: at)? )?"
    r"[0-9]{1,2}(?::[0-9]{2})? ?[apAP]\.?[mM]\.?(?: \([A-Za-z_/+-]+\))?"
)
# A span: `2 days 17 hours 14 minutes`, `~47 min`, `19hr`, `4hr 29min`.
_SPAN = r"~?[0-9]+ ?[a-z]+(?:,? [0-9]+ ?[a-z]+)*"
# The ChatGPT backend's own 429 body, passed on verbatim by pi and opencode (also
# JSON-escaped inside their JSON events): `{"error":{"type":"usage_limit_reached",
# "message":"The usage limit has been reached","plan_type":"plus","resets_at":1777936568,
# "resets_in_seconds":13872}}` (github.com/earendil-works/pi/issues/4172).
_CHATGPT_BODY = Limit(
    r"usage_limit_reached[^\n]{0,800}?resets_at\\*\"\s*:\s*(?P<reset>[0-9]{9,11})", "epoch"
)

BUILTIN: dict[str, Harness] = {
    "demo": Harness(
        name="demo",
        fresh=(*_DEMO, PROMPT),
        resume=(*_DEMO, "--resume", SESSION_ID, PROMPT),
        stdin_fallback=True,
        window=1.0,
        id_pattern=r"conversation: (demo-[0-9a-f]+)",
        gone=(r"no conversation found with id",),
        notes="bundled agent simulator",
    ),
    # Every built-in CLI gets the prompt on stdin: it arrives byte-exact
    # (opencode re-quotes an argument that holds a space), no local user reads
    # it in `ps`, and no size limit applies. With no prompt argument, claude -p
    # reads stdin; codex exec reads it for `-`; so does `opencode run`.
    "claude": Harness(
        name="claude",
        fresh=(
            "claude",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--session-id",
            SESSION_ID,
        ),
        assign_id="uuid",
        resume=(
            "claude",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--resume",
            SESSION_ID,
        ),
        prompt_via="stdin",
        id_pattern=r'"session_id"\s*:\s*"([0-9a-fA-F-]{8,})"',
        retryable=_LOCKED,
        fatal=(
            Fatal(
                r"Please run /login|Not logged in", "claude is not logged in (run claude /login)"
            ),
            Fatal(r"Invalid API key", "claude has an invalid API key (run claude /login)"),
        ),
        gone=(r"No conversation found with session ID",),
        binary="claude",
        outcome="claude",
        limited=(
            # 1.0.x print mode: `Claude AI usage limit reached|1755615600`, the reset
            # in unix seconds (github.com/anthropics/claude-code/issues/6119).
            Limit(r"Claude AI usage limit reached\|(?P<reset>[0-9]{9,11})", "epoch"),
            # 1.0.x: `Claude usage limit reached. Your limit will reset at 5pm
            # (Europe/Warsaw).` (claude-code/issues/6119), also with no zone.
            Limit(rf"usage limit reached\. Your limit will reset at (?P<reset>{_CLOCK})", "clock"),
            # 1.0.8x-1.0.11x: `5-hour limit reached ∙ resets 5am` (claude-code/issues/6392,
            # 7641); 2.1.x: `You've hit your session limit · resets 2:50am (Asia/Muscat)`
            # (claude-code/issues/76151), `You've hit your weekly limit · resets Jul 15
            # at 12am (Australia/Melbourne)` (claude-code/issues/77122), `You've hit
            # your limit · resets 7pm (Europe/Berlin)`.
            Limit(
                rf"(?:limit reached|hit your (?:[A-Za-z0-9-]+ )?limit) (?:[∙·•-]|\\u00b7|\\u2219)"
                rf" resets"
                rf" (?P<reset>{_CLOCK})",
                "clock",
            ),
            Limit(r"Claude AI usage limit reached|You've hit your (?:[A-Za-z0-9-]+ )?limit", ""),
        ),
    ),
    # codex refuses to run outside a trusted (git) directory; spex keeps that
    # safety check and names it when it fires. Add --skip-git-repo-check in
    # harnesses.toml to lift it. With no prompt argument codex reads stdin.
    "codex": Harness(
        name="codex",
        fresh=("codex", "exec", "--json", "-"),
        resume=("codex", "exec", "resume", "--json", SESSION_ID, "-"),
        prompt_via="stdin",
        window=3.0,
        id_pattern=r'"thread_id"\s*:\s*"([0-9a-fA-F-]{8,})"',
        retryable=_LOCKED,
        fatal=(
            Fatal(
                r"Not inside a trusted directory",
                "codex refuses to run outside a trusted git directory"
                " (run it in a git repository, or add --skip-git-repo-check in harnesses.toml)",
            ),
            Fatal(r"Not logged in|codex login", "codex is not logged in (run codex login)"),
            Fatal(r"Invalid API key|invalid_api_key", "codex has an invalid API key"),
        ),
        gone=(r"no rollout found|[Ss]ession .* not found",),
        binary="codex",
        outcome="codex",
        limited=(
            # codex-rs/protocol/src/error.rs (core/src/error.rs before), Display for
            # UsageLimitReachedError + retry_suffix / format_retry_timestamp (codex-cli
            # 0.5x on): `You've hit your usage limit. Upgrade to Pro (…), visit … or try
            # again at 3:45 PM.`, `… Try again at May 11th, 2026 1:36 PM.` - local time,
            # `%-I:%M %p`, the date only when it is not today.
            Limit(rf"hit your usage limit[^\n]*?[Tt]ry again at (?P<reset>{_CLOCK})", "clock"),
            # codex-cli 0.27-0.40 (openai/codex issues 3031, 3899, 4104): `… or try again in
            # 5 days 22 hours 11 minutes.`, `Try again in less than a minute.`
            Limit(
                rf"hit your usage limit[^\n]*?[Tt]ry again in"
                rf" (?P<reset>{_SPAN}|less than a minute)",
                "in",
            ),
            # core/src/error.rs RateLimitedError: `rate limited (status 429 Too Many
            # Requests), retry after 30s`.
            Limit(r"rate limited \(status 429[^)\n]*\), retry after (?P<reset>[0-9]+s)", "in"),
            # No time: `… Try again later.`, the Free plan's `… Upgrade to Plus to continue
            # using Codex (…).`, 0.23's `… or wait for limits to reset (every 5h and every
            # week.).` (openai/codex issue 2669), `Quota exceeded. Check your plan and
            # billing details.`
            Limit(
                r"You['\u2019]ve hit your usage limit|Quota exceeded\. Check your plan and billing",
                "",
            ),
        ),
    ),
    "opencode": Harness(
        name="opencode",
        fresh=("opencode", "run", "--format", "json"),
        resume=("opencode", "run", "--format", "json", "--session", SESSION_ID),
        prompt_via="stdin",
        window=3.0,
        id_pattern=r'"sessionID"\s*:\s*"(ses_[A-Za-z0-9]+)"',
        retryable=_LOCKED,
        fatal=(
            Fatal(
                r"ProviderModelNotFound|No provider", "opencode has no model provider configured"
            ),
        ),
        gone=(r"Session not found|NotFoundError",),
        binary="opencode",
        outcome="opencode",
        limited=(
            # opencode retries a retryable provider error itself (session/retry.ts, using
            # the Retry-After header); `run --format json` prints the one it gives up on
            # as {"type":"error",…,"error":{"name":"APIError","data":{"message":…,
            # "statusCode":429,"isRetryable":…,"responseHeaders":{…},"responseBody":…}}}
            # (MessageV2.APIError; cli/cmd/run). OpenCode Go's body: {"type":
            # "GoUsageLimitError","message":"Weekly usage limit reached. Resets in 19hr"}.
            Limit(rf"[Uu]sage limit reached\.? Resets in (?P<reset>{_SPAN})", "in"),
            _CHATGPT_BODY,
            # A 429 whose Retry-After is minutes or more is a usage window; a
            # shorter one (`Rate limit reached … try again in 1s`) is a rate limit.
            Limit(r'"statusCode"\s*:\s*429[^\n]*?"retry-after"\s*:\s*"(?P<reset>[0-9]{3,})"', "in"),
            # session/retry.ts: `Free usage exceeded, add credits https://opencode.ai/zen`
            # (FreeUsageLimitError); OpenAI's insufficient_quota (`You exceeded your
            # current quota, please check your plan and billing details.`).
            Limit(
                r"FreeUsageLimitError|GoUsageLimitError|Free usage exceeded"
                r"|The usage limit has been reached|You exceeded your current quota",
                "",
            ),
        ),
    ),
    "pi": Harness(
        name="pi",
        fresh=("pi", "-p", "--mode", "json"),
        resume=("pi", "-p", "--mode", "json", "--session", SESSION_ID),
        prompt_via="stdin",
        window=3.0,
        id_pattern=r'"type"\s*:\s*"session"[^\n]*?"id"\s*:\s*"([^"]+)"',
        retryable=_LOCKED,
        fatal=(
            Fatal(r"No API key found", "pi has no API key (run pi, then /login)"),
            Fatal(r"Use /login", "pi is not logged in (run pi, then /login)"),
        ),
        gone=(r"No session found|Session not found",),
        binary="pi",
        outcome="pi",
        limited=(
            # packages/ai/src/providers/openai-codex-responses.ts, parseErrorResponse
            # (badlogic/pi-mono@83378aa, lines 837-843; unchanged in 0.8x): `You have hit
            # your ChatGPT usage limit (plus plan). Try again in ~47 min.` - stopReason
            # "error", its errorMessage in the message_end/agent_end events.
            Limit(rf"hit your ChatGPT usage limit[^\n]*?Try again in (?P<reset>{_SPAN})", "in"),
            # The same provider's SSE `error` event: `Codex error: {…usage_limit_reached…
            # "resets_at":1777936568…}` (github.com/earendil-works/pi/issues/4172).
            _CHATGPT_BODY,
            # No time: the message without `Try again`, and Anthropic's 429 that pi's
            # auto-retry gave up on: `429 {"type":"error","error":{"type":
            # "rate_limit_error","message":"This request would exceed your account's rate
            # limit. Please try again later."}}`.
            # Through a Chat Completions provider the body is gone: `429 The usage
            # limit has been reached`, `429 You exceeded your current quota, …`.
            Limit(
                r"hit your ChatGPT usage limit|usage_limit_reached|The usage limit has been reached"
                r"|You exceeded your current quota",
                "",
            ),
        ),
    ),
}

FIELDS = {
    "fresh": list,
    "resume": list,
    "prompt_via": str,
    "stdin_fallback": bool,
    "window": float,
    "id_pattern": str,
    "retryable": list,
    "fatal": list,
    "binary": str,
    "version_args": list,
    "notes": str,
    "outcome": str,
    "strict": bool,
    "timeout": object,
    "limited": list,
    "assign_id": str,
    "gone": list,
}


def config_files(home: Path) -> list[Path]:
    """Harness files, later ones overriding earlier: user config, then the state home."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    config = Path(xdg) if xdg else Path.home() / ".config"
    return [config / "spexsup" / "harnesses.toml", home / "harnesses.toml"]


BUILT_IN = "built in"


class Registry(NamedTuple):
    """Built-ins plus user harnesses; a bad entry is kept as its error, so a
    mistake in one harness never breaks commands that use another. `sources`
    says where each harness (or error) comes from: BUILT_IN, or the path of
    the harnesses.toml that last defined it."""

    harnesses: dict[str, Harness]
    errors: dict[str, Invalid]
    sources: dict[str, str]

    def names(self) -> list[str]:
        return sorted({*self.harnesses, *self.errors, "command"} - {"*"})

    def get(self, name: str) -> Harness:
        if name in self.errors:
            raise self.errors[name]
        if name not in self.harnesses:
            if "*" in self.errors:
                raise self.errors["*"]
            raise Invalid(f"unknown harness {name!r}", hint=f"one of: {', '.join(self.names())}")
        return self.harnesses[name]


def _bad(path: Path, name: str, field_: str, why: str) -> Invalid:
    return Invalid(f"{path}: harness {clip(repr(name))}, field {clip(repr(field_))}: {why}")


def _parse_entry(path: Path, name: str, table: object, base: Harness | None) -> Harness:
    if not isinstance(table, dict):
        raise _bad(path, name, "-", "must be a table ([harness.NAME])")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) or name == "command":
        raise _bad(path, name, "-", "invalid harness name")
    values: dict[str, object] = {}
    for key, value in table.items():
        kind = FIELDS.get(key)
        if kind is None:
            raise _bad(path, name, key, f"unknown field (known: {', '.join(FIELDS)})")
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if key == "timeout":
            try:
                value = parse_duration(value)
            except Invalid:
                raise _bad(path, name, key, "must be a duration: 90s, 15m, 2h") from None
        elif not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise _bad(path, name, key, f"must be a {kind.__name__}")
        values[key] = value
    for key in ("fresh", "resume", "retryable", "version_args", "gone"):
        items = values.get(key)
        if items is not None and not all(isinstance(x, str) and x for x in items):  # type: ignore[attr-defined]
            raise _bad(path, name, key, "must be a list of non-empty strings")
        # An argv word cannot hold a NUL (the turn's argv file is
        # NUL-separated: it would split the word in two).
        if (
            items is not None
            and key in ("fresh", "resume", "version_args")
            and any("\0" in x for x in items)  # type: ignore[attr-defined]
        ):
            raise _bad(path, name, key, "an argv word must not contain a NUL (\\u0000)")
    fatal: list[Fatal] = []
    for item in values.get("fatal", []):  # type: ignore[attr-defined]
        if (
            not isinstance(item, dict)
            or set(item) != {"pattern", "cause"}
            or not all(isinstance(v, str) for v in item.values())
        ):
            raise _bad(path, name, "fatal", "each entry needs a string pattern and cause")
        fatal.append(Fatal(item["pattern"], item["cause"]))
    limited: list[Limit] = []
    for item in values.get("limited", []):  # type: ignore[attr-defined]
        if (
            not isinstance(item, dict)
            or "pattern" not in item
            or not set(item) <= {"pattern", "reset"}
            or not all(isinstance(v, str) for v in item.values())
            or item.get("reset", "") not in RESET_KINDS
        ):
            raise _bad(
                path,
                name,
                "limited",
                'each entry needs a string pattern and reset one of "", "epoch", "clock", "in"',
            )
        limited.append(Limit(item["pattern"], item.get("reset", "")))
    if "assign_id" in values and values["assign_id"] not in ("", "uuid"):
        raise _bad(path, name, "assign_id", 'must be "uuid" or ""')
    if "outcome" in values and values["outcome"] not in ("", "claude", "codex", "opencode", "pi"):
        raise _bad(path, name, "outcome", 'one of "claude", "codex", "opencode", "pi", ""')
    for key, patterns in (
        ("id_pattern", [values["id_pattern"]] if "id_pattern" in values else []),
        ("retryable", values.get("retryable", [])),
        ("fatal", [f.pattern for f in fatal]),
        ("limited", [lim.pattern for lim in limited]),
        ("gone", values.get("gone", [])),
    ):
        for pattern in patterns:  # type: ignore[attr-defined]
            try:
                compiled = re.compile(pattern)
            except re.error as e:
                raise _bad(path, name, key, f"bad regular expression {pattern!r}: {e}") from None
            if key == "id_pattern" and compiled.groups != 1:
                raise _bad(path, name, key, "needs exactly one (group) around the id")
    if "prompt_via" in values and values["prompt_via"] not in ("arg", "stdin"):
        raise _bad(path, name, "prompt_via", 'must be "arg" or "stdin"')
    window = values.get("window")
    if window is not None and not 0.05 <= window <= 3600:  # type: ignore[operator]
        raise _bad(path, name, "window", "must be between 0.05 and 3600 seconds")
    if base is None and "fresh" not in values:
        raise _bad(path, name, "fresh", "required for a new harness")
    merged = base or Harness(name=name, fresh=())
    changes: dict[str, object] = {
        k: tuple(v) if isinstance(v, list) else v
        for k, v in values.items()
        if k not in ("fatal", "limited")
    }
    if "fatal" in values:
        changes["fatal"] = tuple(fatal)
    if "limited" in values:
        changes["limited"] = tuple(limited)
    for key in ("outcome", "assign_id"):
        if changes.get(key) == "":
            changes[key] = None
    harness = merged._replace(name=name, **changes)  # type: ignore[arg-type]
    if not harness.fresh:
        raise _bad(path, name, "fresh", "must not be empty")
    if (
        "prompt_via" not in values
        and base is not None
        and base.prompt_via == "stdin"
        and any(PROMPT in values.get(k, ()) for k in ("fresh", "resume"))  # type: ignore[operator]
    ):
        # An override written for a built-in that once took the prompt as an
        # argument (`… -- {prompt}`) keeps meaning that.
        harness = harness._replace(prompt_via="arg", stdin_fallback=True)
    for key, template in (("fresh", harness.fresh), ("resume", harness.resume)):
        given = key in values
        if (
            given
            and template is not None
            and harness.prompt_via == "arg"
            and PROMPT not in template
        ):
            raise _bad(path, name, key, f'needs a "{PROMPT}" element (or prompt_via = "stdin")')
        if template is not None and template.count(ARGS) > 1:
            raise _bad(path, name, key, f'"{ARGS}" may appear once')
        if template is not None and any(ARGS in p and p != ARGS for p in template):
            raise _bad(path, name, key, f'"{ARGS}" must be an element of its own')
    if harness.resume is not None and SESSION_ID not in harness.resume:
        raise _bad(path, name, "resume", f'needs a "{SESSION_ID}" element')
    if harness.assign_id and SESSION_ID not in harness.fresh:
        if "assign_id" in values:
            raise _bad(path, name, "fresh", f'needs a "{SESSION_ID}" element with assign_id')
        harness = harness._replace(assign_id=None)  # an override that dropped --session-id
    if not harness.assign_id and SESSION_ID in harness.fresh:
        # An override of claude's fresh argv without --session-id: no id to assign.
        raise _bad(path, name, "fresh", f'"{SESSION_ID}" needs assign_id = "uuid"')
    return harness


def load_registry(home: Path) -> Registry:
    """Built-ins overlaid with the user's harness files (tomllib; no daemon, read per use)."""
    import tomllib

    harnesses = dict(BUILTIN)
    errors: dict[str, Invalid] = {}
    sources = dict.fromkeys([*BUILTIN, "command"], BUILT_IN)
    for path in config_files(home):
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            errors["*"] = Invalid(f"{path}: cannot read harness file: {e}")
            sources["*"] = str(path)
            continue
        except RecursionError:
            errors["*"] = Invalid(f"{path}: cannot read harness file: nested too deeply")
            sources["*"] = str(path)
            continue
        tables = data.get("harness", {})
        unknown = set(data) - {"harness"}
        if unknown or not isinstance(tables, dict):
            found = ", ".join(clip(repr(k), 40) for k in sorted(unknown)[:5])
            errors["*"] = Invalid(f"{path}: expected only [harness.NAME] tables, found {found}")
            sources["*"] = str(path)
            continue
        for name, table in tables.items():
            sources[name] = str(path)
            try:
                harnesses[name] = _parse_entry(path, name, table, harnesses.get(name))
                errors.pop(name, None)
            except Invalid as e:
                errors[name] = e
    return Registry(harnesses, errors, sources)


def resolve(
    name: str, command: Sequence[str] | None, home: Path, args: Sequence[str] = ()
) -> Harness:
    """The adapter a session uses for its next turn, with the session's own `args`."""
    if name == "command":
        if not command:
            raise Invalid("the command harness needs a command", hint="spex new NAME -- CMD ARGS…")
        return command_harness(command)
    return load_registry(home).get(name)._replace(args=tuple(args))


COMMAND_NOTES = "the command after -- (spex new NAME -- CMD ARGS…), the prompt appended"


def describe(registry: Registry, name: str) -> dict[str, Any]:
    """The public view of one harness (`spex harness show --json`): its
    effective argv forms (after harnesses.toml), with `{args}` where a
    session's own arguments go, and where it comes from.

    Raises the harness's own Invalid when its entry is broken or unknown.
    """
    from spexsup.ids import SCHEMA_VERSION

    source = registry.sources.get(name, BUILT_IN)
    view: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "source": source,
        "builtin": name in BUILTIN or name == "command",
        "overrides_builtin": name in BUILTIN and source != BUILT_IN,
        "error": None,
    }
    if name == "command":
        return view | {
            "fresh": None,
            "resume": None,
            "prompt_via": "append",
            "stdin_fallback": False,
            "binary": None,
            "window": None,
            "id_pattern": None,
            "assign_id": None,
            "outcome": None,
            "strict": False,
            "timeout": None,
            "notes": COMMAND_NOTES,
        }
    h = registry.get(name)
    return view | {
        "fresh": shown(h.fresh),
        "resume": shown(h.resume) if h.resume is not None else None,
        "prompt_via": h.prompt_via,
        "stdin_fallback": h.stdin_fallback,
        "binary": h.binary,
        "window": h.window,
        "id_pattern": h.id_pattern,
        "assign_id": h.assign_id,
        "outcome": h.outcome,
        "strict": h.strict,
        "timeout": h.timeout,
        "notes": h.notes,
    }


def describe_all(registry: Registry) -> list[dict[str, Any]]:
    """Every harness's view, by name; a broken entry as `{name, source, error}`,
    and a harness file that could not be read at all as one with name null."""
    from spexsup.ids import SCHEMA_VERSION

    out: list[dict[str, Any]] = []
    for name in registry.names():
        try:
            out.append(describe(registry, name))
        except Invalid as e:
            out.append(
                {
                    "schema_version": SCHEMA_VERSION,
                    "name": name,
                    "source": registry.sources.get(name, BUILT_IN),
                    "error": e.line(),
                }
            )
    if "*" in registry.errors:
        out.append(
            {
                "schema_version": SCHEMA_VERSION,
                "name": None,
                "source": registry.sources["*"],
                "error": registry.errors["*"].line(),
            }
        )
    return out
