"""The buttons: wake, stop, resume, drop a queued prompt, fan out, retry a
wave's failed legs, each run as the `spex` command itself.

A POST runs `spex --home HOME wake NAME -f - --json` (or `stop`, `resume`,
`queue rm`, `fanout`)
as a child process with the server's environment, the prompt on its stdin
byte for byte: admission, bounds, the confirmation window, refusals and
their messages are the CLI's own, and the child's signal handling is its
own too. It runs in a session of its own, so a Ctrl-C that stops the server
does not interrupt a wake it started (the turn, once launched, runs on
regardless). The answer is the command's `--json` document and the line the
CLI prints for it: its verdict line, or its `spex: …` error line.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from spexsup.errors import SpexError
from spexsup.record import Record


class Answer(Record):
    exit_code: int
    doc: dict[str, Any] | None  # the --json document (the error document on failure)
    line: str  # what the CLI would print: the verdict, or `spex: …`
    notes: list[str]  # its other stderr lines (`spex: note: …`, `spex: warning: …`)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def refusal(error: SpexError) -> Answer:
    """What a command would answer for `error`, said before running one (a
    form that names nothing to do): its line and its `--json` document."""
    doc = {"schema_version": 1, "ok": False, "error": error.line(), "exit_code": error.exit_code}
    return Answer(error.exit_code, doc, f"spex: {error.line()}", [])


def run_spex(home: Path, args: list[str], stdin: bytes = b"") -> Answer:
    """`spex --home HOME ARGS… --json`, waited for; never raises for its failure.
    `line` is the error document's `spex: …` line, else empty (the caller
    renders the document as the CLI does)."""
    from spexsup.core import spex as handle
    from spexsup.paths import own_python

    python = own_python("spexsup")
    argv = [*python, *(["--no-hooks"] if handle.NO_HOOKS else []), "--home", str(home)]
    r = subprocess.run(
        [*argv, *args, "--json"],
        input=stdin,
        capture_output=True,
        env=os.environ.copy(),
        start_new_session=True,
        check=False,
    )
    text = r.stdout.decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = None
    if isinstance(parsed, list) and len(parsed) == 1:
        parsed = parsed[0]
    doc = parsed if isinstance(parsed, dict) else None
    said = [x for x in r.stderr.decode("utf-8", "replace").splitlines() if x.startswith("spex:")]
    line = ""
    if doc is not None and doc.get("ok") is False:
        line = f"spex: {doc.get('error')}"
    elif doc is None and r.returncode != 0:
        line = said[-1] if said else f"spex: exited {r.returncode}"
    notes = [x for x in said if x != line]
    return Answer(r.returncode, doc, line, notes)


def wake(home: Path, name: str, prompt: bytes, *, queue: bool, fresh: bool) -> Answer:
    from spexsup.present.render import verdict_line

    args = ["wake", name, "-f", "-"]
    if queue:
        args.append("--queue")
    if fresh:
        args.append("--fresh")
    answer = run_spex(home, args, prompt)
    if not answer.line and answer.doc is not None and "verdict" in answer.doc:
        return answer._replace(line=verdict_line(name, answer.doc))
    return answer


def stop(home: Path, name: str) -> Answer:
    from spexsup.present.render import stopped_line

    answer = run_spex(home, ["stop", name])
    if not answer.line and answer.doc is not None:
        return answer._replace(line=stopped_line(answer.doc))
    return answer


def resume(home: Path, name: str) -> Answer:
    from spexsup.present.render import resumed_line

    answer = run_spex(home, ["resume", name])
    if not answer.line and answer.doc is not None:
        return answer._replace(line=resumed_line(answer.doc))
    return answer


def drop(home: Path, entry: str) -> Answer:
    """`spex queue rm ENTRY`: a queued prompt removed before it launched."""
    from spexsup.present.render import dropped_line

    answer = run_spex(home, ["queue", "rm", entry])
    if not answer.line and answer.doc is not None:
        return answer._replace(line=dropped_line(answer.doc))
    return answer


def fanout(home: Path, names: list[str], prompt: bytes) -> Answer:
    """`spex fanout NAME… -f -`: one prompt to each named session, a wave
    (the names are valid session names: none reads as an option)."""
    return _wave(run_spex(home, ["fanout", "-f", "-", *names], prompt))


def retry(home: Path, wave: str) -> Answer:
    """`spex fanout --retry-failed WAVE`: a new wave of its failed legs."""
    return _wave(run_spex(home, ["fanout", "--retry-failed", wave]))


def _wave(answer: Answer) -> Answer:
    from spexsup.present.progress import summary

    if not answer.line and answer.doc is not None and "legs" in answer.doc:
        return answer._replace(line=summary(answer.doc))
    return answer
