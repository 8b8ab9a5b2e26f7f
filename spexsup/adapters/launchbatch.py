"""The launches of one process on one tmux server, made together (see
`launches`): a wave's legs share tmux client calls."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from spexsup.adapters.group import Group

# What one tmux client call said: its exit status, its output lines, its stderr.
Ran = tuple[int, list[str], str]
# A tmux client call on one server (`TmuxHome._run`).
Run = Callable[..., Ran]

_LAUNCHES: dict[tuple[str | None, str | None], Group[Sequence[str], Ran]] = {}
_BATCH_MARK = "spex-launch-batch "


def launches(server: tuple[str | None, str | None], run: Run) -> Group[Sequence[str], Ran]:
    """The launches of this process on `server` (its socket name and path), made together: a
    wave's legs launching at once share one tmux client call (under load a
    client costs tens of ms to start; the server runs a respawn in a few).
    Thread-safe (created under the GIL's dict set-default)."""
    group = _LAUNCHES.get(server)
    if group is None:
        group = _LAUNCHES.setdefault(server, Group(lambda calls: run_together(run, calls)))
    return group


def run_together(run: Run, calls: Sequence[Sequence[str]]) -> list[Ran]:
    """Each launch's `if-shell` in one client call, each after a line that
    says whose output follows. tmux runs a client's commands in order
    without another client's in between, so each launch is tested and made
    as alone; one whose commands failed (no `launched`/`refused` line) gets
    the call's rc and stderr, as alone it would have."""
    if len(calls) == 1:
        return [run(*calls[0])]
    # tmux refuses a client's command over 16 KiB (`command too long`).
    ran: list[Ran] = []
    chunk: list[Sequence[str]] = []
    size = 0
    for call in calls:
        length = sum(len(os.fsencode(a)) + 1 for a in call) + 64
        if chunk and size + length > BATCH_BYTES:
            ran += _run_chunk(run, chunk)
            chunk, size = [], 0
        chunk.append(call)
        size += length
    return ran + _run_chunk(run, chunk)


BATCH_BYTES = 12_000  # What one tmux client call may carry, below tmux's 16 KiB.


def _run_chunk(run: Run, calls: Sequence[Sequence[str]]) -> list[Ran]:
    if len(calls) == 1:
        return [run(*calls[0])]
    argv: list[str] = []
    for i, call in enumerate(calls):
        argv += ["display-message", "-p", f"{_BATCH_MARK}{i}", ";", *call, ";"]
    rc, out, err = run(*argv[:-1])
    lines: list[list[str]] = [[] for _ in calls]
    at = None
    for line in out:
        if line.startswith(_BATCH_MARK) and line[len(_BATCH_MARK) :].isdigit():
            at = int(line[len(_BATCH_MARK) :])
        elif at is not None and at < len(calls):
            lines[at].append(line)
    ran: list[Ran] = []
    for mine in lines:
        last = mine[-1] if mine else ""
        if last.startswith(("launched ", "refused ")):
            ran.append((0, mine, ""))
        else:
            ran.append((rc or 1, mine, err))
    return ran
