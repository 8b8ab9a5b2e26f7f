"""One resolution: what a wake's turn runs under, every option decided once.

`resolve` is the one precedence function: for each option, what the wake
said (its `WakeRequest`) wins, then the session's own, then the harness's
and config.toml's, then the built-in default. The order between the harness
and config.toml is each option's own and has not changed: the window is
the session's, else config.toml's, else the harness's; strict is any of
them; a timeout, model and fallback come from no config at all. The table
is in docs/architecture.md ("Which option wins?").

Pure: it reads no store, no tmux, no file. What needs a file (the
repository's `.spexsup.toml` check, trusted) is read by the caller and
passed in, only when `wants_repo_check` says the request and the session
leave the check to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spexsup.adapters import sandbox as sandboxes
from spexsup.errors import Invalid
from spexsup.record import Record
from spexsup.turn.request import QueuePolicy, WakeRequest

if TYPE_CHECKING:
    from spexsup.adapters.harness import Harness
    from spexsup.config import Config
    from spexsup.core.sessions import Session
    from spexsup.core.worktree import Setup

# The window when nobody sets one (seconds).
DEFAULT_WINDOW = 2.0
# A check with no time limit of its own gets this one.
DEFAULT_VERIFY_TIMEOUT = 600.0
# Between the watchdog's SIGTERM and SIGKILL when config.toml sets no grace.
DEFAULT_KILL_GRACE = 5.0
# After the reset time a CLI names, this long before the harness runs again.
DEFAULT_LIMIT_MARGIN = 60.0


class TurnPlan(Record):
    """What one turn runs under, every option resolved."""

    # How long the verdict waits for the harness's startup (seconds).
    window: float
    # The wrapper's watchdog: the turn's time limit and, with one, the grace
    # between SIGTERM and SIGKILL.
    timeout: float | None
    grace: float
    strict: bool
    # `--on-limit` as said (its wait is `limit_wait`), and the margin after
    # the reset a CLI names.
    on_limit: str | None
    limit_margin: float
    # Run in the login shell's environment, waiting at most this long for it.
    login_timeout: float | None
    # The model of the first attempt, and those to fall back to, in order.
    model: str | None
    fallback: tuple[str, ...]
    budget: float | None
    # The check of the turn's work (() none) and its time limit.
    verify: tuple[str, ...]
    verify_timeout: float
    sandbox: sandboxes.Policy
    # Seconds between launches of the harness (0 or None: none).
    stagger: float | None
    # The conversation the turn continues (None: a new one).
    resume: str | None
    queue: QueuePolicy


def resolve(
    request: WakeRequest,
    session: Session,
    settings: Config,
    adapter: Harness,
    *,
    repo: Setup | None = None,
) -> TurnPlan:
    """The turn's plan (see the module's docstring). `repo`: the
    repository's check, as `wants_repo_check` asked for it. Invalid when a
    rule cannot be kept (a budget on a harness that prints no usage, a
    fallback model on one that takes none); Refused for `--no-sandbox` on
    a session sandboxed without option (`sandbox.turn_policy`)."""
    limits = request.limits
    model, fallback = models(request, session, adapter)
    if limits.budget is not None and adapter.outcome is None:
        raise Invalid(
            f"harness {adapter.name} prints no usage: a turn budget cannot be kept",
            hint="--budget needs structured output (claude, codex, opencode, pi)",
        )
    if fallback and not adapter.takes_model():
        raise Invalid(
            f"harness {adapter.name} has no way to pass a model, so none to fall back to",
            hint="give the harness model_flag or {model} in harnesses.toml",
        )
    timeout = limits.timeout or session.timeout or adapter.timeout
    grace = settings.grace if timeout else None
    check, check_timeout = verification(request, session, adapter, repo)
    return TurnPlan(
        window=window(request, session, settings, adapter),
        timeout=timeout,
        grace=DEFAULT_KILL_GRACE if grace is None else grace,
        strict=limits.strict or session.strict or adapter.strict or settings.strict,
        on_limit=limits.on_limit or session.on_limit,
        limit_margin=(
            settings.limit_margin if settings.limit_margin is not None else DEFAULT_LIMIT_MARGIN
        ),
        login_timeout=settings.login_timeout if settings.login_shell else None,
        model=model,
        fallback=fallback,
        budget=limits.budget,
        verify=check,
        verify_timeout=check_timeout,
        sandbox=sandbox_policy(request, session, settings, adapter),
        stagger=spacing(request, settings, adapter),
        resume=None if request.fresh else session.harness_session_id,
        queue=queueing(request, session, settings),
    )


def spacing(request: WakeRequest, settings: Config, adapter: Harness) -> float | None:
    """The seconds between the harness's launches: the wake's `--stagger`
    (a fan-out's, a revive's), else config.toml's `stagger`, else the
    harness's own (opencode's 2 s), else none. 0 at any level is none."""
    if request.limits.stagger is not None:
        return request.limits.stagger
    if settings.stagger is not None:
        return settings.stagger
    return adapter.stagger


def window(request: WakeRequest, session: Session, settings: Config, adapter: Harness) -> float:
    """The wake's window, else the session's, else config.toml's, else the
    harness's, else 2 s."""
    return request.window or session.window or settings.window or adapter.window or DEFAULT_WINDOW


def queueing(request: WakeRequest, session: Session, settings: Config) -> QueuePolicy:
    """The wake's queue policy: as said, else (INHERIT) the session's
    `queue`, else config.toml's. Invalid for `--no-sandbox` on a wake that
    may be queued: a queued prompt runs with nobody there to ask."""
    policy = request.queue
    if policy is QueuePolicy.INHERIT:
        policy = QueuePolicy.BUSY if session.queue or settings.queue else QueuePolicy.NEVER
    if request.limits.unsandboxed and (
        policy is not QueuePolicy.NEVER or request.after is not None
    ):
        raise Invalid(
            "--no-sandbox is for a turn that starts now: a queued prompt runs under the"
            " session's sandbox, with nobody there to ask",
            hint="leave out --queue/--after, or spex edit NAME --no-sandbox",
        )
    return policy


def models(
    request: WakeRequest, session: Session, adapter: Harness
) -> tuple[str | None, tuple[str, ...]]:
    """The turn's model (the wake's, else the session's, else the harness's;
    None: the CLI's own) and the models it falls back to, in order (the
    wake's list, else the session's, else the harness's), never its own."""
    limits = request.limits
    model = limits.model or session.model or adapter.model
    chain = next(
        (c for c in (limits.fallback, session.fallback) if c is not None), adapter.fallback
    )
    return model, tuple(dict.fromkeys(m for m in chain if m != model))


def wants_repo_check(request: WakeRequest, session: Session) -> bool:
    """Does the turn's check come to the repository's `.spexsup.toml`?
    (Neither the wake nor the session names one.)"""
    return request.limits.verify is None and session.verify is None


def verification(
    request: WakeRequest, session: Session, adapter: Harness, repo: Setup | None
) -> tuple[tuple[str, ...], float]:
    """The turn's check and its time limit: the wake's, else the session's,
    else the repository's (`repo`), else the harness's; () for none."""
    limits = request.limits
    check = limits.verify if limits.verify is not None else session.verify
    if check is None and repo is not None:
        check = repo.verify
    if check is None:
        check = adapter.verify
    limit = (
        limits.verify_timeout
        or session.verify_timeout
        or (repo.verify_timeout if repo is not None else None)
        or adapter.verify_timeout
        or DEFAULT_VERIFY_TIMEOUT
    )
    return check, limit


def sandbox_policy(
    request: WakeRequest, session: Session, settings: Config, adapter: Harness
) -> sandboxes.Policy:
    """The sandbox the turn runs in: the session's own, else the harness's
    default, else config.toml's, else none (`sandbox.turn_policy`)."""
    return sandboxes.turn_policy(
        session.sandbox, adapter.sandbox, settings.sandbox, session.name, request.limits.unsandboxed
    )
