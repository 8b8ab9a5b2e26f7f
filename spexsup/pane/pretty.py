"""`spex log --pretty` and the pane: a turn's structured output as text a person reads.

The agent CLIs' JSON modes (claude stream-json, codex --json, opencode
--format json, pi --mode json) become: assistant text as it is, each tool
call on one line (`→ Bash: make test`), errors and denials marked `✗`
(red on a terminal), and one closing line. Lines that are not JSON events
(banners, stderr) pass through unchanged; events with nothing to show
(deltas, usage, step markers) are left out.

`python -m spexsup.pane.pretty feed OUTPUT_LOG PARSER` sits between the harness and
the pane (shell/turn.sh): it appends the raw stream to `output.log`, which
spex parses, and shows the pane the rendering, so attaching to a claude pane
shows what claude says rather than a wall of JSON events.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from spexsup import lazyre
from spexsup.pane.lines import EVENT_HEAD, SHOWN_LINE, Lines, last_lines, shown

if TYPE_CHECKING:
    from pathlib import Path

RED = "\x1b[31m"
DIM = "\x1b[2m"
RESET = "\x1b[0m"
ARG_MAX = 120


def _short(value: object) -> str:
    if isinstance(value, dict):
        for key in ("command", "file_path", "path", "pattern", "url", "query", "description"):
            if key in value:
                value = value[key]
                break
        else:
            value = json.dumps(value, ensure_ascii=False)
    text = " ".join(str(value).split())
    return text if len(text) <= ARG_MAX else text[: ARG_MAX - 1] + "…"


class Painter:
    def __init__(self, color: bool) -> None:
        self.color = color

    def error(self, text: str) -> str:
        # An error is one line of words: a provider's JSON body becomes its message.
        from spexsup.adapters.outcome import human

        # Whole escapes first: `human` folds controls to spaces, which would
        # leave an OSC's payload (a title, a clipboard write) as words.
        text = human(printable(text), limit=400)
        return f"{RED}✗ {text}{RESET}" if self.color else f"✗ {text}"

    def note(self, text: str) -> str:
        return f"{DIM}{text}{RESET}" if self.color else text


Render = Callable[[dict[str, Any], Painter], list[str]]


def _claude(e: dict[str, Any], p: Painter) -> list[str]:
    kind = e.get("type")
    if kind == "system" and e.get("subtype") == "init":
        model = f" ({e['model']})" if e.get("model") else ""
        return [p.note(f"· session {e.get('session_id')}{model}")]
    if kind == "assistant":
        out = []
        for part in (e.get("message") or {}).get("content") or []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text" and part.get("text"):
                out.append(str(part["text"]).rstrip())
            elif part.get("type") == "tool_use":
                out.append(f"→ {part.get('name')}: {_short(part.get('input') or '')}")
        if e.get("error"):
            out.append(p.error(str(e["error"])))
        return out
    if kind == "result":
        # (Here, not at the top: `one_line` is on every command's path, the
        # usage module only on one that prints a cost.)
        from spexsup.usage import money

        out = [
            p.error(f"denied: {d.get('tool_name')} {_short(d.get('tool_input') or '')}")
            for d in e.get("permission_denials") or []
            if isinstance(d, dict)
        ]
        subtype = e.get("subtype")
        turns = f"{e['num_turns']} turns" if e.get("num_turns") is not None else ""
        # As show, cost, wave and the web page print a cost (usage.money).
        cost = money(e["total_cost_usd"]) if isinstance(e.get("total_cost_usd"), float) else ""
        extra = ", ".join(x for x in (turns, cost) if x)
        extra = f" ({extra})" if extra else ""
        if subtype == "error_max_turns":
            out.append(p.error(f"stopped at max turns{extra}"))
        elif e.get("is_error"):
            out.append(p.error(f"{e.get('result') or subtype}{extra}"))
        else:
            out.append(p.note(f"✓ done{extra}"))
        return out
    return []


def _codex(e: dict[str, Any], p: Painter) -> list[str]:
    kind = e.get("type")
    if kind == "thread.started":
        return [p.note(f"· thread {e.get('thread_id')}")]
    if kind in ("item.completed", "item.started"):
        item = e.get("item") or {}
        itype = item.get("type")
        if kind == "item.completed" and itype == "agent_message":
            return [str(item.get("text") or "").rstrip()]
        if kind == "item.started" and itype == "command_execution":
            return [f"→ $ {_short(item.get('command') or '')}"]
        if kind == "item.completed" and itype == "file_change":
            changes = ", ".join(str(c.get("path")) for c in item.get("changes") or [])
            return [f"→ edit: {_short(changes)}"]
        if kind == "item.completed" and itype in ("mcp_tool_call", "web_search"):
            return [f"→ {itype}: {_short(item.get('tool') or item.get('query') or '')}"]
        return []
    if kind == "error":
        return [p.error(str(e.get("message")))]
    if kind == "turn.failed":
        error = e.get("error") or {}
        return [
            p.error(f"turn failed: {error.get('message') if isinstance(error, dict) else error}")
        ]
    if kind == "turn.completed":
        return [p.note("✓ turn completed")]
    return []


def _opencode(e: dict[str, Any], p: Painter) -> list[str]:
    kind = e.get("type")
    part = e.get("part") or {}
    if kind == "text":
        return [str(part.get("text") or "").rstrip()]
    if kind == "tool_use":
        state = part.get("state") or {}
        line = f"→ {part.get('tool')}: {_short(state.get('input') or '')}"
        if state.get("status") == "error" and state.get("error"):
            return [line, p.error(_short(state["error"]))]
        return [line]
    if kind == "error":
        error = e.get("error") or {}
        data = error.get("data") if isinstance(error, dict) else None
        message = (data or {}).get("message") if isinstance(data, dict) else None
        return [p.error(str(message or error))]
    return []


def _pi(e: dict[str, Any], p: Painter) -> list[str]:
    kind = e.get("type")
    if kind == "session":
        return [p.note(f"· session {e.get('id')}")]
    if kind == "tool_execution_start":
        return [f"→ {e.get('toolName')}: {_short(e.get('args') or '')}"]
    if kind == "message_end":
        message = e.get("message") or {}
        if message.get("role") != "assistant":
            return []
        content = message.get("content")
        out = [
            str(part["text"]).rstrip()
            for part in (content if isinstance(content, list) else [])
            if isinstance(part, dict) and part.get("type") == "text" and part.get("text")
        ]
        if message.get("stopReason") in ("error", "aborted"):
            out.append(p.error(str(message.get("errorMessage") or message.get("stopReason"))))
        return out
    if kind == "agent_end":
        last = [m for m in e.get("messages") or [] if isinstance(m, dict)][-1:]
        if last and last[0].get("stopReason") in ("error", "aborted"):
            return []  # its error is shown already, and the run is not done
        return [p.note("✓ done")]
    return []


RENDERERS: dict[str, Render] = {
    "claude": _claude,
    "codex": _codex,
    "opencode": _opencode,
    "pi": _pi,
}
# The CLIs whose events carry usage step by step (`budget.Watch.see`);
# codex prints its usage only at the end.
USAGE_PARSERS = ("claude", "opencode", "pi")


def render_line(line: bytes, render: Render | None, painter: Painter) -> list[str]:
    text = line.decode("utf-8", "replace")
    if render is None or not text.lstrip().startswith("{"):
        return [text]
    try:
        event = json.loads(text)
    except ValueError:
        return [text]
    if not isinstance(event, dict) or "type" not in event:
        return [text]
    return render(event, painter)


def shown_lines(line: bytes, cut: int, render: Render | None, painter: Painter) -> list[str]:
    """One line of a turn's output (`cut` bytes of it left out already, as
    `lines.Lines` gives it) as the lines a person reads, each within
    SHOWN_LINE bytes and ending ` … [N bytes cut]` when cut (DESIGN §7
    "Long lines"). A JSON event cut before its end is not parsed: its first
    bytes say what it was."""
    if cut:
        keep = EVENT_HEAD if render is not None and line.lstrip()[:1] == b"{" else SHOWN_LINE
        return [shown(line, keep, cut).decode("utf-8", "replace")]
    return [
        _bounded(part) for text in render_line(line, render, painter) for part in text.split("\n")
    ]


def _bounded(text: str) -> str:
    if len(text) * 4 <= SHOWN_LINE:  # short whatever its characters: no encoding
        return text
    data = text.encode("utf-8", "replace")
    return text if len(data) <= SHOWN_LINE else shown(data, SHOWN_LINE).decode("utf-8", "replace")


def render(chunks: Iterable[bytes], parser: str | None, *, color: bool) -> Iterator[bytes]:
    """The chunks of a turn's output, line by line, rendered for `parser`'s
    CLI (unchanged text when it has none), each line bounded (`shown_lines`).
    Works on a followed stream: a partial last line waits for its end."""
    renderer = RENDERERS.get(parser or "")
    painter = Painter(color)
    lines = Lines()
    for chunk in chunks:
        out = [
            s for line, cut in lines.feed(chunk) for s in shown_lines(line, cut, renderer, painter)
        ]
        if out:
            yield ("\n".join(out) + "\n").encode()
    if (last := lines.end()) is not None:
        yield ("\n".join(shown_lines(*last, renderer, painter)) + "\n").encode()


# What a terminal would act on: CSI sequences (colours, cursor moves), OSC
# strings (titles, links, clipboard writes), other escapes, C0 and C1 controls.
_CONTROL = lazyre.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b.?|[\x00-\x1f\x7f-\x9f]"
)


def printable(text: str) -> str:
    """`text` with every control character and escape sequence removed."""
    return _CONTROL.sub("", text)


def one_line(text: str) -> str:
    """A line spex prints from what an agent or a file said: newlines and tabs
    as spaces, every other control and escape removed (no OSC 52 clipboard
    write, title, screen clear or 8-bit CSI reaches the terminal)."""
    return _CONTROL.sub(_blank_or_nothing, text)


def _blank_or_nothing(m: re.Match[str]) -> str:
    return " " if m.group() in ("\n", "\t", "\r") else ""


_SGR = lazyre.compile(r"\x1b\[[0-9;:]*m")
# The start of an escape a chunk may have cut: ESC, a CSI without its final
# byte, an OSC without its terminator.
_CUT = lazyre.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*)?$")


def _kept_for_terminal(m: re.Match[str]) -> str:
    s = m.group()
    return s if s in ("\n", "\t") or _SGR.fullmatch(s) else ""


def _kept_plain(m: re.Match[str]) -> str:
    return m.group() if m.group() in ("\n", "\t") else ""


class TerminalText:
    """A turn's output made safe for a terminal as it streams (`spex log` on
    one): newlines, tabs and, with `colours`, colours (SGR) stay; every other
    escape and control goes. An escape cut by a chunk boundary waits for its
    end (at most 4 KiB of it)."""

    def __init__(self, *, colours: bool = True) -> None:
        import codecs

        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = ""
        self._keep = _kept_for_terminal if colours else _kept_plain

    def feed(self, data: bytes, *, final: bool = False) -> bytes:
        text = self._pending + self._decoder.decode(data, final)
        self._pending = ""
        cut = None if final else _CUT.search(text, max(0, len(text) - 4096))
        if cut is not None:
            text, self._pending = text[: cut.start()], text[cut.start() :]
        return _CONTROL.sub(self._keep, text).encode("utf-8", "replace")


def readable_tail(path: Path, parser: str | None, size: int = 65536) -> list[str]:
    """The non-empty lines at the end of a turn's output as a person reads
    them: each JSON event rendered for `parser`'s CLI (one with nothing to
    show gives nothing, one that is no event nothing either), escapes
    removed, each line bounded (`shown_lines`). Reads the last `size` bytes
    and the line they start in (`lines.last_lines`); [] when there is no output."""
    renderer = RENDERERS.get(parser or "")
    painter = Painter(False)
    out: list[str] = []
    for line, cut in last_lines(path, size):
        if not cut and renderer is not None and line.lstrip().startswith(b"{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a JSON event is never shown raw
            texts = renderer(event, painter) if isinstance(event, dict) else []
            said = [_bounded(part) for text in texts for part in text.split("\n")]
        else:
            said = shown_lines(line, cut, renderer, painter)
        for text in said:
            out.extend(t for t in (printable(x).strip() for x in text.splitlines()) if t)
    return out


def feed(output_log: str, parser: str, stdin: int = 0, stdout: int = 1) -> int:
    """Copy the harness's output from `stdin` to the turn's output.log as it
    comes, and its rendering to `stdout` (the pane).

    The log comes first and never depends on the pane: a rendering error
    shows the raw bytes instead, and a pane that is gone (EPIPE) only stops
    the rendering. Ctrl-C in the pane is the harness's to handle; this keeps
    draining until the harness's end closes the pipe. A log that fails a
    write (a full disk) is written no more, as tee does, and the pane goes
    on: 1 then (the wrapper counts what the log could not keep), else 0.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def lost(e: OSError) -> None:
        """Say it in the pane (stderr), as tee does: the log stops here."""
        with contextlib.suppress(OSError):
            os.write(2, f"spex: {output_log}: {e.strerror}\n".encode())

    log: int | None
    try:
        log = os.open(output_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    except OSError as e:
        lost(e)
        log = None
    failed = log is None
    renderer = RENDERERS.get(parser)
    painter = Painter(os.isatty(stdout))
    from spexsup.pane.budget import USAGE_WORDS, Watch

    # What the turn spends, counted as the events come: against `spex wake
    # --budget`, and for every reader while it runs (DESIGN §31).
    watch = Watch.of(output_log) if parser in USAGE_PARSERS else None
    lines = Lines()
    showing = True

    def show(data: bytes) -> None:
        nonlocal showing
        while showing and data:
            try:
                data = data[os.write(stdout, data) :]
            except OSError:
                showing = False

    def see(line: bytes, cut: int) -> None:
        try:
            said = shown_lines(line, cut, renderer, painter)
        except Exception:  # a rendering bug must never cost the pane a line
            said = [shown(line, SHOWN_LINE, cut).decode("utf-8", "replace")]
        if said:
            show(("\n".join(said) + "\n").encode())
        if (
            watch is not None
            and not cut
            and line[:1] == b"{"
            and any(w in line for w in USAGE_WORDS)
        ):
            try:
                event = json.loads(line)
                if isinstance(event, dict):
                    watch.see(event)
            except Exception:  # a budget's bookkeeping must never cost the pane a line
                pass

    while True:
        try:
            chunk = os.read(stdin, 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        if log is not None:
            try:
                written = 0
                while written < len(chunk):
                    written += os.write(log, chunk[written:])
            except OSError as e:
                lost(e)
                os.close(log)
                log, failed = None, True
        for line, cut in lines.feed(chunk):
            see(line, cut)
    if (last := lines.end()) is not None:
        see(*last)
    if log is not None:
        os.close(log)
    return 1 if failed else 0


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 4 or sys.argv[1] != "feed":
        print("usage: python -m spexsup.pane.pretty feed OUTPUT_LOG PARSER", file=sys.stderr)
        sys.exit(2)
    sys.exit(feed(sys.argv[2], sys.argv[3]))
