"""A turn's check (`--verify CMD`, DESIGN §16) as its turn dir holds it: the
argv, how it ended, when it started and its output's last lines; read by the
exit reporter (`report.judge`) and `spex verify`. The step the wrapper runs
before the check is `spexsup.pane.verify`:

    python -m spexsup.pane.verify start TURN_DIR   -> exit 0: run the check

After the harness exited 0 and before the turn's end is reported: when the
turn has a `verify` file and its end would be `complete` as it stands (a
turn that failed on its own, a strict flag, an error the CLI exited 0
after, never runs the check), it records the check's start (its row in
`verifications`, the `verifying` event) and exits 0; the wrapper then runs
the check, writing `verifying:<pid>`, its output to the pane and to
`verify.log`, and its exit status to `verify-rc`. Any other case exits 1.

"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from spexsup.pane import turndir
from spexsup.record import Record

if TYPE_CHECKING:
    from collections.abc import Sequence


LOG = turndir.VERIFY_LOG
ARGV = turndir.VERIFY
DEADLINE = turndir.VERIFY_DEADLINE
RC = turndir.VERIFY_RC
TIMED_OUT = turndir.VERIFY_TIMED_OUT
STARTED = turndir.VERIFY_STARTED

# How many lines of verify.log a failure's message quotes.
TAIL_LINES = 5


class Result(Record):
    """How the wrapper's check of a turn ended: its rc (None: it never
    finished) and whether its time limit ended it."""

    rc: int | None
    timed_out: bool


def command(turn_dir: Path) -> tuple[str, ...]:
    """The turn's check as the launcher wrote it; () when it has none."""
    try:
        raw = (turn_dir / ARGV).read_bytes()
    except OSError:
        return ()
    return tuple(w.decode("utf-8", "surrogateescape") for w in raw.split(b"\0") if w)


def result(turn_dir: Path) -> Result:
    try:
        text = (turn_dir / RC).read_text().strip()
    except OSError:
        text = ""
    rc = int(text) if text.isdigit() else None
    return Result(rc, (turn_dir / TIMED_OUT).exists())


def grace(turn_dir: Path) -> float:
    """How long the check's processes get between SIGTERM and SIGKILL when
    they are ended (`verify-deadline`'s GRACE)."""
    try:
        return float((turn_dir / DEADLINE).read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 2.0


def started_at(turn_dir: Path) -> float | None:
    try:
        return float((turn_dir / STARTED).read_text())
    except (OSError, ValueError):
        return None


# Each run's output in verify.log starts with this line (the pane shows it too).
HEADER = "[spex] verifying: "


def header(argv: Sequence[str]) -> str:
    """The line that heads a run of `argv` in verify.log: the check on one
    line, so that a multi-line command's rest never reads as its output
    (`tail` quotes what follows this line)."""
    from spexsup.adapters.harness import shown_verify
    from spexsup.pane.pretty import one_line

    return f"{HEADER}{one_line(shown_verify(argv))}"


def tail(log: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of the latest check's output (after its header line),
    joined for a one-line message."""
    from spexsup.adapters.outcome import output_end
    from spexsup.pane.pretty import printable

    text = output_end(log, 16384).rpartition(HEADER)[2].partition("\n")[2]
    kept = [printable(ln).strip()[:200] for ln in text.splitlines() if ln.strip()]
    return " | ".join(kept[-lines:])


def shown_check(argv: tuple[str, ...]) -> str:
    from spexsup.adapters.harness import shown_verify

    return shown_verify(argv)[:120]


def span(seconds: float) -> str:
    from spexsup import durations

    return durations.span(seconds)
