"""`spex mcp`, driven by the MCP SDK's own client over stdio, as an agent drives it.

Each test starts the installed `spex mcp` under the test's home and tmux
socket and compares what a tool returns with what `spex … --json` prints
for the same thing: the same documents, the same message and exit code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from conftest import SPEX, Env, harness, retry_until
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from spexsup.doors.mcp_server import BOUNDS, CHANGING, MAX_ITEMS, READING, VALUE

TRICKY = "say \"hi\" 'there'\n$(touch /tmp/nope) `id` -lead\ttab é ✓ \\ {x}\n\nend"


@asynccontextmanager
async def connected(env: Env, *options: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=SPEX, args=["mcp", *options], env=env.vars)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def drive(env: Env, body: Callable[[ClientSession], Awaitable[None]], *options: str) -> None:
    async def main() -> None:
        async with connected(env, *options) as session:
            await body(session)

    anyio.run(main)


def texts(result: CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, TextContent)]


def cli(env: Env, *args: str, input: bytes | None = None) -> tuple[int, Any]:
    r = env.run(*args, input=input)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else None


def lines(env: Env, *args: str) -> list[Any]:
    return [json.loads(line) for line in env.run(*args).stdout.splitlines()]


def test_the_cli_start_up_imports_no_sdk(env: Env) -> None:
    """`spex --help` builds every command, `spex mcp`'s too, and imports none
    of the SDK's stack: it loads only inside `spex mcp`."""
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "spexsup", "--help"],
        capture_output=True,
        text=True,
        env=env.vars,
        check=True,
    )
    assert "  mcp  " in r.stdout
    loaded = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in r.stderr.splitlines()}
    assert "spexsup" in loaded
    heavy = {"mcp", "mcp_types", "pydantic", "pydantic_core", "anyio", "starlette", "uvicorn"}
    assert loaded & heavy == set()


def test_tools_with_typed_described_inputs_and_read_only_offers_only_reading(env: Env) -> None:
    async def every(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {*READING, *CHANGING}
        for tool in tools.values():
            assert tool.description, tool.name
            for name, prop in tool.input_schema["properties"].items():
                assert prop.get("description"), (tool.name, name)
        wake = tools["wake"].input_schema
        assert set(wake["required"]) == {"name", "prompt"}
        assert {"window", "timeout", "strict", "fresh", "key", "queue"} <= set(wake["properties"])
        wait = tools["wait"].input_schema["properties"]["timeout"]
        assert {t["type"] for t in wait["anyOf"]} == {"string", "number"}, wait
        assert tools["list_sessions"].annotations is not None
        assert tools["list_sessions"].annotations.read_only_hint is True
        assert tools["stop"].annotations is not None
        assert tools["stop"].annotations.destructive_hint is True

    async def reading(session: ClientSession) -> None:
        tools = {t.name for t in (await session.list_tools()).tools}
        assert tools == set(READING)
        for name in CHANGING:
            refused = await session.call_tool(name, {"name": "d", "prompt": "hi"})
            assert refused.is_error and "Unknown tool" in texts(refused)[0], name
        listed = await session.call_tool("list_sessions", {})
        assert not listed.is_error and listed.structured_content == {"result": []}

    drive(env, every)
    drive(env, reading, "--read-only")
    assert env.run("ls", "-q").stdout == ""


def test_the_global_home_reaches_every_call(env: Env) -> None:
    """`spex --home DIR mcp` drives DIR's sessions, whatever SPEXSUP_HOME says."""
    other = env.root / "other"
    r = env.run("--home", str(other), "--create", "new", "o", "--harness", "demo")
    assert r.returncode == 0, r.stderr
    assert env.run("new", "mine", "--harness", "demo").returncode == 0

    async def body(session: ClientSession) -> None:
        listed = await session.call_tool("list_sessions", {})
        assert listed.structured_content is not None
        assert [s["name"] for s in listed.structured_content["result"]] == ["o"]

    drive(env, body, "--home", str(other))  # anywhere on the line, as every command takes it
    r = env.run("--home", str(env.root / "nowhere"), "mcp")
    assert r.returncode == 2 and r.stderr.startswith("spex: ") and r.stderr.count("\n") == 1


def test_wake_wait_read_log_are_the_cli_documents(env: Env) -> None:
    assert env.run("new", "d", "--harness", "demo").returncode == 0
    got: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        woke = await session.call_tool("wake", {"name": "d", "prompt": "hi", "window": 0.1})
        assert not woke.is_error, texts(woke)
        got["wake"] = woke.structured_content
        assert json.loads(texts(woke)[0]) == woke.structured_content  # the line it printed
        waited = await session.call_tool("wait", {"names": ["d"], "timeout": 30})
        assert not waited.is_error, texts(waited)
        got["wait"] = waited.structured_content
        logged = await session.call_tool("read_log", {"name": "d", "tail": 2})
        assert not logged.is_error and logged.structured_content is None
        got["log"] = texts(logged)[0]
        shown = await session.call_tool("show_session", {"name": "d"})
        got["show"] = shown.structured_content
        listed = await session.call_tool("list_sessions", {"match": "d*"})
        got["ls"] = listed.structured_content

    drive(env, body)
    wake = got["wake"]
    assert wake["schema_version"] == 1 and wake["ok"] is True and wake["session"] == "d"
    assert wake["verdict"] == "confirmed", wake
    # The same shape as the CLI's own wake prints, field for field.
    assert env.run("new", "e", "--harness", "demo").returncode == 0
    code, mine = cli(env, "wake", "e", "hi", "--window", "0.1", "--json")
    assert code == 0 and list(mine) == list(wake)
    # The turn has ended: the CLI's documents of it now are the tool's.
    assert got["wait"] == {"result": cli(env, "wait", "d", "--json")[1]}
    (ended,) = got["wait"]["result"]
    assert (ended["turn"], ended["state"], ended["rc"]) == (wake["turn"], "complete", 0)
    assert got["log"] == env.run("log", "d", "--tail", "2").stdout.rstrip("\n")
    assert got["log"].startswith("... writing the answer\nanswer: done with 'hi'")
    assert got["show"] == cli(env, "show", "d", "--json")[1]
    assert got["ls"] == {"result": [cli(env, "ls", "d", "--json")[1][0]]}


def test_refusals_and_bad_input_are_tool_errors_with_the_cli_message_and_code(
    env: Env,
) -> None:
    assert env.run("new", "d", "--harness", "demo").returncode == 0
    assert env.run("new", "slow", "--", "bash", "-c", "sleep 30").returncode == 0
    assert env.run("stop", "d").returncode == 0
    assert cli(env, "wake", "slow", "x", "--window", "0.2", "--json")[0] == 0
    calls: list[tuple[str, dict[str, Any], list[str], int]] = [
        ("wake", {"name": "d", "prompt": "hi"}, ["wake", "d", "hi"], 3),
        ("wake", {"name": "nosuch", "prompt": "hi"}, ["wake", "nosuch", "hi"], 3),
        ("wake", {"name": "bad/name", "prompt": "hi"}, ["wake", "bad/name", "hi"], 2),
        ("wake", {"name": "slow", "prompt": "hi"}, ["wake", "slow", "hi"], 3),
        ("wake", {"name": "d", "prompt": "x", "window": "a"}, ["wake", "d", "x", "--window=a"], 2),
        ("show_session", {"name": "nosuch"}, ["show", "nosuch"], 3),
        ("wait", {"names": ["slow"], "timeout": 0.2}, ["wait", "slow", "--timeout", "0.2"], 124),
        ("read_log", {"name": "nosuch"}, ["log", "nosuch"], 3),
        ("show_wave", {"wave": "nosuch"}, ["wave", "nosuch"], 3),
        ("events_since", {"since": "yesterday"}, ["events", "--since", "yesterday"], 2),
        # HOST:NAME reaches the CLI's router, as typed (an unknown host is 3, as an
        # unknown session); a dashed name is a name.
        ("wake", {"name": "box1:d", "prompt": "hi"}, ["wake", "box1:d", "hi"], 3),
        ("show_session", {"name": "box1:d"}, ["show", "box1:d"], 3),
        ("stop", {"names": ["d", "box1:d"]}, ["stop", "d", "box1:d"], 3),
        ("show_session", {"name": "-d"}, ["show", "--json", "--", "-d"], 2),
    ]  # fmt: skip
    answers: list[CallToolResult] = []

    async def body(session: ClientSession) -> None:
        for tool, arguments, _, _ in calls:
            answers.append(await session.call_tool(tool, arguments))
        # Busy, with queue: the prompt is kept (exit 0), as wake --queue keeps it.
        queued = await session.call_tool("wake", {"name": "slow", "prompt": "hi", "queue": True})
        assert not queued.is_error and queued.structured_content is not None, texts(queued)
        assert queued.structured_content["verdict"] == "queued"
        # A bad argument's type never reaches spex: the SDK's validation says so.
        typed = await session.call_tool("wait", {"names": ["d"], "timeout": 99999})
        assert typed.is_error and "timeout" in texts(typed)[0]

    drive(env, body)
    for (tool, _, words, code), answer in zip(calls, answers, strict=True):
        r = env.run(*words) if "--json" in words else env.run(*words, "--json")
        assert r.returncode == code, (words, r.stderr)
        line = r.stderr.strip()
        assert line.startswith("spex: ") and line.count("\n") == 0, line
        assert answer.is_error, (tool, texts(answer))
        assert texts(answer)[0] == f"{line} (exit code {code})", (tool, texts(answer))
        doc = answer.structured_content
        assert doc == {**json.loads(r.stdout), "exit_code": code}, (tool, doc)
        assert doc["ok"] is False and doc["exit_code"] == code


def test_a_nul_byte_in_an_argument_is_invalid_input(env: Env) -> None:
    """argv cannot carry a NUL: the call is refused with exit code 2, as the
    CLI refuses a prompt with one, instead of failing inside the server."""
    assert env.run("new", "d", "--harness", "demo").returncode == 0
    answers: list[CallToolResult] = []

    async def body(session: ClientSession) -> None:
        answers.append(await session.call_tool("show_session", {"name": "d\0"}))
        answers.append(await session.call_tool("wake", {"name": "d", "prompt": "x", "key": "\0"}))

    drive(env, body)
    for answer, word in zip(answers, ["'d\\x00'", "'\\x00'"], strict=True):
        said = f"spex: {word} contains a NUL byte (arguments are NUL-free text)"
        assert answer.is_error and texts(answer)[0] == f"{said} (exit code 2)", texts(answer)
        assert answer.structured_content == {
            "schema_version": 1,
            "ok": False,
            "error": said.removeprefix("spex: "),
            "exit_code": 2,
        }
    assert env.run("show", "d", "--json").stdout.count('"turn": null') == 1


def test_every_argument_over_its_bound_is_spex_own_invalid_input(env: Env) -> None:
    """A 200 KB match was `Error executing tool` and E2BIG's traceback (one
    argv word over the kernel's 128 KiB): every argument the door puts on the
    command line has a bound, and a call over it is a tool error naming the
    argument and its bound, exit code 2, before any spex runs."""
    assert env.run("new", "d", "--harness", "demo").returncode == 0
    big = "x" * 200_000
    over = {key: "y" * (bound.limit + 1) for key, bound in BOUNDS.items()}
    calls: list[tuple[str, dict[str, Any], str]] = [
        ("list_sessions", {"match": big}, "match is 200000 bytes, over its bound of 1024"),
        ("list_sessions", {"state": over["state"]}, "state is 257 bytes"),
        ("show_session", {"name": big}, "name is 200000 bytes"),
        ("read_log", {"name": "d", "turn": over["turn"]}, "turn is 257 bytes"),
        ("show_wave", {"wave": over["wave"]}, "wave is 257 bytes"),
        ("events_since", {"since": over["since"]}, "since is 257 bytes"),
        ("events_since", {"session": ["d", big]}, "session is 200000 bytes"),
        ("events_since", {"kind": [over["kind"]]}, "kind is 257 bytes"),
        ("wait", {"names": ["d", big]}, "names is 200000 bytes"),
        ("stop", {"names": ["d"] * (MAX_ITEMS + 1)}, f"names has {MAX_ITEMS + 1} items"),
        ("stop", {"names": ["d"], "grace": over["grace"]}, "grace is 257 bytes"),
        ("wake", {"name": "d", "prompt": "x", "key": "é" * 600}, "key is 1200 bytes"),
        ("wake", {"name": "d", "prompt": "x", "window": big}, "window is 200000 bytes"),
        ("wake", {"name": "d", "prompt": "x", "timeout": big}, "timeout is 200000 bytes"),
        ("wake", {"name": "d", "prompt": "x", "verify": big}, "verify is 200000 bytes"),
        ("resume", {"name": big}, "name is 200000 bytes"),
        ("fanout", {"prompt": "x", "match": big}, "match is 200000 bytes"),
        ("fanout", {"prompt": "x", "names": ["d", big]}, "names is 200000 bytes"),
    ]
    answers: list[CallToolResult] = []

    async def body(session: ClientSession) -> None:
        for listed in (await session.list_tools()).tools:
            props = listed.input_schema["properties"]
            words = {k for k, v in props.items() if "string" in json.dumps(v)}
            words -= {"prompt"}  # on stdin, under the CLI's 1 MiB
            # Every other string argument has a bound: its own, else VALUE's.
            required = {k: ["d"] if "array" in json.dumps(props[k]) else "d"
                        for k in listed.input_schema.get("required", [])}  # fmt: skip
            for word in sorted(words):
                limit = BOUNDS.get(word, VALUE).limit
                many = "array" in json.dumps(props[word])
                value = "z" * (limit + 1)
                arguments = {**required, word: [value] if many else value}
                said = f"{word} is {limit + 1} bytes, over its bound of {limit}"
                calls.append((listed.name, arguments, said))
        for tool, arguments, _ in calls:
            answers.append(await session.call_tool(tool, arguments))
        at = await session.call_tool("list_sessions", {"match": "d" + "*" * 1023})
        assert not at.is_error and at.structured_content is not None, texts(at)
        assert [s["name"] for s in at.structured_content["result"]] == ["d"]
        with pytest.raises(Exception, match="name is 257 bytes"):
            await session.read_resource(f"spex://sessions/{over['name']}/log")

    drive(env, body)
    for (tool, _, said), answer in zip(calls, answers, strict=True):
        first = texts(answer)[0]
        assert answer.is_error, (tool, first[:300])
        assert first.startswith(f"spex: {said}") and first.endswith(" (exit code 2)"), first
        assert first.count("\n") == 0 and "Traceback" not in "".join(texts(answer))
        assert answer.structured_content is not None
        assert answer.structured_content["exit_code"] == 2
    shown = json.loads(env.run("show", "d", "--json").stdout)
    assert shown["turn"] is None and shown["state"] == "idle"  # nothing ran


def test_a_number_of_seconds_reaches_the_cli_as_typed_not_as_an_exponent(env: Env) -> None:
    assert env.run("new", "d", "--harness", "demo").returncode == 0
    woke = {"name": "d", "prompt": "x", "window": 1234567}
    calls = [
        ("wait", {"names": ["d"], "timeout": 0.00001}, ["wait", "d", "--timeout", "0.00001"]),
        ("wake", woke, ["wake", "d", "x", "--window", "1234567"]),
        ("stop", {"names": ["d"], "grace": 0.0000001}, ["stop", "d", "--grace", "0.0000001"]),
    ]
    answers: list[CallToolResult] = []

    async def body(session: ClientSession) -> None:
        for tool, arguments, _ in calls:
            answers.append(await session.call_tool(tool, arguments))

    drive(env, body)
    for (_, _, words), answer in zip(calls, answers, strict=True):
        r = env.run(*words, "--json")  # after the tool's: a stop of a stopped one is still 0
        assert answer.is_error == (r.returncode != 0), (words, texts(answer))
        if r.returncode:
            said = f"{r.stderr.strip()} (exit code {r.returncode})"
            assert texts(answer)[0] == said, (words, texts(answer))


def test_a_prompt_arrives_byte_exact_through_wake_resume_and_fanout(env: Env) -> None:
    record = [sys.executable, harness("record.py")]
    for name in ("r1", "r2", "r3"):
        out = env.root / name
        r = env.run("new", name, "--env", f"RECORD_TO={out}", "--", *record)
        assert r.returncode == 0, r.stderr

    async def body(session: ClientSession) -> None:
        woke = await session.call_tool("wake", {"name": "r1", "prompt": TRICKY, "window": 10})
        assert not woke.is_error and woke.structured_content is not None, texts(woke)
        assert woke.structured_content["verdict"] == "completed", texts(woke)
        await session.call_tool("stop", {"names": ["r2"]})
        resumed = await session.call_tool(
            "resume", {"name": "r2", "prompt": TRICKY + "!", "force": False}
        )
        assert not resumed.is_error, texts(resumed)
        fanned = await session.call_tool(
            "fanout", {"names": ["r3"], "prompt": "-" + TRICKY, "window": 10, "wait": True}
        )
        assert not fanned.is_error, texts(fanned)
        doc = fanned.structured_content
        assert doc is not None and [leg["session"] for leg in doc["legs"]] == ["r3"]

    drive(env, body)
    assert (env.root / "r1").read_bytes() == TRICKY.encode()
    assert retry_until(lambda: (env.root / "r2").exists())
    assert (env.root / "r2").read_bytes() == (TRICKY + "!").encode()
    assert (env.root / "r3").read_bytes() == ("-" + TRICKY).encode()
    assert not (env.root.parent / "nope").exists()


def test_resources_are_each_sessions_log_and_events_page_by_id(env: Env) -> None:
    for name in ("a", "b"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    assert cli(env, "wake", "a", "hello", "--window", "10", "--json")[0] == 0
    first = json.loads(env.run("events", "--json").stdout.splitlines()[0])["id"]
    got: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        listed = (await session.list_resources()).resources
        got["uris"] = [str(r.uri) for r in listed]
        assert all(r.mime_type == "text/plain" for r in listed)
        read = await session.read_resource("spex://sessions/a/log")
        got["log"] = [c.text for c in read.contents if hasattr(c, "text")]
        events = await session.call_tool("events_since", {"since": str(first), "limit": 2})
        got["events"] = events.structured_content
        got["more"] = texts(events)[-1]
        everything = await session.call_tool("events_since", {"session": ["a"]})
        got["all"] = everything.structured_content
        with pytest.raises(Exception, match="no session named 'zz'"):
            await session.read_resource("spex://sessions/zz/log")
        for dashed in ("--help", "-d"):  # a name, refused as one: not `spex log --help`
            with pytest.raises(Exception, match=f"invalid session name '{dashed}'"):
                await session.read_resource(f"spex://sessions/{dashed}/log")

    drive(env, body)
    assert got["uris"] == ["spex://sessions/a/log", "spex://sessions/b/log"]
    assert got["log"] == [env.run("log", "a").stdout]
    after = lines(env, "events", "--since", str(first), "--json")
    assert got["events"] == {"result": after[:2]}
    assert got["more"] == f"{len(after) - 2} more: call again with since={after[1]['id']}"
    every = lines(env, "events", "--session", "a", "--json")
    assert got["all"] == {"result": every}


def spex_children(env: Env, command: str) -> list[psutil.Process]:
    """The `spex COMMAND` processes the server started, under this test's env."""
    found = []
    for proc in psutil.process_iter():
        try:
            line = proc.cmdline()
            if proc.environ().get("TMUX_TMPDIR") != str(env.tmux_tmpdir):
                continue
        except psutil.Error:
            continue
        if line[1:4] == ["-m", "spexsup", "--home"] and command in line:
            found.append(proc)
    return found


def test_a_cancelled_call_or_a_closed_server_ends_its_spex(env: Env) -> None:
    """A wait the client gives up on, and one in flight when the client goes
    away, do not outlive the call: their `spex wait` is ended."""
    assert env.run("new", "slow", "--", "bash", "-c", "sleep 60").returncode == 0
    assert cli(env, "wake", "slow", "x", "--window", "0.2", "--json")[0] == 0

    async def body(session: ClientSession) -> None:
        with anyio.move_on_after(3):  # the SDK's client sends notifications/cancelled
            await session.call_tool("wait", {"names": ["slow"], "timeout": 600})
        with anyio.fail_after(20):
            while spex_children(env, "wait"):
                await anyio.sleep(0.05)
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.call_tool, "wait", {"names": ["slow"], "timeout": 600})
            with anyio.fail_after(20):
                while not spex_children(env, "wait"):
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()

    drive(env, body)
    assert retry_until(lambda: not spex_children(env, "wait"), seconds=20)
    assert cli(env, "show", "slow", "--json")[1]["turn"]["state"] == "running"


def test_a_wake_tool_call_can_carry_a_check(env: Env) -> None:
    """An agent driving others asks for verified verdicts (issue 27)."""
    assert env.run("new", "c", "--", "true").returncode == 0
    got: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        ok = await session.call_tool(
            "wake", {"name": "c", "prompt": "go", "window": 5, "verify": "echo checked"}
        )
        got["ok"] = ok.structured_content
        bad = await session.call_tool(
            "wake", {"name": "c", "prompt": "go", "window": 5, "verify": "exit 4"}
        )
        got["bad"] = (bad.is_error, texts(bad)[0], bad.structured_content)

    drive(env, body)
    assert (got["ok"]["verdict"], got["ok"]["flags"]) == ("completed", ["verified"]), got["ok"]
    is_error, text, doc = got["bad"]
    assert is_error and doc["verdict"] == "failed", got["bad"]
    assert "its check `exit 4` failed (rc 4)" in text and "(exit code 1)" in text, text


def test_wait_and_wake_timeouts_read_the_duration_grammar(env: Env) -> None:
    """`wait.timeout` and `wake.timeout` take what `--timeout` takes: a number
    of seconds or a duration (issue 38 item 11)."""
    assert env.run("new", "d", "--harness", "demo").returncode == 0
    assert env.run("new", "slow", "--", "bash", "-c", "sleep 30").returncode == 0
    assert cli(env, "wake", "slow", "x", "--window", "0.2", "--json")[0] == 0
    answers: dict[str, CallToolResult] = {}

    async def body(session: ClientSession) -> None:
        answers["short"] = await session.call_tool("wait", {"names": ["slow"], "timeout": "0.2s"})
        answers["long"] = await session.call_tool("wait", {"names": ["slow"], "timeout": "2h"})
        answers["bad"] = await session.call_tool("wait", {"names": ["slow"], "timeout": "soon"})
        answers["minutes"] = await session.call_tool(
            "wake", {"name": "d", "prompt": "hi", "timeout": "30m"}
        )
        # Its end, not the window, frees d (a loaded machine outlasts the window).
        await session.call_tool("wait", {"names": ["d"], "timeout": 60})
        answers["seconds"] = await session.call_tool(
            "wake", {"name": "d", "prompt": "hi", "timeout": 90}
        )

    drive(env, body)
    short = answers["short"]
    assert short.is_error and short.structured_content is not None, texts(short)
    assert short.structured_content["exit_code"] == 124
    for key in ("long", "bad"):
        said = texts(answers[key])[0]
        assert answers[key].is_error and said.startswith("spex: invalid timeout"), said
        content = answers[key].structured_content
        assert content is not None and content["exit_code"] == 2, content
    turns = json.loads(env.run("show", "d", "--json").stdout)["turns"]
    assert sorted(t["timeout"] for t in turns) == [90, 1800], (turns, texts(answers["seconds"]))
    assert env.run("stop", "slow").returncode == 0


# --- a lead agent runs a team through MCP alone (issue 41, item 8) ----------------


def call(session: ClientSession) -> Callable[..., Awaitable[CallToolResult]]:
    """`await tool("name", arg=…)`: a call whose text is what it answered."""

    async def tool(tool_name: str, /, **arguments: Any) -> CallToolResult:
        return await session.call_tool(tool_name, arguments)

    return tool


def array(answer: CallToolResult) -> list[Any]:
    """A list tool's answer: its text is a JSON array, and so is its result."""
    got = json.loads(texts(answer)[-1] if answer.is_error else texts(answer)[0])
    assert isinstance(got, list), texts(answer)
    assert answer.structured_content == {"result": got}
    return got


def test_a_lead_makes_two_workers_fans_out_reads_cost_and_diff_and_keeps_the_better(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_verify import edits_harness
    from test_worktree import make_repo

    repo = make_repo(env, monkeypatch)
    edits_harness(env)  # `signs`: appends the prompt and "by SESSION" to work.txt
    got: dict[str, Any] = {}

    async def lead(session: ClientSession) -> None:
        tool = call(session)
        # Two workers in worktrees of one repository, one prompt: a best-of-2 wave,
        # whose check only w-2's work passes.
        fanned = await tool(
            "fanout", prompt="fix it", worktrees=2, repo=str(repo.path), prefix="w",
            harness="signs", verify="grep -q 'by w-2' work.txt", window=10,
        )  # fmt: skip
        assert fanned.is_error, texts(fanned)  # w-1 fails its check: not every leg succeeded
        got["fanout"] = fanned.structured_content
        waited = await tool("wait", names=["w-1", "w-2"], timeout=60)
        got["wait"] = (waited.is_error, array(waited))
        got["wave"] = (await tool("show_wave", wave="last")).structured_content
        got["cost"] = (await tool("cost", by="wave")).structured_content
        got["diffs"] = [(await tool("diff", name=n)).structured_content for n in ("w-1", "w-2")]
        kept = await tool("keep", wave="last", leg="w-2")
        assert not kept.is_error, texts(kept)
        got["keep"] = array(kept)
        got["ls"] = array(await tool("list_sessions"))

    drive(env, lead)
    legs = got["fanout"]["legs"]
    assert [leg["session"] for leg in legs] == ["w-1", "w-2"]
    is_error, turns = got["wait"]
    assert is_error  # w-1 failed its check: wait says exit 1, with each turn
    assert {t["session"]: t["state"] for t in turns} == {"w-1": "failed", "w-2": "complete"}
    verdicts = {leg["session"]: leg["turn_state"] for leg in got["wave"]["legs"]}
    assert verdicts == {"w-1": "failed", "w-2": "complete"}, got["wave"]
    assert got["wave"]["id"] == got["fanout"]["id"]
    # The CLI's own document (these agents print no usage: nothing is known).
    assert got["cost"] == cli(env, "cost", "--by", "wave", "--json")[1]
    for diff in got["diffs"]:
        assert [f["path"] for f in diff["files"]] == ["work.txt"], diff
    outcomes = {o["session"]: o["outcome"] for o in got["keep"]}
    assert outcomes == {"w-1": "removed", "w-2": "kept"}
    assert [s["name"] for s in got["ls"]] == ["w-2"]
    assert repo.branch_exists("spex/w-2") and not repo.worktree("w-1").exists()


def test_a_lead_creates_edits_queues_schedules_retries_and_removes(env: Env) -> None:
    """new, edit, the queue, schedules, retry_failed and rm (refused without
    force while a turn runs, as the CLI refuses), and every list tool's answer
    a JSON array."""
    got: dict[str, Any] = {}

    async def lead(session: ClientSession) -> None:
        tool = call(session)
        made = await tool("new_session", name="a", harness="demo", cwd=str(env.root))
        assert not made.is_error, texts(made)
        made = await tool("new_session", name="slow", args=["bash", "-c", "sleep 60"])
        assert not made.is_error, texts(made)
        made = await tool("new_session", name="f", args=["false"])
        assert not made.is_error, texts(made)
        edited = await tool("edit_session", name="a", timeout="30m", strict=True)
        assert not edited.is_error, texts(edited)
        got["edited"] = edited.structured_content
        woke = await tool("wake", name="slow", prompt="x", window=0.2)
        assert not woke.is_error, texts(woke)
        queued = await tool("wake", name="slow", prompt="later", queue=True, key="k1")
        assert not queued.is_error and queued.structured_content is not None, texts(queued)
        got["queued"] = queued.structured_content
        got["queue"] = array(await tool("list_queue"))
        dropped = await tool("drop_queued", ids=[got["queue"][0]["id"]])
        got["dropped"] = array(dropped)
        got["queue after"] = array(await tool("list_queue", names=["slow"]))
        added = await tool("add_schedule", name="a", prompt="nightly", every="1h")
        assert not added.is_error, texts(added)
        got["schedules"] = array(await tool("list_schedules"))
        removed = await tool("remove_schedules", ids=[got["schedules"][0]["id"]])
        assert not removed.is_error, texts(removed)
        got["schedules after"] = array(await tool("list_schedules"))
        failed = await tool("fanout", prompt="go", names=["f"], wait=True, window=10)
        got["failed"] = (failed.is_error, failed.structured_content)
        retried = await tool("retry_failed", wait=True, window=10)
        got["retried"] = (retried.is_error, retried.structured_content)
        refused = await tool("remove_sessions", names=["slow"])
        got["refused"] = (refused.is_error, texts(refused)[0])
        got["still"] = [s["name"] for s in array(await tool("list_sessions"))]
        got["cli"] = env.run("rm", "slow")  # what the CLI says: the same refusal
        forced = await tool("remove_sessions", names=["slow"], force=True)
        assert not forced.is_error, texts(forced)
        got["events"] = array(await tool("events_since", session=["f"], limit=3))
        got["waited"] = array(await tool("wait", names=["f"], timeout=5))

    drive(env, lead)
    assert (got["edited"]["timeout"], got["edited"]["strict"]) == (1800, True), got["edited"]
    assert got["queued"]["verdict"] == "queued"
    assert [(q["session"], q["first_line"]) for q in got["queue"]] == [("slow", "later")]
    assert [d["id"] for d in got["dropped"]] == [got["queue"][0]["id"]]
    assert got["queue after"] == []
    assert [(s["session"], s["every"]) for s in got["schedules"]] == [("a", 3600)]
    assert got["schedules after"] == []
    is_error, wave = got["failed"]
    assert is_error and [leg["turn_state"] for leg in wave["legs"]] == ["failed"], wave
    is_error, retry = got["retried"]
    assert is_error and retry["retry_of"] == wave["id"], retry
    assert [leg["session"] for leg in retry["legs"]] == ["f"]
    is_error, said = got["refused"]
    r = got["cli"]
    assert is_error and r.returncode == 3 and said == f"{r.stderr.strip()} (exit code 3)"
    assert got["still"] == ["a", "f", "slow"]
    assert [s["name"] for s in json.loads(env.run("ls", "--json").stdout)] == ["a", "f"]
    assert len(got["events"]) == 3 and all(e["session"] == "f" for e in got["events"])
    assert [t["session"] for t in got["waited"]] == ["f"]


def test_wake_and_fanout_options_reach_the_cli_as_typed(env: Env) -> None:
    """Every option of wake and fanout is a parameter: each bad one is refused
    with the very line the CLI says for it, before any turn starts."""
    assert env.run("new", "d", "--harness", "demo").returncode == 0
    calls: list[tuple[str, dict[str, Any], list[str]]] = [
        ("wake", {"after": "nosuch"}, ["wake", "d", "x", "--after", "nosuch"]),
        ("wake", {"after_any": "d"}, ["wake", "d", "x", "--after-any", "d"]),
        ("wake", {"budget": "lots"}, ["wake", "d", "x", "--budget", "lots"]),
        ("wake", {"budget": -1}, ["wake", "d", "x", "--budget=-1"]),
        ("wake", {"model": "-x"}, ["wake", "d", "x", "--model=-x"]),
        ("wake", {"fallback": ","}, ["wake", "d", "x", "--fallback-model", ","]),
        ("wake", {"verify_timeout": "soon"}, ["wake", "d", "x", "--verify-timeout", "soon"]),
        ("wake", {"verify": "true", "no_verify": True},
         ["wake", "d", "x", "--verify", "true", "--no-verify"]),
        ("wake", {"on_limit": "never"}, ["wake", "d", "x", "--on-limit", "never"]),
        ("wake", {"key": "a\tb"}, ["wake", "d", "x", "--key", "a\tb"]),
        ("fanout", {"names": ["d"], "worktrees": 0},
         ["fanout", "d", "-m", "x", "--worktrees", "0"]),
        ("fanout", {"names": ["d"], "pick": "smallest"},
         ["fanout", "d", "-m", "x", "--pick", "smallest"]),
        ("fanout", {"names": ["d"], "sandbox": True}, ["fanout", "d", "-m", "x", "--sandbox"]),
        ("fanout", {"names": ["d"], "stagger": "soon"},
         ["fanout", "d", "-m", "x", "--stagger", "soon"]),
        ("fanout", {"names": ["d"], "after": "nosuch"},
         ["fanout", "d", "-m", "x", "--after", "nosuch"]),
        ("fanout", {"names": ["d"], "budget": "lots"},
         ["fanout", "d", "-m", "x", "--budget", "lots"]),
        ("fanout", {"names": ["d"], "hosts": "nowhere"},
         ["fanout", "d", "-m", "x", "--hosts", "nowhere"]),
    ]  # fmt: skip
    answers: list[CallToolResult] = []

    async def body(session: ClientSession) -> None:
        for tool, arguments, _ in calls:
            extra = {"name": "d"} if tool == "wake" else {}
            answers.append(await session.call_tool(tool, {**extra, "prompt": "x", **arguments}))

    drive(env, body)
    for (tool, arguments, words), answer in zip(calls, answers, strict=True):
        r = env.run(*words, "--json")
        assert r.returncode in (2, 3), (words, r.returncode, r.stderr)
        said = f"{r.stderr.strip()} (exit code {r.returncode})"
        assert answer.is_error and texts(answer)[0] == said, (tool, arguments, texts(answer))
    assert json.loads(env.run("show", "d", "--json").stdout)["turn"] is None


def test_descriptions_are_prose_and_the_readme_lists_every_parameter(env: Env) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.partition("## Driving spex from an agent (MCP)")[2].partition("\n## ")[0]
    rows = {  # each tool's row: the parameters it names, outside the (notes)
        m.group(1): set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", m.group(2))))
        for m in re.finditer(r"^\| `(\w+)` \| .*? \| (.*) \|$", section, re.MULTILINE)
    }
    tools: dict[str, Any] = {}

    async def body(session: ClientSession) -> None:
        tools.update({t.name: t for t in (await session.list_tools()).tools})

    drive(env, body)
    assert set(tools) == set(rows), set(tools) ^ set(rows)
    for name, listed in tools.items():
        description = listed.description or ""
        assert "\n " not in description and "  " not in description, (name, description)
        params = set(listed.input_schema["properties"])
        assert params == rows[name], (name, params ^ rows[name])
