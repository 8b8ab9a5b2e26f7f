"""Notifications through the installed `spex` (DESIGN §26): real HTTP servers
standing in for ntfy, Slack, Discord and Telegram, a real SMTP server
(aiosmtpd), a `notify-send` shim; real turns drive the events."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import SPEX, Env, harness, retry_until

HANG = -1  # a status that means: never answer (until the test lets go)


class Service:
    """A real HTTP server on 127.0.0.1 that records every request (method,
    path, headers, body) and answers each with the next status of `script`
    (then 200); `HANG` holds the request unanswered until `release`."""

    def __init__(self, script: tuple[int, ...] = ()) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.released = threading.Event()
        self.lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with service.lock:
                    service.requests.append(
                        {
                            "method": "POST",
                            "path": self.path,
                            "headers": dict(self.headers.items()),
                            "body": body,
                            "at": time.time(),
                        }
                    )
                    status = service.script.pop(0) if service.script else 200
                if status == HANG:
                    service.released.wait(60)
                    return
                answer = b'{"ok":true}'
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_port}"

    def json_bodies(self) -> list[Any]:
        return [json.loads(r["body"]) for r in self.requests]


@contextmanager
def services(*scripts: tuple[int, ...]) -> Iterator[list[Service]]:
    running = [Service(s) for s in scripts]
    for s in running:
        threading.Thread(target=s.server.serve_forever, daemon=True).start()
    try:
        yield running
    finally:
        for s in running:
            s.released.set()
            s.server.shutdown()
            s.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def smtp_server() -> Iterator[tuple[int, list[Any]]]:
    """A real SMTP server (aiosmtpd) on 127.0.0.1; yields its port and the
    envelopes it received."""
    from aiosmtpd.controller import Controller

    received: list[Any] = []

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            received.append(envelope)
            return "250 OK"

    port = free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, received
    finally:
        controller.stop()


def notify_send_shim(env: Env) -> Path:
    """A `notify-send` first on PATH (the turns' login PATH too) that writes
    its argv to a file per call."""
    bin_dir = env.root / "shim-bin"
    bin_dir.mkdir()
    out = env.root / "desktop"
    out.mkdir()
    shim = bin_dir / "notify-send"
    shim.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        f"open(os.path.join({str(out)!r}, str(os.getpid())), 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    shim.chmod(0o755)
    path = f"{bin_dir}:{env.vars['PATH']}"
    env.vars["PATH"] = path
    env.login_path(path)
    return out


def config(env: Env, text: str) -> None:
    (env.home / "config.toml").write_text(text)


def targets(env: Env) -> dict[str, dict[str, Any]]:
    r = env.run("notify", "ls", "--json")
    assert r.returncode == 0, r.stderr
    return {t["name"]: t for t in json.loads(r.stdout)["targets"]}


def settled(env: Env, name: str, delivered: int = 0, failed: int = 0) -> bool:
    t = targets(env)[name]
    return (t["delivered"], t["failed"], t["waiting"]) == (delivered, failed, 0)


def hooks_log(env: Env) -> str:
    path = env.home / "hooks.log"
    return path.read_text() if path.exists() else ""


def fail_a_turn(env: Env, name: str = "api") -> None:
    """A real turn that fails (its harness prints a line and exits 7)."""
    assert env.run("new", name, "--", harness("exit7.sh")).returncode == 0
    env.run("wake", name, "x", "--window", "2")  # confirmed or failed: a loaded machine
    assert env.run("wait", name, "--timeout", "60s").returncode == 1


def test_every_service_gets_its_documented_request(env: Env) -> None:
    desktop = notify_send_shim(env)
    with (
        services((), (), (), ()) as (ntfy, slack, discord, telegram),
        smtp_server() as (port, mails),
    ):
        config(
            env,
            "[serve]\nurl = 'https://spex.example/'\n"
            f"[[notify]]\nname = 'phone'\nservice = 'ntfy'\nurl = '{ntfy.base}/spex-topic'\n"
            "tags = ['robot', 'warning']\nwindow = 0\n"
            f"[[notify]]\nname = 'mail'\nservice = 'email'\nhost = '127.0.0.1'\nport = {port}\n"
            "from = 'spex@example.com'\nto = ['me@example.com']\nwindow = 0\n"
            "[[notify]]\nname = 'here'\nservice = 'desktop'\nwindow = 0\n",
        )
        secrets = {
            "team": ("slack", f"{slack.base}/services/T1/B2/XYZSECRET", []),
            "chat": ("discord", f"{discord.base}/api/webhooks/1/DISCORDSECRET", []),
            "bot": ("telegram", "123:BOTSECRET", ["--chat-id", "42", "--api", telegram.base]),
        }
        for name, (service, secret, extra) in secrets.items():
            r = env.run(
                "notify", "add", name, service, "--secret-stdin", "--window", "0", *extra,
                input=secret.encode(),
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
        assert (env.home / "notify-secrets.toml").stat().st_mode & 0o777 == 0o600
        fail_a_turn(env)
        for name in ("phone", "mail", "here", "team", "chat", "bot"):

            def sent(n: str = name) -> bool:
                return settled(env, n, delivered=1)

            assert retry_until(sent, seconds=60), name

        (req,) = ntfy.requests
        assert req["method"] == "POST" and req["path"] == "/spex-topic"
        h = req["headers"]
        assert h["Title"] == "spex: api turn failed"
        assert h["Priority"] == "high" and h["Tags"] == "robot,warning"
        assert h["Click"] == "https://spex.example/s/api"
        assert h["Content-Type"] == "text/plain; charset=utf-8"
        text = req["body"].decode()
        assert text.startswith("api: turn failed (")
        assert "cause: " in text and "boom: something broke" in text
        assert text.endswith("https://spex.example/s/api")

        (req,) = slack.requests
        assert req["path"] == "/services/T1/B2/XYZSECRET"
        assert req["headers"]["Content-Type"] == "application/json"
        (body,) = slack.json_bodies()
        assert list(body) == ["text"] and body["text"].startswith("*spex: api turn failed*\n")

        (req,) = discord.requests
        assert req["path"] == "/api/webhooks/1/DISCORDSECRET"
        (body,) = discord.json_bodies()
        assert list(body) == ["content"]
        assert body["content"].startswith("**spex: api turn failed**\n")

        (req,) = telegram.requests
        assert req["path"] == "/bot123:BOTSECRET/sendMessage"
        (body,) = telegram.json_bodies()
        assert body["chat_id"] == "42" and body["disable_web_page_preview"] is True
        assert body["text"].startswith("spex: api turn failed\napi: turn failed")

        (mail,) = mails
        assert mail.mail_from == "spex@example.com" and mail.rcpt_tos == ["me@example.com"]
        parsed = message_from_bytes(mail.content)
        assert parsed["Subject"] == "spex: api turn failed"
        payload = parsed.get_payload(decode=True)
        assert isinstance(payload, bytes) and b"https://spex.example/s/api" in payload

        ((argv),) = [json.loads(p.read_text()) for p in desktop.iterdir()]
        assert argv[:3] == ["--app-name=spex", "--urgency=critical", "spex: api turn failed"]
        assert argv[3].startswith("api: turn failed")

    # No secret is ever shown: not in the log, nor in ls.
    shown = hooks_log(env) + env.run("notify", "ls").stdout
    shown += env.run("notify", "ls", "--json").stdout
    for secret in ("XYZSECRET", "DISCORDSECRET", "BOTSECRET", "spex-topic"):
        assert secret not in shown
    listed = targets(env)
    assert listed["team"]["secret"] == "notify-secrets.toml"
    assert listed["phone"]["to"].startswith("http://127.0.0.1:")


def test_a_500_then_a_200_is_retried_once_and_delivered_once(env: Env) -> None:
    with services((500, 200)) as (ntfy,):
        config(
            env, f"[[notify]]\nname = 'p'\nservice = 'ntfy'\nurl = '{ntfy.base}/t'\nwindow = 0\n"
        )
        fail_a_turn(env)
        assert retry_until(lambda: settled(env, "p", delivered=1), seconds=60)
        assert len(ntfy.requests) == 2
        assert ntfy.requests[0]["body"] == ntfy.requests[1]["body"]
        assert "delivered: HTTP 200 (attempt 2 of 3)" in hooks_log(env)


def test_a_server_that_never_answers_is_a_recorded_timeout_not_a_late_verdict(
    env: Env,
) -> None:
    with services((HANG, HANG)) as (ntfy,):
        config(
            env,
            f"[[notify]]\nname = 'p'\nservice = 'ntfy'\nurl = '{ntfy.base}/t'\nwindow = 0\n"
            "timeout = '1s'\nattempts = 2\n",
        )
        fail_a_turn(env)
        assert retry_until(lambda: len(ntfy.requests) >= 1, seconds=60)
        # The verdict was in SQLite before the delivery even began.
        db = sqlite3.connect(env.home / "state.db")
        try:
            ((state, ended),) = db.execute("SELECT state, ended_at FROM turns").fetchall()
        finally:
            db.close()
        assert state == "failed" and ended <= ntfy.requests[0]["at"]
        assert retry_until(lambda: settled(env, "p", failed=1), seconds=60)
        (failure,) = targets(env)["p"]["failures"]
        assert failure["outcome"] == "failed: no answer in 1s after 2 attempts"
        assert len(ntfy.requests) == 2
        listed = env.run("notify", "ls").stdout
        assert "failed: no answer in 1s after 2 attempts" in listed


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_racing_spex_processes_deliver_a_lost_turn_once(env: Env) -> None:
    with services(()) as (ntfy,):
        config(
            env, f"[[notify]]\nname = 'p'\nservice = 'ntfy'\nurl = '{ntfy.base}/t'\nwindow = 0\n"
        )
        assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
        woke = json.loads(env.run("wake", "a", "x", "--window", "0.3", "--json").stdout)
        wrapper = psutil.Process(woke["pid"])
        wrapper.kill()
        assert retry_until(lambda: _gone(wrapper), seconds=30)
        readers = [
            subprocess.Popen([SPEX, "ls"], env=env.vars, stdout=subprocess.DEVNULL)
            for _ in range(4)
        ]
        assert [r.wait(60) for r in readers] == [0, 0, 0, 0]
        assert retry_until(lambda: settled(env, "p", delivered=1), seconds=60)
        (req,) = ntfy.requests
        assert req["headers"]["Title"] == "spex: a turn lost"
        for pid in [p.pid for p in psutil.process_iter() if _turn_of(p) == woke["turn"]]:
            os.kill(pid, signal.SIGKILL)


def _turn_of(proc: psutil.Process) -> str | None:
    try:
        return proc.environ().get("SPEXSUP_TURN")
    except psutil.Error:
        return None


LEGS = 30


@pytest.mark.timeout(600)
def test_a_wave_of_failing_legs_sends_one_summary_per_target(env: Env) -> None:
    go = env.root / "go"
    with services((), ()) as (ntfy, slack):
        config(
            env,
            f"[[notify]]\nname = 'p'\nservice = 'ntfy'\nurl = '{ntfy.base}/t'\nwindow = '60s'\n",
        )
        r = env.run(
            "notify", "add", "s", "slack", "--secret-stdin", "--window", "60s",
            input=f"{slack.base}/hook".encode(),
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        for n in range(LEGS):
            r = env.run(
                "new", f"leg{n:03}", "--env", f"GO={go}", "--env", "RC=7", "--",
                harness("until_go.sh"),
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
        r = env.run("fanout", "--all", "-m", "go", "--window", "0.5", "--json", timeout=300)
        assert r.returncode == 0, r.stderr
        go.touch()
        for name in ("p", "s"):

            def summed(n: str = name) -> bool:
                return settled(env, n, delivered=LEGS + 1)

            assert retry_until(summed, seconds=300), targets(env)[name]
        (req,) = ntfy.requests
        title = req["headers"]["Title"]
        assert title == f"spex: {LEGS} failed, 1 wave-ended in {LEGS} sessions", title
        text = req["body"].decode()
        assert text.startswith(f"{LEGS + 1} events: ")
        assert f"… and {LEGS + 1 - 10} more (spex events)" in text
        ((body),) = slack.json_bodies()
        assert f"{LEGS} failed" in body["text"]


def test_a_bad_line_is_one_error_and_changes_nothing(env: Env) -> None:
    config(env, "[[notify]]\nname = 'p'\nservice = 'ntfy'\nurl = 'https://ntfy.sh/t'\n")
    before = (env.home / "config.toml").read_bytes()
    bad = [
        ("notify", "add", "q", "ntfy", "--url", "ftp://nope"),
        ("notify", "add", "q", "ntfy", "--url", "https://ntfy.sh/x", "--priority", "7"),
        ("notify", "add", "q", "ntfy", "--url", "https://ntfy.sh/x", "--on", "falied"),
        ("notify", "add", "q", "ntfy", "--url", "https://ntfy.sh/x", "--window", "soon"),
        ("notify", "add", "q", "slack", "--url", "https://hooks.slack.com/services/X"),
        ("notify", "add", "q", "telegram", "--chat-id", "1"),
        ("notify", "add", "q", "pager"),
    ]
    for argv in bad:
        r = env.run(*argv)
        assert r.returncode == 2, (argv, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("spex: "), r.stderr
        assert r.stdout == ""
        assert (env.home / "config.toml").read_bytes() == before
        assert not (env.home / "notify-secrets.toml").exists()
    assert "did you mean 'failed'?" in env.run(*bad[2]).stderr
    # A name in use is refused (3), the same.
    r = env.run("notify", "add", "p", "desktop")
    assert r.returncode == 3 and (env.home / "config.toml").read_bytes() == before
    # A broken table in the file: every notify command says so in one line (exit 1,
    # as any broken config.toml), and a turn's verdict does not change.
    config(env, "[[notify]]\nname = 'p'\nservice = 'ntfy'\nurl = 'https://x/t'\npriority = 9\n")
    broken = (env.home / "config.toml").read_bytes()
    r = env.run("notify", "ls")
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("spex: ") and "'priority' must be 1-5" in r.stderr
    assert env.run("notify", "add", "q", "desktop").returncode == 1
    doctor = env.run("doctor")
    assert doctor.returncode == 1 and "'priority' must be 1-5" in doctor.stdout + doctor.stderr
    assert (env.home / "config.toml").read_bytes() == broken
    fail_a_turn(env)
    assert retry_until(lambda: "not run" in hooks_log(env), seconds=30)


def test_secrets_from_the_environment_and_test_and_rm(env: Env) -> None:
    with services((), (404,)) as (telegram, slack):
        config(
            env,
            "[[notify]]\nname = 'bot'\nservice = 'telegram'\nchat_id = '@ops'\n"
            f"token_env = 'SPEX_TEST_TOKEN'\napi = '{telegram.base}'\n"
            "[[notify]]\nname = 'team'\nservice = 'slack'\nurl_env = 'SPEX_TEST_SLACK'\n",
        )
        r = env.run("notify", "test", "bot")
        assert r.returncode == 1 and "$SPEX_TEST_TOKEN is not set" in r.stdout
        extra = {"SPEX_TEST_TOKEN": "9:ENVSECRET", "SPEX_TEST_SLACK": f"{slack.base}/x"}
        r = env.run("notify", "test", "bot", extra=extra)
        assert r.returncode == 0
        assert r.stdout == "bot (telegram): delivered: HTTP 200 (attempt 1 of 3)\n"
        assert telegram.requests[0]["path"] == "/bot9:ENVSECRET/sendMessage"
        # A 4xx is final: no retry.
        r = env.run("notify", "test", "team", extra=extra)
        assert r.returncode == 1 and "failed: HTTP 404 (attempt 1 of 3)" in r.stdout
        assert len(slack.requests) == 1
        listed = env.run("notify", "ls", extra=extra).stdout
        assert "$SPEX_TEST_TOKEN" in listed and "ENVSECRET" not in listed
        assert env.run("notify", "rm", "bot").returncode == 0
        assert list(targets(env)) == ["team"]
        assert env.run("notify", "rm", "bot").returncode == 3


def test_a_queue_that_runs_dry_is_one_message(env: Env) -> None:
    go = env.root / "go"
    with services(()) as (ntfy,):
        config(
            env,
            f"[[notify]]\nname = 'p'\nservice = 'ntfy'\nurl = '{ntfy.base}/t'\nwindow = 0\n"
            "on = ['queue-empty']\n",
        )
        assert (
            env.run("new", "a", "--env", f"GO={go}", "--", harness("until_go.sh")).returncode == 0
        )
        env.run("wake", "a", "first", "--window", "0.3")
        for prompt in ("second", "third"):
            r = env.run("wake", "a", "--queue", prompt)
            assert r.returncode == 0 and "queued" in r.stdout, r
        go.touch()

        # The first turn's end starts the second, the second's the third; the
        # third's end leaves the queue empty: that one is the news.
        def third_ended() -> bool:
            db = sqlite3.connect(env.home / "state.db")
            try:
                row = db.execute("SELECT count(*) FROM turns WHERE state = 'complete'").fetchone()
            finally:
                db.close()
            return bool(row[0] == 3)

        assert retry_until(third_ended, seconds=90)
        assert env.run("wait", "a", "--timeout", "60s").returncode == 0
        assert retry_until(lambda: settled(env, "p", delivered=1), seconds=60)
        (req,) = ntfy.requests
        assert req["headers"]["Title"] == "spex: a queue ran dry"
        assert req["headers"]["Priority"] == "default"


def test_a_failed_check_is_check_failed(env: Env) -> None:
    with services(()) as (ntfy,):
        config(
            env,
            f"[[notify]]\nname = 'p'\nservice = 'ntfy'\nurl = '{ntfy.base}/t'\nwindow = 0\n"
            "on = ['check-failed']\n",
        )
        work = env.root / "work"
        work.mkdir()
        r = env.run("new", "a", "--cwd", str(work), "--", harness("exit0.sh"))
        assert r.returncode == 0, r.stderr
        env.run("wake", "a", "x", "--verify", "echo FAIL; exit 3", "--window", "5")
        assert env.run("wait", "a", "--timeout", "60s").returncode == 1
        assert retry_until(lambda: settled(env, "p", delivered=1), seconds=60), env.run(
            "events", "--json"
        ).stdout
        (req,) = ntfy.requests
        assert req["headers"]["Title"] == "spex: a check failed (exit 3)"
        assert req["headers"]["Priority"] == "high"
