"""A turn's end as judged from its files (`spexsup.pane.report.judge`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spexsup import outcome as outcome_mod
    from spexsup.pane import check as verify_mod


class Judgement:
    """How a turn that exited with `rc` ended: its state, flags, and for a
    failure its named cause (`timed-out`, `strict`, `agent-error`,
    `usage-limit`, `not-found`, `no-login-shell`, `sandbox`) and message.

    A plain class, not a dataclass: `dataclasses` imports `inspect`, 10-20 ms
    on every turn's exit reporter."""

    __slots__ = (
        "cause",
        "error",
        "flags",
        "gone",
        "limit_reset",
        "outcome",
        "state",
        "survivors",
        "verification",
    )

    def __init__(
        self,
        state: str,
        flags: list[str] | None = None,
        cause: str | None = None,
        error: str | None = None,
        limit_reset: float | None = None,
    ) -> None:
        self.state = state
        self.flags = flags if flags is not None else []
        self.cause = cause
        self.error = error
        self.limit_reset = limit_reset
        # The conversation id a `conversation-gone` end found unknown.
        self.gone: str | None = None
        # The pids a time limit's SIGKILL left alive (`spexsup.pane.deadline`).
        self.survivors: list[int] = []
        # What the output's parser read (usage too), when it was read.
        self.outcome: outcome_mod.Outcome | None = None
        # How the turn's check ended, when it has one (`pane.verify`).
        self.verification: verify_mod.Result | None = None
