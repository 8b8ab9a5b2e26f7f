"""turn/plan.py: the one precedence function, option by option.

Plain unit tests: `resolve` reads no store, no tmux and no file, so each
layer (the wake's request, the session, the harness, config.toml, the
built-in default) is a value built here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from spexsup.adapters.harness import Harness
from spexsup.adapters.sandbox import Mode, Policy
from spexsup.config import Config
from spexsup.core.sessions import Session
from spexsup.core.worktree import Setup
from spexsup.errors import Invalid, Refused
from spexsup.turn import plan
from spexsup.turn.plan import resolve
from spexsup.turn.request import Limits, QueuePolicy, WakeRequest

MODEL_FLAG = Harness("h", fresh=("agent", "{prompt}"), model_flag="--model", outcome="claude")


def session(**kw: Any) -> Session:
    base: dict[str, Any] = {
        "name": "s",
        "harness": "h",
        "command": None,
        "cwd": "/tmp",
        "env": {},
        "window": None,
        "state": "idle",
        "harness_session_id": "conv-1",
        "current_turn": None,
        "created_at": 0.0,
        "incarnation": "i",
        "launch_fence": 0,
    }
    return Session(**{**base, **kw})


def request(**limits: Any) -> WakeRequest:
    return WakeRequest("s", b"go", limits=Limits(**limits))


def test_nothing_said_gives_the_built_in_defaults() -> None:
    p = resolve(request(), session(), Config(), Harness("h", fresh=("a",)))
    assert p.window == plan.DEFAULT_WINDOW
    assert p.timeout is None and p.grace == plan.DEFAULT_KILL_GRACE
    assert p.strict is False and p.on_limit is None
    assert p.limit_margin == plan.DEFAULT_LIMIT_MARGIN
    assert p.login_timeout == Config().login_timeout  # login_shell is on by default
    assert p.model is None and p.fallback == ()
    assert p.budget is None
    assert p.verify == () and p.verify_timeout == plan.DEFAULT_VERIFY_TIMEOUT
    assert p.sandbox == Policy(Mode.OFF)
    assert p.stagger is None
    assert p.resume == "conv-1"
    assert p.queue is QueuePolicy.NEVER


def test_window_is_the_wakes_then_the_sessions_then_configs_then_the_harnesss() -> None:
    h = Harness("h", fresh=("a",), window=4.0)
    cfg = Config(window=3.0)
    assert resolve(WakeRequest("s", b"", window=1.0), session(window=2.0), cfg, h).window == 1.0
    assert resolve(WakeRequest("s", b""), session(window=2.0), cfg, h).window == 2.0
    assert resolve(WakeRequest("s", b""), session(), cfg, h).window == 3.0
    assert resolve(WakeRequest("s", b""), session(), Config(), h).window == 4.0


def test_timeout_is_the_wakes_then_the_sessions_then_the_harnesss_with_configs_grace() -> None:
    h = Harness("h", fresh=("a",), timeout=30.0)
    cfg = Config(grace=1.5)
    assert resolve(request(timeout=10.0), session(timeout=20.0), cfg, h).timeout == 10.0
    assert resolve(request(), session(timeout=20.0), cfg, h).timeout == 20.0
    p = resolve(request(), session(), cfg, h)
    assert (p.timeout, p.grace) == (30.0, 1.5)
    # No time limit: no grace of config.toml's either (the built-in one).
    p = resolve(request(), session(), cfg, Harness("h", fresh=("a",)))
    assert (p.timeout, p.grace) == (None, plan.DEFAULT_KILL_GRACE)


@pytest.mark.parametrize(
    ("wake", "own", "harness", "configured"),
    [
        (True, False, False, False),
        (False, True, False, False),
        (False, False, True, False),
        (False, False, False, True),
    ],
)
def test_strict_is_any_of_them(wake: bool, own: bool, harness: bool, configured: bool) -> None:
    h = Harness("h", fresh=("a",), strict=harness)
    p = resolve(request(strict=wake), session(strict=own), Config(strict=configured), h)
    assert p.strict is True


def test_on_limit_is_the_wakes_then_the_sessions_and_the_margin_configs() -> None:
    h = Harness("h", fresh=("a",))
    p = resolve(request(on_limit="wait:1h"), session(on_limit="wait"), Config(), h)
    assert p.on_limit == "wait:1h"
    p = resolve(request(), session(on_limit="wait"), Config(limit_margin=5.0), h)
    assert (p.on_limit, p.limit_margin) == ("wait", 5.0)


def test_login_timeout_only_with_the_login_shell() -> None:
    h = Harness("h", fresh=("a",))
    assert resolve(request(), session(), Config(login_timeout=3.0), h).login_timeout == 3.0
    assert resolve(request(), session(), Config(login_shell=False), h).login_timeout is None


def test_model_and_fallback_are_the_wakes_then_the_sessions_then_the_harnesss() -> None:
    h = MODEL_FLAG._replace(model="base", fallback=("small", "base"))
    p = resolve(request(model="opus", fallback=("sonnet",)), session(model="x"), Config(), h)
    assert (p.model, p.fallback) == ("opus", ("sonnet",))
    p = resolve(request(), session(model="x", fallback=("y", "x")), Config(), h)
    assert (p.model, p.fallback) == ("x", ("y",))  # never its own model
    p = resolve(request(), session(), Config(), h)
    assert (p.model, p.fallback) == ("base", ("small",))
    # An empty list given is a list: no fallback at all.
    assert resolve(request(fallback=()), session(), Config(), h).fallback == ()


def test_a_fallback_needs_a_harness_that_takes_a_model() -> None:
    with pytest.raises(Invalid, match="no way to pass a model"):
        resolve(request(fallback=("b",)), session(), Config(), Harness("h", fresh=("a",)))


def test_a_budget_is_the_wakes_and_needs_usage() -> None:
    assert resolve(request(budget=2.5), session(), Config(), MODEL_FLAG).budget == 2.5
    with pytest.raises(Invalid, match="prints no usage"):
        resolve(request(budget=2.5), session(), Config(), Harness("h", fresh=("a",)))


def test_verify_is_the_wakes_then_the_sessions_then_the_repositorys_then_the_harnesss() -> None:
    h = Harness("h", fresh=("a",), verify=("harness",), verify_timeout=4.0)
    repo = Setup(verify=("repo",), verify_timeout=3.0)
    s = session(verify=("own",), verify_timeout=2.0)
    p = resolve(request(verify=("mine",), verify_timeout=1.0), s, Config(), h, repo=repo)
    assert (p.verify, p.verify_timeout) == (("mine",), 1.0)
    p = resolve(request(), s, Config(), h, repo=repo)
    assert (p.verify, p.verify_timeout) == (("own",), 2.0)
    p = resolve(request(), session(), Config(), h, repo=repo)
    assert (p.verify, p.verify_timeout) == (("repo",), 3.0)
    p = resolve(request(), session(), Config(), h)
    assert (p.verify, p.verify_timeout) == (("harness",), 4.0)
    # --no-verify is a check given: none, and the repository is not asked.
    assert resolve(request(verify=()), session(), Config(), h).verify == ()
    assert not plan.wants_repo_check(request(verify=()), session())
    assert not plan.wants_repo_check(request(), s)
    assert plan.wants_repo_check(request(), session())


def test_sandbox_is_the_sessions_then_the_harnesss_then_configs() -> None:
    h = Harness("h", fresh=("a",))
    own = Policy(Mode.OPTIONAL)
    assert resolve(request(), session(sandbox=own), Config(sandbox="on"), h).sandbox == own
    assert resolve(request(), session(), Config(), h._replace(sandbox=True)).sandbox.enabled
    assert resolve(request(), session(), Config(sandbox="on"), h).sandbox == Policy(Mode.ON)
    # --no-sandbox: only a session sandboxed as optional allows it.
    p = resolve(request(unsandboxed=True), session(sandbox=own), Config(), h)
    assert p.sandbox.mode is Mode.OFF
    with pytest.raises(Refused, match="is sandboxed"):
        resolve(request(unsandboxed=True), session(sandbox=Policy(Mode.ON)), Config(), h)


def test_stagger_is_the_wakes_even_zero_then_configs() -> None:
    h = Harness("h", fresh=("a",))
    assert resolve(request(stagger=0.0), session(), Config(stagger=2.0), h).stagger == 0.0
    assert resolve(request(), session(), Config(stagger=2.0), h).stagger == 2.0


def test_a_fresh_wake_resumes_nothing() -> None:
    h = Harness("h", fresh=("a",))
    fresh = WakeRequest("s", b"", fresh=True)
    assert resolve(fresh, session(), Config(), h).resume is None


def test_queue_is_the_wakes_then_the_sessions_then_configs() -> None:
    inherit = WakeRequest("s", b"", queue=QueuePolicy.INHERIT)
    assert plan.queueing(inherit, session(), Config()) is QueuePolicy.NEVER
    assert plan.queueing(inherit, session(queue=True), Config()) is QueuePolicy.BUSY
    assert plan.queueing(inherit, session(), Config(queue=True)) is QueuePolicy.BUSY
    never = inherit._replace(queue=QueuePolicy.NEVER)
    assert plan.queueing(never, session(queue=True), Config(queue=True)) is QueuePolicy.NEVER
    leg = inherit._replace(queue=QueuePolicy.AT_LIMIT)
    assert plan.queueing(leg, session(), Config()) is QueuePolicy.AT_LIMIT


def test_no_sandbox_is_refused_for_a_wake_that_may_be_queued() -> None:
    bare = WakeRequest("s", b"", limits=Limits(unsandboxed=True))
    assert plan.queueing(bare, session(), Config()) is QueuePolicy.NEVER
    for queued in (
        bare._replace(queue=QueuePolicy.BUSY),
        bare._replace(after="other"),
        bare._replace(queue=QueuePolicy.INHERIT),
    ):
        with pytest.raises(Invalid, match="--no-sandbox is for a turn that starts now"):
            plan.queueing(queued, session(queue=True), Config())


def test_a_queued_request_reads_back_as_it_was_kept() -> None:
    """The queue row's JSON form, and a row written before the request existed."""
    from spexsup.turn.request import Wave

    asked = WakeRequest(
        "s",
        b"p",
        window=3.0,
        fresh=True,
        limits=Limits(5.0, True, "wait", "m", ("f",), 0.0, 1.5, (), 9.0),
        after="other",
        wave=Wave("w1", 2, 4.0),
    )
    kept = asked.queue_options()
    assert kept == {
        "window": 3.0,
        "fresh": True,
        "timeout": 5.0,
        "strict": True,
        "on_limit": "wait",
        "model": "m",
        "fallback": ["f"],
        "budget": 1.5,
        "stagger": 0.0,
        "verify": [],
        "verify_timeout": 9.0,
        "after": "other",
        "after_any": False,
        "wave": "w1",
        "wave_max": 2,
        "wave_budget": 4.0,
    }
    assert WakeRequest.from_queue("s", b"p", kept, "q1") == asked._replace(queued="q1")
    # A row of the old writer: only what was given, no wave.
    old = {"timeout": 60, "strict": True}
    back = WakeRequest.from_queue("s", b"p", old, "q2")
    assert back.limits == Limits(timeout=60, strict=True) and back.window is None
    assert back.wave is None and back.queued == "q2"


def test_a_waves_turn_options_read_back() -> None:
    from spexsup.ids import recorded_options

    asked = WakeRequest("", b"p", window=2.0, limits=Limits(7.0, True, None, "m", ("f",), 1.0))
    doc = {"turn_options": asked.turn_options()}
    assert WakeRequest.from_turn_options("", b"p", recorded_options(doc)) == asked
    # A wave recorded before any option was: none.
    assert WakeRequest.from_turn_options("", b"p", recorded_options({})) == WakeRequest("", b"p")


def test_a_waves_turn_options_keep_every_option_that_shapes_a_leg() -> None:
    """A retry repeats its legs (DESIGN §31): every field of the request and
    of its limits, set to something other than its default, reads back from
    the recorded options, but those that are each leg's own or the wave's
    (its session, key, wave, queue policy, `--after`, a queue entry)."""
    from spexsup.ids import recorded_options

    limits = Limits(7.0, True, "wait", "m", ("f",), 0.0, 2.5, ("make", "test"), 9.0, True)
    assert all(v != d for v, d in zip(limits, Limits(), strict=True)), "a new Limits field"
    asked = WakeRequest("", b"p", window=2.0, fresh=True, force=False, limits=limits)
    doc = json.loads(json.dumps({"turn_options": asked.turn_options()}))
    back = WakeRequest.from_turn_options("", b"p", recorded_options(doc))
    assert back == asked
    own = {"name", "prompt", "key", "queue", "after", "after_any", "wave", "queued", "force"}
    # A new request field is either recorded or named here as the leg's own.
    assert set(WakeRequest._fields) - own == {"window", "fresh", "limits"}
