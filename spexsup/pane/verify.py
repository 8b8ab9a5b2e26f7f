"""The wrapper's verification step (`--verify CMD`, DESIGN §16), run in the pane:

    python -m spexsup.pane.verify start TURN_DIR   -> exit 0: run the check
    python -m spexsup.pane.verify end TURN_DIR PID [TEE]  (the check exited:
        end what it left running in its process session, PID's, and what
        still holds its output, the pipe TEE reads)

After the harness exited 0 and before the turn's end is reported: when the
turn has a check and its end would be `complete` as it stands (a turn that
failed on its own, a strict flag, an error the CLI exited 0 after, never
runs the check), it records the check's start (its row in `verifications`,
the `verifying` event), prints the check's header line and exits 0; the
wrapper then runs the check (`verifying:<pid>`), its output to the pane and
to `verify.log`, its exit status to `verify-rc`. Any other case exits 1.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from spexsup.pane import turndir
from spexsup.pane.check import command, grace, header
from spexsup.states import ACTIVE, COMPLETE

RUN = 0
NO = 1


def start(turn_dir: Path) -> int:
    from spexsup.pane import report
    from spexsup.state import events, ledger
    from spexsup.state.store import Store

    argv = command(turn_dir)
    if not argv or (turn_dir / turndir.STOP_REQUEST).exists():
        return NO
    home, session, turn = turn_dir.parent.parent.parent, turn_dir.parent.name, turn_dir.name
    if report.judge(home, turn_dir, 0, verify=False).state != COMPLETE:
        return NO  # it failed on its own: that end stands, unchecked
    now = time.time()
    turndir.mark_verify_started(turn_dir, now)
    print(header(argv), flush=True)
    try:
        store = Store(home, (events,))  # its event is recorded; no hook runs in the pane
        with store.tx() as db:
            row = ledger.current_turn(db, session, turn)
            if row is None or row["state"] not in ACTIVE:
                return NO  # stopped (or ended) meanwhile
            ledger.verifying(db, session, turn, command=argv, at=now)
    except Exception as e:  # the reporter records the row with the end
        print(f"spex: recording the verification's start: {e}", file=sys.stderr)
    return RUN


def end(turn_dir: Path, leader: int, tee: int | None = None) -> int:
    """The check (its process session, `leader`'s) exited: end what it left
    running there, and what still holds its output open (the pipe `tee`,
    the wrapper's copy of it to the pane and verify.log, reads: a child
    that left the session with `setsid`), SIGTERM, SIGKILL after the grace.
    Linux keeps a pid out of reuse while a live process has it as its
    session: every member is the check's; so is every other holder of its
    output, which the wrapper closed before starting this step."""
    import os

    from spexsup.adapters.procs import fd_holders, reap, session_members

    output: list[str] = []
    ours = {os.getpid(), os.getppid()}  # this step and the wrapper
    if tee is not None:
        ours.add(tee)
        with contextlib.suppress(OSError):  # tee is done: nothing holds the output
            output.append(str(Path(f"/proc/{tee}/fd/0").readlink()))

    def pids() -> set[int]:
        found = set(session_members(leader, "0"))
        if output:
            found.update(fd_holders(output, skip=ours))
        return found

    def members() -> list:  # type: ignore[type-arg]
        import psutil

        found = []
        for pid in pids():
            try:
                found.append(psutil.Process(pid))
            except psutil.Error:
                continue
        return found

    if pids():
        reap(members, grace(turn_dir))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) in (3, 4) and argv[0] == "end" and all(a.isdigit() for a in argv[2:]):
        try:
            return end(Path(argv[1]), *map(int, argv[2:]))
        except Exception as e:  # its leftovers stay: never the turn's end
            print(f"spex: ending the check's leftovers: {e}", file=sys.stderr)
            return 1
    if len(argv) != 2 or argv[0] != "start":
        print(
            "spex: usage: python -m spexsup.pane.verify start TURN_DIR | end TURN_DIR PID [TEE]",
            file=sys.stderr,
        )
        return 2
    try:
        return start(Path(argv[1]))
    except Exception as e:  # unjudgeable: run the check, the reporter decides
        print(f"spex: verification: {e}", file=sys.stderr)
        return RUN


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
