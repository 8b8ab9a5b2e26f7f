"""A wake's request: one frozen value, built once at the door.

`spex wake` (and `resume -- PROMPT`), a fan-out's legs, a schedule's
firing and the queue's dequeuer each build a `WakeRequest` and hand it to
`turn.front.wake`; nothing below re-reads a loose option. What the request
leaves unsaid (None) is resolved once, by `turn.plan.resolve`.

Its JSON forms are the ones the store and the wave documents have always
held (DESIGN §3 queue `options`, §6 `turn_options`): a prompt queued, or a
wave recorded, before the request existed reads back as the same request.
A Record (spexsup.record), not a dataclass: `spex wake` never imports `dataclasses`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from enum import StrEnum
from pathlib import Path
from typing import Any

from spexsup.record import Record


class Limits(Record):
    """A wake's own per-turn rules: `--timeout` (seconds), `--strict`,
    `--on-limit`, `--model` and `--fallback-model`; the session's and then
    the harness's apply where these are not given (`turn.plan.resolve`).
    Its tuple is the turn options a key's fingerprint holds (`keys`)."""

    timeout: float | None = None
    strict: bool = False
    on_limit: str | None = None
    model: str | None = None
    fallback: tuple[str, ...] | None = None
    # Not admission's: the least time between launches of the turn's harness
    # (`spexsup.adapters.stagger`; 0: none; None: config.toml's `stagger`).
    stagger: float | None = None
    # USD: the turn is stopped once its known spend reaches it (pane.budget).
    budget: float | None = None
    # `--verify CMD` as an argv (None: the session's, the repository's, the
    # harness's; (): `--no-verify`), and `--verify-timeout` (seconds).
    verify: tuple[str, ...] | None = None
    verify_timeout: float | None = None
    # `--no-sandbox`: this one turn outside the session's sandbox, which
    # only a session sandboxed as `optional` allows (DESIGN §19).
    unsandboxed: bool = False


class Wave(Record):
    """A fan-out leg's wave, and the most legs of it that may run at once
    (None: no limit of its own)."""

    id: str
    max_running: int | None = None
    # `fanout --budget` (USD): a leg queued once the wave's known spend
    # reached it is skipped, cause `budget` (see `wavedoc.over_budget`).
    budget: float | None = None


class QueuePolicy(StrEnum):
    """What a wake does when its turn cannot start now."""

    # Refused (busy, leased, at a running limit): plain `spex wake`.
    NEVER = "never"
    # Kept in the queue while the session is busy or leased, or a running
    # limit is reached (`wake --queue`, a schedule of overlap `queue`).
    BUSY = "busy"
    # A fan-out leg: only a running limit queues; busy or leased refuses.
    AT_LIMIT = "at-limit"
    # Neither flag given: the session's `queue`, else config.toml's
    # (BUSY or NEVER; see `turn.plan.queueing`).
    INHERIT = "inherit"


class WakeRequest(Record):
    """Everything a wake asks, as its caller said it (None: not said)."""

    name: str
    prompt: bytes
    window: float | None = None
    fresh: bool = False
    # Replace whatever runs in the pane (vim, a REPL…).
    force: bool = False
    limits: Limits = Limits()
    # `--key`: idempotent (see `turn.keys`).
    key: str | None = None
    queue: QueuePolicy = QueuePolicy.NEVER
    # `--after SESSION` (`--after-any`): queued until that session's turn ends.
    after: str | None = None
    after_any: bool = False
    # A fan-out leg's wave (its turn is linked to it at admission).
    wave: Wave | None = None
    # Set by the dequeuer: the queue entry this wake launches.
    queued: str | None = None

    def queue_options(self) -> dict[str, Any]:
        """The queue row's `options` (DESIGN §3): what is given, nothing else
        (False and None left out, but `stagger` 0 and `verify` [] kept: they
        beat a default). The turn `after` waits for is the row's own
        column (`after_turn`)."""
        limits = self.limits
        out: dict[str, Any] = {"window": self.window, "fresh": self.fresh}
        out.update(timeout=limits.timeout, strict=limits.strict, on_limit=limits.on_limit)
        out.update(model=limits.model)
        if limits.fallback is not None:
            out["fallback"] = list(limits.fallback)
        out.update(budget=limits.budget)
        kept = {k: v for k, v in out.items() if v not in (None, False)}
        if limits.stagger is not None:
            kept["stagger"] = limits.stagger  # 0 too: "no spacing" beats config.toml's
        if limits.verify is not None:
            kept["verify"] = list(limits.verify)  # [] too: --no-verify
        if limits.verify_timeout is not None:
            kept["verify_timeout"] = limits.verify_timeout
        if self.after is not None:
            kept.update(after=self.after, after_any=self.after_any)
        if self.wave is not None:
            kept.update(wave=self.wave.id, wave_max=self.wave.max_running)
            if self.wave.budget is not None:
                kept["wave_budget"] = self.wave.budget
        return kept

    @classmethod
    def from_queue(
        cls, name: str, prompt: bytes, options: dict[str, Any], entry: str
    ) -> WakeRequest:
        """The wake a queue row launches (any row: its format never changed),
        as entry `entry` (its `after`, once the dequeuer has settled it, is
        only a record: `turn.wake.start` does not read it)."""
        fallback = options.get("fallback")
        verify = options.get("verify")
        limits = Limits(
            options.get("timeout"),
            bool(options.get("strict")),
            options.get("on_limit"),
            options.get("model"),
            tuple(fallback) if fallback is not None else None,
            options.get("stagger"),
            options.get("budget"),
            tuple(verify) if verify is not None else None,
            options.get("verify_timeout"),
        )
        wave = None
        if options.get("wave") is not None:
            wave = Wave(options["wave"], options.get("wave_max"), options.get("wave_budget"))
        return cls(
            name,
            prompt,
            window=options.get("window"),
            fresh=bool(options.get("fresh")),
            limits=limits,
            after=options.get("after"),
            after_any=bool(options.get("after_any")),
            wave=wave,
            queued=entry,
        )

    def turn_options(self) -> dict[str, Any]:
        """A wave document's `turn_options` (DESIGN §6, §31): the request every
        leg runs under, each option None (False for strict, fresh and
        unsandboxed) where not given: everything that shapes a leg's turn
        but its session, key, wave and queue policy (the wave's own fields),
        so `from_turn_options` gives the same request back and a retry
        repeats it (tests/test_plan.py holds every field to that)."""
        limits = self.limits
        return {
            "fresh": self.fresh,
            "window": self.window,
            "timeout": limits.timeout,
            "strict": limits.strict,
            "on_limit": limits.on_limit,
            "model": limits.model,
            "fallback": list(limits.fallback) if limits.fallback is not None else None,
            "stagger": limits.stagger,
            "verify": list(limits.verify) if limits.verify is not None else None,
            "verify_timeout": limits.verify_timeout,
            "budget": limits.budget,
            "unsandboxed": limits.unsandboxed,
        }

    @classmethod
    def from_turn_options(cls, name: str, prompt: bytes, recorded: dict[str, Any]) -> WakeRequest:
        """The request a wave's `turn_options` recorded (`ids.recorded_options`
        fills what an older document lacks)."""
        fallback = recorded.get("fallback")
        verify = recorded.get("verify")
        limits = Limits(
            recorded.get("timeout"),
            bool(recorded.get("strict")),
            recorded.get("on_limit"),
            recorded.get("model"),
            tuple(fallback) if fallback is not None else None,
            recorded.get("stagger"),
            recorded.get("budget"),
            tuple(verify) if verify is not None else None,
            recorded.get("verify_timeout"),
            bool(recorded.get("unsandboxed")),
        )
        fresh = bool(recorded.get("fresh"))
        return cls(name, prompt, window=recorded.get("window"), fresh=fresh, limits=limits)


class Hooks(Record):
    """How a conductor (a fan-out) rides along a wake: not part of what is
    asked, so never stored. `gate` (a concurrency limit) is held around
    admission and launch; `on_admitted` hears the turn id once it exists;
    `check_abort` is called while a staggered launch waits (it raises to
    end the wake). `tree_start` gives the work tree's record at the start
    (`git-start`'s document) that the conductor's legs share
    (`spexsup.pane.snapshot.SharedStarts.doc`): the turn's wrapper then
    takes none of its own."""

    gate: AbstractContextManager[object] | None = None
    on_admitted: Callable[[str], None] | None = None
    check_abort: Callable[[], None] | None = None
    tree_start: Callable[[Path], Mapping[str, Any] | None] | None = None


NO_HOOKS = Hooks()
