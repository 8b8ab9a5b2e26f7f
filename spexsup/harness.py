"""Harness adapters: how each agent CLI runs one headless turn.

An adapter says the argv of a fresh and of a resumed turn, how the prompt is
delivered, where the conversation id shows in the turn's output, its default
confirmation window, and which startup failures are retryable (nothing ran) or
fatal with a cause to name. Built-ins can be overridden or extended in TOML.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from spexsup.errors import Invalid

PROMPT = "{prompt}"
SESSION_ID = "{session_id}"

# Linux refuses a single argv string of 32 pages or more (MAX_ARG_STRLEN).
MAX_ARG_BYTES = 128 * 1024 - 1


@dataclass(frozen=True)
class Fatal:
    pattern: str
    cause: str


@dataclass(frozen=True)
class Harness:
    name: str
    fresh: tuple[str, ...]
    resume: tuple[str, ...] | None = None
    # "arg": the prompt is the argv element spelled {prompt}; "stdin": it is
    # fed on stdin. A prompt too big for argv falls back to stdin when
    # `stdin_fallback`, else the wake is refused.
    prompt_via: str = "arg"
    stdin_fallback: bool = False
    window: float | None = None
    id_pattern: str | None = None
    retryable: tuple[str, ...] = ()
    fatal: tuple[Fatal, ...] = ()
    binary: str | None = None
    version_args: tuple[str, ...] = ("--version",)
    notes: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)

    def argv(self, prompt: bytes, session_id: str | None) -> tuple[list[bytes], bool]:
        """The turn's argv and whether the prompt goes on stdin.

        Raises Invalid when the prompt fits neither argv nor stdin.
        """
        template = self.resume if session_id and self.resume else self.fresh
        on_stdin = self.prompt_via == "stdin"
        if not on_stdin and len(prompt) > MAX_ARG_BYTES:
            if not self.stdin_fallback:
                raise Invalid(
                    f"the prompt is {len(prompt)} bytes, too big for {self.name}'s argv",
                    hint=f"at most {MAX_ARG_BYTES} bytes for this harness",
                )
            on_stdin = True
        out: list[bytes] = []
        for part in template:
            if part == PROMPT:
                if not on_stdin:
                    out.append(prompt)
            else:
                out.append(part.replace(SESSION_ID, session_id or "").encode())
        return out, on_stdin


def command_harness(command: Sequence[str]) -> Harness:
    """`spex new NAME -- CMD…`: CMD with the prompt appended as one last argument."""
    return Harness(name="command", fresh=(*command, PROMPT), stdin_fallback=True)


_DEMO = (sys.executable, "-m", "spexsup.demo_agent")

BUILTIN: dict[str, Harness] = {
    "demo": Harness(
        name="demo",
        fresh=(*_DEMO, PROMPT),
        resume=(*_DEMO, "--resume", SESSION_ID, PROMPT),
        stdin_fallback=True,
        window=1.0,
        id_pattern=r"conversation: (demo-[0-9a-f]+)",
        fatal=(Fatal(r"Please run /login", "the demo agent is not logged in"),),
        notes="bundled agent simulator",
    ),
    "claude": Harness(
        name="claude",
        fresh=("claude", "-p", "--output-format", "stream-json", "--verbose", PROMPT),
        resume=(
            "claude",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--resume",
            SESSION_ID,
            PROMPT,
        ),
        stdin_fallback=True,
        id_pattern=r'"session_id"\s*:\s*"([0-9a-fA-F-]{8,})"',
        retryable=(r"database is locked", r"SQLITE_BUSY"),
        fatal=(
            Fatal(
                r"Please run /login|Not logged in", "claude is not logged in (run claude /login)"
            ),
            Fatal(r"Invalid API key", "claude has an invalid API key"),
            Fatal(
                r"No conversation found with session ID",
                "claude does not know this conversation id (wake with --fresh)",
            ),
        ),
        binary="claude",
    ),
    "codex": Harness(
        name="codex",
        fresh=("codex", "exec", "--json", "--skip-git-repo-check", PROMPT),
        resume=("codex", "exec", "--json", "--skip-git-repo-check", "resume", SESSION_ID, PROMPT),
        stdin_fallback=True,
        id_pattern=r'"(?:thread_id|session_id|conversation_id)"\s*:\s*"([0-9a-fA-F-]{8,})"',
        retryable=(r"database is locked", r"SQLITE_BUSY"),
        fatal=(
            Fatal(r"Not inside a trusted directory", "codex refuses an untrusted directory"),
            Fatal(r"Not logged in|Please run .?codex login", "codex is not logged in"),
            Fatal(r"Invalid API key|invalid_api_key", "codex has an invalid API key"),
        ),
        binary="codex",
    ),
    "opencode": Harness(
        name="opencode",
        fresh=("opencode", "run", "--format", "json", PROMPT),
        resume=("opencode", "run", "--format", "json", "--session", SESSION_ID, PROMPT),
        id_pattern=r'"sessionID"\s*:\s*"(ses_[A-Za-z0-9]+)"',
        retryable=(r"database is locked", r"SQLITE_BUSY"),
        fatal=(Fatal(r"No provider|ProviderModelNotFound", "opencode has no model provider"),),
        binary="opencode",
    ),
    "pi": Harness(
        name="pi",
        fresh=("pi", "-p", PROMPT),
        resume=("pi", "-p", "--session", SESSION_ID, PROMPT),
        id_pattern=r'"(?:sessionId|session_id)"\s*:\s*"([^"]+)"',
        retryable=(r"database is locked",),
        fatal=(
            Fatal(r"No API key found", "pi has no API key (run pi, then /login)"),
            Fatal(r"Use /login", "pi is not logged in (run pi, then /login)"),
        ),
        binary="pi",
    ),
}

NAMES = (*BUILTIN, "command")


def validate_name(name: str) -> str:
    if name not in NAMES:
        raise Invalid(f"unknown harness {name!r}", hint=f"one of: {', '.join(NAMES)}")
    return name


def resolve(name: str, command: Sequence[str] | None) -> Harness:
    """The adapter a session uses for its next turn."""
    if name == "command":
        if not command:
            raise Invalid("the command harness needs a command", hint="spex new NAME -- CMD ARGS…")
        return command_harness(command)
    if name in BUILTIN:
        return BUILTIN[name]
    raise Invalid(f"unknown harness {name!r}", hint=f"one of: {', '.join(NAMES)}")


def find_session_id(harness: Harness, output: bytes) -> str | None:
    """The conversation id in a turn's output: the last match wins."""
    if not harness.id_pattern:
        return None
    text = output.decode("utf-8", "replace")
    matches = re.findall(harness.id_pattern, text)
    return str(matches[-1]) if matches else None
