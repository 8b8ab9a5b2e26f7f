"""Live progress: `fanout --wait`'s per-leg table on a terminal (pexpect), its
plain lines through a pipe, NO_COLOR, and `maint --wait` saying what it
waits for. Every wait here is on output the command prints, with generous
deadlines, so a loaded machine only makes them slower."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from conftest import SPEX, Env, harness, retry_until

# Colour (SGR with a colour parameter), as opposed to cursor movement.
COLOUR = re.compile(r"\x1b\[[0-9;]*3[0-7]m")
# Between two cells of a table row: spaces and style codes.
GAP = r"(?:\s|\x1b\[[0-9;]*m)+"


def until_go(env: Env, name: str, *, chatty: bool = False, rc: int = 0) -> Path:
    """A session whose turns run until `go-NAME` exists; `chatty` ones print first."""
    go = env.root / f"go-{name}"
    command = (
        ["bash", "-c", f"echo working; exec {harness('until_go.sh')}"]
        if chatty
        else [harness("until_go.sh")]
    )
    args = ["new", name, "--env", f"GO={go}", "--env", f"RC={rc}", "--", *command]
    assert env.run(*args).returncode == 0
    return go


def spawn(env: Env, *args: str, extra: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    import pexpect

    return pexpect.spawn(
        SPEX,
        list(args),
        env={**env.vars, **(extra or {})},
        encoding="utf-8",
        timeout=60,
        dimensions=(30, 120),
    )


def test_fanout_wait_on_a_terminal_is_a_live_table_of_stages(env: Env) -> None:
    import pexpect

    go_a = until_go(env, "a", chatty=True)
    go_b = until_go(env, "b", rc=3)
    child = spawn(env, "fanout", "a", "b", "-m", "x", "--window", "0.5", "--wait")
    child.expect(r"wave \S+: 2 legs")
    child.expect("SESSION")
    child.expect("STAGE")
    child.expect("waiting for the turns to end")
    # The table is redrawn in place: each expect finds the next frame's text.
    # a printed a line just now (producing output, for 10 s); b printed nothing.
    child.expect(rf"a{GAP}producing output{GAP}\dm\d\ds")
    child.expect(rf"b{GAP}confirmed{GAP}\dm\d\ds")
    go_b.touch()
    child.expect(r"ended failed rc=3")
    child.expect(r"\dm\d\ds")
    go_a.touch()
    child.expect(r"ended complete rc=0")
    child.expect(r"wave \S+: partial")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1


def test_no_color_keeps_the_table_but_drops_the_colours(env: Env) -> None:
    import pexpect

    go = until_go(env, "a")
    go.touch()  # the turn ends at once
    child = spawn(env, "fanout", "a", "-m", "x", "--window", "0.5", "--wait")
    child.expect(pexpect.EOF)
    coloured = child.before
    child.close()
    assert COLOUR.search(coloured), repr(coloured[-300:])
    assert env.run("wait", "a").returncode == 0
    child = spawn(
        env, "fanout", "a", "-m", "x", "--window", "0.5", "--wait", extra={"NO_COLOR": "1"}
    )
    child.expect(pexpect.EOF)
    plain = child.before
    child.close()
    assert child.exitstatus == 0
    assert "ended complete rc=0" in plain and "SESSION" in plain
    assert not COLOUR.search(plain), repr(plain[-300:])


def test_fanout_wait_through_a_pipe_is_one_plain_line_per_leg_end(env: Env) -> None:
    go_a = until_go(env, "a")
    go_b = until_go(env, "b")
    proc = subprocess.Popen(
        [SPEX, "fanout", "a", "b", "-m", "x", "--window", "0.5", "--wait"],
        env=env.vars,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []

    def until(pattern: str) -> str:
        while True:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, f"no line matching {pattern!r} in {lines}"
            lines.append(line)
            if re.search(pattern, line):
                return line

    until(r"^waiting for the turns to end")
    go_b.touch()
    assert re.fullmatch(r"  b: ended complete rc=0 · \dm\d\ds\n", until(r"^  b: ended"))
    assert not any(ln.startswith("  a: ended") for ln in lines)
    go_a.touch()
    out, err = proc.communicate(timeout=60)
    lines += out.splitlines(keepends=True)
    assert proc.returncode == 0, err
    text = "".join(lines)
    assert "\x1b" not in text and "\r" not in text
    stages = [ln.split(":", 1)[1].split("·")[0].strip() for ln in lines if ln.startswith("  a: ")]
    # A log: each leg once, when it ends; then the summary.
    assert stages == ["ended complete rc=0"], lines
    assert [ln for ln in lines if ln.startswith("  b: ")] == [lines[-3]] or len(lines) == 5, lines
    assert len(lines) == 5, lines  # wave W: 2 legs / waiting… / b / a / summary
    assert text.rstrip().splitlines()[-1].startswith("wave ")


def test_fanout_wait_through_a_pipe_of_many_legs_is_a_line_each_and_a_summary(
    env: Env,
) -> None:
    """12 legs, two of them failing: 12 end lines, each leg once, and the
    summary (it was a line per stage change and the list again)."""
    names = [f"l{n}" for n in range(12)]
    for name in names:
        rc = 3 if name in ("l4", "l9") else 0
        assert env.run("new", name, "--", "bash", "-c", f"sleep 0.5; exit {rc}").returncode == 0
    r = env.run("fanout", "--match", "l*", "-m", "x", "--window", "0.3", "--wait", timeout=120)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    legs = [ln for ln in lines if ln.startswith("  ")]
    assert sorted(ln.split(":")[0].strip() for ln in legs) == sorted(names), lines
    assert sum("ended failed rc=3" in ln for ln in legs) == 2, lines
    assert len(lines) == len(names) + 3, lines  # the wave line, waiting…, the summary
    assert lines[-1].startswith("wave ") and "12 legs: 10 complete · 2 failed" in lines[-1], lines


def test_maint_wait_says_what_it_waits_for(env: Env) -> None:
    assert env.run("new", "a", "--harness", "demo").returncode == 0
    go = env.root / "go"
    holder = subprocess.Popen(
        [SPEX, "maint", "--stop", "a", "--", harness("until_go.sh")],
        env={**env.vars, "GO": str(go)},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert retry_until(lambda: "active" in env.run("maint", "--status").stdout, seconds=30), (
        env.run("maint", "--status").stdout
    )
    waiter = subprocess.Popen(
        [SPEX, "maint", "--stop", "a", "--wait", "60", "--", "true"],
        env=env.vars,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert waiter.stderr is not None
    line = waiter.stderr.readline()
    assert re.fullmatch(
        r"spex: waiting up to 60s for the maintenance lease"
        rf" \(lease 1 is active, held by pid {holder.pid}\)\n",
        line,
    ), line
    go.touch()
    assert holder.wait(60) == 0
    _, rest = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, rest
    assert "\x1b" not in line + rest


def test_a_leg_whose_harness_exited_is_ending_until_its_end_is_recorded(env: Env) -> None:
    """Issue 42, item 6: its harness gone, the reporter not done yet, a leg
    is `ending`, not `producing output` (its output log grew just now)."""
    import pexpect

    go, gate = env.root / "go", env.root / "gate"
    r = env.run("new", "a", "--env", f"GO={go}", "--env", f"GATE={gate}", "--",
                harness("held_reporter.sh"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    child = spawn(env, "fanout", "a", "-m", "x", "--window", "0.3", "--wait")
    child.expect("waiting for the turns to end")
    child.expect(rf"a{GAP}producing output{GAP}\dm\d\ds")
    go.touch()  # the harness exits; its reporter waits for the gate
    child.expect(rf"a{GAP}ending{GAP}\dm\d\ds")
    assert show_state(env, "a") == "running"
    gate.touch()
    child.expect(r"ended complete rc=0")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def show_state(env: Env, name: str) -> str:
    import json

    return str(json.loads(env.run("show", name, "--json").stdout)["turn"]["state"])


def test_the_live_table_shows_a_leg_verifying_then_its_check(env: Env) -> None:
    """Issue 27: `verifying 0m0Ns` while a leg's check runs, then the check's end."""
    import pexpect

    gate = env.root / "gate"
    for name in ("a", "b"):
        assert env.run("new", name, "--", "true").returncode == 0
    check = f'while [ ! -e {gate} ]; do sleep 0.05; done; [ "$SPEXSUP_SESSION" = a ]'
    child = spawn(env, "fanout", "a", "b", "-m", "x", "--window", "0.3", "--verify", check,
                  "--wait")  # fmt: skip
    child.expect("waiting for the turns to end")
    child.expect(rf"a{GAP}verifying \dm\d\ds")
    child.expect(rf"b{GAP}verifying \dm\d\ds")
    gate.touch()
    # The last frame may be cut short by the exit (the live view redraws a
    # few times a second): the ends are read from the wave as well.
    child.expect(r"ended (complete|failed) rc=0, verif")
    child.expect(r"wave \S+: partial")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    shown = env.run("wave", "last").stdout
    assert "rc=0 verified" in shown and "rc=0 verify failed (rc 1)" in shown, shown


def test_the_live_table_never_outgrows_an_80x24_terminal(env: Env) -> None:
    """26 legs on 24 rows: at most the terminal's height of table (the header
    stays on screen), the legs still running first, the rest as `+N more`;
    the summary wraps at a word within 80 columns."""
    import pexpect

    names = [f"leg-{i:02d}" for i in range(26)]
    gos = [until_go(env, name) for name in names]
    child = pexpect.spawn(
        SPEX,
        ["fanout", *names, "-m", "x", "--window", "0.5", "--wait"],
        env=env.vars,
        encoding="utf-8",
        timeout=60,
        dimensions=(24, 80),
    )
    # 22 rows: the header, 19 legs, this line, the footer that counts them.
    child.expect(r"\+7 more")
    child.expect(r"26 legs: \d+ complete · 0 failed · 0 skipped · \d+ running")
    for go in gos[:5]:
        go.touch()
    child.expect(r"\+7 more")
    for go in gos[5:]:
        go.touch()
    child.expect(r"wave \S+: complete")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    tail = child.before.replace("\r", "")
    assert all(len(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", ln)) <= 80 for ln in tail.splitlines())


def test_the_live_table_shows_a_running_legs_spend_so_far(env: Env) -> None:
    """Issue 42, item 3: a running leg's COST is what its pane counted so far
    (two API messages of $0.315 at these prices), then its recorded cost."""
    import pexpect

    env.home.mkdir(parents=True, exist_ok=True)
    (env.home / "config.toml").write_text(
        '[pricing."claude-sonnet-4-5"]\ninput = 3.0\noutput = 15.0\n'
    )
    gate = env.root / "go"
    args = ["new", "c", "--harness", "claude", "--cwd", str(env.root)]
    r = env.run(*args, "--env", "FAKE_CLAUDE_LOGGED_IN=1", "--env", f"FAKE_GATE={gate}")
    assert r.returncode == 0, r.stderr
    child = spawn(env, "fanout", "c", "-m", "go [steps 2]", "--window", "0.5", "--wait")
    child.expect("COST")
    child.expect(rf"c{GAP}(?:confirmed|producing output){GAP}\dm\d\ds{GAP}\S+{GAP}~\$0\.63 so far")
    gate.touch()
    child.expect(r"ended complete rc=0")
    child.expect(r"\$0\.09")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
