"""`spex serve` on a phone (issue 41, items 4-6): the list in triage order,
ten sessions a screen, ages that count on, an installable app that works
under a reverse proxy's prefix; a session's page output first; every POST
a 303 with its verdict as a banner; the actions from the page. A real
server, a real headless Chromium at 390x844, as tests/test_web.py."""

from __future__ import annotations

import http.client
import http.server
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Env, harness, retry_until
from playwright.sync_api import expect
from test_web import (
    Server,
    banner,
    browser,  # noqa: F401 (a fixture)
    event_count,
    new_until_go,
    server,  # noqa: F401 (a fixture)
    signed_in,
    start,
    state,
)

from spexsup.present.triage import Need, need
from spexsup.web.site import Said


def turns(env: Env, name: str) -> list[str]:
    r = env.run("show", name, "--json")
    return [t["id"] for t in json.loads(r.stdout).get("turns") or []]


def test_the_list_puts_what_needs_a_person_first_ten_a_phone_screen(
    env: Env,
    server: Server,  # noqa: F811
    browser: Any,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:
    assert env.run("new", "bad", "--", "sh", "-c", "exit 1").returncode == 0
    assert env.run("wake", "bad", "x").returncode == 1  # failed
    assert env.run("new", "halt", "--harness", "demo").returncode == 0
    assert env.run("stop", "halt").returncode == 0  # stopped
    go = new_until_go(env, "run")
    assert env.run("wake", "run", "work").returncode == 0  # running
    for i in range(10):  # idle
        assert env.run("new", f"idle-{i:02d}", "--harness", "demo").returncode == 0
    page = signed_in(browser, server, request)
    needs = page.eval_on_selector_all("#sessions tbody tr", "rs => rs.map(r => r.dataset.need)")
    assert needs == ["failed", "stopped", "running", *["idle"] * 10], needs
    # One line a session: at least ten whole rows on the first screen of 390x844.
    boxes = page.eval_on_selector_all(
        "#sessions tbody tr",
        "rs => rs.map(r => { const b = r.getBoundingClientRect(); return [b.top, b.bottom]; })",
    )
    on_screen = [b for b in boxes if b[1] <= 844]
    assert len(on_screen) >= 10, boxes
    assert all(bottom - top < 40 for top, bottom in boxes), boxes  # one line each
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing off the side
    page.screenshot(path=str(env.root / "phone-list.png"))
    # The running turn's age counts on, without a reload.
    age = page.locator("#row-run .age")
    first = age.text_content()
    page.evaluate("window.sameDocument = 1")
    expect(age).not_to_have_text(first or "", timeout=5000)
    assert page.evaluate("window.sameDocument") == 1
    # Filters: by need and by name, in the URL (and in /rows, which the live updates fetch).
    page.select_option("#filter select[name=state]", "attention")
    expect(page.locator("#sessions tbody tr")).to_have_count(2)
    assert "state=attention" in page.url
    page.fill("#filter input[name=name]", "idle-0[12]")
    page.select_option("#filter select[name=state]", "")
    expect(page.locator("#sessions tbody tr")).to_have_count(2)
    assert page.text_content("#sessions tbody tr:first-child .name") == "idle-01"
    status, _, body = server.request("GET", "/rows?state=running")
    assert status == 200 and b'id="row-run"' in body and b'id="row-bad"' not in body
    assert server.request("GET", "/?state=nosuch")[0] == 400
    go.touch()


def test_each_need_is_read_from_the_session_its_turn_and_its_flags() -> None:
    limited = {"state": "failed", "cause": "usage-limit"}
    assert need("failed", limited, []) == Need.LIMITED
    assert need("running", {"state": "running", "waiting_until": 1.0}, []) == Need.LIMITED
    assert need("failed", {"state": "lost"}, []) == Need.LOST
    assert need("failed", {"state": "timed-out"}, []) == Need.FAILED
    assert need("running", {"state": "running"}, ["verifying"]) == Need.VERIFYING
    assert need("creating", None, []) == Need.OTHER
    order = [Need.FAILED, Need.LOST, Need.LIMITED, Need.VERIFYING, Need.STOPPED]
    assert list(Need)[:5] == order  # what needs a person, before running and idle


def test_a_wake_from_the_phone_then_a_refresh_starts_one_turn(
    env: Env,
    server: Server,  # noqa: F811
    browser: Any,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:
    go = new_until_go(env, "api")
    page = signed_in(browser, server, request)
    page.click("#row-api a")
    page.wait_for_selector("#prompt")
    # Output first, then the controls, then the settings.
    tops = [page.locator(s).bounding_box()["y"] for s in ("#log", "#prompt", "#panel")]
    assert tops == sorted(tops), tops
    page.screenshot(path=str(env.root / "phone-session.png"), full_page=True)
    page.fill("#prompt", "one turn only")
    page.click("#wake")
    page.wait_for_selector("#flash")
    assert re.match(r"api: confirmed turn \S+ pid \d+ \(\d+ ms\)$", page.text_content("#flash"))
    assert page.url == server.base + "/s/api"  # the redirect's page, not the POST's
    page.reload()
    page.wait_for_selector("#log")
    assert page.locator("#flash").count() == 0  # the banner was said once
    assert len(turns(env, "api")) == 1
    go.touch()
    expect(page.locator("#turn-state")).to_have_text("complete rc=0")
    page.reload()
    assert len(turns(env, "api")) == 1


def test_every_post_answers_303_with_its_verdict_as_a_banner(
    env: Env,
    server: Server,  # noqa: F811
) -> None:
    go = new_until_go(env, "api")
    status, headers, _ = server.request("POST", "/s/api/wake", body=b"prompt=hi")
    assert (status, headers["location"], headers["x-spex-exit-code"]) == (303, "../../s/api", "0")
    assert "httponly" in headers["set-cookie"].lower()
    assert re.match(rb"api: confirmed turn ", banner(server, headers))
    status, headers, _ = server.request("POST", "/s/api/stop", body=b"confirm=yes")
    assert (status, headers["location"]) == (303, "../../s/api")
    assert banner(server, headers).startswith(b"api: stopped (turn ")
    status, headers, _ = server.request("POST", "/s/api/resume", body=b"")
    assert banner(server, headers).startswith(b"api: resumed")
    # A banner cookie not sealed by this server is not shown.
    name = headers["set-cookie"].split("=")[0]
    forged = {"Cookie": f"{name}=eyJvayI6dHJ1ZX0.0000"}
    assert b'id="flash"' not in server.request("GET", "/s/api", headers=forged)[2]
    go.touch()


def test_queue_drop_fan_out_and_retry_from_the_page(
    env: Env,
    server: Server,  # noqa: F811
    browser: Any,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:
    go = new_until_go(env, "api")
    assert env.run("wake", "api", "first").returncode == 0
    page = signed_in(browser, server, request)
    page.goto(server.base + "/s/api")
    page.fill("#prompt", "later, please")
    page.click("#queue")
    page.wait_for_selector("#flash")
    assert "queued" in page.text_content("#flash")
    expect(page.locator("#queued li")).to_have_count(1)
    assert "later, please" in page.text_content("#queued li")
    page.click("#queued button.drop")
    page.wait_for_selector("#flash")
    assert page.text_content("#flash").startswith("api: removed queued prompt q")
    assert page.locator("#queued li").count() == 0
    assert json.loads(env.run("queue", "ls", "--json").stdout) == []
    go.touch()
    # Fan out one prompt to the sessions ticked; one leg fails; retry it.
    assert env.run("new", "ok", "--", harness("exit0.sh")).returncode == 0
    assert env.run("new", "bad", "--", "sh", "-c", "exit 1").returncode == 0
    page.goto(server.base + "/waves")
    page.check("#fanout input[value=ok]")
    page.check("#fanout input[value=bad]")
    page.fill("#fanout-prompt", "do it")
    page.click("#fan-out")
    page.wait_for_selector("#flash")
    assert re.match(r"wave \S+: ", page.text_content("#flash")), page.text_content("#flash")
    wave = page.url.rsplit("/", 1)[1]
    # Failed in its window, or (on a slow machine) confirmed, then ended failed.
    expect(page.locator("#legs")).to_contain_text(re.compile(r"bad: \w+ turn \S+ .*rc=1"))
    legs = page.text_content("#legs")
    assert "ok: " in legs and "api" not in legs
    page.click("#retry")
    page.wait_for_selector("#flash")
    retried = page.url.rsplit("/", 1)[1]
    assert retried != wave, page.text_content("#flash")
    doc = json.loads(env.run("wave", retried, "--json").stdout)
    assert doc["retry_of"] == wave and [leg["session"] for leg in doc["legs"]] == ["bad"]
    # Nothing ticked: the banner says so, and no wave is made.
    page.goto(server.base + "/waves")
    page.fill("#fanout-prompt", "nobody")
    page.click("#fan-out")
    page.wait_for_selector("#flash")
    assert page.text_content("#flash") == "spex: no session ticked (tick the sessions to wake)"
    assert len(json.loads(env.run("wave", "ls", "--json").stdout)) == 2


def test_a_banner_fits_its_cookie_whatever_its_line() -> None:
    """A cookie over 4 KiB is dropped by the browser without a word: the
    banner's JSON is cut to fit, its start kept."""
    long = Said(False, "spex: " + "é" * 5000, ["spex: note: " + "ü" * 900] * 5)
    text = long.packed()
    doc = json.loads(text)
    assert len(text.encode()) <= 2700 and doc["notes"] == []
    assert doc["line"].startswith("spex: éé") and doc["line"].endswith("…")
    short = Said(True, "api: confirmed turn t", ["spex: note: x"])
    assert json.loads(short.packed()) == short._asdict()


def test_the_new_buttons_refuse_bad_input_and_change_nothing(
    env: Env,
    server: Server,  # noqa: F811
) -> None:
    go = new_until_go(env, "api")
    go_other = new_until_go(env, "other")
    assert env.run("wake", "other", "work").returncode == 0
    assert env.run("wake", "other", "later", "--queue").returncode == 0
    (entry,) = [q["id"] for q in json.loads(env.run("queue", "ls", "--json").stdout)]
    js = {"Accept": "application/json"}
    # Another session's queued prompt is not this page's to drop.
    status, headers, _ = server.request("POST", "/s/api/queue/drop", body=f"id={entry}".encode())
    assert (status, headers["location"], headers["x-spex-exit-code"]) == (
        303,
        "../../../s/api",
        "3",
    )
    said = f"spex: api has no queued prompt {entry} (spex queue ls api)"
    assert banner(server, headers) == said.encode()
    status, _, body = server.request(
        "POST", "/s/api/queue/drop", headers=js, body=f"id={entry}".encode()
    )
    error = {"schema_version": 1, "ok": False, "error": said[6:], "exit_code": 3}
    assert (status, json.loads(body)) == (409, error)
    for bad in (b"id=", b"id=-rf", b"id=a%20b", b""):
        status, _, body = server.request("POST", "/s/api/queue/drop", body=bad)
        assert (status, body) == (400, b"spex: id names a queued prompt (spex queue ls)\n"), bad
    assert [q["id"] for q in json.loads(env.run("queue", "ls", "--json").stdout)] == [entry]
    # A fan-out with nothing ticked or a bad name: no wave.
    status, headers, _ = server.request("POST", "/waves/fanout", body=b"prompt=x")
    assert (status, headers["location"], headers["x-spex-exit-code"]) == (303, "../waves", "2")
    assert (
        banner(server, headers, "/waves") == b"spex: no session ticked (tick the sessions to wake)"
    )
    assert server.request("POST", "/waves/fanout", body=b"session=a.b&prompt=x")[0] == 400
    # A retry of no wave, of a bad id.
    # A retry of no wave, of a bad id.
    status, headers, _ = server.request("POST", "/w/w20200101T000000Z-000000/retry", body=b"")
    assert (status, headers["location"]) == (303, "../../waves")
    assert headers["x-spex-exit-code"] != "0"
    assert server.request("POST", "/w/-x/retry", body=b"")[0] == 400
    assert json.loads(env.run("wave", "ls", "--json").stdout) == []
    # An unknown session is a wave's refused leg, as `spex fanout` makes it.
    status, headers, _ = server.request("POST", "/waves/fanout", body=b"session=nosuch&prompt=x")
    assert (status, headers["x-spex-exit-code"]) == (303, "1")
    wave = headers["location"].removeprefix("../w/")
    assert banner(server, headers, f"/w/{wave}").startswith(f"wave {wave}: ".encode())
    assert b"nosuch: refused" in server.request("GET", f"/w/{wave}")[2]
    assert state(env, "api")["turn"] is None
    go.touch()
    go_other.touch()


def test_read_only_keeps_none_of_the_actions(
    env: Env,
    browser: Any,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:
    new_until_go(env, "api")
    env.run("new", "bad", "--", "sh", "-c", "exit 1")
    wave = json.loads(env.run("fanout", "bad", "-m", "x", "--json").stdout)["id"]
    s = start(env, "--read-only")
    try:
        page = signed_in(browser, s, request)
        for path in ("/s/api", "/waves", f"/w/{wave}", "/"):
            page.goto(s.base + path)
            page.wait_for_selector("#read-only")
            assert page.locator("form[method=post]").count() == 0, path
        before = event_count(env)
        posts = [
            ("/s/api/wake", b"prompt=hi&queue=1"),
            ("/s/api/queue/drop", b"id=q1"),
            ("/waves/fanout", b"session=api&prompt=hi"),
            (f"/w/{wave}/retry", b""),
        ]
        for path, body in posts:
            status, _, answer = s.request("POST", path, body=body)
            assert status == 403 and b"--read-only" in answer, (path, status, answer)
        assert event_count(env) == before and state(env, "api")["turn"] is None
        assert len(json.loads(env.run("wave", "ls", "--json").stdout)) == 1
    finally:
        assert s.stop() in (143, -15)


class Prefixed(http.server.ThreadingHTTPServer):
    """A reverse proxy serving the server under /spex/ (what nginx's
    `location /spex/ { proxy_pass http://127.0.0.1:PORT/; }` does), streams too."""

    upstream: int


class Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Prefixed

    def log_message(self, *args: Any) -> None:
        pass

    def forward(self) -> None:
        if not self.path.startswith("/spex/"):
            self.send_error(404)
            return
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        conn.request(self.command, self.path[len("/spex") :], body=body, headers=headers)
        r = conn.getresponse()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("connection", "close")
        self.end_headers()
        while chunk := r.read1(65536):
            self.wfile.write(chunk)
            self.wfile.flush()
        self.close_connection = True
        conn.close()

    do_GET = do_POST = do_HEAD = forward


@pytest.fixture
def proxy(server: Server) -> Iterator[str]:  # noqa: F811
    httpd = Prefixed(("127.0.0.1", 0), Forward)
    httpd.upstream = server.port
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/spex/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_app_installs_and_works_under_a_proxys_prefix(
    env: Env,
    server: Server,  # noqa: F811
    proxy: str,
) -> None:
    from playwright.sync_api import sync_playwright
    from test_web import CHROMIUM, CHROMIUM_ARGS

    new_until_go(env, "api")
    with sync_playwright() as p:
        # A profile of its own: Chromium installs nothing from an incognito one.
        phone = p.chromium.launch_persistent_context(
            str(env.root / "profile"),
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            viewport={"width": 390, "height": 844},
        )
        phone.set_default_timeout(20_000)
        try:
            used(env, server, proxy, phone)
        finally:
            phone.close()
    status, _, body = server.request("GET", "/manifest.webmanifest", bearer=False)
    assert status == 200 and json.loads(body)["start_url"] == "./"  # no token: it says nothing
    assert server.request("GET", "/icon-192.png", bearer=False)[2][:8] == b"\x89PNG\r\n\x1a\n"


def used(env: Env, s: Server, proxy: str, phone: Any) -> None:
    page = phone.new_page()
    page.goto(proxy + "#token=" + s.token)
    page.wait_for_selector("#board")
    assert page.url == proxy
    # Chromium's own installability check: the manifest, its icons, the page.
    cdp = phone.new_cdp_session(page)
    assert retry_until(lambda: cdp.send("Page.getAppManifest").get("url", "") != "")
    manifest = cdp.send("Page.getAppManifest")
    assert manifest["url"] == proxy + "manifest.webmanifest" and not manifest["errors"]
    assert cdp.send("Page.getInstallabilityErrors")["installabilityErrors"] == []
    # Every link, form and stream stays under the prefix.
    expect(page.locator("#live")).to_have_text(re.compile("^live"))
    page.click("#row-api a")
    page.wait_for_selector("#prompt")
    assert page.url == proxy + "s/api"
    page.fill("#prompt", "through the proxy")
    page.click("#wake")
    page.wait_for_selector("#flash")
    assert page.url == proxy + "s/api" and "confirmed" in page.text_content("#flash")
    expect(page.locator("#log")).to_contain_text("started on: through the proxy")
    (env.root / "go-api").touch()
    expect(page.locator("#turn-state")).to_have_text("complete rc=0")
    page.click("header a.brand")
    page.wait_for_selector("#board")
    assert page.url == proxy


def test_a_public_url_names_this_server_to_the_host_and_origin_checks(env: Env) -> None:
    (env.home / "config.toml").write_text('[serve]\nurl = "https://spex.example.com/spex"\n')
    new_until_go(env, "api")
    s = start(env)
    try:
        host = {"Host": "spex.example.com", "Origin": "https://spex.example.com"}
        assert s.request("GET", "/rows", headers=host)[0] == 200
        assert s.request("POST", "/s/api/resume", headers=host, body=b"")[0] == 303
        evil = {"Host": "spex.example.com", "Origin": "https://evil.example"}
        assert s.request("POST", "/s/api/resume", headers=evil, body=b"")[0] == 403
        assert s.request("GET", "/rows", headers={"Host": "other.example.com"})[0] == 421
    finally:
        assert s.stop() in (143, -15)
