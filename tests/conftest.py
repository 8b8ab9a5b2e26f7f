"""Every test gets its own tmux server, HOME, SPEXSUP_HOME and process cleanup.

The private server is named per test and lives under a per-test TMUX_TMPDIR,
so the user's default server is never touched. Every process started under
the test's environment (found by its TMUX_TMPDIR, which panes inherit from
the tmux server) is killed with its process group in teardown.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from spexsup.core.spex import Spex

HERE = Path(__file__).resolve().parent
HARNESSES = HERE / "harnesses"
# Fakes of the real agent CLIs (claude, codex, opencode, pi) and of crontab, first on PATH.
FAKES = HERE / "fakes"
WRAPPERS = HERE / "wrappers"
SPEX = str(Path(sys.executable).parent / "spex")


@dataclass
class Env:
    root: Path
    home: Path
    tmux_tmpdir: Path
    socket: str
    vars: dict[str, str]

    def spex(self) -> Spex:
        return Spex.open(self.home)

    def run(
        self,
        *args: str,
        input: bytes | None = None,
        timeout: float = 60,
        extra: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the installed `spex` command the way a user does."""
        env = {**self.vars, **(extra or {})}
        return subprocess.run(
            [SPEX, *args],
            input=input.decode("utf-8", "surrogateescape") if input is not None else None,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            env=self.vars,
            check=False,
        )

    def login_path(self, path: str) -> None:
        """The PATH the user's login shell sets: turns run with it (a tiny
        `.profile` in the test's HOME, as a person's dotfiles would)."""
        (Path(self.vars["HOME"]) / ".profile").write_text(f"PATH='{path}'\nexport PATH\n")

    def pane_pid(self, name: str) -> int:
        out = self.tmux("display-message", "-p", "-t", f"={name}:0.0", "#{pane_pid}")
        return int(out.stdout.strip())


def _ours(proc: psutil.Process, tmux_tmpdir: str) -> bool:
    try:
        return proc.environ().get("TMUX_TMPDIR") == tmux_tmpdir
    except psutil.Error:
        return False


def kill_everything(tmux_tmpdir: str) -> int:
    """SIGKILL every process of this test (its TMUX_TMPDIR) and its group;
    how many it found."""
    me = os.getpid()
    found = 0
    for proc in psutil.process_iter():
        if proc.pid == me or not _ours(proc, tmux_tmpdir):
            continue
        found += 1
        try:
            pgid = os.getpgid(proc.pid)
            if pgid != os.getpgid(me):
                os.killpg(pgid, signal.SIGKILL)
            proc.kill()
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def end_everything(e: Env) -> None:
    """The test's tmux server and every process of it. A process started while
    a pass ran (the detached launcher a reporter starts for a queued prompt)
    escapes that pass and may start the server again: until a pass finds
    none (a server started meanwhile is one of ours, found by the next)."""
    for _ in range(50):
        e.tmux("kill-server")
        if not kill_everything(str(e.tmux_tmpdir)):
            return


def teardown(e: Env, after_passes: Callable[[], None] = lambda: None) -> None:
    """The end of a test: every process of it (`end_everything`), then its
    TMUX_TMPDIR moved away, so that no tmux client of the test can make its
    socket again; a server one started before the move (a process no pass
    could see, caught mid-exec, launching after the last pass) is killed
    where the move took its socket. `after_passes`: what tests/test_teardown
    does in between."""
    end_everything(e)
    after_passes()
    gone = e.tmux_tmpdir.with_name(e.tmux_tmpdir.name + ".gone")
    try:
        e.tmux_tmpdir.rename(gone)
    except OSError:
        gone = e.tmux_tmpdir
    socket = gone / f"tmux-{os.getuid()}" / e.socket
    subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True, check=False)
    kill_everything(str(e.tmux_tmpdir))
    shutil.rmtree(gone, ignore_errors=True)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    # tmux sockets need a short path: keep TMUX_TMPDIR out of pytest's deep tmp.
    tmux_tmpdir = Path(tempfile.mkdtemp(prefix="spx"))
    home = tmp_path / "state"
    home.mkdir(mode=0o700)  # a SPEXSUP_HOME that does not exist is refused as a typo
    user_home = tmp_path / "home"
    user_home.mkdir()
    socket = f"t{os.getpid()}-{tmux_tmpdir.name}"
    values = {
        "HOME": str(user_home),
        "TMUX_TMPDIR": str(tmux_tmpdir),
        "SPEXSUP_TMUX": socket,
        "SPEXSUP_HOME": str(home),
        "SPEXSUP_DEMO_DELAY": "0.2",
        # Schedules on cron, whose crontab is a fake in tests/fakes (a test of
        # the real one says so): no test installs a timer of the real user.
        "SPEXSUP_SCHEDULE_ENGINE": "cron",
        "SHELL": "/bin/bash",
        "PATH": f"{Path(sys.executable).parent}:{FAKES}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    for key in ("TMUX", "TMUX_PANE", "SPEXSUP_TMUX_SOCKET", "SPEXSUP_WRAPPER", "XDG_STATE_HOME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    vars_ = dict(os.environ.items())
    e = Env(tmp_path, home, tmux_tmpdir, socket, vars_)
    # Turns take their PATH from the login shell: give it ours (fakes first).
    e.login_path(values["PATH"])
    try:
        yield e
    finally:
        teardown(e)


def harness(name: str) -> str:
    return str(HARNESSES / name)


def retry_until(check: Callable[[], bool], seconds: float = 10, interval: float = 0.05) -> bool:
    """Poll `check` until true or the deadline (libtmux's retry_until, for tests)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


def signal_a_helper_thread(pid: int, sig: int) -> None:
    """Send `sig` to one thread of process `pid` other than its main thread
    (tgkill). The kernel may hand a process-wide signal to any thread, and
    Python runs the handler in the main thread only: this makes that happen."""
    import ctypes

    # Only a thread that does not block it: the kernel hands a process-wide
    # signal to none of those (spex's inotify reader blocks SIGINT and SIGTERM).
    helpers = [
        int(t.name)
        for t in Path(f"/proc/{pid}/task").iterdir()
        if int(t.name) != pid and not _blocks(t / "status", sig)
    ]
    assert helpers, f"process {pid} has no helper thread that takes signal {sig}"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, max(helpers), sig) != 0:
        raise OSError(ctypes.get_errno(), "tgkill")


def _blocks(status: Path, sig: int) -> bool:
    """Whether the thread whose /proc status this is blocks `sig` (SigBlk)."""
    try:
        text = status.read_text()
    except OSError:
        return True  # gone: no thread to signal
    mask = next(line.split()[1] for line in text.splitlines() if line.startswith("SigBlk:"))
    return bool(int(mask, 16) >> (sig - 1) & 1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Each phase's report on the test item (`item.rep_call`), so a fixture's
    teardown knows whether the test failed (tests/test_web.py's screenshot)."""
    outcome: Any = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


# The tests that take longest (tens of seconds each on a loaded 2-core
# machine): run first, so xdist's first round hands them out across the
# workers and the suite never ends waiting on one of them started last.
LONG = frozenset(
    {
        "test_notify.py::test_a_wave_of_failing_legs_sends_one_summary_per_target",
        "test_json_contract.py::test_every_document_keeps_the_contract",
        "test_json_contract.py::test_every_failure_is_the_error_document",
        "test_layers.py::test_importing_a_module_loads_nothing_above_it",
        "test_contrib.py::test_wheel_check_script",
        "test_races.py::test_stop_kills_the_agent_while_another_process_holds_the_write_lock",
        "test_hosts.py::test_remote_session_commands_match_local",
        "test_keys.py::test_a_key_reused_for_another_prompt_or_options_is_refused",
        "test_schedule.py::test_a_real_cron_daemon_fires_a_schedule",
        "test_cli.py::test_every_collection_is_listed_by_ls_and_its_old_spelling",
        "test_hosts.py::test_one_connection_is_shared",
        "test_cli.py::test_every_id_is_accepted_in_every_form_spex_prints",
        "test_progress.py::test_the_live_table_never_outgrows_an_80x24_terminal",
        "test_waves.py::test_fifty_legs_at_once",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.nodeid.split("/")[-1].split("[")[0] not in LONG)


def wakeups(pid: int) -> int:
    """How many times the threads of process `pid` have blocked and woken so
    far (the sum of their voluntary context switches)."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue  # a thread that ended meanwhile
        switches = re.search(r"^voluntary_ctxt_switches:\s+(\d+)$", text, re.M)
        assert switches is not None, text
        total += int(switches[1])
    return total
