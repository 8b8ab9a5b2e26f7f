"""One root exception; each subclass carries its exit code (DESIGN §3).

Nothing in the package prints or exits: the CLI turns a `SpexError` into one
line on stderr (`spex: <message> (<hint>)`) and its exit code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the exit reporter imports this module: nothing at run time
    from collections.abc import Sequence

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
    """No session of that name. When one of the `known` names is close, the
    hint names it (`did you mean 'api'?`), as for a mistyped command or option."""

    def __init__(self, name: str, known: Sequence[str] = ()) -> None:
        close: list[str] = []
        if known and len(name) <= 64:  # a valid name: a 5 MB word is no typo
            import difflib  # only when a name is unknown

            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "see spex ls"
        super().__init__(f"no session named {clip(repr(name))}", hint=hint)


class SessionBusy(Refused):
    """A turn runs: the session takes no other one until it ends. An
    `orphaned` one (its pane gone, its agent running on as `survivors`) is
    named so: only a stop ends it."""

    def __init__(self, session: str, turn: str | None, survivors: Sequence[int] = ()) -> None:
        if survivors:
            pids = ", ".join(map(str, survivors))
            super().__init__(
                f"session {session!r} is busy with turn {turn}, whose agent (pid {pids})"
                " runs on without its pane",
                hint=f"spex stop {session} ends it",
            )
        else:
            super().__init__(
                f"session {session!r} is busy with turn {turn}",
                hint=f"spex wait {session}, or spex stop {session}",
            )
        self.session = session
        self.turn = turn


class AtLimit(Refused):
    """A running-turn limit is reached (`max_running`, `fanout --max-running`):
    a wake with `--queue` waits for a turn to end, one without is refused."""

    def __init__(self, limit: int, running: str, setting: str) -> None:
        super().__init__(
            f"{limit} {running} already running, the limit ({setting})",
            hint="give --queue to launch it when one ends",
        )
        self.limit = limit
        self.waits = f"a free slot ({setting})"


class OverBudget(AtLimit):
    """The home's known spend today has reached config.toml's `budget_day`:
    a wake with `--queue` waits for the next day, one without is refused."""

    def __init__(self, spent: str, budget: str) -> None:
        Refused.__init__(
            self,
            f"today's known spend {spent} has reached budget_day ({budget})",
            hint="give --queue to launch it tomorrow, or raise budget_day in config.toml",
        )
        self.limit = 0
        self.waits = f"tomorrow (budget_day {budget})"


class SessionStopped(Refused):
    def __init__(self, session: str) -> None:
        super().__init__(f"session {session!r} is stopped", hint=f"spex resume {session}")
        self.session = session


class TurnStopped(Refused):
    """A stop (or rm) aborted the turn while it was starting."""

    def __init__(self, session: str, turn: str, when: str = "before it started") -> None:
        by = "(spex stop or rm) " if when == "before it started" else ""
        super().__init__(
            f"turn {turn} of {session!r} was stopped {by}{when}", hint=f"spex show {session}"
        )
        self.session = session
        self.turn = turn


class UnderLease(Refused):
    """A maintenance lease holds the session: only its bearer may change it."""

    def __init__(self, session: str, epoch: int, state: str, holder: int | None) -> None:
        who = f"held by pid {holder}" if holder else "its holder is gone"
        super().__init__(
            f"session {session!r} is under maintenance lease {epoch} ({state}, {who})",
            hint="spex maint ls",
        )
        self.session = session
        self.epoch = epoch


# What a command could not do but carried on without (a full disk kept a
# reader from settling turns): printed on stderr by the CLI, once each.
WARNINGS: list[str] = []


def warn(message: str) -> None:
    if message not in WARNINGS:
        WARNINGS.append(message)


def unknown_key(where: str, key: str, known: Sequence[str], table: str | None = None) -> str:
    """Warn of a key no reader knows (a typo must not pass unseen, nor cost the
    rest of the file): `where: unknown key 'windw' at the top level, ignored (did
    you mean 'window'?)`, else the known keys. Returns the message."""
    import difflib  # only when a file has such a key

    # A 5 MB key is no typo of a known one; SequenceMatcher need not see it.
    close = difflib.get_close_matches(key, known, n=1) if len(key) <= 200 else []
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
    place = f"in {table}" if table else "at the top level"
    message = f"{where}: unknown key {clip(repr(key))} {place}, ignored ({hint})"
    warn(message)
    return message
