"""Signed webhooks (`POST /trigger/NAME`, spexsup.web.triggers): real HTTP
POSTs to a real `spex serve`, signed as GitHub and as the generic scheme
sign them; a bad signature changes nothing, a redelivery starts no turn."""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Env, harness
from test_web import Server, start

SECRET = "It's a Secret to Everybody"
GITHUB_CONFIG = """
[trigger.gh]
session = "d"
prompt = "review PR #{pull_request.number}: {pull_request.title} ({action}) {{ok}}"
secret_env = "SPEX_TEST_HOOK_SECRET"

[trigger.plain]
session = "d"
prompt = "deploy {ref}"

[trigger.many]
match = "w*"
prompt = "run {job}"

[trigger.wave]
match = "w*"
prompt = "run {job}"
"""
PR = {"action": "opened", "pull_request": {"number": 7, "title": "Fix the flaky test"}}


def github(body: bytes, delivery: str, secret: str = SECRET, **more: str) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": f"sha256={digest}",
        **more,
    }


def generic(body: bytes, stamp: int, secret: str, **more: str) -> dict[str, str]:
    signed = str(stamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Spex-Timestamp": str(stamp),
        "X-Spex-Signature": f"sha256={digest}",
        **more,
    }


def turns(env: Env, name: str) -> list[dict[str, Any]]:
    shown: list[dict[str, Any]] = json.loads(env.run("show", name, "--json").stdout)["turns"]
    return shown


def post(server: Server, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    status, _, data = server.request("POST", path, headers=headers, body=body, bearer=False)
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data.decode()


@pytest.fixture
def served(env: Env) -> Iterator[Server]:
    """`d` records each prompt; the triggers of GITHUB_CONFIG; their secrets in
    the server's environment (gh) and in trigger-secrets.toml (plain)."""
    record = [sys.executable, harness("record.py")]
    r = env.run("new", "d", "--env", f"RECORD_TO={env.root / 'prompt'}", "--", *record)
    assert r.returncode == 0, r.stderr
    (env.home / "config.toml").write_text(GITHUB_CONFIG)
    secrets = env.home / "trigger-secrets.toml"
    secrets.write_text('[plain]\nsecret = "plain secret"\n[wave]\nsecret = "wave secret"\n')
    secrets.chmod(0o600)
    env.vars["SPEX_TEST_HOOK_SECRET"] = SECRET
    s = start(env)
    try:
        yield s
    finally:
        s.stop()
        assert "Traceback" not in s.stderr.read_text()


def test_a_signed_github_delivery_wakes_its_session_once_redelivered_twice(
    env: Env, served: Server
) -> None:
    body = json.dumps(PR).encode()
    headers = github(body, "72d3162e-cc78-11e3-81ab-4c9367dc0958")
    answers = [post(served, "/trigger/gh", body, headers) for _ in range(3)]
    assert [status for status, _ in answers] == [200, 200, 200], answers
    first, again, third = (doc for _, doc in answers)
    assert first["ok"] is True and first["repeat"] is False, first
    assert again["repeat"] is True and third["repeat"] is True
    assert first["turn"] == again["turn"] == third["turn"]
    (turn,) = turns(env, "d")
    assert turn["id"] == first["turn"]
    prompt = "review PR #7: Fix the flaky test (opened) {ok}"
    assert (env.root / "prompt").read_bytes() == prompt.encode()
    # Another delivery is another turn.
    assert env.run("wait", "d", "--timeout", "60").returncode == 0
    status, doc = post(served, "/trigger/gh", body, github(body, "another-delivery"))
    assert status == 200 and doc["repeat"] is False and doc["turn"] != first["turn"], doc
    assert len(turns(env, "d")) == 2


def test_a_wrong_or_missing_signature_is_401_and_changes_nothing(env: Env, served: Server) -> None:
    body = json.dumps(PR).encode()
    events = env.run("events", "--json").stdout
    bad = [
        github(body, "d1", secret="not the secret"),
        github(body + b" ", "d2"),  # another body's signature
        {**github(body, "d3"), "X-Hub-Signature-256": "sha256=" + "0" * 64},
        {**github(body, "d4"), "X-Hub-Signature-256": "sha1=abc"},
        {k: v for k, v in github(body, "d5").items() if k != "X-Hub-Signature-256"},
        generic(body, int(time.time()), "wrong"),
        generic(body, int(time.time()) - 3600, "plain secret"),  # signed, but an hour old
    ]
    paths = ["/trigger/gh"] * 6 + ["/trigger/plain"]
    answers = [post(served, p, body, h) for p, h in zip(paths, bad, strict=True)]
    assert [s for s, _ in answers] == [401] * 7, answers
    for _, said in answers:
        assert isinstance(said, str) and said.startswith("spex: ") and said.count("\n") == 1
    assert "more than 300s from now" in answers[-1][1]
    assert turns(env, "d") == [] and not (env.root / "prompt").exists()
    assert env.run("events", "--json").stdout == events


def test_the_generic_signature_a_proxy_host_and_the_refusals_before_anything_runs(
    env: Env, served: Server
) -> None:
    body = b'{"ref": "v1.2"}'
    now = int(time.time())
    # No token, and a Host that is not this server's (a proxy's): the signature is the authority.
    headers = generic(body, now, "plain secret", **{"X-Spex-Delivery": "job-1"})
    status, doc = post(served, "/trigger/plain", body, {**headers, "Host": "hooks.example.com"})
    assert status == 200 and doc["repeat"] is False, doc
    status, again = post(served, "/trigger/plain", body, headers)
    assert status == 200 and again["repeat"] is True and again["turn"] == doc["turn"]
    assert (env.root / "prompt").read_bytes() == b"deploy v1.2"
    cases = [
        ("/trigger/nosuch", b"{}", generic(b"{}", now, "x"), 404),
        ("/trigger/plain", b"{}", generic(b"{}", now, "plain secret"), 422),  # no field ref
        ("/trigger/plain", b"not json", generic(b"not json", now, "plain secret"), 400),
        ("/trigger/many", b"{}", generic(b"{}", now, "x"), 500),  # a trigger with no secret
    ]
    for path, sent, headers, code in cases:
        status, said = post(served, path, sent, headers)
        assert status == code and isinstance(said, str) and said.startswith("spex: "), (path, said)
    pinged = {**github(b"{}", "p1"), "X-GitHub-Event": "ping"}  # when the hook is made
    status, pong = post(served, "/trigger/gh", b"{}", pinged)
    assert status == 200 and pong["pong"] is True, pong
    assert len(turns(env, "d")) == 1


def test_read_only_refuses_every_delivery(env: Env) -> None:
    assert env.run("new", "d", "--harness", "demo").returncode == 0
    (env.home / "config.toml").write_text(GITHUB_CONFIG)
    env.vars["SPEX_TEST_HOOK_SECRET"] = SECRET
    server = start(env, "--read-only")
    try:
        body = json.dumps(PR).encode()
        status, said = post(server, "/trigger/gh", body, github(body, "d1"))
    finally:
        server.stop()
    assert status == 403 and "read-only" in said
    assert turns(env, "d") == []


def test_a_match_trigger_fans_out_once_per_delivery(env: Env, served: Server) -> None:
    for name in ("w1", "w2"):
        assert env.run("new", name, "--harness", "demo").returncode == 0
    body = b'{"job": "nightly"}'
    headers = generic(body, int(time.time()), "wave secret", **{"X-Spex-Delivery": "n-1"})
    status, wave = post(served, "/trigger/wave", body, headers)
    assert status == 200 and sorted(leg["session"] for leg in wave["legs"]) == ["w1", "w2"], wave
    assert env.run("wait", "w1", "w2", "--timeout", "60").returncode == 0
    status, again = post(served, "/trigger/wave", body, headers)
    assert status == 200, again
    assert [len(turns(env, n)) for n in ("w1", "w2")] == [1, 1]
    assert "run nightly" in env.run("log", "w1").stdout
