"""A turn whose output holds a 50 MB line (tests/harnesses/flood.sh, a claude
stream): every reader shows each line cut to its bound with the bytes left
out said (`… [N bytes cut]`), and its memory stays flat. Peak memory is the
reader process's own (`wait4`'s rusage, or a server's VmHWM)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
from conftest import SPEX, Env, harness
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import TextContent
from test_web import start

from spexsup.pane.lines import PARSE_LINE, RAW_LINE, SHOWN_LINE, Cut, Lines, shorter

FLOOD = 50_000_000  # the line of `x`
EVENT = 3_000_000  # the assistant event's text of `y`
MAX_RSS_KIB = 100 * 1024
CUT = re.compile(rb" \xe2\x80\xa6 \[(\d+) bytes cut\]$")  # ` … [N bytes cut]`


def flooded(env: Env, name: str = "f") -> Path:
    """A session whose finished turn wrote flood.sh's stream; its turn dir."""
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        f'[harness.flood]\nfresh = ["bash", "{harness("flood.sh")}", "{{prompt}}"]\n'
        'outcome = "claude"\n'
    )
    assert env.run("new", name, "--harness", "flood").returncode == 0
    r = env.run("wake", name, "go", "--json")
    assert r.returncode == 0, r.stderr
    turn: str = json.loads(r.stdout)["turn"]
    r = env.run("wait", name, "--timeout", "120", timeout=150)
    assert r.returncode == 0, r.stderr
    directory = env.home / "turns" / name / turn
    assert (directory / "output.log").stat().st_size > FLOOD
    return directory


# Runs ARGV and writes its peak resident KiB (wait4's rusage) to PEAK. A small
# process of its own: a child's ru_maxrss counts the memory of the process it
# was forked from (this test's, tens of MB), so spex is not forked from here.
PEAK = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
open(sys.argv[1], "w").write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def measured(env: Env, *args: str) -> tuple[bytes, int]:
    """`spex ARGS…`'s stdout and its peak resident memory in KiB."""
    out = env.root / f"out-{time.monotonic_ns()}"
    peak = out.with_suffix(".peak")
    with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
        argv = [sys.executable, "-c", PEAK, str(peak), SPEX, *args]
        subprocess.run(argv, stdout=stdout, stderr=stderr, env=env.vars, check=True)
    code, kib = (int(x) for x in peak.read_text().split())
    assert code == 0, out.with_suffix(".err").read_text()
    return out.read_bytes(), kib


def cut_lines(text: bytes, limit: int) -> list[tuple[bytes, int]]:
    """Every line of `text` within `limit` (plus its note), as (line, cut)."""
    found = []
    for line in text.split(b"\n"):
        m = CUT.search(line)
        kept = line[: m.start()] if m else line
        assert len(kept) <= limit, (len(kept), line[:80])
        found.append((kept, int(m.group(1)) if m else 0))
    return found


def peak_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M).group(1))  # type: ignore[union-attr]


def test_spex_log_raw_pretty_and_tail_cut_a_50mb_line_in_flat_memory(env: Env) -> None:
    flooded(env)
    raw, rss = measured(env, "log", "f")
    assert rss < MAX_RSS_KIB, rss
    lines = cut_lines(raw, RAW_LINE)
    assert lines[1] == (b"x" * RAW_LINE, FLOOD - RAW_LINE)
    assert lines[2][0].startswith(b'{"type":"assistant"') and lines[2][1] > EVENT - RAW_LINE
    assert b'"text":"after the flood"' in lines[3][0] and lines[3][1] == 0

    for args in (("--pretty", "--tail", "400"), ("--pretty",)):
        shown, rss = measured(env, "log", "f", *args)
        assert rss < MAX_RSS_KIB, (args, rss)
        lines = cut_lines(shown, SHOWN_LINE)
        assert lines[1] == (b"x" * SHOWN_LINE, FLOOD - SHOWN_LINE), args
        # A JSON event longer than PARSE_LINE is not read: its start says what it was.
        event, left = lines[2]
        assert event.startswith(b'{"type":"assistant"') and len(event) + left > EVENT > PARSE_LINE
        assert [line for line, _ in lines[3:]] == [
            b"after the flood",
            "✓ done (1 turns)".encode(),
            b"",
        ]

    tail, rss = measured(env, "log", "f", "--tail", "3")
    assert rss < MAX_RSS_KIB and cut_lines(tail, RAW_LINE)[0][1] > EVENT - RAW_LINE


def test_the_pane_feed_shows_a_50mb_line_cut_in_flat_memory(env: Env) -> None:
    """`python -m spexsup.pane.pretty feed`, between the harness and the pane,
    run as shell/turn.sh runs it: output.log gets every byte, the pane the
    rendering with the flood cut, and the feed's memory stays flat."""
    env.root.mkdir(parents=True, exist_ok=True)
    log, screen, peak = env.root / "output.log", env.root / "screen", env.root / "feed.peak"
    feed = [sys.executable, "-m", "spexsup.pane.pretty", "feed", str(log), "claude"]
    with subprocess.Popen(["bash", harness("flood.sh"), "go"], stdout=subprocess.PIPE) as agent:
        with screen.open("wb") as out:
            argv = [sys.executable, "-c", PEAK, str(peak), *feed]
            subprocess.run(argv, stdin=agent.stdout, stdout=out, env=env.vars, check=True)
        assert agent.wait() == 0
    code, kib = (int(x) for x in peak.read_text().split())
    assert code == 0 and kib < MAX_RSS_KIB, (code, kib)
    assert log.stat().st_size > FLOOD + EVENT  # the log keeps every byte
    lines = cut_lines(screen.read_bytes(), SHOWN_LINE)
    assert lines[1] == (b"x" * SHOWN_LINE, FLOOD - SHOWN_LINE)
    assert lines[2][0].startswith(b'{"type":"assistant"') and lines[2][1] > EVENT - SHOWN_LINE
    assert [line for line, _ in lines[3:]] == [b"after the flood", "✓ done (1 turns)".encode(), b""]


def test_a_failure_message_is_its_long_last_line_cut(env: Env) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        f'[harness.long]\nfresh = ["bash", "{harness("long_last_line.sh")}", "{{prompt}}"]\n'
    )
    assert env.run("new", "g", "--harness", "long").returncode == 0
    assert env.run("wake", "g", "go").returncode == 1
    r = env.run("wait", "g", "--json", "--timeout", "60")
    assert r.returncode == 1, r.stderr
    error = json.loads(r.stdout)[0]["error"]
    # The wake's message (`exited rc=3: ` and the last lines, 200 bytes each)
    # or the reporter's (the last line, 300 bytes), whichever recorded the end.
    said = re.fullmatch(r"(?:exited rc=3: )?(z+) … \[(\d+) bytes cut\]", error)
    assert said is not None, error[-80:]
    assert len(said[1]) in (200, 300) and len(said[1]) + int(said[2]) == 300_000, error[-80:]


def test_top_and_the_pane_show_a_long_last_line_cut(env: Env) -> None:
    directory = flooded(env)
    with (directory / "output.log").open("ab") as f:  # a last line longer than any read
        f.write(b"z" * 300_000)
    board, rss = measured(env, "top", "--json")
    assert rss < MAX_RSS_KIB, rss
    assert json.loads(board)[0]["last_output"] == "z" * 500 + " … [299500 bytes cut]"
    table, rss = measured(env, "top")  # on a pipe: the table once
    assert rss < MAX_RSS_KIB and b"zzz" in table and len(table) < 4096, (rss, table[-300:])
    # The pane's rendering (pretty.feed) showed the flood cut, never its 50 MB.
    screen = env.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "=f:0.0").stdout
    assert f"x … [{FLOOD - SHOWN_LINE} bytes cut]" in screen, screen[-2000:]
    assert "after the flood" in screen and len(screen) < 1_000_000


def test_the_session_page_and_its_live_log_are_bounded(env: Env) -> None:
    turn = flooded(env).name
    server = start(env)
    try:
        status, _, page = server.request("GET", "/s/f")
        assert status == 200 and len(page) < 1_000_000, len(page)
        assert f"x … [{FLOOD - SHOWN_LINE} bytes cut]".encode() in page
        assert b"after the flood" in page
        # The live log (SSE) of the ended turn: its text, then its end.
        status, _, live = server.request("GET", f"/s/f/log/live?turn={turn}")
        assert status == 200 and len(live) < 1_000_000, len(live)
        docs = [json.loads(line[5:]) for line in live.splitlines() if line.startswith(b"data:")]
        text = "".join(doc.get("text", "") for doc in docs)
        assert f"x … [{FLOOD - SHOWN_LINE} bytes cut]" in text and "after the flood" in text
        assert docs[-1]["end"] is True
        assert peak_kib(server.proc.pid) < MAX_RSS_KIB, peak_kib(server.proc.pid)
    finally:
        server.stop()


def mcp_child() -> psutil.Process:
    """This test's `spex mcp` (other children may end while we look)."""
    for child in psutil.Process().children():
        try:
            if "mcp" in child.cmdline():
                return child
        except psutil.Error:
            continue
    raise AssertionError("no spex mcp among this test's children")


def test_mcp_read_log_is_bounded(env: Env) -> None:
    flooded(env)
    got: dict[str, Any] = {}

    async def main() -> None:
        params = StdioServerParameters(command=SPEX, args=["mcp"], env=env.vars)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for pretty in (False, True):
                answer = await session.call_tool("read_log", {"name": "f", "pretty": pretty})
                assert not answer.is_error
                texts = (c.text for c in answer.content if isinstance(c, TextContent))
                got[f"pretty={pretty}"] = next(texts)
            got["peak"] = peak_kib(mcp_child().pid)

    anyio.run(main)
    raw, pretty = got["pretty=False"], got["pretty=True"]
    assert f"x … [{FLOOD - RAW_LINE} bytes cut]" in raw and len(raw) < 4 * RAW_LINE
    assert f"x … [{FLOOD - SHOWN_LINE} bytes cut]" in pretty and len(pretty) < 4 * SHOWN_LINE
    assert "after the flood" in pretty
    assert got["peak"] < MAX_RSS_KIB, got["peak"]  # the server holds the answers, not the line


def test_cut_and_lines_keep_their_bound_across_chunks_and_characters() -> None:
    """The readers themselves, fed in chunks of every size: each line its first
    bytes (never half a UTF-8 character) and the count of the rest."""
    text = "é" * 10 + "\n" + "short\n" + "ab" * 3  # 20-byte line, 5, 6 without a newline
    data = text.encode()
    for size in range(1, len(data) + 1):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        assert b"".join(Cut(7).stream(chunks)).decode() == (
            "ééé … [14 bytes cut]\nshort\nababab"
        ), size
        lines, got = Lines(7), []
        for chunk in chunks:
            got += lines.feed(chunk)
        assert [*got, lines.end()] == [
            ("ééé".encode() + b"\xc3", 13),
            (b"short", 0),
            (b"ababab", 0),
        ]
    assert shorter("z" * 50 + " … [100 bytes cut]", 10) == "z" * 10 + " … [140 bytes cut]"
    assert shorter("ok", 10) == "ok" and shorter("é" * 6, 5) == "éé … [8 bytes cut]"
