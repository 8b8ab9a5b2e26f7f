"""`spex serve`: a real server process on the test's home and tmux server,
looked at with a real headless Chromium (Debian's, driven by Playwright) and
spoken to over HTTP (http.client, which sends any Host or Origin we ask)."""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import SPEX, Env, harness, retry_until, wakeups
from playwright.sync_api import expect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
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
URL = re.compile(r"^spex serve(?: \(read-only\))?: (http://[^/]+)/#token=([A-Za-z0-9_-]{43})$")


@dataclass
class Server:
    proc: subprocess.Popen[str]
    base: str  # http://127.0.0.1:PORT
    token: str
    stderr: Path

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def url(self) -> str:
        return f"{self.base}/#token={self.token}"

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        bearer: bool = True,
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        sent = dict(headers or {})
        if bearer:
            sent.setdefault("Authorization", f"Bearer {self.token}")
        if body is not None:
            sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
        try:
            conn.request(method, path, body=body, headers=sent)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start(env: Env, *args: str) -> Server:
    """`spex serve --port 0 ARGS…`, once it printed its URL."""
    err = env.root / f"serve-{time.monotonic_ns()}.err"
    proc = subprocess.Popen(
        [SPEX, "serve", "--port", "0", *args],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=err.open("w"),
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline().strip() if ready else ""
    m = URL.match(line)
    if m is None:
        proc.kill()
        proc.wait()
        raise AssertionError(f"spex serve printed {line!r}; stderr: {err.read_text()}")
    return Server(proc, m.group(1), m.group(2), err)


@pytest.fixture
def server(env: Env) -> Iterator[Server]:
    s = start(env)
    try:
        yield s
    finally:
        assert s.stop() in (143, -15), s.stderr.read_text()
        assert "Traceback" not in s.stderr.read_text()


@pytest.fixture
def browser(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A fresh headless Chromium context (its own profile). On teardown a
    screenshot of the session list is kept in the test's temp dir, and its
    path printed when the test failed."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = chromium.new_context(viewport={"width": 390, "height": 844})  # a phone
        context.set_default_timeout(20_000)
        try:
            yield context
        finally:
            shot = tmp_path / "sessions.png"
            base = getattr(request.node, "web_base", None)
            try:
                if base is not None:
                    page = context.new_page()
                    page.goto(base + "/")
                    page.screenshot(path=str(shot), full_page=True)
            except PlaywrightError:
                pass  # the test stopped its own server: its list was shot while it ran
            finally:
                report = getattr(request.node, "rep_call", None)
                if report is not None and report.failed:
                    print(f"screenshot of the session list: {shot}")
                context.close()
                chromium.close()


def signed_in(browser: Any, server: Server, request: pytest.FixtureRequest) -> Any:
    """A page that opened the printed URL: the fragment's token is now a cookie."""
    request.node.web_base = server.base
    page = browser.new_page()
    page.goto(server.url())
    page.wait_for_selector("#board")
    assert "#token" not in page.url and server.token not in page.url
    return page


def banner(server: Server, answer: dict[str, str], path: str = "/s/api") -> bytes:
    """The page a POST's 303 leads to, with the banner cookie it set: its
    `#flash`, spent (the same GET again shows none)."""
    cookie = answer["set-cookie"].split(";")[0]
    status, headers, body = server.request("GET", path, headers={"Cookie": cookie})
    assert status == 200 and "max-age=0" in headers["set-cookie"].lower(), headers
    flash = re.search(rb'<p id="flash"[^>]*>(.*?)</p>', body)
    assert flash is not None, body[:2000]
    return flash.group(1)


def new_until_go(env: Env, name: str) -> Path:
    go = env.root / f"go-{name}"
    r = env.run("new", name, "--env", f"GO={go}", "--", harness("talk_until_go.sh"))
    assert r.returncode == 0, r.stderr
    return go


def state(env: Env, name: str) -> dict[str, Any]:
    r = env.run("show", name, "--json")
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def event_count(env: Env) -> int:
    r = env.run("events", "--json")
    return len(r.stdout.splitlines())


# --- in a real browser ------------------------------------------------------------


def test_the_page_lists_sessions_and_a_wake_from_it_ends_live(
    env: Env, server: Server, browser: Any, request: pytest.FixtureRequest
) -> None:
    go = new_until_go(env, "api")
    assert env.run("new", "web", "--harness", "demo").returncode == 0
    page = signed_in(browser, server, request)
    # The cookie the fragment became: HttpOnly, SameSite=Strict, never readable by the page.
    (cookie,) = browser.cookies()
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    assert page.evaluate("document.cookie") == ""
    assert page.text_content("#row-api .state") == "idle"
    assert page.text_content("#row-web td[data-label=name]") == "web"
    page.screenshot(path=str(env.root / "list.png"))

    listing = browser.new_page()  # a second page keeps the list open meanwhile
    listing.goto(server.base + "/")
    expect(listing.locator("#live")).to_have_text(re.compile("^live"))

    page.click("#row-api a")
    page.wait_for_selector("#prompt")
    typed = "fix it <script>window.pwned = 1</script>\nline two $(rm -rf /) `x` ünïcode"
    page.fill("#prompt", typed)
    page.click("#wake")
    page.wait_for_selector("#flash")
    assert re.match(r"api: confirmed turn \S+ pid \d+ \(\d+ ms\)$", page.text_content("#flash"))
    turn = state(env, "api")["turn"]["id"]
    prompt = (env.home / "turns" / "api" / turn / "prompt").read_bytes()
    assert prompt == typed.encode()  # byte-exact; the form's CRLF back to what was typed
    expect(page.locator("#log")).to_contain_text("started on")
    expect(listing.locator("#row-api .turn")).to_contain_text("running")

    page.evaluate("window.sameDocument = 1")
    listing.evaluate("window.sameDocument = 1")
    go.touch()
    # The end reaches both pages without a reload: the same documents, updated.
    expect(page.locator("#turn-state")).to_have_text("complete rc=0")
    expect(page.locator("#log")).to_contain_text("& done")
    expect(listing.locator("#row-api .turn")).to_contain_text("complete rc=0")
    assert (
        page.evaluate("window.sameDocument") == 1 and listing.evaluate("window.sameDocument") == 1
    )
    assert page.evaluate("window.pwned") is None
    assert "<b>bold</b>" in page.text_content("#log")  # the agent's text, shown as text
    assert page.locator("#log b").count() == 0


def test_stop_asks_first_then_resume(
    env: Env, server: Server, browser: Any, request: pytest.FixtureRequest
) -> None:
    go = new_until_go(env, "api")
    assert env.run("wake", "api", "work").returncode == 0
    page = signed_in(browser, server, request)
    page.goto(server.base + "/s/api")
    page.click("#stop")
    page.wait_for_selector("#confirm-stop")
    assert page.title().startswith("stop api")
    assert "This aborts turn" in page.text_content("main")
    assert state(env, "api")["turn"]["state"] == "running"  # asking changed nothing
    page.click("#confirm-stop")
    page.wait_for_selector("#flash")
    assert re.match(r"api: stopped \(turn \S+ aborted; ", page.text_content("#flash"))
    assert state(env, "api")["state"] == "stopped"
    assert page.text_content("#state") == "stopped"
    page.click("#resume")
    page.wait_for_selector("#flash")
    assert page.text_content("#flash").startswith("api: resumed: takes turns again")
    assert state(env, "api")["state"] != "stopped"
    go.touch()


def test_read_only_has_no_buttons_and_refuses_posts(
    env: Env, browser: Any, request: pytest.FixtureRequest
) -> None:
    new_until_go(env, "api")
    s = start(env, "--read-only")
    try:
        page = signed_in(browser, s, request)
        page.goto(s.base + "/s/api")
        page.wait_for_selector("#read-only")
        assert page.locator("form").count() == 0 and page.locator("button").count() == 0
        before = event_count(env)
        for path in ("/s/api/wake", "/s/api/stop", "/s/api/resume"):
            status, _, body = s.request("POST", path, body=b"prompt=hi&confirm=yes")
            assert status == 403 and b"--read-only" in body, (path, status, body)
        assert s.request("GET", "/s/api/stop")[0] == 403
        assert event_count(env) == before and state(env, "api")["turn"] is None
    finally:
        assert s.stop() in (143, -15)


def test_without_the_token_it_answers_401(
    env: Env, server: Server, browser: Any, request: pytest.FixtureRequest
) -> None:
    request.node.web_base = server.base
    for path in ("/", "/rows", "/s/api", "/waves", "/events", "/s/api/log/live?turn=x"):
        status, _, body = server.request("GET", path, bearer=False)
        assert status == 401 and b"no token" in body, path
    assert server.request("GET", "/", headers={"Authorization": "Bearer " + "x" * 43})[0] == 401
    cookie = {"Cookie": "spex_0=" + "0" * 64}
    assert server.request("GET", "/", headers=cookie, bearer=False)[0] == 401
    status, _, _ = server.request("POST", "/s/api/wake", body=b"prompt=x", bearer=False)
    assert status == 401
    # A browser without it gets the sign-in page, with a 401.
    page = browser.new_page()
    response = page.goto(server.base + "/")
    assert response.status == 401 and page.locator("input[name=token]").count() == 1
    page = browser.new_page()
    page.goto(server.base + "/#token=" + "A" * 43)
    page.wait_for_selector("#login-error")
    assert "not this server's token" in page.text_content("#login-error")
    assert browser.cookies() == []


def test_a_post_without_the_pages_csrf_token_is_refused(
    env: Env, server: Server, browser: Any, request: pytest.FixtureRequest
) -> None:
    go = new_until_go(env, "api")
    page = signed_in(browser, server, request)
    page.goto(server.base + "/s/api")
    csrf = page.get_attribute("form.wake input[name=csrf]", "value")
    assert csrf
    before = event_count(env)
    for form in (
        {"prompt": "x"},
        {"prompt": "x", "csrf": "forged.0000"},
        {"prompt": "x", "csrf": ""},
    ):
        r = browser.request.post(server.base + "/s/api/wake", form=form)
        assert r.status == 403 and "CSRF" in r.text(), form
    assert event_count(env) == before and state(env, "api")["turn"] is None
    r = browser.request.post(
        server.base + "/s/api/wake", form={"prompt": "x", "csrf": csrf}, max_redirects=0
    )
    assert r.status == 303 and r.headers["x-spex-exit-code"] == "0"
    go.touch()


# --- over HTTP -------------------------------------------------------------------


def test_no_get_changes_anything_and_only_get_head_post_are_served(
    env: Env, server: Server
) -> None:
    new_until_go(env, "api")
    assert env.run("stop", "api").returncode == 0
    before = (event_count(env), state(env, "api")["state"])
    paths = ["/", "/rows", "/s/api", "/s/api/panel", "/s/api/stop", "/s/api/wake",
             "/s/api/resume", "/waves", "/login", "/s/api?turn=last"]  # fmt: skip
    for path in paths:
        status, headers, _ = server.request("GET", path)
        assert status in (200, 405, 409), (path, status)
        assert not any(k.startswith("access-control-") for k in headers), path
    assert (event_count(env), state(env, "api")["state"]) == before
    for method in ("PUT", "DELETE", "PATCH", "OPTIONS"):
        status, headers, _ = server.request(method, "/s/api/resume")
        assert status == 405 and "access-control-allow-origin" not in headers, method
    assert state(env, "api")["state"] == "stopped"


def test_the_host_header_and_a_posts_origin_must_be_this_server(env: Env, server: Server) -> None:
    new_until_go(env, "api")
    for host in ("evil.example", f"evil.example:{server.port}", "127.0.0.1.evil.example", ""):
        status, _, _ = server.request("GET", "/", headers={"Host": host})
        assert status == 421, host
    for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", "[::1]:9"):
        assert server.request("GET", "/rows", headers={"Host": host})[0] == 200, host
    before = event_count(env)
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": f"http://localhost:{server.port + 1}"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        status, _, body = server.request("POST", "/s/api/wake", headers=headers, body=b"prompt=x")
        assert status == 403 and b"another origin" in body, headers
    assert event_count(env) == before


def test_wake_stop_resume_answer_as_the_cli_does(env: Env, server: Server) -> None:
    """Bearer clients (scripts) need no CSRF token and may ask for the JSON."""
    js = {"Accept": "application/json"}
    status, headers, body = server.request("POST", "/s/nosuch/wake", headers=js, body=b"prompt=x")
    assert (status, headers["x-spex-exit-code"]) == (404, "3")
    cli = env.run("wake", "nosuch", "x", "--json")
    assert json.loads(body) == json.loads(cli.stdout)  # the CLI's own document
    said = cli.stderr.strip()  # spex: no session named 'nosuch' (…)
    status, _, body = server.request("POST", "/s/nosuch/wake", body=b"prompt=x")
    assert status == 404 and said.replace("'", "&#39;").encode() in body
    assert server.request("GET", "/s/bad.name")[0] == 400
    assert server.request("GET", "/s/nosuch")[0] == 404
    go = new_until_go(env, "api")
    status, headers, body = server.request("POST", "/s/api/wake", headers=js, body=b"prompt=")
    assert status == 400 and headers["x-spex-exit-code"] == "2"
    status, _, body = server.request("POST", "/s/api/wake", headers=js, body=b"prompt=a%0D%0Ab")
    doc = json.loads(body)
    assert (status, doc["verdict"]) == (200, "confirmed")
    assert (env.home / "turns" / "api" / doc["turn"] / "prompt").read_bytes() == b"a\nb"
    status, headers, body = server.request("POST", "/s/api/wake", headers=js, body=b"prompt=again")
    assert status == 409 and b"is busy" in body  # the CLI's refusal, word for word
    # A page's POST answers 303 to the session's page, which shows the line once.
    status, headers, _ = server.request("POST", "/s/api/wake", body=b"prompt=again")
    assert (status, headers["location"], headers["x-spex-exit-code"]) == (303, "../../s/api", "3")
    assert b"is busy" in banner(server, headers)
    status, _, body = server.request("POST", "/s/api/stop", body=b"")
    assert status == 400 and b"Stop api?" in body  # no confirmation: nothing stopped
    assert state(env, "api")["turn"]["state"] == "running"
    status, _, body = server.request("POST", "/s/api/stop", headers=js, body=b"confirm=yes")
    assert (status, json.loads(body)["aborted"]) == (200, doc["turn"])
    status, _, body = server.request("POST", "/s/api/resume", headers=js, body=b"")
    assert (status, json.loads(body)["resumed"]) == (200, True)
    assert server.request("POST", "/s/api/wake", body=b"\xff\xfe")[0] == 400
    status, _, _ = server.request("POST", "/s/api/wake", body=b"prompt=" + b"x" * (4 << 20))
    assert status == 413
    go.touch()


def test_every_post_to_an_unknown_session_is_404_as_its_get(env: Env, server: Server) -> None:
    """A POST to /s/UNKNOWN/wake, /stop or /resume said 409 (the CLI's exit 3,
    a refusal of a state); there is no session, as GET /s/UNKNOWN says: 404,
    with the CLI's line or document, and nothing happens."""
    new_until_go(env, "api")  # a home with a session in it, and its events
    before = event_count(env)
    said = env.run("wake", "nosuch", "x").stderr.strip().encode()  # spex: no session named …
    assert server.request("GET", "/s/nosuch")[0] == 404
    for action, body in (("wake", b"prompt=x"), ("stop", b"confirm=yes"), ("stop", b""),
                         ("resume", b"")):  # fmt: skip
        status, headers, page = server.request("POST", f"/s/nosuch/{action}", body=body)
        assert status == 404 and said in page.replace(b"&#39;", b"'"), (action, body, page[:300])
        js = {"Accept": "application/json"}
        status, headers, page = server.request("POST", f"/s/nosuch/{action}", body=body, headers=js)
        assert status == 404, (action, body, status, page[:300])
        if body != b"":  # a stop without confirm=yes asks first: no command, no document
            doc = json.loads(page)
            assert (doc["ok"], doc["exit_code"], headers["x-spex-exit-code"]) == (False, 3, "3")
    assert event_count(env) == before and state(env, "api")["state"] != "stopped"
    assert env.run("show", "nosuch").returncode == 3


def test_hostile_names_prompts_and_output_are_text(env: Env, server: Server) -> None:
    evil = "<img src=x onerror=alert(1)>\"'&"
    r = env.run("new", "h", "--", harness("escapes.sh"))
    assert r.returncode == 0, r.stderr
    env.run("wake", "h", evil)
    for path in ("/", "/s/h", "/waves"):
        _, _, body = server.request("GET", path)
        assert b"<img" not in body and b"onerror=alert(1)>" not in body, path
    _, _, body = server.request("GET", "/s/h")
    assert b"&lt;img src=x onerror=alert(1)&gt;" in body
    assert b"\x1b" not in body  # no terminal escapes either, as spex log --pretty


def test_the_wave_pages_count_legs_as_the_cli_does(env: Env, server: Server) -> None:
    """Issue 38, item 8: the waves list and a wave's page say its legs in the
    one grammar, and a failed leg's line says `failed` once."""
    env.run("new", "ok", "--", harness("exit0.sh"))
    env.run("new", "bad", "--", "sh", "-c", "exit 1")
    r = env.run("fanout", "ok", "bad", "-m", "go", "--window", "10", "--json")
    wave = json.loads(r.stdout)["id"]
    counted = "2 legs: 1 complete · 1 failed · 0 skipped · 0 running"
    assert counted in env.run("wave", "last").stdout
    _, _, body = server.request("GET", "/waves")
    assert counted in body.decode(), body
    _, _, body = server.request("GET", f"/w/{wave}")
    text = body.decode()
    assert f"wave {wave}: partial · {counted}" in text, text
    assert re.search(r"bad: failed turn \S+ rc=1<", text) and "ended failed" not in text, text
    # Retried once it works: the first wave's page tells each leg's last
    # attempt (issue 42, item 5), as `spex wave` does.
    env.run("rm", "bad")
    env.run("new", "bad", "--", harness("exit0.sh"))
    r = env.run("fanout", "--retry-failed", wave, "--window", "10", "--json")
    retry = json.loads(r.stdout)["id"]
    _, _, body = server.request("GET", f"/w/{wave}")
    text = body.decode()
    assert "after 1 retry: complete · 2 legs: 2 complete" in text, text
    assert f"(attempt 2, wave {retry})" in text, text


def test_events_stream_names_session_and_turn_and_resumes_without_gaps(
    env: Env, server: Server
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", "/events?since=0", headers={"Authorization": f"Bearer {server.token}"})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("content-type", "").startswith("text/event-stream")
    assert env.run("new", "api", "--harness", "demo").returncode == 0
    assert env.run("wake", "api", "hi").returncode == 0
    seen: list[dict[str, Any]] = []
    ids: list[int] = []
    while not any(e["kind"] == "completed" for e in seen):
        line = r.fp.readline().decode()
        if line.startswith("id: "):
            ids.append(int(line[4:]))
        elif line.startswith("data: "):
            seen.append(json.loads(line[6:]))
    conn.close()
    assert [e["id"] for e in seen] == ids == sorted(set(ids))
    assert all("session" in e and "turn" in e and e["schema_version"] == 1 for e in seen)
    turn = state(env, "api")["turn"]["id"]
    assert [e["kind"] for e in seen if e["turn"] == turn][-1] == "completed"
    cli = [json.loads(x) for x in env.run("events", "--json").stdout.splitlines()]
    assert seen == cli[: len(seen)]  # the documents `spex events --json` prints
    # Resuming after an id: exactly what came after it.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    headers = {"Authorization": f"Bearer {server.token}", "Last-Event-ID": str(ids[1])}
    conn.request("GET", "/events?since=0", headers=headers)
    r = conn.getresponse()
    again: list[int] = []
    while len(again) < len(ids) - 2:
        line = r.fp.readline().decode()
        if line.startswith("id: "):
            again.append(int(line[4:]))
    conn.close()
    assert again == ids[2:]


def test_a_bad_event_id_or_tail_in_a_stream_is_400_or_ignored_never_500(
    env: Env, server: Server
) -> None:
    """`str.isdigit` takes '²' and any number of digits; `int` refuses both."""
    assert env.run("new", "api", "--harness", "demo").returncode == 0
    assert env.run("wake", "api", "hi", "--window", "5").returncode == 0
    turn = state(env, "api")["turn"]["id"]
    for since in ("%C2%B2", "9" * 5000):
        status, _, body = server.request("GET", f"/events?since={since}")
        assert (status, body) == (400, b"spex: since is an event id\n"), since
    status, _, _ = server.request("GET", "/events", headers={"Last-Event-ID": "\xb2"})
    assert status == 400
    for tail in ("%C2%B2", "9" * 5000):  # not a count: the page's own tail
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        path = f"/s/api/log/live?turn={turn}&tail={tail}"
        conn.request("GET", path, headers={"Authorization": f"Bearer {server.token}"})
        r = conn.getresponse()
        assert r.status == 200 and r.readline() == b"retry: 2000\n", tail
        conn.close()


def test_a_closed_live_log_of_a_quiet_turn_leaves_no_thread_behind(
    env: Env, server: Server
) -> None:
    """Each open log stream follows in a thread of its own: a page closed while
    its turn writes nothing must not leave that thread (and its store and
    watch) until the turn ends or writes again."""
    assert env.run("new", "slow", "--", "bash", "-c", "sleep 60").returncode == 0
    assert env.run("wake", "slow", "x", "--window", "0.2").returncode == 0
    turn = state(env, "slow")["turn"]["id"]
    proc = psutil.Process(server.proc.pid)
    assert server.request("GET", f"/s/slow?turn={turn}")[0] == 200  # the thread pool is up
    before = proc.num_threads()
    streams = []
    for _ in range(8):  # one at a time: one worker thread of the pool serves them all
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        path = f"/s/slow/log/live?turn={turn}"
        conn.request("GET", path, headers={"Authorization": f"Bearer {server.token}"})
        r = conn.getresponse()
        assert r.status == 200 and r.readline() == b"retry: 2000\n"
        streams.append(conn)
    assert retry_until(lambda: proc.num_threads() >= before + 8)
    for conn in streams:
        conn.close()
    assert retry_until(lambda: proc.num_threads() <= before, seconds=5), proc.num_threads()
    assert state(env, "slow")["turn"]["state"] == "running"


def test_an_idle_server_with_open_pages_wakes_about_once_a_second(env: Env, server: Server) -> None:
    """uvicorn's own main loop wakes ten times a second to look for a signal:
    with nothing happening that was most of what an idle `spex serve` cost.
    The signal wakes it now (the fixture's SIGTERM still ends it, 143), and
    it wakes once a second to renew the Date header. Counted, not timed: a
    loaded machine delays wakes, it does not add them."""
    assert server.request("GET", "/")[0] == 200
    streams = []
    for _ in range(2):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("GET", "/events", headers={"Authorization": f"Bearer {server.token}"})
        r = conn.getresponse()
        assert r.status == 200 and r.readline() == b"retry: 1000\n"
        streams.append(conn)
    # The fewest wakes of three 2 s windows (the first may still hold the
    # streams' start): sleeps here are the windows counted over, not waits.
    windows = []
    for _ in range(3):
        before, started = wakeups(server.proc.pid), time.monotonic()
        time.sleep(2)
        windows.append((wakeups(server.proc.pid) - before, time.monotonic() - started))
    for conn in streams:
        conn.close()
    woke, seconds = min(windows)
    # Ten a second from uvicorn's loop alone would be 20 or more in each.
    assert woke <= 4 * seconds, f"wakes in 2 s windows: {windows}"
    status, headers, _ = server.request("GET", "/")
    assert status == 200 and headers["date"].endswith(" GMT")


def test_the_token_file_the_url_and_the_address(env: Env) -> None:
    s = start(env)
    path = env.home / "serve.token"
    try:
        assert path.read_text().strip() == s.token
        assert path.stat().st_mode & 0o777 == 0o600
    finally:
        s.stop()
    again = start(env)  # kept across restarts: the printed URL still works
    assert again.token == s.token and again.stop() in (143, -15)
    fresh = start(env, "--new-token")
    assert fresh.token != s.token and path.read_text().strip() == fresh.token
    assert fresh.stop() in (143, -15)
    path.chmod(0o644)
    r = env.run("serve", "--port", "0")
    assert r.returncode == 1 and r.stderr.startswith("spex: ") and "readable by others" in r.stderr
    path.chmod(0o600)
    kept = path.read_bytes()
    path.unlink()
    for fifo in (False, True):  # not read: a FIFO would block the open
        os.mkfifo(path, 0o600) if fifo else path.mkdir()
        r = env.run("serve", "--port", "0", timeout=10)
        assert (r.returncode, r.stderr) == (1, f"spex: {path} is not a file of yours (remove it)\n")
        path.unlink() if fifo else path.rmdir()
    path.write_bytes(kept)
    path.chmod(0o600)
    # Another address only when asked, and said with a warning.
    wide = start(env, "--host", "0.0.0.0")
    try:
        assert wide.base.startswith("http://127.0.0.1:")
        assert "spex: warning: listening on 0.0.0.0" in wide.stderr.read_text()
        assert wide.request("GET", "/rows")[0] == 200
    finally:
        wide.stop()
    assert "warning" not in s.stderr.read_text()
    # A port in use, a bad port, a bad address: one line each.
    busy = start(env)
    try:
        r = env.run("serve", "--port", str(busy.port))
        assert r.returncode == 1 and r.stderr.count("\n") == 1
        assert r.stderr.startswith(f"spex: cannot listen on 127.0.0.1 port {busy.port}")
    finally:
        busy.stop()
    assert env.run("serve", "--port", "70000").returncode == 2
    r = env.run("serve", "--host", "no such host.invalid", "--port", "0")
    assert r.returncode == 2 and r.stderr.startswith("spex: invalid --host")
    r = env.run("-H", "box", "serve")
    assert r.returncode == 2 and "serves this machine's state home" in r.stderr


def test_nothing_else_imports_the_web_stack() -> None:
    """`spex --help` builds every command: none of them loads starlette,
    uvicorn, jinja2 or anyio (only `spex serve`'s body does)."""
    code = (
        "import sys; from spexsup.cli.app import register; register();"
        "print(' '.join(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('starlette', 'uvicorn', 'jinja2', 'anyio', 'spexsup'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stdout.split()
    assert "spexsup.cli.serve" in loaded
    assert [m for m in loaded if not m.startswith("spexsup")] == []
    assert [m for m in loaded if m.startswith("spexsup.web")] == []
