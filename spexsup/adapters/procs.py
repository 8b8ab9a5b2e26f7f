"""Process identity and liveness.

A process is named by `(pid, start token)`, the start token being field 22 of
`/proc/<pid>/stat` (start time in clock ticks since boot), so a reused pid is
never mistaken for ours. Liveness is tri-state: a pid that exists is not
proof that *our* process is alive (zombies, reuse), and a probe we could not
make proves nothing either way.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from spexsup.adapters.group import Group

if TYPE_CHECKING:
    import psutil


class Liveness(enum.Enum):
    ALIVE = "alive"
    DEAD = "dead"
    UNPROVEN = "unproven"


def boot_id() -> str:
    """This boot's id. `SPEXSUP_BOOT_ID_FILE` names another file to read it
    from: the test suite's way to simulate a reboot, nothing else's (read
    every time: a test reboots under a running process)."""
    source = os.environ.get("SPEXSUP_BOOT_ID_FILE")
    if source is None and _BOOT:
        return _BOOT[0]  # the machine's cannot change while we run
    try:
        found = Path(source or "/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
    if source is None:
        _BOOT.append(found)
    return found


_BOOT: list[str] = []


def _stat_fields(pid: int) -> list[bytes] | None:
    """Fields 3.. of /proc/<pid>/stat (state first), or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'.
    return stat[stat.rindex(b")") + 2 :].split()


def start_token(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat, or None when the process does not exist."""
    fields = _stat_fields(pid)
    return fields[19].decode() if fields else None


def own_identity() -> tuple[int, str]:
    """This process's (pid, start token), read once per process (a wave's
    hundred legs asked for it twice each)."""
    pid = os.getpid()
    if _OWN and _OWN[0][0] == pid:  # not a fork's parent's
        return _OWN[0]
    token = start_token(pid)
    assert token is not None
    _OWN[:] = [(pid, token)]
    return pid, token


_OWN: list[tuple[int, str]] = []


def identity_liveness(pid: int, token: str | None) -> Liveness:
    """Is the process named by (pid, token) alive? A zombie counts as dead.

    One read of /proc/<pid>/stat gives both the state and the start token:
    this runs inside every confirmation window, so it stays that cheap.
    """
    try:
        fields = _stat_fields(pid)
    except OSError:
        return Liveness.UNPROVEN
    if fields is None or fields[0] in (b"Z", b"X"):
        return Liveness.DEAD
    if token is not None and fields[19].decode() != token:
        return Liveness.DEAD
    return Liveness.ALIVE


def command_line_liveness(pid: int, word: str) -> Liveness:
    """Is `pid` alive (not a zombie) with `word` among its arguments?

    Two reads of /proc, as psutil's Process.status() and cmdline() make them,
    without psutil's import (~15 ms, more on a loaded machine): every wake
    checks its wrapper this way inside the confirmation window.
    """
    try:
        fields = _stat_fields(pid)
        if fields is None or fields[0] in (b"Z", b"X"):
            return Liveness.DEAD
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return Liveness.DEAD
    except OSError:
        return Liveness.UNPROVEN
    return Liveness.ALIVE if os.fsencode(word) in argv else Liveness.DEAD


def tagged_liveness(pid: int, turn_id: str) -> Liveness:
    """Is `pid` alive (not a zombie) with `SPEXSUP_TURN=<turn_id>` in its
    environment? Two reads of /proc: how a reader re-checks the survivors it
    recorded of a turn without scanning every process (`turn_processes`).
    Reuse-proof: a turn's id is never another's. A process whose environment
    we may not read is UNPROVEN."""
    try:
        fields = _stat_fields(pid)
        if fields is None or fields[0] in (b"Z", b"X"):
            return Liveness.DEAD
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return Liveness.DEAD
    except OSError:
        return Liveness.UNPROVEN
    tag = b"SPEXSUP_TURN=" + os.fsencode(turn_id)
    return Liveness.ALIVE if tag in environ else Liveness.DEAD


def is_zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] == b"Z"


def turn_processes(
    turn_id: str, wrapper_pid: int | None, *, since: float = 0.0, until: float | None = None
) -> list[psutil.Process]:
    """Every live process of a turn, except its wrapper. Found four ways:

    - the tree under the wrapper (while it lives);
    - its process group and session: the wrapper leads the pane's session,
      so the harness and whatever it forked stay there unless they `setsid`;
    - `SPEXSUP_TURN=<turn>` in the environment, which survives setsid and
      double forks (orphans of a SIGKILLed wrapper or of a killed server).

    A child or a group or session member counts only if it started within
    the turn's life (`since`..`until`), and a group or session member only
    if it carries no other turn's marker: after the turn the wrapper execs
    the pane's shell, whose children are the user's, not the turn's. The
    wrapper must outlive the harness to write the final marker, so it is
    never included, nor is its exit reporter (`SPEXSUP_STEP=report`) or
    what that starts (hook runners).

    Threads of one process asking at once share one pass over every process
    (`_SCANS`): a pass reads each process's environment, and `spex stop
    --all` over 1 000 sessions made two such passes per session, one after
    another (4 minutes here, most of it reading /proc).
    """
    return _SCANS.run(_Query(turn_id, wrapper_pid, since, until))


class _Query(NamedTuple):
    turn: str
    wrapper: int | None
    since: float
    until: float | None


class _Seen(NamedTuple):
    """One process as the pass read it: its /proc/<pid>/stat and environment."""

    parent: int
    group: int
    session: int
    started: float  # epoch seconds, as psutil's create_time()
    ticks: bytes  # the start token, to tell a reused pid
    turn: bytes | None  # its SPEXSUP_TURN
    step: bool  # the wrapper's exit reporter or what it started
    environ: bool  # whether its environment could be read


def _read_all() -> dict[int, _Seen]:
    """Every live process but this one, read with two reads of /proc each:
    through psutil, a pass over 3 500 processes took 165 ms, here 60."""
    import psutil

    booted = psutil.boot_time()
    hertz = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    seen: dict[int, _Seen] = {}
    with os.scandir("/proc") as entries:
        pids = [int(e.name) for e in entries if e.name.isdigit()]
    for pid in pids:
        if pid == me:
            continue
        try:
            stat = _read(f"/proc/{pid}/stat")
            fields = stat[stat.rindex(b")") + 2 :].split()
            if fields[0] in (b"Z", b"X"):
                continue  # a zombie is no process to kill
            try:
                environ: bytes | None = b"\0" + _read(f"/proc/{pid}/environ")
            except PermissionError:
                environ = None
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        turn = _variable(environ, b"SPEXSUP_TURN") if environ is not None else None
        step = environ is not None and _variable(environ, b"SPEXSUP_STEP") == b"report"
        seen[pid] = _Seen(
            int(fields[1]),
            int(fields[2]),
            int(fields[3]),
            booted + int(fields[19]) / hertz,
            fields[19],
            turn,
            step,
            environ is not None,
        )
    return seen


def _read(path: str) -> bytes:
    """A /proc file whole, without a Path or a buffered file around it (a
    pass reads thousands)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _variable(environ: bytes, key: bytes) -> bytes | None:
    """KEY's value in an environment block read with a NUL before it."""
    at = environ.find(b"\0" + key + b"=")
    if at < 0:
        return None
    start = at + len(key) + 2
    end = environ.find(b"\0", start)
    return environ[start : end if end >= 0 else len(environ)]


def _scan(queries: Sequence[_Query]) -> list[list[psutil.Process]]:
    """`turn_processes` for each query, from one pass over the processes."""
    import psutil

    seen = _read_all()
    below: dict[int, list[int]] = {}
    for pid, one in seen.items():
        below.setdefault(one.parent, []).append(pid)
    found: list[set[int]] = []
    tagged: dict[bytes, list[int]] = {}
    led: dict[int, list[int]] = {}
    for i, query in enumerate(queries):
        tagged.setdefault(os.fsencode(query.turn), []).append(i)
        mine: set[int] = set()
        if query.wrapper is not None:
            led.setdefault(query.wrapper, []).append(i)
            mine = _tree(seen, below, query.wrapper, _limit(query))
        found.append(mine)
    for pid, one in seen.items():
        if one.turn is not None:
            for i in tagged.get(one.turn, ()):
                if pid != queries[i].wrapper:
                    found[i].add(pid)
        elif one.environ:
            for wrapper in {one.group, one.session} & led.keys():
                for i in led[wrapper]:
                    if pid != wrapper and queries[i].since - 1.0 <= one.started <= _limit(
                        queries[i]
                    ):
                        found[i].add(pid)
    # A Process object for each one found, unless its pid was reused since
    # (psutil then refuses to signal it, too).
    procs: dict[int, psutil.Process] = {}
    for pid in set().union(*found) if found else ():
        if seen[pid].step:
            continue
        try:
            proc = psutil.Process(pid)
            if start_token(pid) == seen[pid].ticks.decode():
                procs[pid] = proc
        except psutil.Error:
            continue
    return [[procs[pid] for pid in sorted(each) if pid in procs] for each in found]


def _limit(query: _Query) -> float:
    return (query.until if query.until is not None else float("inf")) + 1.0


def _tree(seen: dict[int, _Seen], below: dict[int, list[int]], root: int, limit: float) -> set[int]:
    """The processes under `root` that started by `limit`, as psutil's
    `children(recursive=True)` finds them: none younger than `root` (a
    reused pid), none when `root` is gone."""
    if root not in seen:
        return set()
    born = seen[root].started
    found: set[int] = set()
    done: set[int] = set()
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in done:  # a reused pid may make the recorded tree a cycle
            continue
        done.add(pid)
        for child in below.get(pid, ()):
            if born <= seen[child].started:
                stack.append(child)
                if seen[child].started <= limit:
                    found.add(child)
    return found


_SCANS: Group[_Query, list[psutil.Process]] = Group(_scan)


def _living(proc: psutil.Process) -> bool:
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def signal_all(procs: Iterable[psutil.Process], sig: signal.Signals) -> None:
    """Signal each process; psutil refuses a pid that was reused since we saw it."""
    import psutil

    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            continue


RESCAN = 0.1
_hurried = False


def hurry() -> None:
    """A signal is ending spex: a reap under way skips what is left of its
    grace and kills now, so that the command ends in a second or two and
    what it was stopping is stopped (a stop of many finishes those under
    way: `Spex.at_once`)."""
    global _hurried
    _hurried = True


def reap(find: Callable[[], list[psutil.Process]], grace: float) -> list[psutil.Process]:
    """SIGTERM everything `find` returns, rescanning until none is left or `grace`
    ends (a TERM trap may spawn a child), then SIGKILL and rescan the same way.

    Returns the processes still alive after SIGKILL: survivors to report.
    """
    import psutil

    deadline = time.monotonic() + grace
    for sig, until in ((signal.SIGTERM, deadline), (signal.SIGKILL, None)):
        hard_deadline = time.monotonic() + 2.0
        while True:
            procs = find()
            if not procs:
                return []
            signal_all(procs, sig)
            now = time.monotonic()
            end = until if until is not None else hard_deadline
            if now >= end or (_hurried and sig is signal.SIGTERM):
                break
            psutil.wait_procs(procs, timeout=min(RESCAN, end - now))
    return [p for p in find() if _living(p)]


def session_members(sid: int, born_from: str) -> list[int]:
    """Live pids in session `sid` or process group `sid`, started no earlier than
    `born_from` (the leader's start token).

    Linux keeps a pid number out of reuse while any process still uses it as
    its session or group id, and the start-time bound keeps out a process
    that had the leader's pid before it. Zombies are left out (they are dead).
    """
    floor = int(born_from)
    # fields[2] is the process group (field 5), fields[3] the session (field 6).
    return [
        pid
        for pid, fields in _living_stats()
        if sid in (int(fields[2]), int(fields[3])) and int(fields[19]) >= floor
    ]


def _living_stats() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, /proc/<pid>/stat fields) of every process but zombies, one scan."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat_fields(int(entry.name))
        except OSError:
            continue
        if fields is not None and fields[0] not in (b"Z", b"X"):
            yield int(entry.name), fields


def descendants(pid: int) -> list[int]:
    """Live pids below `pid` in the process tree (one scan of /proc); zombies
    are left out. A process that `setsid`s stays a descendant; an orphan
    leaves the tree unless `pid` is a child subreaper, which adopts it."""
    children: dict[int, list[int]] = {}
    for child, fields in _living_stats():
        children.setdefault(int(fields[1]), []).append(child)
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def belongs_to(pid: int, root_pid: int, root_token: str) -> bool:
    """Is `pid` the process (root_pid, root_token), a descendant of it, or a member
    of the session it leads? (An orphaned grandchild is reparented away from the
    root but stays in its session.)"""
    if identity_liveness(root_pid, root_token) is Liveness.ALIVE:
        seen = 0
        current: int | None = pid
        while current is not None and current > 1 and seen < 4096:
            if current == root_pid:
                return True
            current = parent_pid(current)
            seen += 1
    return pid in session_members(root_pid, root_token)


def kill_members(sid: int, born_from: str, grace: float) -> list[int]:
    """SIGTERM what is left of session/group `sid` (see `session_members`), SIGKILL
    the survivors after `grace`; return the pids found."""
    import psutil

    def find() -> list[psutil.Process]:
        found = []
        for pid in session_members(sid, born_from):
            try:
                found.append(psutil.Process(pid))
            except psutil.Error:
                continue
        return found

    pids = [p.pid for p in find()]
    reap(find, max(grace, 0.0))
    return pids


def fd_holders(links: Collection[str], skip: Collection[int] = ()) -> list[int]:
    """Live pids (other than `skip`) with an open fd whose `/proc/<pid>/fd` link
    is one of `links` (`pipe:[N]`, `socket:[N]`).

    A process whose fds we may not read is left out: it is not found, so the
    caller cannot count an end as closed on its account. An fd in flight in a
    unix socket's queue (SCM_RIGHTS, not yet received) is held by no process.
    """
    wanted = set(links)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = str(fd.readlink())
            except OSError:
                continue
            if link in wanted:
                found.append(int(entry.name))
                break
    return found


def become_subreaper() -> None:
    """Adopt our orphaned descendants (prctl PR_SET_CHILD_SUBREAPER), so a
    child's background process stays ours to wait for and kill. Best effort:
    without it, leftovers outside its tree are out of reach."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def reap_children() -> tuple[list[tuple[int, int]], bool]:
    """(pid, wait status) of every child that ended; and whether any is left."""
    ended: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended, False
        if pid == 0:
            return ended, True
        ended.append((pid, status))
