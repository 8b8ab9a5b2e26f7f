"""The plan of a fan-out: which sessions get which prompt, under which rules.

`spex fanout` and `spex up --revive` decide here and the CLI renders what
they decided. A plan is one of three kinds: named sessions (or --all,
--match), a retry of a wave's legs that did not succeed (the first attempt's
rules, but what is given now wins), or best of N (N new worktree sessions).
Every refusal happens before any session is woken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from spexsup import ids
from spexsup.adapters.sandbox import Policy
from spexsup.conductors import waves
from spexsup.core.sessions import Session, no_harness
from spexsup.core.spex import Spex
from spexsup.errors import Invalid
from spexsup.record import Record
from spexsup.turn.admit import parse_on_limit
from spexsup.turn.request import Limits, WakeRequest
from spexsup.turn.revive import revivals

if TYPE_CHECKING:
    # Best of N only: a plain fan-out imports neither (dataclasses, git, the
    # worktree code: about 15 ms of every wave's start, before its first leg).
    from spexsup.core.worktree import Request, Setup

# What `spex up --revive` says when no -m is given.
REVIVE_PROMPT = (
    "Your previous turn was interrupted: the machine restarted while you were working."
    " Check the state of your work and continue where you left off."
)


class Given(Record):
    """The per-turn rules given on the command line (None: not given)."""

    window: float | None = None
    timeout: float | None = None
    strict: bool | None = None
    on_limit: str | None = None
    model: str | None = None
    fallback: tuple[str, ...] | None = None
    stagger: float | None = None
    # `--verify CMD` as an argv (() for --no-verify) and `--verify-timeout`.
    verify: tuple[str, ...] | None = None
    verify_timeout: float | None = None
    # `--fresh`: every leg starts a new conversation (`--no-fresh`: a retry
    # resumes them though its wave was fresh); `--key`: each leg its own.
    fresh: bool | None = None
    key: str | None = None


class Plan(Record):
    targets: list[str]
    # What every leg asks (its name unused: each leg's is its session).
    wake: WakeRequest
    retry_of: str | None = None
    # Best of N: the legs' names and the worktree request they were made from.
    best_of: tuple[str, ...] = ()
    request: Request | None = None
    # Set when there is nothing to launch, saying why (the plan is not an error).
    nothing: str | None = None


def _check(given: Given) -> None:
    """Refuse a malformed rule before anything is read or made."""
    if given.on_limit is not None:
        parse_on_limit(given.on_limit)


T = TypeVar("T")


def _either(mine: T | None, theirs: T | None) -> T | None:
    """What is given now, else what the first attempt ran under."""
    return mine if mine is not None else theirs


def _request(given: Given, prompt: bytes) -> WakeRequest:
    """The legs' request, from the rules given (None: not given)."""
    limits = Limits(
        given.timeout,
        bool(given.strict),
        given.on_limit,
        model=given.model,
        fallback=given.fallback,
        stagger=given.stagger,
        verify=given.verify,
        verify_timeout=given.verify_timeout,
    )
    return WakeRequest("", prompt, given.window, bool(given.fresh), limits=limits, key=given.key)


def to_sessions(
    spex: Spex,
    names: Sequence[str],
    prompt: Callable[[], bytes],
    given: Given,
    *,
    all_: bool = False,
    match: str | None = None,
) -> Plan:
    """One prompt to the sessions named (or all, or those matching a glob)."""
    _check(given)
    targets = waves.select_sessions(spex, names, all_=all_, match=match)
    return Plan(targets, _request(given, prompt()))


def retry(spex: Spex, wave: str, names: Sequence[str], given: Given) -> Plan:
    """The legs of `wave` (a full id, prefix, `last` or `last~N`) that did not
    succeed, under the rules they first ran with, except those given now."""
    _check(given)
    for n in names:
        ids.validate_name(n)
    wave = ids.resolve_wave(spex.store.db, wave)
    targets, prompt, recorded = waves.retry_plan(spex, wave, names)
    first = WakeRequest.from_turn_options("", prompt, recorded)
    now = _request(given, prompt)

    limits = Limits(
        _either(given.timeout, first.limits.timeout),
        bool(given.strict) if given.strict is not None else first.limits.strict,
        _either(given.on_limit, first.limits.on_limit),
        _either(given.model, first.limits.model),
        _either(given.fallback, first.limits.fallback),
        _either(given.stagger, first.limits.stagger),
        verify=_either(given.verify, first.limits.verify),
        verify_timeout=given.verify_timeout or first.limits.verify_timeout,
    )
    # Everything else the legs first ran under, as recorded: a retry of a
    # `--fresh` wave starts new conversations again (DESIGN §31).
    limits = limits._replace(budget=first.limits.budget, unsandboxed=first.limits.unsandboxed)
    request = now._replace(
        window=_either(given.window, first.window),
        fresh=first.fresh if given.fresh is None else given.fresh,
        limits=limits,
    )
    nothing = None if targets else f"nothing to retry: no leg of wave {wave} failed"
    return Plan(targets, request, retry_of=wave, nothing=nothing)


class BestOf(Record):
    """`--worktrees N`: N new worktree sessions, named PREFIX-1…N (None: the
    repository's name), of `harness`, each with the `sandbox` policy when given."""

    legs: int
    prefix: str | None = None
    harness: str | None = None
    sandbox: Policy | None = None


def best_of(
    spex: Spex,
    best: BestOf,
    request: Request,
    prompt: Callable[[], bytes],
    given: Given,
    *,
    confirm: Callable[[Setup], bool] | None = None,
    made: Callable[[Session], None] | None = None,
) -> Plan:
    """The `best` legs, new worktree sessions of its harness (the caller's
    config.toml's default_harness when none is given; never the demo
    simulator by default, as `spex new`), each told the same prompt. `made`
    hears each leg once it exists."""
    from spexsup.conductors import bestof

    _check(given)
    if best.harness is None:
        raise no_harness(spex.home, command=False)
    text = prompt()
    legs = bestof.leg_names(best.prefix or bestof.default_prefix(request.repo), best.legs)
    sessions = bestof.create_legs(
        spex,
        legs,
        request,
        harness=best.harness,
        window=given.window,
        confirm=confirm,
        sandbox=best.sandbox,
    )
    for leg in sessions:
        if made is not None:
            made(leg)
    return Plan(legs, _request(given, text), best_of=tuple(legs), request=request)


def check_best_of_options(
    count: int | None,
    where: tuple[str | None, str | None, str | None],
    *,
    prefix: str | None,
    harness: str | None,
) -> None:
    """--repo, --base, --prefix, --harness and --worktree-dir belong to
    --worktrees (`count`); `where` is --base, --repo and --worktree-dir, the
    worktree request's own (None when not given)."""
    if count is None and (where != (None, None, None) or prefix or harness):
        raise Invalid("--repo, --base, --prefix, --harness and --worktree-dir need --worktrees")


@contextmanager
def revive(
    spex: Spex, names: Sequence[str] | None, prompt: bytes | None, stagger: float | None = None
) -> Iterator[Plan]:
    """The sessions (of `names`, default all) whose current turn a reboot
    interrupted, claimed for this revive while the plan is held (two
    concurrent revives never wake one session twice), told `prompt` (default
    REVIVE_PROMPT), their launches `stagger` apart (None: config.toml's)."""
    with revivals(spex, names) as targets:
        nothing = None if targets else "nothing to revive: no turn was interrupted by a reboot"
        text = prompt if prompt is not None else REVIVE_PROMPT.encode()
        yield Plan(
            list(targets), WakeRequest("", text, limits=Limits(stagger=stagger)), nothing=nothing
        )
