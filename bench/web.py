#!/usr/bin/env python3
"""`spex serve` under load: 200 real sessions (`spex new` on the demo harness,
a turn run on some of them), then

- the list page (GET /, server-side render and transfer) and its live
  fragment (GET /rows, what an open page fetches after each event): p50 / p90
  / max of N requests, against 500 ms;
- an event's way to an open page: a transition committed through the core
  (`events.record` in a store transaction, as every writer records one) until
  the SSE stream the page holds (`/events`) delivers it, against 100 ms; and
  the same for a real `spex wake` (its `launched` event).

    python bench/web.py [--sessions 200] [--n 30]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from goals import record

from spexsup.core.spex import open_store
from spexsup.state import events

SPEX = str(Path(sys.executable).parent / "spex")
URL = re.compile(r"^spex serve: (http://[^/]+)/#token=(\S+)$")


def stats(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    return f"p50 {statistics.median(ms):.1f} ms, p90 {p90:.1f} ms, max {ms[-1]:.1f} ms"


class Home:
    """A throwaway state home on a private tmux server."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spexweb"))
        (self.root / "state").mkdir(mode=0o700)  # a home that does not exist is refused
        self.env = {
            **os.environ,
            "SPEXSUP_HOME": str(self.root / "state"),
            "SPEXSUP_TMUX": f"spexweb-{os.getpid()}",
            "TMUX_TMPDIR": str(self.root),
            "HOME": str(self.root),
            "SHELL": "/bin/sh",
            "SPEXSUP_DEMO_DELAY": "0.05",
        }
        self.env.pop("TMUX", None)

    def spex(self, *args: str) -> str:
        r = subprocess.run(
            [SPEX, *args], env=self.env, cwd=self.root, capture_output=True, text=True, check=False
        )
        if r.returncode != 0:
            raise SystemExit(f"spex {' '.join(args)}: {r.returncode} {r.stderr}")
        return r.stdout

    def close(self) -> None:
        subprocess.run(
            ["tmux", "-L", self.env["SPEXSUP_TMUX"], "kill-server"],
            env=self.env,
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def parallel(work: Callable[[str], object], items: list[str], workers: int = 4) -> None:
    """`work` on every item, `workers` at a time."""
    todo = list(reversed(items))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                item = todo.pop()
            work(item)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def populate(home: Home, sessions: int, woken: int) -> None:
    home.spex("ls")  # the schema, before parallel writers
    names = [f"s{i:03d}" for i in range(sessions)]
    started = time.perf_counter()
    parallel(lambda n: home.spex("new", n, "--harness", "demo"), names)
    made = time.perf_counter() - started
    parallel(lambda n: home.spex("wake", n, f"task for {n}"), names[:woken])
    print(f"{sessions} sessions made in {made:.1f} s; {woken} of them ran a turn")


class Serve:
    def __init__(self, home: Home) -> None:
        self.proc = subprocess.Popen(
            [SPEX, "serve", "--port", "0"],
            env=home.env,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        m = URL.match(self.proc.stdout.readline().strip() if ready else "")
        if m is None:
            self.proc.kill()
            raise SystemExit("spex serve did not print its URL")
        self.base, self.token = m.group(1), m.group(2)
        self.port = int(self.base.rsplit(":", 1)[1])

    def get(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {self.token}"})
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def timed_get(serve: Serve, path: str, n: int, rows: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        status, body = serve.get(path)
        out.append(time.perf_counter() - started)
        assert status == 200 and body.count(b'<tr id="row-') == rows, (status, len(body))
    return out


class Listener:
    """An open page's event stream: each event's arrival time, by id."""

    def __init__(self, serve: Serve) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=None)
        since = 10**12  # nothing missed to replay: only what commits from now on
        headers = {"Authorization": f"Bearer {serve.token}"}
        self.conn.request("GET", f"/events?since={since}", headers=headers)
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        self.arrived: dict[str, float] = {}  # perf_counter at arrival
        self.lag: dict[str, float] = {}  # arrival (wall clock) less the event's own `at`
        self.lock = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        fp = self.response.fp
        while line := fp.readline():  # until close() shuts the socket
            if line.startswith(b"data: "):
                at, wall = time.perf_counter(), time.time()
                doc = json.loads(line[6:])
                with self.lock:
                    self.arrived[f"{doc['kind']}:{doc['session']}"] = at
                    self.lag[f"{doc['kind']}:{doc['session']}"] = wall - doc["at"]
                    self.lock.notify_all()

    def wait(self, key: str, timeout: float = 10) -> float:
        with self.lock:
            if not self.lock.wait_for(lambda: key in self.arrived, timeout):
                raise SystemExit(f"event {key} never reached the stream")
            return self.arrived[key]

    def close(self) -> None:
        # Shut the socket first: it ends the reader's blocking readline, whose
        # buffer lock a bare close() would wait for.
        if self.conn.sock is not None:
            with contextlib.suppress(OSError):
                self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(5)
        self.conn.close()


def event_latency(home: Home, serve: Serve, n: int) -> tuple[list[float], list[float]]:
    listener = Listener(serve)
    store = open_store(Path(home.env["SPEXSUP_HOME"]))
    core = []
    try:
        with store.tx() as db:
            events.record(db, "created", session="warmup")
        listener.wait("created:warmup")
        for i in range(n):
            started = time.perf_counter()
            with store.tx() as db:
                events.record(db, "created", session=f"bench{i}")
            core.append(listener.wait(f"created:bench{i}") - started)
            time.sleep(0.02)
        wakes = []
        for i in range(min(n, 10)):
            name = f"s{i:03d}"
            proc = subprocess.Popen(
                [SPEX, "wake", name, "again", "--window", "0.2"],
                env=home.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            listener.wait(f"launched:{name}", 30)
            wakes.append(listener.lag[f"launched:{name}"])
            proc.wait(30)
        return core, wakes
    finally:
        listener.close()
        store.close()


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def page_latency(home: Home, serve: Serve, n: int) -> list[float] | None:
    """An event committed through the core until the list page, open in
    Debian's headless Chromium, has it (its live line says so): the page's
    own clock at that moment less the event's `at`. None without a browser."""
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        return None
    if chromium is None:
        return None
    store = open_store(Path(home.env["SPEXSUP_HOME"]))
    lags = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{serve.base}/#token={serve.token}")
            page.wait_for_selector("#board")
            expect(page.locator("#live")).to_have_text(re.compile("^live"))
            page.evaluate(
                """() => { window.seen = {}; const live = document.getElementById("live");
                new MutationObserver(() => {
                  window.seen[live.textContent] = performance.timeOrigin + performance.now();
                }).observe(live, {childList: true, characterData: true, subtree: true}); }"""
            )
            for i in range(n):
                with store.tx() as db:
                    ident = events.record(db, "created", session=f"page{i}")
                (at,) = store.db.execute("SELECT at FROM events WHERE id = ?", (ident,)).fetchone()
                deadline = time.monotonic() + 10
                seen = None
                while seen is None and time.monotonic() < deadline:
                    time.sleep(0.005)
                    seen = page.evaluate(f"window.seen['live · created page{i}']")
                if seen is None:
                    raise SystemExit(f"event {ident} never reached the page")
                lags.append(seen / 1000 - at)
                time.sleep(0.05)
        finally:
            browser.close()
            store.close()
    return lags


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--n", type=int, default=30)
    args = parser.parse_args()
    package = Path(__file__).resolve().parent.parent / "spexsup"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)
    home = Home()
    serve = None
    try:
        print(f"\nspex serve with {args.sessions} sessions, n={args.n}\n")
        populate(home, args.sessions, woken=min(args.sessions, 40))
        serve = Serve(home)
        first = timed_get(serve, "/", 1, args.sessions)
        page = timed_get(serve, "/", args.n, args.sessions)
        rows = timed_get(serve, "/rows", args.n, args.sessions)
        print(f"GET / (first, the thread opens its store): {first[0] * 1000:.1f} ms")
        said = record("web_list", statistics.median(page) * 1000)
        print(f"GET / list page, goal ≤ 500 ms: {stats(page)} ({said})")
        print(f"GET /rows (the live refresh of the list): {stats(rows)}")
        core, wakes = event_latency(home, serve, args.n)
        said = record("web_event", statistics.median(core) * 1000)
        print(f"event committed -> open page's stream, goal ≤ 100 ms: {stats(core)} ({said})")
        print(f"spex wake's launched event -> open page's stream: {stats(wakes)}")
        shown = page_latency(home, serve, args.n)
        if shown is None:
            print("event committed -> the page in a browser: skipped (no chromium/playwright)")
        else:
            said = record("web_page", statistics.median(shown) * 1000)
            shown_at = f"goal ≤ 100 ms: {stats(shown)} ({said})"
            print(f"event committed -> the list page in Chromium, {shown_at}")
    finally:
        if serve is not None:
            serve.close()
        home.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
