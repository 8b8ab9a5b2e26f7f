"""Rendering: JSON for machines, plain aligned columns for people.

Tables are never wrapped: a pipe gets one line per row, columns two spaces
apart with no trailing blanks; a terminal gets the same, with the columns
named `squeeze` shortened (home as `~`, an ellipsis in the middle) and any
line still too wide cut at the terminal's edge.

Colour is the one place a view adds escapes of its own: a session's state
(`STATE_COLORS`), only where `use_color` says so (`--color`, NO_COLOR, a
terminal), as `Painted` cells that `table` aligns on their plain text.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import lazyre, states
from spexsup.errors import Invalid
from spexsup.ids import SCHEMA_VERSION, iso
from spexsup.pane.pretty import one_line as clean
from spexsup.present import fit
from spexsup.present.turnerror import beyond_exit

if TYPE_CHECKING:
    from spexsup.errors import SpexError


def print_json(data: Any) -> None:
    """Indented for a person at a terminal; one compact line for a pipe, which
    json's C encoder writes many times faster (`ls --json` of 1 000 sessions)."""
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(data, indent=indent) + "\n")


__all__ = ["iso"]


def document(data: dict[str, Any]) -> dict[str, Any]:
    """A top-level JSON document: `schema_version` first."""
    return {"schema_version": SCHEMA_VERSION, **data}


# Epoch times whose names do not end in `_at`.
EPOCH_KEYS = frozenset({"at", "limit_reset", "waiting_until", "deadline"})


def is_epoch_key(key: str) -> bool:
    """Whether a field of that name holds an epoch time (or null)."""
    return key in EPOCH_KEYS or key.endswith("_at")


def with_iso(data: Any) -> Any:
    """`data` with an `*_iso` twin after each epoch time field (`created_at`,
    `ended_at`, a history entry's `at`, `deadline`…) of every object in it,
    unless it has one already (DESIGN §8 "JSON"). A copy: `data` is unchanged."""
    if isinstance(data, list):
        return [with_iso(v) for v in data]
    if not isinstance(data, dict):
        return data
    out = {}
    for key, value in data.items():
        out[key] = with_iso(value)
        epoch = value is None or (isinstance(value, int | float) and not isinstance(value, bool))
        if epoch and is_epoch_key(key) and f"{key}_iso" not in data:
            out[f"{key}_iso"] = iso(value)
    return out


def span(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def age(seconds: float) -> str:
    return f"{span(max(0.0, seconds))} ago"


def run_time(turn: dict[str, Any]) -> str:
    """`, ran 9s` for an ended turn, as its wrapper measured it; nothing for
    one that never ran or whose run time is unknown (no guess from its record)."""
    seconds = turn.get("ran")
    return "" if turn["ended_at"] is None or seconds is None else f", ran {span(seconds)}"


def dropped_line(doc: dict[str, Any]) -> str:
    """What `spex queue rm` says of a queued prompt it removed."""
    return f"{doc['session']}: removed queued prompt {doc['id']}"


def short_id(turn_id: str) -> str:
    """The random part of an id, what `--turn` and `spex wave` accept as a prefix."""
    return turn_id.rpartition("-")[2]


def turn_cells(turn: dict[str, Any] | None, *, wide: bool = False) -> tuple[str, str]:
    """(`<id> <state> rc=N (flag,…)`, `3m ago, ran 9s`) for a session's current
    or last turn; its outcome flags (`denied:Bash`, `max-turns`) as recorded."""
    if turn is None:
        return "-", "-"
    rc = "" if turn["rc"] is None else f" rc={turn['rc']}"
    ident = turn["id"] if wide else short_id(turn["id"])
    when = age(time.time() - turn["started_at"]) + run_time(turn)
    state = turn["state"]
    if state in states.ACTIVE and turn.get("waiting_until"):
        state = f"waiting for usage reset {clock(turn['waiting_until'])}"
    flags = f" ({','.join(turn['flags'])})" if turn.get("flags") else ""
    return f"{ident} {state}{rc}{flags}", when


def shorten_path(path: str, width: int) -> str:
    home = str(Path.home())
    if home != "/" and (path == home or path.startswith(home + "/")):
        path = "~" + path[len(home) :]
    if len(path) <= width or width < 5:
        return path
    keep = width - 1
    return path[: keep // 2] + "…" + path[len(path) - (keep - keep // 2) :]


# --- colour -----------------------------------------------------------------

# The colour a session's state is shown in, as an ANSI colour number (curses
# numbers them the same): failed red, running green, stopped yellow; any
# other state in the terminal's own colours.
STATE_COLORS: dict[str, int] = {states.FAILED: 1, states.BUSY: 2, states.STOPPED: 3}
COLOR_CHOICES = ("auto", "always", "never")


def use_color(choice: str = "auto") -> bool:
    """`--color auto|always|never`, as git reads it: `auto` colours stdout only
    when it is a terminal (not TERM=dumb) and NO_COLOR is unset or empty
    (no-color.org); `always` colours whatever NO_COLOR says. Invalid (exit 2)
    for any other word, before anything is read."""
    if choice not in COLOR_CHOICES:
        raise Invalid(f"invalid --color {choice!r}", hint=f"one of: {', '.join(COLOR_CHOICES)}")
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return sys.stdout.isatty()


class Painted(str):
    """A cell shown in a colour (`sgr`, an SGR parameter such as `31`); its
    value is the plain text, so widths and cuts count what a reader sees."""

    sgr: str

    def __new__(cls, text: str, sgr: str) -> Painted:
        cell = super().__new__(cls, text)
        cell.sgr = sgr
        return cell


def paint(text: str, sgr: str) -> str:
    return f"\x1b[{sgr}m{text}\x1b[0m" if sgr and text else text


def escaped(cell: str) -> str:
    """A cell as a terminal gets it: a `Painted` one inside its colour's escapes."""
    return paint(cell, getattr(cell, "sgr", ""))


def state_cell(text: str, state: str, color: bool) -> str:
    """`text` (a state, maybe with a note: `running (leased)`) in the colour
    of the session state `state`, when `color`."""
    code = STATE_COLORS.get(state) if color else None
    return Painted(text, f"3{code}") if code else text


def _painted(line: str, cells: Sequence[str], widths: Sequence[int], sgrs: Sequence[str]) -> str:
    """`line` (plain, maybe cut) with each cell that has a colour painted, by
    the cells' positions: from the right, so earlier positions stay put."""
    starts = [sum(widths[:i]) + 2 * i for i in range(len(cells))]
    for start, cell, sgr in reversed(list(zip(starts, cells, sgrs, strict=True))):
        end = min(len(line), start + len(cell))
        if sgr and start < end:
            line = line[:start] + paint(line[start:end], sgr) + line[end:]
    return line


def _columns() -> int:
    """The terminal's own width (its ioctl, not a stale $COLUMNS); off a
    terminal $COLUMNS, else 80, as shutil.get_terminal_size says (whose
    import, bz2 and lzma with it, would cost every `spex show` a few ms)."""
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except OSError:
        pass
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    return columns if columns > 0 else 80


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    squeeze: str | None = None,
    tty: bool | None = None,
    narrow: Mapping[str, Sequence[fit.Step]] | None = None,
) -> None:
    """Print aligned columns (see the module doc); `squeeze` names the column a
    terminal shortens to fit (a path), `narrow` each column's steps (`fit`)."""
    tty = sys.stdout.isatty() if tty is None else tty
    width = _columns() if tty else 0
    # Cells hold what agents and files said (a cwd, an error): no escapes,
    # but the colours of the cells `state_cell` painted.
    sgrs = [[getattr(c, "sgr", "") for c in r] for r in [headers, *rows]]
    grid = [[clean(c) for c in r] for r in [headers, *rows]]
    steps = narrow or ({squeeze: [fit.SQUEEZE]} if squeeze else {})
    if tty and steps:
        grid, sgrs = fit.narrow(grid, sgrs, width, steps, shorten_path)
    widths = [max(len(r[i]) for r in grid) for i in range(len(grid[0]))]
    out = []
    for r, sgr in zip(grid, sgrs, strict=True):
        line = "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        cut = tty and len(line) > width
        if cut:
            line = line[: width - 1]
        if any(sgr):
            line = _painted(line, r, widths, sgr)
        out.append(line + "…" if cut else line)
    sys.stdout.write("\n".join(out) + "\n")


# -- text views of JSON documents ---------------------------------------------
# Each local command renders its text through these from the same dict its
# --json prints, and a command run on another host renders the JSON that
# host's spex printed with them: the text is the same by construction.


def failure(doc: Any) -> bool:
    """A refused or failed command's `{"ok": false, "error", "exit_code"}`."""
    return isinstance(doc, dict) and doc.get("ok") is False and "exit_code" in doc


def as_list(doc: Any) -> list[dict[str, Any]]:
    return [doc] if isinstance(doc, dict) else list(doc)


def ls_rows(rows: Sequence[dict[str, Any]], *, wide: bool, color: bool = False) -> list[list[str]]:
    lines = []
    for r in rows:
        turn, when = turn_cells(r["turn"], wide=wide)
        words = r["state"] + (" (leased)" if r.get("lease") else "")
        if r.get("queued"):
            words += f" +{r['queued']} queued"
        state = state_cell(words, r["state"], color)
        lines.append([r["name"], r["harness"], state, turn, when, pane_cell(r), r["cwd"]])
    return lines


LS_HEADERS = ["NAME", "HARNESS", "STATE", "TURN", "WHEN", "PANE", "CWD"]
NO_SESSIONS = "no sessions (create one with: spex new NAME --harness HARNESS)"


def ls_text(rows: Sequence[dict[str, Any]], *, wide: bool, color: bool = False) -> None:
    if not rows:
        sys.stdout.write(NO_SESSIONS + "\n")
        return
    table(LS_HEADERS, ls_rows(rows, wide=wide, color=color), narrow=fit.LS_STEPS)


def pane_of(row: dict[str, Any]) -> str:
    """The session's pane status (`ok`, `missing`, …): an older host's spex
    names it `home` only."""
    return str(row["pane"] if "pane" in row else row["home"])


def pane_cell(row: dict[str, Any]) -> str:
    wt = row.get("worktree")
    pane = pane_of(row)
    pane = f"{pane} (spex up)" if pane in ("missing", "dead") else pane
    return pane + (", worktree missing" if wt and wt["state"] == "missing" else "")


def end_words(state: str | None, rc: int | None, cause: str | None) -> str:
    """`failed rc=1 (overloaded)`: a turn's state, its rc, and what a failed
    end was (not repeated where the state says it: `timed-out`)."""
    words = str(state or "-") + ("" if rc is None else f" rc={rc}")
    return words + (f" ({cause})" if cause and cause != state else "")


def turn_line(t: dict[str, Any]) -> str:
    """`<id>  failed rc=1 (overloaded)  3m ago, ran 9s  (API Error: 529 overloaded)`.

    The wake's verdict is named only when the turn never ran (never
    confirmed its start, no rc of its own): otherwise its end says it all."""
    line = f"{short_id(t['id'])}  {end_words(t['state'], t['rc'], t.get('cause'))}"
    if t.get("model"):
        line += f" on {t['model']}"
    for attempt in t.get("fallbacks") or ():
        line += f" (fell back from {attempt.get('model') or 'the default'}: {attempt.get('cause')})"
    line += f"  {age(time.time() - t['started_at'])}{run_time(t)}"
    if t["verdict"] == states.Verdict.FAILED and t["rc"] is None and t["state"] != states.COMPLETE:
        line += ", never confirmed its start"  # it never ran: no exit of its own
    if t.get("cost") and t["cost"].get("amount") is not None:
        line += f"  {spend_of(t).cost_text()}"
    elif t.get("so_far"):
        line += f"  {so_far_text(t['so_far'])}"
    error = beyond_exit(t["error"], t["rc"])
    if error:
        line += f"  ({error})"
    elif states.ORPHANED in (t.get("flags") or ()) and t["state"] in states.ACTIVE:
        pids = ", ".join(map(str, t.get("survivors") or ())) or "unknown"
        line += (
            f"  (orphaned: its pane is gone, its agent runs on as pid {pids};"
            f" spex stop {t['session']} ends it)"
        )
    elif waiting(t):
        line += f"  (waiting for usage reset {clock(t['waiting_until'])})"
    elif t.get("flags"):
        from spexsup.adapters.outcome import describe

        line += f"  ({describe(t['flags'])})"
    return clean(line)


_PLAIN_WORD = lazyre.compile(r"[\w@%+=:,./{}-]+")


def argv_word(word: str) -> str:
    """One argv element as a shell would need it; `{prompt}` and the like bare."""
    if _PLAIN_WORD.fullmatch(word):
        return word
    import shlex  # a word to quote is rare: `ls` and `show` seldom pay for it

    return shlex.quote(word)


def command_text(command: Any) -> str:
    """A harness command as a shell would take it, never a Python list."""
    return argv_text(command) if isinstance(command, list) else str(command)


def argv_text(argv: Sequence[str]) -> str:
    return " ".join(argv_word(w) for w in argv)


def worktree_line(w: dict[str, Any]) -> str:
    """One line for a worktree session's worktree (`spex show`): path,
    branch, and what it holds."""
    line = f"{w['path']} on {w['branch']}"
    if w.get("error"):
        return f"{line}: {w['error']}"
    if w["state"] == "missing":
        return f"{line}: worktree missing"
    if w.get("ahead") is not None:
        line += f", {w['ahead']} ahead / {w['behind']} behind base"
    return line + f", {w['unsaved'] or 'nothing unsaved'}"


def show_lines(row: dict[str, Any], *, color: bool = False) -> list[str]:
    """`spex show`: the session, every setting (`-` where it has none of its
    own and a default applies; env by name only), then its recent turns;
    the state in its colour when `color`."""
    fields = [
        ("session", row["name"]),
        (
            "harness",
            row["harness"] + (" " + command_text(row["command"]) if row["command"] else ""),
        ),
    ]
    if "harness_args" in row and row["harness"] != "command":  # (an older host's spex: absent)
        fields.append(("args", argv_text(row["harness_args"]) or "-"))
    fields += [("state", row["state"]), ("pane", pane_of(row)), ("cwd", row["cwd"])]
    if row["worktree"]:
        fields.append(("worktree", worktree_line(row["worktree"])))
    if "env_keys" in row:
        fields.append(("env", ", ".join(row["env_keys"]) or "-"))
    # The agent's own conversation id, which the next wake continues.
    fields.append(("conversation", row["harness_session_id"] or "- (the next wake starts one)"))
    fields += setting_cells(row)
    if row.get("sandbox"):
        from spexsup.adapters.sandbox import shown

        fields += shown(row["sandbox"])
    fields += [
        (label, row[key])
        for key, label in (
            ("binary", "binary"),
            ("prompt_line", "prompt"),
            ("answer_line", "answer"),
        )
        if row.get(key)
    ]
    turns = row.get("turns") or []
    # A harness that never reports usage (command, demo) has no unknown to say.
    silent = row.get("reports_usage") is False and not spend_of(row).tokens_known
    if turns and turns[0].get("cost") and not silent:
        fields.append(("last turn", spend_of(turns[0]).line()))
    elif turns and turns[0].get("so_far"):
        fields.append(("this turn", f"{spend_of(turns[0]['so_far']).line()} so far"))
    if row.get("cost") and row.get("spent_turns") and not silent:
        n = row["spent_turns"]
        fields.append(("spent", f"{spend_of(row).line()} ({n} turn{'s' * (n != 1)})"))
    if not turns:
        fields.append(("turns", "none yet"))
    out = [f"{label:<{LABEL}} {value}" for label, value in fields]
    if turns:
        out.append("turns:")
        out.extend(f"  {turn_line(t)}" for t in turns)
    out = [clean(line) for line in out]
    if color:  # after clean(), which would drop the escapes
        at = [label for label, _ in fields].index("state")
        cell = escaped(state_cell(clean(row["state"]), row["state"], True))
        out[at] = f"{'state':<{LABEL}} {cell}"
    return out


# `spex show`'s label column: its longest label, `conversation`.
LABEL = 12


def so_far_text(so_far: dict[str, Any]) -> str:
    """A running turn's spend (`so_far`, DESIGN §31): `$0.42 so far`."""
    return f"{spend_of(so_far).cost_text()} so far"


def spend_of(doc: dict[str, Any]) -> Any:
    """The `usage.Spend` a document's `usage` and `cost` say (issue 26)."""
    from spexsup import usage

    return usage.from_json({"usage": doc.get("usage"), "cost": doc.get("cost")})


def setting_cells(row: dict[str, Any]) -> list[tuple[str, str]]:
    """A session's window, timeout, strict and on-limit as `show` prints them."""
    from spexsup.durations import span as limit_span

    cells = [("window", limit_span(row["window"]) if row["window"] else "-")]
    if "timeout" in row:  # absent from an older host's spex
        cells += [
            ("timeout", limit_span(row["timeout"]) if row["timeout"] else "-"),
            ("strict", "yes (any outcome flag fails a turn)" if row["strict"] else "no"),
            ("on limit", row["on_limit"] or "-"),
        ]
    if "queue" in row:
        cells.append(("queue", "yes (a wake queues when busy)" if row["queue"] else "no"))
    if "model" in row:
        fallback = row.get("fallback")
        cells += [
            ("model", row["model"] or "-"),
            ("fallback", ", ".join(fallback) if fallback else "-" if fallback is None else "none"),
        ]
    if "verify" in row:
        from spexsup.adapters.harness import shown_verify

        check = row["verify"]
        text = shown_verify(check) if check else "-" if check is None else "none"
        if check and row.get("verify_timeout"):
            text += f" (time limit {limit_span(row['verify_timeout'])})"
        cells.append(("verify", text))
    return cells


# What `spex edit` says of each field it changed, in this order.
EDIT_LABELS = {
    "harness": "harness",
    "command": "command",
    "harness_args": "args",
    "cwd": "cwd",
    "env": "env",
    "window": "window",
    "timeout": "timeout",
    "strict": "strict",
    "on_limit": "on-limit",
    "queue": "queue",
    "model": "model",
    "fallback": "fallback",
    "verify": "verify",
    "verify_timeout": "verify-timeout",
    "sandbox": "sandbox",
    "pinned_binary": "binary",
    "harness_session_id": "conversation",
}


def _setting(key: str, value: Any) -> str:
    from spexsup.durations import span as limit_span

    if value is None or value == []:
        return "-"
    if key in ("window", "timeout", "verify_timeout"):
        return limit_span(value)
    if key == "verify" and isinstance(value, list):
        from spexsup.adapters.harness import shown_verify

        return shown_verify(value)
    if key in ("strict", "queue"):
        return "yes" if value else "no"
    if key == "sandbox" and isinstance(value, dict):
        extra = [f"network {value['network']}"] if value["mode"] != "off" else []
        extra += [f"+write {p}" for p in value["allow_write"]]
        extra += [f"-read {p}" for p in value["deny_read"]]
        extra += [f"+host {h}" for h in value["allow_hosts"]]
        return " ".join([value["mode"], *extra])
    if isinstance(value, list):
        return argv_text(value)
    return str(value)


def edit_lines(name: str, changes: dict[str, Any], *, dry_run: bool) -> list[str]:
    """`spex edit`: one line per changed field (`api: window 2s -> 5s`; env by
    name only), then what was done."""
    out = []
    for key, label in EDIT_LABELS.items():
        change = changes.get(key)
        if change is None:
            continue
        if key == "env":
            said = [f"{k} set" for k in change["set"]] + [f"{k} unset" for k in change["unset"]]
            out.append(f"{name}: env {', '.join(said)}")
        else:
            was, now = _setting(key, change["from"]), _setting(key, change["to"])
            out.append(f"{name}: {label} {was} -> {now}")
    if not changes:
        out.append(f"{name}: nothing to change (it is so already)")
    elif dry_run:
        out.append(f"would edit {name} (dry run: nothing changed)")
    else:
        out.append(f"edited {name}: its next turn runs with this")
    return [clean(line) for line in out]


def verdict_line(name: str, v: dict[str, Any]) -> str:
    """`api: failed turn T rc=1 (812 ms): <cause>`: the cause is on the verdict line."""
    repeat = f"repeat of key {v['key']}: " if v.get("repeat") else ""
    if v["verdict"] == states.Verdict.QUEUED:
        if repeat and v["turn"]:
            return clean(
                f"{name}: queued {v['queued']} ({repeat}it became turn {v['turn']},"
                f" {now_words(v['state'])})"
            )
        waits = v.get("waits") or "its turn"
        return clean(
            f"{name}: queued {v['queued']} (position {v['position']}; {repeat}it waits for"
            f" {waits}: spex queue {name})"
        )
    line = f"{name}: {v['verdict']} turn {v['turn']}"
    if v["pid"]:
        line += f" pid {v['pid']}"
    if v["rc"] is not None:
        line += f" rc={v['rc']}"
    if v.get("attempts", 1) > 1:
        line += f" after {v['attempts']} attempts"
    line += f" ({repeat}it {now_words(v['state'])})" if repeat else f" ({v['elapsed_ms']} ms)"
    error = beyond_exit(v["error"], v["rc"])
    if error:
        line += f": {error}"
    elif v.get("flags"):
        from spexsup.adapters.outcome import describe

        line += f" ({describe(v['flags'])})"
    elif v.get("waiting_until"):
        line += f" (waiting for usage reset {clock(v['waiting_until'])})"
    return clean(line)


def now_words(state: str | None) -> str:
    """What a repeated key's turn is doing now: `is running`, `ended complete`."""
    if state in states.ACTIVE:
        return "is running"
    return f"ended {state}" if state else "is gone"


def clock(epoch: float) -> str:
    return time.strftime("%H:%M", time.localtime(epoch))


def waiting(t: dict[str, Any]) -> bool:
    """Is the turn waiting in its pane for a usage limit to reset?"""
    return bool(t["state"] in states.ACTIVE and t.get("waiting_until"))


def ended_line(e: dict[str, Any]) -> str:
    """`api: turn T failed rc=1 (agent-error): <message>`, what `spex wait`
    prints per turn."""
    words = end_words(e["state"], e["rc"], e.get("cause"))
    said = beyond_exit(e["error"], e["rc"]) if e["state"] != states.TurnState.COMPLETE else None
    why = f": {said}" if said else ""
    if not why and e.get("flags"):
        from spexsup.adapters.outcome import describe

        why = f" ({describe(list(e['flags']))})"
    return clean(f"{e['session']}: turn {e['turn']} {words}{why}")


def stopped_line(d: dict[str, Any]) -> str:
    aborted = d.get("aborted")
    what = f"turn {aborted} aborted" if aborted else "no turn was running"
    return clean(f"{d['session']}: stopped ({what}; no new turns until spex resume {d['session']})")


def one_failed(name: str, error: SpexError) -> dict[str, Any]:
    """One session's failure in a command of several (stop, rm): `{ok:
    false, session, error, exit_code}`, its error a line naming the session."""
    line = refusal_line(name, error.line())
    return document({"ok": False, "session": name, "error": line, "exit_code": error.exit_code})


def each_said(
    doc: Any, lines: Callable[[dict[str, Any]], list[str]]
) -> tuple[list[str], list[str]]:
    """A command's document (one session's, or a list) as text: each done
    one's `lines`, and each failed one's `spex: NAME: why` (for stderr)."""
    out: list[str] = []
    err: list[str] = []
    for d in as_list(doc):
        if failure(d):
            err.append(f"spex: {d['error']}")
        else:
            out += lines(d)
    return out, err


def stopped_lines(d: dict[str, Any]) -> list[str]:
    return [stopped_line(d)]


def resumed_line(d: dict[str, Any]) -> str:
    n = d["session"]
    if not d["resumed"]:
        return f"{n}: not stopped (nothing to do)"
    return f"{n}: resumed: takes turns again (the aborted turn is not restarted)"


def refusal_line(name: str, error: str) -> str:
    """`NAME: <why>`, printable; a message that starts with the name keeps it once."""
    return clean(error if error.startswith(f"{name}: ") else f"{name}: {error}")


def rm_check_document(found: dict[str, SpexError | None], *, dry_run: bool) -> dict[str, Any]:
    """`spex rm`'s check of several sessions: each one and what would refuse
    it; refused (exit 3) as a whole when any one is, which nothing removed."""
    refused = sum(e is not None for e in found.values())
    doc: dict[str, Any] = {"ok": not refused, "dry_run": dry_run}
    if refused:
        what = f"{refused} of {len(found)} sessions" + (" would be" if dry_run else "")
        doc["error"] = f"{what} refused" + ("" if dry_run else "; removed nothing")
        doc["exit_code"] = 3
    doc["sessions"] = [
        {
            "session": n,
            "ok": e is None,
            "error": None if e is None else e.line(),
            "exit_code": None if e is None else e.exit_code,
        }
        for n, e in found.items()
    ]
    return document(doc)


def would_remove_lines(doc: dict[str, Any]) -> list[str]:
    """`spex rm --dry-run`'s stdout: `would remove NAME` for each that would go."""
    return [f"would remove {s['session']}" for s in doc["sessions"] if s["ok"]]


def removed_lines(d: dict[str, Any]) -> list[str]:
    n = d["session"]
    return [*(clean(f"{n}: {line}") for line in d.get("notes") or []), f"removed {n}"]
