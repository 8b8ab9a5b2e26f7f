"""Launching a planned wave and showing it to its end: `spex fanout` and
`spex up --revive` both run one (`run_wave`), each leg's end as it settles
(a live table on a terminal with --wait), then the wave's summary. A signal
stops the launches not yet started, or the wait, never the turns."""

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from spexsup import states
from spexsup.cli import decl
from spexsup.present.progress import LegsView, PlainLegs, leg_line, summary
from spexsup.present.render import document, print_json, with_iso
from spexsup.present.spend import leg_costs, with_spend

if TYPE_CHECKING:
    from collections.abc import Container

    from spexsup.cli.worktree import Kept
    from spexsup.conductors.fanout import Plan
    from spexsup.conductors.waves import Pacing, Wave
    from spexsup.core.spex import Spex

# Whatever the window, a signalled fan-out is gone this long after the first signal.
HARD_EXIT_AFTER = 8.0


class WaitInterrupted(BaseException):
    """The first signal while waiting: stop waiting now (the turns run on)."""


@contextmanager
def signals_for(holder: dict[str, Any]) -> Iterator[None]:
    """While launching, the first SIGINT/SIGTERM aborts the launches not yet
    started (from a thread: the handler must not take the store); while
    waiting, it stops the wait at once. A second signal exits at once with
    its own code, and so does a fan-out still there 8 s after the first."""

    def hard_exit(code: int) -> None:
        wave = holder.get("wave")
        if wave is not None:
            with contextlib.suppress(Exception):
                wave.record_turns()
        os._exit(code)

    def handler(signum: int, frame: object) -> None:
        code = 130 if signum == signal.SIGINT else 143
        if "signal" in holder:
            hard_exit(code)
        holder["signal"], holder["code"] = signum, code
        timer = threading.Timer(HARD_EXIT_AFTER, hard_exit, (code,))
        timer.daemon = True
        timer.start()
        if holder.get("phase") == "wait":
            raise WaitInterrupted
        wave = holder.get("wave")
        if wave is not None:
            threading.Thread(target=wave.abort, daemon=True).start()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def run_wave(
    spex: "Spex",
    plan: "Plan",
    *,
    max_concurrent: int | None = None,
    on_complete: str | None = None,
    wait: bool = False,
    as_json: bool = False,
    pacing: "Pacing | None" = None,
    keep_best: str | None = None,
    also: dict[str, Any] | None = None,
) -> None:
    """Launch the plan's wave and show it: each leg as it settles (a live
    table on a terminal with --wait), then the wave's summary; with
    `keep_best` (the pick), keep the best leg by its check (`bestof.choose`).
    `also`: fields the JSON document carries beside the wave's (`up --revive`:
    its pane reports)."""
    from spexsup.conductors import waves
    from spexsup.core import wavedoc

    if plan.nothing is not None:
        _say_nothing(plan, plan.nothing, as_json=as_json)
        return
    targets, retry_failed = plan.targets, plan.retry_of
    live = sys.stdout.isatty() and not as_json
    holder: dict[str, Any] = {"phase": "launch"}
    printed: set[str] = set()
    # --wait: every leg's stage as it changes, a live table on a terminal.
    progress: LegsView | PlainLegs | None = None
    if wait and not as_json:
        progress = PlainLegs(spex.home, costs=leg_costs(spex.home)) if not live else None

    def on_change(doc: dict[str, Any]) -> None:
        if as_json:
            return
        if wait:
            if progress is not None:
                progress.update(doc)
            return
        for leg in doc["legs"]:
            if (
                leg["status"] in (states.LegStatus.DONE, states.LegStatus.ABORTED)
                and leg["session"] not in printed
            ):
                printed.add(leg["session"])
                decl.echo(("  " if live else "") + leg_line(leg))

    def on_create(wave: "Wave") -> None:
        holder["wave"] = wave
        if plan.best_of and plan.request is not None:
            from spexsup.conductors import bestof  # best of N only (see conductors.fanout)

            bestof.mark_best_of(wave, plan.request, plan.best_of)
        nonlocal progress
        if not as_json:
            decl.echo(
                f"wave {wave.id}: {len(targets)} leg{'s' * (len(targets) != 1)}"
                + (" (retry)" if retry_failed else "")
            )
        if wait and live and not as_json:
            progress = LegsView(spex.home, wave.doc, costs=leg_costs(spex.home)).__enter__()
        wave.listeners.append(on_change)
        if "signal" in holder:  # a signal that came before the wave existed
            threading.Thread(target=wave.abort, daemon=True).start()

    detached: list[str] = []
    try:
        with signals_for(holder):
            wave = waves.fanout(
                spex,
                targets,
                plan.wake,
                max_concurrent=waves.DEFAULT_MAX_CONCURRENT
                if max_concurrent is None
                else max_concurrent,
                retry_of=retry_failed,
                on_complete=on_complete,
                on_create=on_create,
                pacing=pacing or waves.Pacing(),
            )
            if wait and "signal" not in holder:
                wave.listeners.clear()
                try:
                    # The phase first: a Ctrl-C right after the line below
                    # must stop the wait, not count as one during the launch.
                    holder["phase"] = "wait"
                    if isinstance(progress, LegsView):
                        progress.print("waiting for the turns to end…")
                    elif not as_json:
                        decl.echo("waiting for the turns to end…")
                    wave.wait_turns(None if progress is None else progress.update)
                    holder["phase"] = "done"
                except WaitInterrupted:
                    holder["phase"] = "done"
                    wave.detach()
                    detached = [leg["session"] for leg in wave.running_legs()]
    finally:
        if isinstance(progress, LegsView):
            progress.__exit__()
    doc = with_spend(spex, waves.refresh(spex, wave.id))
    kept = None
    if keep_best is not None and not detached and "signal" not in holder:
        from spexsup.cli.worktree import keep_best_leg

        kept = keep_best_leg(spex, doc, keep_best)
        doc = {**with_spend(spex, waves.refresh(spex, wave.id)), "keep": kept.public()}
    if as_json:
        print_json(document(with_iso({**doc, **(also or {})})))
    else:
        rest = wait and not detached and not live
        shown = progress.shown if isinstance(progress, PlainLegs) else {}
        _show_wave(doc, kept, detached, unshown=rest, shown=shown, signalled="signal" in holder)
    if "signal" in holder:
        raise decl.Exit(holder["code"])
    ok = doc["state"] == states.WaveState.COMPLETE if wait else wavedoc.succeeded(doc)
    if kept is not None:
        ok = kept.ok
    if not ok:
        raise decl.Exit(1)


def _say_nothing(plan: "Plan", nothing: str, *, as_json: bool) -> None:
    """A plan with no leg to launch (a retry with none failed): why."""
    if not as_json:
        decl.echo(nothing)
        return
    from spexsup.core import wavedoc

    print_json(
        {
            "schema_version": wavedoc.SCHEMA_VERSION,
            "ok": True,
            "retry_of": plan.retry_of,
            "wave": None,
            "legs": [],
            "message": nothing,
        }
    )


def _show_wave(
    doc: dict[str, Any],
    kept: "Kept | None",
    detached: list[str],
    *,
    unshown: bool,
    shown: "Container[str]",
    signalled: bool,
) -> None:
    """The wave's end on a terminal or in a pipe: the legs not printed yet
    (`unshown`: those not in `shown`), its summary, the best leg kept, and
    the legs still running when the wait stopped (`detached`, or after a
    signal while launching, those the document says run on)."""
    from spexsup.core import wavedoc
    from spexsup.present import fit

    if unshown:
        # Each leg's end was printed as it came; a leg the last update
        # did not show yet is printed now, never one twice.
        for leg in doc["legs"]:
            if leg["session"] not in shown:
                decl.echo("  " + leg_line(leg))
    for line in fit.for_stdout(summary(doc)):
        decl.echo(line)
    if kept is not None:
        for line in kept.lines:
            decl.echo(line)
    if not detached and signalled:
        # Interrupted while launching: the legs already launched run on.
        detached = [
            leg["session"]
            for leg in doc["legs"]
            if wavedoc.leg_outcome(leg) == states.LegResult.RUNNING
        ]
    if detached:
        decl.echo(f"stopped waiting; still running: {', '.join(detached)}")
        decl.echo(f"keep waiting with: spex wait {' '.join(detached)}")
        decl.echo(f"stop them with: spex stop {' '.join(detached)}")
