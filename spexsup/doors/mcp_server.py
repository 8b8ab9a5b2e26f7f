"""`spex mcp`: the Model Context Protocol over stdio, on the official SDK's MCPServer.

Every tool runs the CLI itself, `spex … --json` in a process of its own,
and hands back what it printed: the same documents (`schema_version`
included), the same one-line message and exit code for a refusal or a
failure (as a tool error, `isError: true`), and the same admission, bounds
and byte-exact prompt delivery (the prompt goes on stdin, `-f -`). Nothing
here decides anything. Why a process per call rather than the core in
process: wake, wait, stop and fanout install signal handlers and block,
which the event loop's thread cannot do; each call is then as independent,
as interruptible (SIGTERM, the CLI's own clean-up) and as bounded as a
command a person types, and no second way to build a document exists.

A call the client cancels, or one in flight when the server ends (stdin
closed, SIGINT, SIGTERM), sends its `spex` SIGTERM, which it handles as it
does a Ctrl-C, and SIGKILL `STOP_GRACE` seconds later.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import json
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
from anyio.abc import ByteReceiveStream, Process
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    CallToolResult,
    ContentBlock,
    Resource,
    TextContent,
    ToolAnnotations,
)
from pydantic import Field

from spexsup import __version__
from spexsup.doors.commands import MIRRORS, Duration, Mirror, duration
from spexsup.doors.commands import parameters as mirrored_parameters
from spexsup.doors.commands import signature as mirrored_signature
from spexsup.doors.commands import words as mirrored_words
from spexsup.errors import clip
from spexsup.pane.pretty import TerminalText

# What `--read-only` offers; the others change something and are not offered at all.
READING = (
    "list_sessions",
    "show_session",
    "wait",
    "read_log",
    "show_wave",
    "events_since",
    "list_queue",
    "list_schedules",
    "cost",
    "diff",
)
CHANGING = (
    "wake",
    "stop",
    "resume",
    "fanout",
    "retry_failed",
    "new_session",
    "edit_session",
    "remove_sessions",
    "drop_queued",
    "add_schedule",
    "remove_schedules",
    "keep",
)
# A cancelled call's spex gets this long after SIGTERM (a fan-out's own hard exit is 8 s).
STOP_GRACE = 10.0
# The longest `wait` a client may ask for, in seconds.
MAX_WAIT = 3600
LOG_URI = "spex://sessions/{name}/log"


@dataclass(frozen=True)
class Bound:
    """The most UTF-8 bytes one argument may carry to the CLI's command line,
    and what the argument is (said when it is over)."""

    limit: int
    what: str


# Every argument a tool puts on the CLI's command line, by parameter name (a
# list's bound is each item's; one not named here is bounded by VALUE). The
# kernel refuses one word over 128 KiB and a command line over ARG_MAX
# (E2BIG): these keep every call far below both and say which argument was
# over. A prompt goes on stdin (the CLI's
# 1 MiB bound applies there).
WORD = 256  # a session name is 1-64 characters, HOST:NAME 129; an id 64
BOUNDS = {
    "name": Bound(WORD, "a session name"),
    "names": Bound(WORD, "a session name"),
    "session": Bound(WORD, "a session name"),
    "match": Bound(1024, "a glob of session names"),
    "state": Bound(WORD, "a state"),
    "kind": Bound(WORD, "an event kind"),
    "turn": Bound(WORD, "a turn id"),
    "wave": Bound(WORD, "a wave id"),
    "since": Bound(WORD, "an event id, a duration or a time"),
    "window": Bound(WORD, "a duration"),
    "timeout": Bound(WORD, "a duration"),
    "grace": Bound(WORD, "a duration"),
    "key": Bound(1024, "a key of at most 200 characters"),
    "verify": Bound(64 * 1024, "a check command"),
    "on_complete": Bound(64 * 1024, "a command"),
    "args": Bound(64 * 1024, "an argument of the harness"),
}
# Any other string argument (a path, a model, a cron expression…): PATH_MAX.
VALUE = Bound(4096, "a value")
# The most items a list argument (names, session, kind) may hold.
MAX_ITEMS = 1000

INSTRUCTIONS = """\
spex supervises coding-agent sessions in tmux panes. wake starts a turn and
returns its verdict (confirmed: still running, completed, failed with the
reason); wait blocks until turns end; read_log shows a turn's output. Each
tool returns the JSON document `spex … --json` prints; a refusal or failure
is a tool error carrying spex's one-line message and its exit code (1
failed, 2 invalid input, 3 refused, 124 timed out)."""


@dataclass(frozen=True)
class Ran:
    """What one `spex` command did: its exit code and both outputs, as bytes."""

    code: int
    stdout: bytes
    stderr: bytes


class Runner:
    """Runs `spex WORDS…` as the server was started: the same interpreter,
    environment, `--home` and `--no-hooks`."""

    def __init__(self, options: Sequence[str]) -> None:
        self.argv = [sys.executable, "-m", "spexsup", *options]

    async def run(self, words: Sequence[str], stdin: bytes | None = None) -> Ran:
        """Run to the end; `stdin` (a prompt) is written whole, then closed.
        Never the server's own stdin or stdout, which carry the protocol. A
        word with a NUL byte cannot be an argument: exit 2, as the CLI
        refuses a prompt with one."""
        for word in words:
            if "\0" in word:
                said = f"spex: {clip(repr(word))} contains a NUL byte (arguments are NUL-free text)"
                return Ran(2, b"", said.encode() + b"\n")
        try:
            process = await anyio.open_process(
                [*self.argv, *words],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as e:  # BOUNDS keep E2BIG away; a full process table does not
            code = 2 if e.errno == errno.E2BIG else 1
            return Ran(code, b"", f"spex: cannot run spex: {e.strerror}\n".encode())
        out, err = bytearray(), bytearray()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_feed, process, stdin or b"")
                assert process.stdout is not None and process.stderr is not None
                tg.start_soon(_drain, process.stdout, out)
                tg.start_soon(_drain, process.stderr, err)
            code = await process.wait()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await _end(process)
            raise
        await process.aclose()
        return Ran(code, bytes(out), bytes(err))


def over_bound(arguments: Mapping[str, object]) -> Ran | None:
    """Exit 2 with spex's one line if an argument is over its `BOUNDS` (or a
    list over MAX_ITEMS), naming it and its bound, or holds a NUL byte (argv
    cannot carry one: said of the value, as the CLI says it of a prompt);
    else None."""
    for key, value in arguments.items():
        if key == "prompt":
            continue  # on stdin, under the CLI's own 1 MiB bound
        bound = BOUNDS.get(key, VALUE)
        items = value if isinstance(value, list) else [value]
        if len(items) > MAX_ITEMS:
            said = f"{key} has {len(items)} items, over its bound of {MAX_ITEMS}"
            return Ran(2, b"", f"spex: {said}\n".encode())
        for item in items:
            size = len(item.encode("utf-8", "surrogatepass")) if isinstance(item, str) else 0
            if size > bound.limit:
                said = f"{key} is {size} bytes, over its bound of {bound.limit} ({bound.what})"
                return Ran(2, b"", f"spex: {said}\n".encode())
            if isinstance(item, str) and "\0" in item:
                said = f"{clip(repr(item))} contains a NUL byte (arguments are NUL-free text)"
                return Ran(2, b"", f"spex: {said}\n".encode())
    return None


def bounded(tool: Callable[..., Awaitable[CallToolResult]]) -> Callable[..., Any]:
    """`tool`, answering a call with an argument over its bound as a tool
    error (exit code 2) before any spex runs. The SDK reads the schema
    through `__wrapped__`."""

    @functools.wraps(tool)
    async def checked(**arguments: Any) -> CallToolResult:
        refused = over_bound(arguments)
        return result(refused) if refused else await tool(**arguments)

    return checked


async def _feed(process: Process, data: bytes) -> None:
    assert process.stdin is not None
    try:
        if data:
            await process.stdin.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # it exited (refused) before reading it all: its exit says why
    finally:
        await process.stdin.aclose()


async def _drain(stream: ByteReceiveStream, into: bytearray) -> None:
    async for chunk in stream:
        into += chunk


async def _end(process: Process) -> None:
    """SIGTERM (the CLI cleans up as on Ctrl-C), SIGKILL after STOP_GRACE."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with anyio.move_on_after(STOP_GRACE):
            await process.wait()
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
    await process.aclose()


# --- what a tool returns ------------------------------------------------------


def documents(stdout: str, json_lines: bool = False) -> Any:
    """The JSON `spex --json` printed: one document (an object or a list),
    or with `json_lines` a list of one document a line. None if not JSON."""
    try:
        if json_lines:
            return [json.loads(line) for line in stdout.splitlines() if line.strip()]
        return json.loads(stdout) if stdout.strip() else None
    except ValueError:
        return None


def message(ran: Ran, doc: Any) -> str:
    """The CLI's own words for a refusal or failure: its `spex: …` lines on
    stderr, else (a wake's failed verdict says it only in the document) the
    document's `error`."""
    said = ran.stderr.decode("utf-8", "replace").strip()
    if said:
        return said
    if isinstance(doc, dict) and doc.get("error"):
        return f"spex: {doc['error']}"
    return "spex: not every turn ended complete" if isinstance(doc, list) else "spex: failed"


def result(ran: Ran, text: str | None = None, *, json_lines: bool = False) -> CallToolResult:
    """A tool's answer: the output as the CLI printed it (or `text`), and the
    document as structured content (a list as `{"result": [...]}`, the SDK's
    form: structured content is an object); a non-zero exit is a tool error
    whose first text is the message and the exit code. With `json_lines`
    (one document a line, as `spex events --json` prints), the text is the
    JSON array of them, as every list tool's is."""
    out = ran.stdout.decode("utf-8", "replace")
    doc = documents(out, json_lines)
    if json_lines and isinstance(doc, list) and text is None:
        out = json.dumps(doc)
    content: list[ContentBlock] = [
        TextContent(type="text", text=(out if text is None else text).rstrip("\n"))
    ]
    if ran.code != 0:
        said = f"{message(ran, doc)} (exit code {ran.code})"
        content.insert(0, TextContent(type="text", text=said))
    elif ran.stderr.strip():  # notes and warnings
        content.append(TextContent(type="text", text=ran.stderr.decode("utf-8", "replace")))
    content = [c for c in content if not isinstance(c, TextContent) or c.text]
    structured = {"result": doc} if isinstance(doc, list) else doc
    if ran.code != 0 and structured is None:
        # A command with no --json (log): its line, as --json would have put it.
        line = message(ran, doc).partition("\n")[0].removeprefix("spex: ")
        structured = {"schema_version": 1, "ok": False, "error": line, "exit_code": ran.code}
    return CallToolResult(
        content=content,
        structured_content=structured if isinstance(structured, dict) else None,
        is_error=ran.code != 0,
    )


def readable(data: bytes) -> str:
    """A turn's output as `spex log` shows it on a terminal, without colours:
    the agent's escapes and controls removed, newlines and tabs kept."""
    return TerminalText(colours=False).feed(data, final=True).decode("utf-8", "replace")


def option(name: str, value: Duration | None) -> list[str]:
    return [] if value is None else [name, duration(value)]


def typed(command: str, names: Sequence[str], options: Sequence[str]) -> list[str]:
    """`COMMAND NAME… OPTIONS…` as a person types it: a `HOST:NAME` there is
    run on its host by the CLI's router, which reads names before `--`. A
    name that starts with `-` goes after `--`, where the CLI refuses it as a
    name rather than reading it as an option."""
    if any(n.startswith("-") for n in names):
        return [command, *options, "--", *names]
    return [command, *names, *options]


def many(name: str, values: Sequence[str] | None) -> list[str]:
    return [w for v in values or () for w in (name, v)]


# --- the server -----------------------------------------------------------------

DURATION_HELP = "a duration: 5 (seconds), 90s, 15m, 2h"
Name = Annotated[str, Field(description="The session's name (HOST:NAME for another host).")]
Names = Annotated[list[str], Field(description="Session names.", min_length=1)]


class SpexServer(MCPServer[Any]):
    """MCPServer whose resources are the sessions' logs, listed as they are now."""

    def __init__(self, runner: Runner, read_only: bool) -> None:
        super().__init__(
            "spex", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
        )
        self.runner = runner
        self.read_only = read_only

    async def list_resources(self) -> list[Resource]:
        ran = await self.runner.run(["ls", "--json"])
        doc = documents(ran.stdout.decode("utf-8", "replace"))
        if ran.code != 0 or not isinstance(doc, list):
            raise MCPError(INTERNAL_ERROR, message(ran, doc))
        return [
            Resource(
                uri=LOG_URI.format(name=s["name"]),
                name=f"{s['name']} log",
                title=f"{s['name']}: its current turn's output",
                description=f"The output of session {s['name']}'s current or last turn"
                f" ({s['state']}), as spex log shows it.",
                mime_type="text/plain",
            )
            for s in doc
            if isinstance(s, dict) and isinstance(s.get("name"), str)
        ]


# A tool, and a door's tools by name.
Tool = Callable[..., Awaitable[CallToolResult]]
Tools = dict[str, Tool]


def _reading_tools(run: Callable[..., Awaitable[Ran]]) -> Tools:
    """The tools that only read (READING), each a `spex … --json` run."""

    async def list_sessions(
        match: Annotated[
            str | None, Field(description="Only sessions whose name matches this glob.")
        ] = None,
        state: Annotated[
            str | None,
            Field(description="Only sessions in this state (idle, running, failed, stopped…)."),
        ] = None,
    ) -> CallToolResult:
        """Every session with its state and current or last turn: `spex ls --json`."""
        return result(
            await run(["ls", "--json", *option("--match", match), *option("--state", state)])
        )

    async def show_session(name: Name) -> CallToolResult:
        """One session in full, its turns included: `spex show NAME --json`."""
        return result(await run(typed("show", [name], ["--json"])))

    async def wait(
        names: Names,
        timeout: Annotated[
            Duration,
            Field(
                description=f"Give up after this long ({DURATION_HELP}; at most 1h): a tool"
                " error with exit code 124, as spex wait --timeout says it; the turns run on."
            ),
        ] = 60,
    ) -> CallToolResult:
        """Block until each session's current turn ends, then each turn's document:
        `spex wait NAMES --timeout T --json`. Exit code 1 (a tool error) when any
        turn did not end complete; each turn's rc and state are in the result."""
        from spexsup import durations
        from spexsup.errors import Invalid

        try:  # the door's own bound: a tool call must not hold its client an hour
            durations.parse(timeout, "timeout", allow_zero=True, maximum=MAX_WAIT)
        except Invalid as e:
            return result(Ran(2, b"", f"spex: {e.line()}\n".encode()))
        return result(await run(typed("wait", names, ["--json", "--timeout", duration(timeout)])))

    async def show_wave(
        wave: Annotated[str, Field(description="A wave id, a prefix of one, or last.")] = "last",
    ) -> CallToolResult:
        """A fan-out wave and each of its legs: `spex wave WAVE --json`."""
        return result(await run(typed("wave", [wave], ["--json"])))

    return {
        "list_sessions": list_sessions,
        "show_session": show_session,
        "wait": wait,
        "show_wave": show_wave,
    }


def _output_tools(run: Callable[..., Awaitable[Ran]]) -> Tools:
    """The reading tools that page through output: a turn's log, the event log."""

    async def read_log(
        name: Name,
        tail: Annotated[
            int | None,
            Field(description="Only the last N lines (null: the whole output).", ge=0),
        ] = 200,
        pretty: Annotated[
            bool,
            Field(
                description="Render claude/codex/opencode/pi JSON events as text: assistant"
                " text, one line per tool call, errors marked (as spex log --pretty)."
            ),
        ] = False,
        turn: Annotated[
            str | None,
            Field(description="Another turn: an id, a prefix of one, last or last~N."),
        ] = None,
    ) -> CallToolResult:
        """A turn's output, as `spex log NAME [--tail N] [--pretty]` shows it on a
        terminal (the agent's escape sequences removed)."""
        words = ["log", *option("--turn", turn), *(["--pretty"] if pretty else [])]
        words += [] if tail is None else ["--tail", str(tail)]
        ran = await run(typed(words[0], [name], words[1:]))
        return result(ran, readable(ran.stdout) if ran.code == 0 else None)

    async def events_since(
        since: Annotated[
            str | None,
            Field(
                description="After this event id (the last id you saw), or those of the last"
                " DURATION (15m), or since an ISO time; null: from the oldest kept."
            ),
        ] = None,
        session: Annotated[
            list[str] | None, Field(description="Only events of these sessions.")
        ] = None,
        kind: Annotated[
            list[str] | None,
            Field(description="Only events of these kinds (launched, completed, failed…)."),
        ] = None,
        limit: Annotated[
            int,
            Field(
                description="At most this many events, the oldest first; call again with"
                " since = the last id for the next ones.",
                ge=1,
                le=10000,
            ),
        ] = 500,
    ) -> CallToolResult:
        """The event log after a point: `spex events --since ID --json`, one
        document per event (a `pruned` one first if events after ID were pruned)."""
        words = ["events", "--json", *option("--since", since)]
        ran = await run([*words, *many("--session", session), *many("--kind", kind)])
        if ran.code != 0:
            return result(ran)  # the failure document
        lines = ran.stdout.splitlines(keepends=True)
        kept = Ran(ran.code, b"".join(lines[:limit]), ran.stderr)
        answer = result(kept, json_lines=True)
        if len(lines) > limit:
            last = documents(lines[limit - 1].decode("utf-8", "replace"))
            after = last.get("id") if isinstance(last, dict) else None
            more = f"{len(lines) - limit} more: call again with since={after}"
            answer.content.append(TextContent(type="text", text=more))
        return answer

    return {"read_log": read_log, "events_since": events_since}


def _acting_tools(run: Callable[..., Awaitable[Ran]]) -> Tools:
    """The tools that change something (CHANGING): not served `read_only`."""

    async def stop(
        names: Names,
        grace: Annotated[
            Duration | None,
            Field(description=f"SIGTERM, then SIGKILL after this long ({DURATION_HELP})."),
        ] = None,
    ) -> CallToolResult:
        """Abort each session's running turn and take no new turns until resume:
        `spex stop NAMES --json`. The conversation is kept."""
        return result(await run(typed("stop", names, ["--json", *option("--grace", grace)])))

    async def resume(
        name: Name,
        prompt: Annotated[
            str | None, Field(description="Then wake it with this prompt (byte for byte).")
        ] = None,
        force: Annotated[
            bool, Field(description="Resume even if an old turn may still run.")
        ] = False,
    ) -> CallToolResult:
        """Let a stopped session take turns again; with a prompt, also wake it:
        `spex resume NAME [-f -] --json`."""
        words = ["resume", "--json", *(["--force"] if force else [])]
        if prompt is None:
            return result(await run(typed(words[0], [name], words[1:])))
        return result(await run(typed(words[0], [name], [*words[1:], "-f", "-"]), prompt.encode()))

    return {"stop": stop, "resume": resume}


def build(runner: Runner, *, read_only: bool = False) -> SpexServer:
    """The server with its tools: all of them, or with `read_only` only READING."""
    server = SpexServer(runner, read_only)
    run = runner.run
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.resource(
        LOG_URI,
        name="session log",
        description="The output of a session's current or last turn, as spex log shows it.",
        mime_type="text/plain",
    )
    async def session_log(name: str) -> str:
        # `--help` is a bad name, not an option
        ran = over_bound({"name": name}) or await run(typed("log", [name], []))
        if ran.code != 0:
            raise ResourceError(message(ran, None))
        return readable(ran.stdout)

    tools = {**_reading_tools(run), **_output_tools(run), **_acting_tools(run)}
    tools.update({m.name: mirrored(m, run) for m in MIRRORS})
    keeps = ToolAnnotations(destructive_hint=False, open_world_hint=False)
    removes = ToolAnnotations(destructive_hint=True, open_world_hint=False)
    stops = ToolAnnotations(destructive_hint=True, idempotent_hint=True, open_world_hint=False)
    ends = ("remove_sessions", "drop_queued", "remove_schedules", "keep")
    for name in (*READING, *(() if read_only else CHANGING)):
        hints = reads if name in READING else removes if name in ends else keeps
        server.add_tool(
            bounded(tools[name]),
            name=name,
            description=prose(tools[name].__doc__ or ""),
            annotations=stops if name == "stop" else hints,
        )
    return server


def mirrored(mirror: Mirror, run: Callable[..., Awaitable[Ran]]) -> Tool:
    """The tool that runs `mirror`'s command: its parameters are the
    command's own (`spexsup.doors.commands`), given to the SDK as the
    function's `__signature__`, which `inspect.signature` (and so the SDK's
    schema and validation) reads in place of the `**arguments` below."""
    given = mirrored_parameters(mirror)

    async def call(**arguments: Any) -> CallToolResult:
        said = mirrored_words(given, arguments)
        options = [*said.options, *(["-f", "-"] if mirror.prompt else []), "--json"]
        words = [*mirror.words[:-1], *typed(mirror.words[-1], said.names, options)]
        words += ["--", *said.rest] if said.rest else []
        prompt = arguments.get("prompt")
        return result(await run(words, prompt.encode() if isinstance(prompt, str) else None))

    call.__name__ = call.__qualname__ = mirror.name
    call.__doc__ = mirror.description
    call.__signature__ = mirrored_signature(mirror, given, CallToolResult)  # type: ignore[attr-defined]
    return call


def prose(doc: str) -> str:
    """A docstring as a tool's description: its paragraphs, each one line."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def serve(options: Sequence[str], *, read_only: bool = False) -> int:
    """Serve on stdin/stdout until the client closes stdin (0) or a SIGINT or
    SIGTERM (130, 143); `options` are the global ones each `spex` gets."""
    server = build(Runner(options), read_only=read_only)
    code = 0

    async def main() -> None:
        nonlocal code
        async with anyio.create_task_group() as tg:

            async def on_signal() -> None:
                nonlocal code
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        code = 128 + signum
                        tg.cancel_scope.cancel()

            tg.start_soon(on_signal)
            await server.run_stdio_async()
            tg.cancel_scope.cancel()

    anyio.run(main)
    return code


__all__ = ["BOUNDS", "CHANGING", "MAX_ITEMS", "READING", "Runner", "build", "serve"]
