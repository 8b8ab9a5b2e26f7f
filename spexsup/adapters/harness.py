"""Harness adapters: how each agent CLI runs one headless turn.

An adapter says the argv of a fresh and of a resumed turn, how the prompt is
delivered, where the conversation id shows in the turn's output, its default
confirmation window, and which startup failures are retryable (nothing ran) or
fatal with a cause to name. This module is the adapter record and the
built-ins; `spexsup.adapters.registry` overlays them with the user's harnesses.toml.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from spexsup import lazyre
from spexsup.errors import Invalid
from spexsup.paths import own_python
from spexsup.record import Record

PROMPT = "{prompt}"
SESSION_ID = "{session_id}"
# The turn's model (`--model`); with none, a `{model}` word and the flag just
# before it are left out.
MODEL = "{model}"
# Where a session's own arguments (`spex new NAME --harness H -- ARGS…`) go.
ARGS = "{args}"

# Linux refuses a single argv string of 32 pages or more (MAX_ARG_STRLEN).
MAX_ARG_BYTES = 128 * 1024 - 1


class Fatal(Record):
    """Output that names why the harness cannot work: `cause` says it for the
    end's message; with `category`, the failed end's cause is that one (and
    the pattern's `message` group, if any, is the error line)."""

    pattern: str
    cause: str
    category: str | None = None


class Limit(Record):
    """A usage-limit message: `pattern` matches it; its group `reset` (if any)
    holds the reset time, read as `reset` says: "epoch" (unix seconds),
    "clock" (`7pm`, `9:30 AM`, `19:30`, optionally `(Area/City)`), "in"
    (`2 hours 5 minutes`, `5h`, `30m`), or "" (no time given)."""

    pattern: str
    reset: str = ""


RESET_KINDS = ("", "epoch", "clock", "in")


class Harness(Record):
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
    # The structured-output parser for outcome flags (spexsup.adapters.outcome.PARSERS).
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
    # How a turn's `--model` reaches the CLI: `model_flag M` where the
    # session's arguments go, unless the argv spells `{model}` itself.
    model_flag: str | None = None
    # The model a turn runs when none is given (None: the CLI's own), and the
    # models to fall back to, in order (`--fallback-model`, see pane.fallback).
    model: str | None = None
    fallback: tuple[str, ...] = ()
    # The command that checks a turn's work after the harness exits 0
    # (`--verify`, DESIGN §16), as an argv; () for none. Its time limit.
    verify: tuple[str, ...] = ()
    verify_timeout: float | None = None
    # Sandboxed sessions (DESIGN §19): whether its sessions are sandboxed
    # unless they say otherwise; the state it writes besides the session's
    # cwd (`~` and `$VAR` expanded, a path whose variable is unset skipped);
    # the hosts it reaches its model on (`host`, `host:port`, `*.domain`).
    sandbox: bool = False
    sandbox_write: tuple[str, ...] = ()
    model_hosts: tuple[str, ...] = ()
    # State files it rewrites by a rename in a directory the sandbox keeps
    # read-only, each `(VAR, DIR, FILE)`: unless the session sets VAR, the
    # sandbox sets VAR=DIR, which makes the CLI look for FILE in DIR, and
    # shows FILE there (spexsup.adapters.sandbox.relocate).
    sandbox_relocate: tuple[tuple[str, str, str], ...] = ()
    # Seconds between its launches in a home when neither `--stagger` nor
    # config.toml's `stagger` says (spexsup.adapters.stagger); None: none.
    stagger: float | None = None

    def takes_model(self) -> bool:
        if self.prompt_via == "append":
            return False  # the command harness's argv is the user's, verbatim
        return self.model_flag is not None or any(
            MODEL in part for part in (*self.fresh, *(self.resume or ()))
        )

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
        self,
        prompt: bytes,
        session_id: str | None,
        assigned: str | None = None,
        model: str | None = None,
    ) -> tuple[list[bytes], bool]:
        """The turn's argv and whether the prompt goes on stdin; a fresh turn of
        a harness that takes a chosen id gets `assigned` as its {session_id};
        `model` (else the harness's own) goes in as `{model}` or `model_flag`.

        Raises Invalid when the prompt fits neither argv nor stdin, or a model
        is given to a harness that has no way to pass one.
        """
        model = model or self.model
        if model is not None and not self.takes_model():
            raise Invalid(
                f"harness {self.name} has no way to pass a model",
                hint="put it in the harness's argv, or give the harness model_flag or {model}"
                " in harnesses.toml",
            )
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
        spelled = any(MODEL in p for p in parts)
        out: list[bytes] = []
        for i, part in enumerate([*parts, None]):
            if i == at:
                if model is not None and not spelled and self.model_flag is not None:
                    out.extend((self.model_flag.encode(), os.fsencode(model)))
                out.extend(os.fsencode(a) for a in self.args)
            if part is None:
                break
            if part == PROMPT:
                if not on_stdin:
                    out.append(prompt)
            elif MODEL in part and model is None:
                if i > 0 and parts[i - 1].startswith("-") and out:
                    out.pop()  # its flag: `--model {model}` with no model is neither
            else:
                word = part.replace(SESSION_ID, session_id or "")
                out.append(os.fsencode(word.replace(MODEL, model or "")))
        return out, on_stdin


_MODEL_RE = lazyre.compile(r"[^\s,\x00-\x1f\x7f]{1,200}")


def parse_model(text: str, option: str = "--model") -> str:
    """A model name as a CLI takes it (`sonnet`, `openai/gpt-5`, `qwen3:8b`)."""
    if not _MODEL_RE.fullmatch(text):
        raise Invalid(
            f"invalid {option} {text!r}", hint="a model name: 1-200 characters, no space or comma"
        )
    return text


# A verify command given as one string runs as `sh -c STRING`.
VERIFY_SHELL = ("sh", "-c")
VERIFY_HINT = "a command line such as 'make test' (run by sh -c), or an argv list"


def verify_argv(value: object, where: str) -> tuple[str, ...]:
    """A verify command as written (`--verify`, `verify = …` in a harness or
    `.spexsup.toml`): a string, run by `sh -c`, or an argv list of strings.
    An empty string or list is no check. Invalid on anything else, naming
    `where`."""
    if isinstance(value, str):
        _verify_words(where, (value,))
        return (*VERIFY_SHELL, value) if value.strip() else ()
    if isinstance(value, list | tuple) and all(isinstance(w, str) and w for w in value):
        _verify_words(where, value)
        return tuple(value)
    raise Invalid(
        f"{where}: verify must be a string or a list of non-empty strings", hint=VERIFY_HINT
    )


def _verify_words(where: str, words: Sequence[str]) -> None:
    """No NUL (the turn dir's argv is NUL-separated) and valid UTF-8 (a
    command line's undecodable bytes arrive as surrogates, which no JSON
    document, database row or meta.json can hold)."""
    for w in words:
        if "\0" in w:
            raise Invalid(f"{where}: a verify command must not contain a NUL", hint=VERIFY_HINT)
        try:
            w.encode()
        except UnicodeEncodeError:
            raise Invalid(
                f"{where}: a verify command must be valid UTF-8", hint=VERIFY_HINT
            ) from None


def shown_verify(argv: Sequence[str]) -> str:
    """A verify argv as a person wrote it: the string of `sh -c STRING`, else
    the argv shell-quoted."""
    if tuple(argv[:2]) == VERIFY_SHELL and len(argv) == 3:
        return argv[2]
    import shlex

    return shlex.join(argv)


def parse_models(text: str, option: str = "--fallback-model") -> tuple[str, ...]:
    """`A,B`: the models to fall back to, in order; "" is none."""
    return tuple(parse_model(m.strip(), option) for m in text.split(",")) if text else ()


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


_DEMO = tuple(own_python("spexsup.adapters.demo_agent"))
# The spacing of opencode's launches in a home (see its entry below).
OPENCODE_STAGGER = 2.0

# Conversation-store and lock errors that mean nothing ran: safe to retry.
_LOCKED = (r"database is locked", r"SQLITE_BUSY")
# opencode's error log on stderr: `run --format json` says only `Unexpected
# server error` of a misspelled model; its log names it.
_OPENCODE_LOG = ("--print-logs", "--log-level", "ERROR")

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
        model_flag="--model",
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
        sandbox_write=("~/.claude", "~/.claude.json", "$CLAUDE_CONFIG_DIR", "~/.cache/claude"),
        model_hosts=("api.anthropic.com", "statsig.anthropic.com", "claude.ai"),
        # claude (2.1.x) saves ~/.claude.json under a lock dir beside it
        # (~/.claude.json.lock) through a temp file renamed over it; in a
        # read-only ~ every save failed (EROFS, logged only in --debug) and
        # nothing of it persisted. With CLAUDE_CONFIG_DIR=~/.claude (the
        # config dir it already uses) it keeps the file as
        # $CLAUDE_CONFIG_DIR/.claude.json, and on the rename's EBUSY writes
        # it in place.
        sandbox_relocate=(("CLAUDE_CONFIG_DIR", "~/.claude", "~/.claude.json"),),
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
        model_flag="--model",
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
        sandbox_write=("$CODEX_HOME", "~/.codex"),
        model_hosts=("api.openai.com", "chatgpt.com", "auth.openai.com"),
    ),
    "opencode": Harness(
        name="opencode",
        fresh=("opencode", "run", "--format", "json", *_OPENCODE_LOG),
        resume=("opencode", "run", "--format", "json", *_OPENCODE_LOG, "--session", SESSION_ID),
        prompt_via="stdin",
        window=3.0,
        id_pattern=r'"sessionID"\s*:\s*"(ses_[A-Za-z0-9]+)"',
        retryable=_LOCKED,
        fatal=(
            # opencode 1.18's log: `error="ProviderModelNotFoundError: Model not
            # found: fake/fake-modle. Did you mean: fake-model?"`.
            Fatal(
                r"ProviderModelNotFoundError: (?P<message>Model not found: [^\"\\\n]*)",
                "opencode does not know the model",
                "model-not-found",
            ),
            Fatal(
                r"ProviderModelNotFound|No provider", "opencode has no model provider configured"
            ),
        ),
        # Not `ProviderModelNotFoundError` (a model it does not know), in its log.
        gone=(r"Session not found|(?<!Model)NotFoundError",),
        binary="opencode",
        model_flag="--model",
        outcome="opencode",
        # Every `opencode run` opens one SQLite database (and the first
        # migrates it); started at once, ten of them lose legs to its locks and
        # to a migration raced (issue 42, item 4): one start each 2 s.
        stagger=OPENCODE_STAGGER,
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
        # Its XDG base directories, where the environment moves them.
        sandbox_write=(
            "~/.local/share/opencode",
            "~/.config/opencode",
            "~/.cache/opencode",
            "~/.local/state/opencode",
            "$XDG_DATA_HOME/opencode",
            "$XDG_CONFIG_HOME/opencode",
            "$XDG_CACHE_HOME/opencode",
            "$XDG_STATE_HOME/opencode",
        ),
        model_hosts=(
            "api.anthropic.com",
            "api.openai.com",
            "opencode.ai",
            "models.dev",
            "openrouter.ai",
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
        model_flag="--model",
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
        sandbox_write=("~/.pi", "$PI_CODING_AGENT_DIR"),
        model_hosts=("api.anthropic.com", "api.openai.com", "chatgpt.com", "openrouter.ai"),
    ),
}
