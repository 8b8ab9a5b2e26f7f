"""What a person sees in a session's pane, and in spex's own one-line views
of a turn's output: a CLI of JSON events is rendered (spexsup.pane.pretty), while
output.log keeps the raw stream spex parses."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Env, retry_until
from test_turns import show, wake_json

ONLINE = {"FAKE_CLAUDE_LOGGED_IN": "1"}


def pane(env: Env, name: str) -> str:
    out = env.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", f"={name}:0.0")
    return out.stdout


def pane_shows(env: Env, name: str, text: str) -> bool:
    return retry_until(lambda: text in pane(env, name), seconds=15)


def output_log(env: Env, name: str) -> bytes:
    turn: str = show(env, name)["turn"]["id"]
    return (env.home / "turns" / name / turn / "output.log").read_bytes()


def test_a_claude_pane_shows_the_rendering_and_an_end_line_naming_the_flags(env: Env) -> None:
    env.run("new", "c", "--harness", "claude", *[f"--env={k}={v}" for k, v in ONLINE.items()])
    code, v = wake_json(env, "c", "fix the build [deny]\nand the tests", "--window", "10")
    assert code == 0 and v["verdict"] == "completed", v
    end = f"[spex] turn {v['turn']} ended rc=0 · 2 tool permissions denied: Write, Bash"
    assert pane_shows(env, "c", end), pane(env, "c")
    screen = pane(env, "c")
    # The prompt's first line when the turn starts, then what claude said.
    assert f"[spex] turn {v['turn']}: fix the build [deny]\n" in screen
    assert "turn 1: fix the build [deny]" in screen
    assert "✗ denied: Write a.txt" in screen and "✗ denied: Bash make" in screen
    assert '{"type"' not in screen
    # output.log keeps every raw event for parsing.
    raw = output_log(env, "c")
    assert b'"permission_denials"' in raw and raw.count(b'{"type"') >= 3


def test_a_stopped_turn_says_so_on_its_end_line(env: Env) -> None:
    env.run("new", "c", "--harness", "claude", "--env", "FAKE_CLAUDE_LOGGED_IN=1")
    code, v = wake_json(env, "c", "work [sleep 60]", "--window", "1")
    assert code == 0 and v["verdict"] == "confirmed", v
    assert env.run("stop", "c", "--grace", "1").returncode == 0
    assert pane_shows(env, "c", f"[spex] turn {v['turn']} ended rc=143 · stopped by spex stop"), (
        pane(env, "c")
    )


def test_a_failed_turn_names_its_message_on_the_end_line(env: Env) -> None:
    env.run("new", "c", "--harness", "claude", "--cwd", str(env.root))
    code, v = wake_json(env, "c", "hi", "--window", "10")
    assert code == 1
    assert pane_shows(env, "c", f"[spex] turn {v['turn']} ended rc=1 · claude is not logged in")


def test_the_log_is_byte_exact_whatever_the_rendering_makes_of_it(env: Env) -> None:
    """Events the renderer cannot make sense of are shown raw; a last line
    with no newline, a huge line, bytes that are not UTF-8 all reach
    output.log as the harness wrote them."""
    script = env.root / "odd.py"
    payload = (
        b'{"type":"assistant","message":"not a dict"}\n'
        b'{"type":"result","subtype":"success","result":"ok","permission_denials":[]}\n'
        b"plain \xff\xfe text\n" + b"x" * 70_000 + b"\n" + b'{"type": "system", "subtype"'
    )
    (env.root / "payload").write_bytes(payload)
    script.write_text(
        f"import sys\nsys.stdout.buffer.write(open({str(env.root / 'payload')!r}, 'rb').read())\n"
    )
    (env.home).mkdir(parents=True, exist_ok=True)
    (env.home / "harnesses.toml").write_text(
        f'[harness.odd]\nfresh = ["python3", "{script}", "{{prompt}}"]\noutcome = "claude"\n'
    )
    assert env.run("new", "o", "--harness", "odd").returncode == 0
    _, v = wake_json(env, "o", "go", "--window", "10")
    assert v["verdict"] in ("completed", "failed"), v
    assert pane_shows(env, "o", f"[spex] turn {v['turn']} ended")
    assert output_log(env, "o") == payload
    screen = pane(env, "o")
    assert '"not a dict"' in screen  # shown as it is, not lost
    assert "plain" in screen and "text" in screen


def test_one_line_views_render_json_events(env: Env) -> None:
    """`spex top`'s last-output column and a failure's message show the
    agent's words, never a raw JSON event."""
    env.run("new", "c", "--harness", "claude", "--env", "FAKE_CLAUDE_LOGGED_IN=1")
    code, v = wake_json(env, "c", "go [ask]", "--window", "10")
    assert code == 0, v
    rows = json.loads(env.run("top", "--json").stdout)
    assert rows[0]["last_output"] == "✓ done (1 turns, $0.09)", rows
    # One precision for a cost (issue 38 item 11): the pane's is show's and cost's.
    assert "$0.09" in env.run("show", "c").stdout and "$0.09" in env.run("cost").stdout
    top = env.run("top").stdout
    assert '{"' not in top


def test_hook_summary_is_the_rendered_last_line(env: Env, tmp_path: Path) -> None:
    seen = tmp_path / "summary"
    (env.home).mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text(
        "[[hook]]\n"
        'on = ["completed"]\n'
        f'run = ["sh", "-c", "printf %s \\"$SPEX_SUMMARY\\" > {seen}"]\n'
    )
    env.run("new", "c", "--harness", "claude", "--env", "FAKE_CLAUDE_LOGGED_IN=1")
    code, v = wake_json(env, "c", "go", "--window", "10")
    assert code == 0, v
    assert retry_until(seen.exists, seconds=15)
    done = "✓ done (1 turns, $0.09)"
    assert retry_until(lambda: seen.read_text() == done, seconds=5), seen.read_text()


def test_an_error_event_keeps_no_escape_payload_as_words(tmp_path: Path) -> None:
    """A claude error whose text holds an OSC title and a clipboard write: the
    one-line views drop each whole escape, never leaving its payload
    (`]0;pwned-title`) as words once the control bytes are gone."""
    import subprocess

    from conftest import harness

    from spexsup.pane import turndir

    out = subprocess.run(["bash", harness("escapes_json.sh")], capture_output=True, check=False)
    (tmp_path / turndir.OUTPUT).write_bytes(out.stdout)
    (tmp_path / turndir.META).write_text(json.dumps({"outcome": "claude"}))
    last = turndir.last_line(tmp_path)
    assert last is not None and "API Error" in last and "json-done" in last
    assert "pwned-title" not in last and "cHduZWQ" not in last, last
