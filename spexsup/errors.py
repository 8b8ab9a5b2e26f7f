"""One root exception; each subclass carries its exit code (DESIGN §3).

Nothing in the package prints or exits: the CLI turns a `SpexError` into one
line on stderr (`spex: <message> (<hint>)`) and its exit code.
"""

from __future__ import annotations

# The longest message line: a 5 MB key in a config file is not echoed whole.
MAX_LINE = 1000


def clip(text: str, limit: int = 80) -> str:
    """`text`, or its start and `… (N chars)` when it is longer than `limit`."""
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(text)} chars)"


class SpexError(Exception):
    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(self.line())

    def line(self) -> str:
        """The message and its hint; a line longer than MAX_LINE keeps its
        start and its end (where the hint is) around `…`."""
        line = f"{self.message} ({self.hint})" if self.hint else self.message
        if len(line) <= MAX_LINE:
            return line
        cut = len(line) - MAX_LINE + 40
        return f"{line[: MAX_LINE * 2 // 3]}… ({cut} chars cut) …{line[-(MAX_LINE // 3 - 40) :]}"


class Failed(SpexError):
    """Attempted and failed."""

    exit_code = 1


class Invalid(SpexError):
    """Usage error or invalid input; nothing was changed."""

    exit_code = 2


class Refused(SpexError):
    """Refused by a precondition (unknown, busy, stopped, maintenance, exists)."""

    exit_code = 3


class TimedOut(SpexError):
    exit_code = 124


class UnknownSession(Refused):
    def __init__(self, name: str) -> None:
        super().__init__(f"no session named {name!r}", hint="see spex ls")


# What a command could not do but carried on without (a full disk kept a
# reader from settling turns): printed on stderr by the CLI, once each.
WARNINGS: list[str] = []


def warn(message: str) -> None:
    if message not in WARNINGS:
        WARNINGS.append(message)
