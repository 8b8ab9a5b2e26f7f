"""Hooks through the installed `spex`: exactly once, detached, their env and
placeholders, a webhook to a local server, broken hooks logged, turned off."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import psutil
from conftest import SPEX, Env, harness, retry_until

RECORD = (
    "import json, os, sys; out = sys.argv[1]; "
    "env = {k: v for k, v in os.environ.items() if k.startswith('SPEX')}; "
    "open(os.path.join(out, str(os.getpid())), 'w').write(json.dumps([sys.argv[2:], env]))"
)


def config(env: Env, text: str) -> None:
    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text(text)


def recorder(env: Env, on: str, *extra: str) -> Path:
    """A hook that writes its argv and SPEX* environment to a file per run."""
    out = env.root / "runs"
    out.mkdir()
    argv = [sys.executable, "-c", RECORD, str(out), *extra]
    config(env, f"[[hook]]\nname = 'rec'\non = {on}\nrun = {json.dumps(argv)}\n")
    return out


def runs(out: Path) -> list[Any]:
    return [json.loads(p.read_text()) for p in sorted(out.iterdir()) if p.stat().st_size]


def claims(env: Env) -> list[tuple[str, str | None]]:
    """(hook, outcome) of every claimed (event, hook) pair."""
    import sqlite3

    db = sqlite3.connect(env.home / "state.db")
    try:
        return list(db.execute("SELECT hook, outcome FROM hook_runs ORDER BY event, hook"))
    finally:
        db.close()


def hooks_log(env: Env) -> str:
    path = env.home / "hooks.log"
    return path.read_text() if path.exists() else ""


def test_two_readers_racing_over_a_lost_turn_fire_its_hook_once(env: Env) -> None:
    out = recorder(env, '["lost"]', "{session}", "{verdict}", "{rc}", "{nope}")
    assert env.run("new", "a", "--", harness("sleeper.sh")).returncode == 0
    woke = json.loads(env.run("wake", "a", "x", "--window", "0.3", "--json").stdout)
    # Its first line is in the log (the summary the hook gets) before the kill.
    output = env.home / "turns" / "a" / woke["turn"] / "output.log"
    # (The wrapper makes output.log only once the login environment is read.)
    assert retry_until(
        lambda: output.exists() and "working on: x" in output.read_text(), seconds=30
    )
    wrapper = psutil.Process(woke["pid"])
    wrapper.kill()
    assert retry_until(lambda: _gone(wrapper), seconds=30)
    # Several reconciling readers at once: each may find the turn lost, one records it.
    readers = [
        subprocess.Popen([SPEX, "ls"], env=env.vars, stdout=subprocess.DEVNULL) for _ in range(4)
    ]
    assert [r.wait(60) for r in readers] == [0, 0, 0, 0]
    # Every runner a reader started has recorded its outcome: one claim, one run.
    assert retry_until(lambda: claims(env) == [("rec", "exit 0")], seconds=30), claims(env)
    ((args, hook_env),) = runs(out)
    assert args == ["a", "lost", "", "{nope}"]
    assert hook_env["SPEX_EVENT"] == "lost" and hook_env["SPEX_SESSION"] == "a"
    assert hook_env["SPEX_TURN"] == woke["turn"] and hook_env["SPEX_VERDICT"] == "lost"
    assert hook_env["SPEX_RC"] == "" and "never recorded how it ended" in hook_env["SPEX_ERROR"]
    assert hook_env["SPEX_SUMMARY"] == "working on: x"
    # Never mistaken for a process of the turn.
    assert "SPEXSUP_TURN" not in hook_env
    assert "hook rec: ok, exit 0" in hooks_log(env)
    for pid in [p.pid for p in psutil.process_iter() if _turn_of(p) == woke["turn"]]:
        os.kill(pid, signal.SIGKILL)


def _gone(proc: psutil.Process) -> bool:
    """Dead: reaped, or a zombie its parent (tmux) has not reaped yet."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _turn_of(proc: psutil.Process) -> str | None:
    try:
        return proc.environ().get("SPEXSUP_TURN")
    except psutil.Error:
        return None


def test_the_exit_reporter_fires_completed_with_the_summary(env: Env) -> None:
    out = recorder(env, '["completed", "failed"]', "{summary}")
    go = env.root / "go"
    assert env.run("new", "a", "--env", f"GO={go}", "--", harness("until_go.sh")).returncode == 0
    assert env.run("wake", "a", "x", "--window", "0.3").returncode == 0
    go.touch()
    # No spex process runs now: the reporter in the pane fires the hook.
    assert retry_until(lambda: len(runs(out)) == 1, seconds=30)
    ((_args, hook_env),) = runs(out)
    assert hook_env["SPEX_EVENT"] == "completed" and hook_env["SPEX_RC"] == "0"
    assert hook_env["SPEX_SUMMARY"] == ""  # until_go.sh prints nothing


def test_a_slow_hook_does_not_delay_the_verdict(env: Env) -> None:
    started, done = env.root / "slow-started", env.root / "slow-done"
    argv = ["bash", "-c", f"touch {started}; sleep 5; touch {done}"]
    config(env, f"[[hook]]\non = ['completed']\nrun = {json.dumps(argv)}\n")
    assert env.run("new", "a", "--", harness("exit0.sh")).returncode == 0
    r = env.run("wake", "a", "x", "--window", "3", "--json")
    # The reporter committed `completed` (and started the hook) before the
    # verdict; the verdict is out while the hook still sleeps.
    assert not done.exists()
    assert r.returncode == 0 and json.loads(r.stdout)["verdict"] == "completed"
    assert retry_until(started.exists, seconds=30)
    assert "ok" not in hooks_log(env)  # still sleeping
    assert retry_until(lambda: hooks_log(env).count(": ok, exit 0") == 1, seconds=60)


@contextmanager
def local_http(
    record: Callable[[Any, bytes], None], *, status: int, delay: float = 0.0
) -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 that hands each POST's headers and body
    to `record` and answers `status` (after `delay` seconds); yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            record(self.headers, self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(delay)
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def test_a_webhook_posts_the_event_to_a_local_server(env: Env) -> None:
    received: list[dict[str, Any]] = []

    def record(headers: Any, body: bytes) -> None:
        received.append({"type": headers["Content-Type"], **json.loads(body)})

    with local_http(record, status=204) as base:
        url = f"{base}/spex"
        config(
            env,
            f"[[hook]]\nname = 'web'\non = ['failed']\nsessions = ['ap*']\nurl = '{url}'\n"
            "[[hook]]\nname = 'closed'\non = ['failed']\nurl = 'http://127.0.0.1:9/'\n",
        )
        for name in ("api", "other"):
            assert env.run("new", name, "--", harness("exit7.sh")).returncode == 0
            assert env.run("wake", name, "x", "--window", "60").returncode == 1
        assert retry_until(lambda: "hook closed: failed" in hooks_log(env), seconds=30)
        assert retry_until(lambda: len(received) == 1, seconds=30)
        (post,) = received
        assert post["type"] == "application/json" and post["schema_version"] == 1
        assert (post["kind"], post["session"], post["rc"]) == ("failed", "api", 7)
        assert post["summary"] == "boom: something broke"
        assert "hook web: ok, HTTP 204" in hooks_log(env)
        assert "POST failed" in hooks_log(env)


def test_broken_hooks_are_logged_and_change_no_verdict(env: Env) -> None:
    config(
        env,
        "[[hook]]\nname = 'missing'\non = ['completed']\nrun = ['/no/such/notifier']\n"
        "[[hook]]\nname = 'fails'\non = ['completed']\nrun = ['bash', '-c', 'echo nope; exit 3']\n"
        "[[hook]]\nname = 'hangs'\non = ['completed']\nrun = ['sleep', '30']\ntimeout = 0.5\n",
    )
    assert env.run("new", "a", "--", harness("exit0.sh")).returncode == 0
    r = env.run("wake", "a", "x", "--window", "3", "--json")
    assert json.loads(r.stdout)["verdict"] == "completed"
    assert retry_until(lambda: hooks_log(env).count("hook ") >= 3, seconds=30)
    text = hooks_log(env)
    assert "hook missing: failed, cannot run '/no/such/notifier'" in text
    assert "hook fails: failed, exit 3" in text and "  | nope" in text
    assert "hook hangs: failed, timed out after 0.5s, killed" in text
    assert json.loads(env.run("show", "a", "--json").stdout)["turn"]["state"] == "complete"
    assert (env.home / "hooks.log").stat().st_mode & 0o777 == 0o600


def test_a_bad_hook_table_is_logged_and_named_by_hooks_test(env: Env) -> None:
    config(env, "[[hook]]\non = ['finished']\nrun = ['true']\n")
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    assert "hooks of events 1..1 not run: config.toml: [[hook]] #1: 'on'" in hooks_log(env)
    r = env.run("hooks", "test", "1")
    assert r.returncode == 1 and r.stderr.startswith("spex: config.toml: [[hook]] #1: 'on'")
    config(env, "[[hook]]\non = ['created']\nrun = 'notify-send hi'\n")
    r = env.run("hooks", "test", "1")
    assert r.returncode == 1 and "'run' must be a non-empty list" in r.stderr


def test_a_hook_on_home_recreated_fires_on_pane_recreated(env: Env) -> None:
    """`home-recreated`, the old name of `pane-recreated`, still subscribes a
    hook (DESIGN §24), which `hooks ls` shows under the new name."""
    out = recorder(env, '["home-recreated"]', "{event}", "{session}")
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    listed = json.loads(env.run("hooks", "ls", "--json").stdout)["hooks"]
    assert [h["on"] for h in listed] == [["pane-recreated"]]
    env.tmux("kill-session", "-t", "=a")
    assert env.run("up", "a").returncode == 0
    assert retry_until(lambda: len(runs(out)) == 1, seconds=30)
    assert runs(out)[0][0] == ["pane-recreated", "a"]


def test_hooks_test_runs_by_hand_and_no_hooks_turns_them_off(env: Env) -> None:
    out = recorder(env, '["created", "removed"]', "{event}")
    assert env.run("--no-hooks", "new", "a", "--harness", "demo").returncode == 0
    assert env.run("new", "b", "--harness", "demo", extra={"SPEXSUP_NO_HOOKS": "1"}).returncode == 0
    # Claimed before started: no claim, no run.
    assert claims(env) == []
    assert runs(out) == []
    r = env.run("hooks", "test", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hooks"] == [{"hook": "rec", "ok": True, "detail": "exit 0"}]
    assert len(runs(out)) == 1
    assert env.run("hooks", "test", "99").returncode == 3
    assert env.run("hooks", "test", "x").returncode == 2
    assert env.run("rm", "a").returncode == 0
    assert retry_until(lambda: len(runs(out)) == 2, seconds=30)
    assert sorted(a[0][0] for a in runs(out)) == ["created", "removed"]


def test_tmux_message_reaches_the_users_own_clients(env: Env) -> None:
    """A client attached (in a pty) to a tmux server of the user's, not spex's,
    sees the message; spex's own server is never addressed by the sink."""
    import pexpect

    contrib = Path(__file__).resolve().parent.parent / "contrib" / "hooks"
    socket = env.tmux_tmpdir / "user.sock"
    client = pexpect.spawn(
        "tmux",
        ["-S", str(socket), "-f", "/dev/null", "new-session", "-s", "user"],
        env={**env.vars, "SHELL": "/bin/sh", "TERM": "xterm"},
        encoding="utf-8",
        timeout=30,
        dimensions=(24, 120),
    )
    try:
        client.expect(r"\[user\]")  # its status line: attached
        argv = ["env", f"SPEX_TMUX_SOCKET={socket}", str(contrib / "tmux-message.sh")]
        config(env, f"[[hook]]\non = ['created']\nrun = {json.dumps(argv)}\n")
        assert env.run("new", "a", "--harness", "demo").returncode == 0
        client.expect("spex: a created", timeout=30)
        assert retry_until(lambda: ": ok, exit 0" in hooks_log(env), seconds=30), hooks_log(env)
    finally:
        subprocess.run(["tmux", "-S", str(socket), "kill-server"], check=False)
        client.close(force=True)


def test_the_contrib_sinks(env: Env) -> None:
    """notify-desktop.sh with a notify-send on PATH that records its argv, and
    ntfy.sh posting to a local server."""
    contrib = Path(__file__).resolve().parent.parent / "contrib" / "hooks"
    bin_dir = env.root / "bin"
    bin_dir.mkdir()
    sent = env.root / "notify-send.args"
    (bin_dir / "notify-send").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {sent}\n')
    (bin_dir / "notify-send").chmod(0o755)
    bodies: list[tuple[str, str]] = []

    def record(headers: Any, body: bytes) -> None:
        bodies.append((headers["Title"], body.decode()))

    with local_http(record, status=200) as base:
        url = f"{base}/topic"
        desktop = [str(contrib / "notify-desktop.sh")]
        ntfy = ["env", f"NTFY_URL={url}", str(contrib / "ntfy.sh")]
        config(
            env,
            f"[[hook]]\non = ['failed']\nrun = {json.dumps(desktop)}\n"
            f"[[hook]]\non = ['failed']\nrun = {json.dumps(ntfy)}\n",
        )
        path = f"{bin_dir}:{env.vars['PATH']}"
        # Whoever records the end runs the hooks: the wake, or the turn's
        # own reporter (with the login PATH): notify-send is on both.
        env.login_path(path)
        assert env.run("new", "a", "--", harness("exit7.sh"), extra={"PATH": path}).returncode == 0
        assert env.run("wake", "a", "x", "--window", "2", extra={"PATH": path}).returncode == 1
        assert retry_until(lambda: sent.exists() and len(bodies) == 1, seconds=30)
        assert sent.read_text().splitlines()[-2:] == [
            "spex: a failed rc=7",
            "boom: something broke",
        ]
        assert bodies == [("spex: a failed", "boom: something broke")]


def test_a_failed_end_gives_the_hook_its_reason_and_the_agents_line(env: Env) -> None:
    """pi exits 0 after its retries give up on a rate limit: the hook sees a
    `failed` event, why (`SPEX_CAUSE`, and `SPEX_REASON`, its old name), the
    agent's own line (`SPEX_ERROR`), and a summary rendered from its JSON
    events, never the raw event."""
    out = recorder(env, '["failed"]', "{cause}")
    r = env.run(
        "new", "p", "--harness", "pi", "--env", "FAKE_PI_ONLINE=1",
        "--env", "FAKE_LIMIT_FORM=anthropic",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    woke = json.loads(env.run("wake", "p", "go [limit]", "--window", "10", "--json").stdout)
    assert woke["verdict"] == "failed", woke
    assert retry_until(lambda: len(runs(out)) == 1, seconds=30)
    ((args, hook_env),) = runs(out)
    assert args == ["rate-limited"]
    assert hook_env["SPEX_CAUSE"] == hook_env["SPEX_REASON"] == "rate-limited"
    assert hook_env["SPEX_ERROR"] == (
        "429 This request would exceed your account's rate limit. Please try again later."
    )
    assert hook_env["SPEX_SUMMARY"] == (
        "✗ 429 This request would exceed your account's rate limit. Please try again later."
    )


def test_no_hooks_on_the_command_that_starts_the_server_stays_with_that_command(
    env: Env, tmp_path: Path
) -> None:
    """`spex --no-hooks new …` starts the tmux server; its `--no-hooks` must not
    land in the server's environment and silence every later turn's reporter."""
    out = recorder(env, '["completed"]', "{event}")
    go = tmp_path / "go"
    r = env.run("--no-hooks", "new", "a", "--env", f"GO={go}", "--", harness("until_go.sh"))
    assert r.returncode == 0, r.stderr
    assert "SPEXSUP_NO_HOOKS" not in env.tmux("show-environment", "-g").stdout
    woke = json.loads(env.run("wake", "a", "x", "--window", "1", "--json").stdout)
    assert woke["verdict"] == "confirmed", woke
    go.touch()  # the turn ends after its wake: the pane's reporter records it
    assert retry_until(lambda: len(runs(out)) == 1, seconds=30), hooks_log(env)
    assert runs(out)[0][0] == ["completed"]


def _command_lines() -> list[bytes]:
    """Every process's argv as /proc shows it to any local user."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes())
            except OSError:
                continue
    return lines


def test_no_hook_runner_shows_the_event_or_a_webhook_url_in_its_argv(env: Env) -> None:
    secret = "SeCrEt-webhook-token-5b1f"
    planted = "PlAnTeD-in-the-event-77c3"
    agent = env.root / "agent.sh"
    agent.write_text(f"#!/bin/sh\necho '{planted}' >&2\nexit 7\n")
    agent.chmod(0o755)
    started = env.root / "slow-started"
    posts: list[bytes] = []
    with local_http(lambda _h, body: posts.append(body), status=200, delay=3) as base:
        config(
            env,
            f"[[hook]]\nname = 'web'\non = ['failed']\nurl = '{base}/hooks/{secret}'\n"
            "[[hook]]\nname = 'slow'\non = ['failed']\n"
            f"run = ['bash', '-c', 'touch {started}; sleep 3']\n",
        )
        assert env.run("new", "a", "--", str(agent)).returncode == 0
        # A window far past the agent's exit: its end, not a slow start on a
        # loaded machine, decides the verdict (failed, exit 1).
        woke = subprocess.Popen(
            [SPEX, "wake", "a", "x", "--window", "60"], env=env.vars, stdout=subprocess.DEVNULL
        )
        seen: list[bytes] = []

        def scan() -> bool:
            seen.extend(line for line in _command_lines() if secret.encode() in line)
            seen.extend(line for line in _command_lines() if planted.encode() in line)
            return hooks_log(env).count("ok, ") == 2

        # Scanned all along: while the wake runs, the POST waits and the hook sleeps.
        assert retry_until(scan, seconds=60), hooks_log(env)
        assert woke.wait(90) == 1
    assert started.exists() and len(posts) == 1
    assert json.loads(posts[0])["error"] == planted  # the event did carry it
    assert seen == []


def test_a_hook_whose_claimer_died_before_starting_it_fires_once_from_the_next_reader(
    env: Env,
) -> None:
    out = recorder(env, '["created"]', "{session}")
    assert env.run("new", "first", "--harness", "demo").returncode == 0
    assert retry_until(lambda: len(runs(out)) == 1, seconds=30)
    # `spex new` SIGKILLs itself right after committing `created` and its claim.
    r = env.run("new", "a", "--harness", "demo", extra={"SPEXSUP_FAULT": "after-hook-claim"})
    assert r.returncode == -signal.SIGKILL
    assert claims(env) == [("rec", "exit 0"), ("rec", None)]
    # The next reconciling reader finds the claim untaken under a dead claimer.
    assert env.run("ls").returncode == 0
    assert retry_until(lambda: claims(env) == [("rec", "exit 0")] * 2, seconds=30), claims(env)
    for command in (("ls",), ("events",), ("show", "a")):
        assert env.run(*command).returncode == 0
    assert retry_until(lambda: _runners(env) == [], seconds=30)
    assert sorted(args[0] for args, _ in runs(out)) == ["a", "first"]
    assert hooks_log(env).count("hook rec: ok") == 2


def _runners(env: Env) -> list[psutil.Process]:
    """The hook runners of this test's home."""
    found = []
    for proc in psutil.process_iter():
        try:
            argv = proc.cmdline()
        except psutil.Error:
            continue
        if "spexsup.core.hooks" in argv and str(env.home) in argv:
            found.append(proc)
    return found


def test_a_yes_hook_keeps_the_head_of_its_output_within_the_cap(env: Env) -> None:
    from spexsup.core.hookproc import OUTPUT_LIMIT

    config(env, "[[hook]]\nname = 'yes'\non = ['created']\nrun = ['yes', 'spam']\ntimeout = 3\n")
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    biggest = [0]

    def done() -> bool:
        for runner in _runners(env):
            try:
                rss = runner.memory_info().rss
            except psutil.Error:
                continue
            biggest[0] = max(biggest[0], rss)
            if rss > 200 * 2**20:  # never let a runner that hoards eat the machine
                runner.kill()
                return True
        return claims(env) != [("yes", None)]

    assert retry_until(done, seconds=60)
    assert biggest[0] < 200 * 2**20, f"runner grew to {biggest[0] >> 20} MiB"
    assert claims(env) == [("yes", "timed out after 3s, killed")]
    text = hooks_log(env)
    assert len(text) < 2 * OUTPUT_LIMIT + 1024
    assert "  | spam\n" in text and "[output truncated: " in text


def test_a_hook_that_leaves_processes_running_is_killed_with_them_at_its_timeout(
    env: Env,
) -> None:
    left = env.root / "left"
    script = (
        f"sleep 1000 >/dev/null 2>&1 & echo $! >> {left}; "
        f"setsid sleep 1001 >/dev/null 2>&1 & echo $! >> {left}; exit 0"
    )
    config(
        env,
        f"[[hook]]\nname = 'bg'\non = ['created']\nrun = ['bash', '-c', '{script}']\ntimeout = 1\n",
    )
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    assert retry_until(lambda: claims(env) != [("bg", None)], seconds=30)
    assert claims(env) == [("bg", "exit 0, but left 2 processes running: killed at the 1s timeout")]
    pids = [int(p) for p in left.read_text().split()]
    assert len(pids) == 2
    assert retry_until(lambda: not any(psutil.pid_exists(p) for p in pids), seconds=10)
    assert "hook bg: failed, exit 0, but left 2 processes" in hooks_log(env)


def test_many_hooks_at_once_never_run_more_than_the_slots(env: Env) -> None:
    from spexsup.core.hooks import SLOTS

    spans = env.root / "spans"
    spans.mkdir()
    script = f"d={spans}/$$; date +%s.%N > $d.start; sleep 0.4; date +%s.%N > $d.end"
    tables = [
        f"[[hook]]\nname = 'h{n}'\non = ['created']\nrun = ['bash', '-c', '{script}']\n"
        for n in range(8)
    ]
    config(env, "".join(tables))
    for name in ("a", "b", "c"):
        assert env.run("new", name, "--harness", "demo").returncode == 0

    def finished() -> bool:
        done = claims(env)
        return len(done) == 24 and all(outcome is not None for _, outcome in done)

    assert retry_until(finished, seconds=90), claims(env)
    assert {outcome for _, outcome in claims(env)} == {"exit 0"}
    times = []
    for start in spans.glob("*.start"):
        end = start.with_suffix(".end")
        times.append((float(start.read_text()), float(end.read_text())))
    assert len(times) == 24
    edges = sorted([(a, 1) for a, _ in times] + [(b, -1) for _, b in times])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    assert 2 <= most <= SLOTS, most


def test_the_ntfy_sink_keeps_the_topic_url_and_the_message_off_curls_argv(env: Env) -> None:
    contrib = Path(__file__).resolve().parent.parent / "contrib" / "hooks"
    bodies: list[tuple[str, str]] = []

    def record(headers: Any, body: bytes) -> None:
        bodies.append((headers["Title"], body.decode()))

    with local_http(record, status=200, delay=1.5) as base:
        url = f"{base}/topic-SeCrEt-9d2e"
        ntfy = ["env", f"NTFY_URL={url}", str(contrib / "ntfy.sh")]
        config(env, f"[[hook]]\non = ['failed']\nrun = {json.dumps(ntfy)}\n")
        assert env.run("new", "a", "--", harness("exit7.sh")).returncode == 0
        # A window far past the agent's exit: its end decides, not a slow start.
        assert env.run("wake", "a", "x", "--window", "60").returncode == 1
        curls: list[list[bytes]] = []

        def posted() -> bool:
            for line in _command_lines():
                argv = line.split(b"\0")
                if argv[0].endswith(b"curl"):
                    curls.append(argv)
            return ": ok, exit 0" in hooks_log(env)

        # Scanned while curl waits for the (slow) server.
        assert retry_until(posted, seconds=30), hooks_log(env)
    assert bodies == [("spex: a failed", "boom: something broke")]
    assert curls, "curl was never seen running"
    leaked = [a for a in curls if any(b"SeCrEt" in w or b"boom" in w for w in a)]
    assert leaked == []


def test_doctor_names_a_hooks_unknown_event_kind_and_a_run_that_is_no_list(env: Env) -> None:
    config(
        env,
        "[[hook]]\nname = 'ok'\non = ['failed']\nrun = ['true']\nsesions = ['a*']\n"
        "[[hook]]\non = ['falied']\nrun = ['true']\n"
        "[[hook]]\non = ['completed']\nrun = 'notify-send done'\n",
    )
    path = env.home / "config.toml"
    r = env.run("doctor")
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert (
        f"FAIL  config: {path}: [[hook]] #2: 'on': unknown event kind 'falied'"
        " (did you mean 'failed'?)"
    ) in lines
    assert (
        f"FAIL  config: {path}: [[hook]] #3: 'run' must be a non-empty list of strings"
        " (argv, not a shell line)"
    ) in lines
    assert (
        f"warn  config: {path}: unknown key 'sesions' in [[hook]] #1, ignored"
        " (did you mean 'sessions'?)"
    ) in lines
    doc = json.loads(env.run("doctor", "--json").stdout)
    assert doc["ok"] is False
    details = [(p["severity"], p["detail"]) for p in doc["config"]["problems"]]
    assert [s for s, _ in details] == ["error", "error", "warning"]
    assert "unknown event kind 'falied'" in details[0][1] and "'run' must be" in details[1][1]
    config(env, "[[hook]]\non = ['failed']\nrun = ['true']\n")
    assert env.run("doctor").returncode == 0


def test_hooks_ls_shows_the_hooks_as_read(env: Env) -> None:
    assert env.run("hooks", "ls").stdout == "no hooks\n"
    config(
        env,
        "[[hook]]\nname = 'rec'\non = ['failed', 'lost']\nsessions = ['api*']\n"
        "run = ['notify-send', '{session} {verdict}']\ntimeout = '2m'\n"
        "[[hook]]\nname = 'web'\non = ['*']\nurl = 'http://127.0.0.1:9/'\n",
    )
    r = env.run("hooks", "ls")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        '#1 rec: on failed,lost sessions api*: run ["notify-send", "{session} {verdict}"]'
        " timeout 120s",
        "#2 web: on *: url http://127.0.0.1:9/ timeout 30s",
    ]
    doc = json.loads(env.run("hooks", "ls", "--json").stdout)
    assert doc["schema_version"] == 1
    assert doc["hooks"][0] == {
        "number": 1,
        "name": "rec",
        "on": ["failed", "lost"],
        "sessions": ["api*"],
        "run": ["notify-send", "{session} {verdict}"],
        "url": None,
        "timeout": 120.0,
    }
    assert doc["hooks"][1]["url"] == "http://127.0.0.1:9/" and doc["hooks"][1]["run"] is None
    config(env, "[[hook]]\non = ['falied']\nrun = ['true']\n")
    r = env.run("hooks", "ls")
    assert r.returncode == 1 and "unknown event kind 'falied'" in r.stderr


def test_hooks_test_takes_a_hook_as_hooks_ls_shows_it(env: Env) -> None:
    """`hooks ls` shows `#N NAME`; `hooks test EVENT --hook` takes either, so
    an event and a hook are never read for one another (issue 38 item 10)."""
    config(
        env,
        "[[hook]]\nname = 'one'\non = ['created']\nrun = ['true']\n"
        "[[hook]]\nname = 'two'\non = ['created']\nrun = ['true']\n",
    )
    assert env.run("--no-hooks", "new", "a", "--harness", "demo").returncode == 0
    listed = env.run("hooks", "ls").stdout.splitlines()
    assert [line.split(":")[0] for line in listed] == ["#1 one", "#2 two"], listed
    for pick, name in (("#2", "two"), ("2", "two"), ("one", "one")):
        r = env.run("hooks", "test", "1", "--hook", pick, "--json")
        assert r.returncode == 0, (pick, r.stderr)
        assert [h["hook"] for h in json.loads(r.stdout)["hooks"]] == [name], pick
    r = env.run("hooks", "test", "1", "--hook", "#3")
    assert r.returncode == 3 and r.stderr == "spex: no hook '#3' (see spex hooks ls)\n", r.stderr
    r = env.run("hooks", "test", "99")
    assert r.returncode == 3 and "--hook names a hook" in r.stderr, r.stderr
