"""The one wake: a request in, a verdict out.

`wake` is what every door calls (`spex wake` and `resume -- PROMPT`, a
fan-out's legs, a schedule's firing): it resolves the request's queue
policy (`plan.queueing`) and either starts the turn now (`turn.wake.start`)
or keeps the prompt in the queue (`turn.queue`), whose dequeuer launches it
later through `turn.wake.start` again.
"""

from __future__ import annotations

from spexsup import config, states
from spexsup.core.sessions import get, validate_window
from spexsup.core.spex import Spex
from spexsup.errors import AtLimit, Failed, Refused, SessionBusy, UnderLease
from spexsup.turn import keys, plan
from spexsup.turn.admit import Verdict
from spexsup.turn.request import NO_HOOKS, Hooks, QueuePolicy, WakeRequest
from spexsup.turn.wake import KEY_ATTEMPTS, repeat_verdict, start


def wake(spex: Spex, request: WakeRequest, hooks: Hooks = NO_HOOKS) -> Verdict:
    """Wake `request.name` with `request.prompt` (see `turn.wake.start` for
    what a wake that starts now does, and `hooks`).

    Queued when its policy says so (`QueuePolicy`; INHERIT is the session's
    `queue`, else config.toml's) or it waits `--after` a session's turn:
    see `_wake_or_queue`. Refused for an unknown session, before anything.
    """
    session = get(spex, request.name)
    validate_window(request.window)
    # Read before admission: a broken config file changes nothing.
    settings = config.load(spex.home)
    policy = plan.queueing(request, session, settings)
    if policy is QueuePolicy.NEVER and request.after is None:
        return start(spex, request, hooks, settings)
    return _wake_or_queue(spex, request, policy, hooks, settings)


def _wake_or_queue(
    spex: Spex,
    request: WakeRequest,
    policy: QueuePolicy,
    hooks: Hooks,
    settings: config.Config,
) -> Verdict:
    """Wake now, or keep the prompt while the session is busy or leased or a
    running limit is reached (verdict `queued`, its position). With
    `request.after` (a session), it waits for that session's current (or
    last) turn to end, then launches if it ended `complete` (any end with
    `after_any`), else ends `skipped`. With a key, a repeat (see `start`)
    answers with the first wake's turn or entry. Policy AT_LIMIT (a fan-out
    leg): a busy or leased session refuses, as without the queue; only a
    running limit queues."""
    # Here, not at the top: a wake that is not queued never loads the queue.
    from spexsup.turn.queue import dequeue, enqueue, entries, positions

    name, key = request.name, request.key
    until = None  # the turn of `request.after` it waits for
    queued_before = bool(entries(spex, (name,)))
    waits = "the prompts queued before it" if queued_before else None
    if request.after is not None:
        after = request.after
        other = get(spex, after)
        if other.current_turn is None:
            raise Refused(f"session {after!r} has no turn to wait for", hint=f"spex show {after}")
        until = other.current_turn
        waits = f"{after}'s turn"
    mark = keys.fingerprint(request.prompt, request.fresh, tuple(request.limits))
    for _ in range(KEY_ATTEMPTS):
        if until is None and not queued_before:  # else first come, first served
            try:
                return start(spex, request, hooks, settings)
            except AtLimit as e:
                waits = e.waits
            except (SessionBusy, UnderLease) as e:
                if policy is QueuePolicy.AT_LIMIT:
                    raise
                waits = "the session's turn" if isinstance(e, SessionBusy) else "the lease"
        elif key is not None and keys.lookup(spex.store.db, key, name, mark) is not None:
            answer = repeat_verdict(spex, name, key)
            if answer is not None:
                return answer
            continue
        try:
            entry, position = enqueue(spex, request, after_turn=until)
        except keys.Repeat:
            assert key is not None
            answer = repeat_verdict(spex, name, key)
            if answer is not None:
                return answer
            continue  # given back before we read it: try again
        # The turn that made us queue may have ended before the entry committed,
        # with nobody left to launch it: try once ourselves.
        done = dequeue(spex, name)
        if entry in done:
            return done[entry]._replace(key=key)
        place = positions(entries(spex, (name,))).get(entry, position)
        return Verdict(
            name, None, states.Verdict.QUEUED, queued=entry, position=place, key=key, waits=waits
        )
    raise Failed(f"key {key!r} was claimed and given back {KEY_ATTEMPTS} times", hint="retry")
