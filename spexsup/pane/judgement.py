"""A turn's end as judged from its files (`spexsup.pane.report.judge`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from spexsup.adapters import outcome as outcome_mod
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


def verified(turn_dir: Path, verdict: Judgement, meta: dict[str, Any]) -> None:
    """A complete end as its check has it: flag `verified` when the check
    passed, else failed with cause `verify` (its rc and the last lines of
    verify.log) or `verify-timeout`; a turn without a check stays as it is."""
    from spexsup.pane import check, turndir
    from spexsup.states import FAILED, VERIFIED, VERIFY, VERIFY_TIMEOUT

    argv = check.command(turn_dir)
    if not argv and meta.get("verify"):
        # The launcher wrote a check the turn dir no longer holds (something
        # truncated or removed it): never a complete end nobody checked.
        verdict.state, verdict.cause = FAILED, VERIFY
        verdict.error = "its check was never run: the turn dir's verify file is gone or garbled"
        return
    if not argv:
        return
    checked = check.result(turn_dir)
    verdict.verification = checked
    if checked.rc == 0 and not checked.timed_out:
        verdict.flags = [*verdict.flags, VERIFIED]
        return
    shown = check.shown_check(argv)
    verdict.state = FAILED
    said = check.tail(turn_dir / check.LOG)
    if checked.timed_out:
        limit = meta.get("verify_timeout")
        spent = f" ({check.span(limit)})" if isinstance(limit, int | float) else ""
        verdict.cause = VERIFY_TIMEOUT
        verdict.error = f"its check `{shown}` ran past its time limit{spent}"
        verdict.survivors = turndir.survivors(turn_dir)
    elif checked.rc is None:
        verdict.cause = VERIFY
        verdict.error = f"its check `{shown}` never finished"
    else:
        verdict.cause = VERIFY
        verdict.error = f"its check `{shown}` failed (rc {checked.rc})"
    if said:
        verdict.error += f": {said}"
