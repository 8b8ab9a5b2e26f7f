"""Small parity gaps closed with issue 17: fanout --fresh, log --tail, a dead
pane reported as dead, `1 leg`, the harness environment documented."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from conftest import HERE, Env, retry_until


def argv_log(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def claude(env: Env, name: str, log: Path) -> None:
    out = env.run(
        "new",
        name,
        "--harness",
        "claude",
        "--env",
        "FAKE_CLAUDE_LOGGED_IN=1",
        "--env",
        f"FAKE_ARGV_LOG={log}",
    )
    assert out.returncode == 0, out.stderr


def test_fanout_fresh_starts_new_conversations(env: Env) -> None:
    log = env.root / "argv"
    claude(env, "c", log)
    assert env.run("wake", "c", "first", "--window", "10").returncode == 0
    conversation = json.loads(env.run("show", "c", "--json").stdout)["harness_session_id"]
    assert conversation
    resumed = env.run("fanout", "c", "-m", "second", "--window", "10", "--wait")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("wave ") and ": 1 leg\n" in resumed.stdout
    fresh = env.run("fanout", "c", "-m", "third", "--window", "10", "--wait", "--fresh")
    assert fresh.returncode == 0, fresh.stderr
    calls = argv_log(log)
    assert calls[1][calls[1].index("--resume") + 1] == conversation
    assert "--resume" not in calls[2]


def test_log_tail(env: Env, tmp_path: Path) -> None:
    script = tmp_path / "lines.sh"
    script.write_text("#!/bin/sh\nfor i in $(seq 1 50); do echo line $i; done\n")
    script.chmod(0o755)
    assert env.run("new", "a", "--", str(script)).returncode == 0
    assert env.run("wake", "a", "go").returncode == 0
    assert env.run("wait", "a", "--timeout", "30").returncode == 0
    whole = env.run("log", "a").stdout
    assert whole.endswith("line 50\n")
    out = env.run("log", "a", "--tail", "3")
    assert out.returncode == 0 and out.stdout == "line 48\nline 49\nline 50\n"
    assert env.run("log", "a", "-n", "1").stdout == "line 50\n"
    assert env.run("log", "a", "--tail", "0").stdout == ""
    assert env.run("log", "a", "--tail", "1000").stdout == whole
    for args in (["--tail", "-1"], ["--tail", "x"], ["--tail", "2", "--json"]):
        bad = env.run("log", "a", *args)
        assert bad.returncode == 2, (args, bad.stderr)
        assert bad.stderr.startswith("spex: ") and bad.stderr.count("\n") == 1
        if "--json" in args:  # a failed --json command still prints its document
            assert json.loads(bad.stdout)["exit_code"] == 2
        else:
            assert bad.stdout == ""


def test_a_dead_pane_is_reported_dead_and_up_respawns_it(env: Env) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    os.kill(env.pane_pid("a"), signal.SIGKILL)  # the pane's shell dies; tmux keeps the pane

    def pane() -> str:
        return str(json.loads(env.run("ls", "--json").stdout)[0]["pane"])

    assert retry_until(lambda: pane() == "dead")
    assert "dead (spex up)" in env.run("ls").stdout
    assert "pane         dead" in env.run("show", "a").stdout
    up = env.run("up", "a")
    assert up.returncode == 0, up.stderr
    assert up.stdout.startswith("a: respawned")
    assert pane() == "ok"
    assert env.run("wake", "a", "hello").returncode == 0


def test_the_readme_documents_the_harness_environment() -> None:
    readme = (HERE.parent / "README.md").read_text()
    section = readme.split("## Harnesses", 1)[1].split("\n## ", 1)[0]
    reference = (HERE.parent / "docs" / "harnesses.md").read_text()
    for var in (
        "SPEXSUP_SESSION",
        "SPEXSUP_TURN",
        "SPEXSUP_TURN_DIR",
        "SPEXSUP_PROMPT_FILE",
        "SPEXSUP_HOME",
    ):
        assert f"`{var}`" in section and f"`{var}`" in reference, var


def test_the_readme_opens_with_contents_that_reach_every_section_and_page() -> None:
    """Item 17: a table of contents whose links all land, and the reference
    pages it moved to docs/ exist and are linked."""
    import re

    root = HERE.parent
    readme = (root / "README.md").read_text()
    headings = re.findall(r"(?m)^## (.+)$", readme)

    def slug(title: str) -> str:  # GitHub's anchors
        return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")

    contents = readme.split("**Contents:**", 1)[1].split("\n\n", 1)[0]
    anchors = re.findall(r"\]\(#([^)]+)\)", contents)
    assert sorted(anchors) == sorted(slug(h) for h in headings), (anchors, headings)
    for page in re.findall(r"\]\((docs/[^)#]+)\)", readme):
        assert (root / page).is_file(), page
    for page in ("harnesses", "events", "maintenance", "worktrees", "hosts"):
        assert f"(docs/{page}.md)" in readme, page
    assert readme.count("Errors are one line on stderr") == 1  # said once
