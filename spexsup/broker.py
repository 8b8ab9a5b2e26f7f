"""`spex maint -- CMD`: run CMD under a maintenance lease, brokering its requests.

The command runs in its own session and process group with exactly three
inherited fds (DESIGN §5): 3 requests (command → broker), 4 responses, 5 a
socketpair carrying the turn token, the byte 0x01. The broker writes one token
at start and answers each returned token with a new one, so requests never
interleave; any other byte is corruption. The lease token (32 random bytes)
lives only in this process's memory; the database holds its sha256.

Loss of authority (heartbeat failure, the request pipe closed while the
command lives, token corruption): stop brokering, SIGTERM the command's
process group, SIGKILL after 1 s, exit 1, and do not release (recovery does).
The command exiting with a request pending: exit 1, no release. Otherwise
release and exit with the command's exit code.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import select
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spexsup import control, lease
from spexsup.errors import Invalid, Refused, SpexError
from spexsup.lease import Capability
from spexsup.procs import Liveness, identity_liveness, own_identity
from spexsup.sessions import NAME_RE
from spexsup.spex import Spex

MAX_FRAME = 4096
TOKEN = b"\x01"
BROKER_FDS = "3,4,5"
KILL_AFTER = 1.0
DRAIN_LIMIT = 60.0


class CommandNotFound(SpexError):
    exit_code = 127


def heartbeat_interval(ttl: float) -> float:
    return min(max(ttl / 3, 0.25), 1.0)


@dataclass(frozen=True)
class Frame:
    id: str
    op: str
    session: str
    force: bool
    client_pid: int
    client_token: str


class FrameError(Exception):
    def __init__(self, message: str, frame_id: str | None = None) -> None:
        super().__init__(message)
        self.frame_id = frame_id


def parse_frame(line: bytes) -> Frame:
    """Validate one request line; FrameError says why (and the id, if readable)."""
    if len(line) > MAX_FRAME:
        raise FrameError(f"frame longer than {MAX_FRAME} bytes")
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise FrameError("frame is not JSON") from None
    if not isinstance(data, dict):
        raise FrameError("frame is not a JSON object")
    frame_id = data.get("id") if isinstance(data.get("id"), str) else None
    expected = {"v", "id", "op", "session", "force", "client"}
    if set(data) != expected:
        raise FrameError(f"frame fields must be exactly {sorted(expected)}", frame_id)
    if type(data["v"]) is not int or data["v"] != 1:
        raise FrameError("unsupported frame version", frame_id)
    if frame_id is None or not 1 <= len(frame_id) <= 128:
        raise FrameError("id must be a string of 1-128 characters", frame_id)
    if data["op"] not in ("stop", "resume"):
        raise FrameError("op must be stop or resume", frame_id)
    if not isinstance(data["session"], str) or not NAME_RE.fullmatch(data["session"]):
        raise FrameError("invalid session name", frame_id)
    if type(data["force"]) is not bool:
        raise FrameError("force must be a boolean", frame_id)
    client = data["client"]
    if (
        not isinstance(client, dict)
        or set(client) != {"pid", "start_token"}
        or type(client["pid"]) is not int
        or client["pid"] <= 0
        or not isinstance(client["start_token"], str)
        or not client["start_token"].isdigit()
    ):
        raise FrameError("client must be {pid, start_token}", frame_id)
    if identity_liveness(client["pid"], client["start_token"]) is not Liveness.ALIVE:
        raise FrameError("client pid is not live with that start token", frame_id)
    return Frame(
        frame_id, data["op"], data["session"], data["force"], client["pid"], client["start_token"]
    )


def response(
    frame_id: str | None, outcome: str, code: str | None = None, error: str | None = None
) -> dict[str, Any]:
    return {
        "id": frame_id,
        "ok": outcome == "committed",
        "outcome": outcome,
        "code": code,
        "error": error,
    }


class AuthorityLost(Exception):
    pass


class Maintenance:
    """One `spex maint` run: acquire, spawn, broker, and end per DESIGN §5."""

    def __init__(
        self,
        spex: Spex,
        plan: Sequence[Capability],
        *,
        all_sessions: bool,
        ttl: float,
        wait: float,
    ) -> None:
        if not 0.5 <= ttl <= 86400:
            raise Invalid(f"invalid --ttl {ttl}", hint="between 0.5 and 86400 seconds")
        if not 0 <= wait <= 86400:
            raise Invalid(f"invalid --wait {wait}", hint="between 0 and 86400 seconds")
        if not plan and not all_sessions:
            raise Invalid("a maintenance lease needs --stop/--resume sessions or --all")
        self.spex = spex
        self.plan = list(plan)
        self.all_sessions = all_sessions
        self.ttl = ttl
        self.wait = wait
        self.token = secrets.token_bytes(32)
        self.pid, self.start_token = own_identity()
        self.epoch = 0

    # --- the lease ---------------------------------------------------------

    def acquire(self) -> None:
        """Take the lease (`draining`) within --wait, then wait for `active`."""
        give_up = time.monotonic() + self.wait
        scope = sorted({c.session for c in self.plan})
        while True:
            with self.spex.store.tx() as db:
                row = lease.recover(db)
                if row["state"] == "open":
                    self.epoch = row["epoch"] + 1
                    now = time.time()
                    db.execute(
                        "UPDATE lease SET state = 'draining', epoch = ?, token_hash = ?,"
                        " holder_pid = ?, holder_token = ?, deadline = ?, scope = ?,"
                        " all_sessions = ?, acquired_at = ?, revoked = 0 WHERE id = 1",
                        (
                            self.epoch,
                            lease.hash_token(self.token),
                            self.pid,
                            self.start_token,
                            now + self.ttl,
                            json.dumps(scope),
                            int(self.all_sessions),
                            now,
                        ),
                    )
                    db.executemany(
                        "INSERT INTO capabilities (epoch, idx, op, session, force, state)"
                        " VALUES (?, ?, ?, ?, ?, 'unused')",
                        [
                            (self.epoch, i, c.op, c.session, int(c.force))
                            for i, c in enumerate(self.plan)
                        ],
                    )
                    break
                holder = row["holder_pid"]
            if time.monotonic() >= give_up:
                raise Refused(
                    f"no maintenance lease within {self.wait:g}s"
                    f" (epoch {row['epoch']} is {row['state']}, holder pid {holder})",
                    hint="spex maint --status",
                )
            time.sleep(0.1)
        drain_until = time.monotonic() + max(self.wait, DRAIN_LIMIT)
        while not self.heartbeat(want="active"):
            if time.monotonic() >= drain_until:
                self.release()
                raise Refused("older operations on the leased sessions did not finish")
            time.sleep(0.05)

    def heartbeat(self, want: str = "active") -> bool:
        """Extend the deadline if the lease is still ours exactly as granted.

        With want="active" while still draining, returns False (not yet) and
        raises AuthorityLost if the lease is no longer ours at all.
        """
        with self.spex.store.tx() as db:
            row = lease.recover(db)
            caps = db.execute(
                "SELECT op, session, force FROM capabilities WHERE epoch = ? ORDER BY idx",
                (self.epoch,),
            ).fetchall()
            ours = (
                row["epoch"] == self.epoch
                and not row["revoked"]
                and row["holder_pid"] == self.pid
                and row["holder_token"] == self.start_token
                and lease.token_matches(self.token, row["token_hash"])
                and [(c["op"], c["session"], bool(c["force"])) for c in caps]
                == [(c.op, c.session, c.force) for c in self.plan]
                and row["state"] in ("draining", "active")
            )
            if not ours:
                raise AuthorityLost(f"the lease is no longer ours (epoch {row['epoch']})")
            db.execute(
                "UPDATE lease SET deadline = ? WHERE id = 1 AND epoch = ?",
                (time.time() + self.ttl, self.epoch),
            )
            return bool(row["state"] == want)

    def release(self) -> None:
        with self.spex.store.tx() as db:
            db.execute(
                "UPDATE lease SET state = 'open', token_hash = NULL, holder_pid = NULL,"
                " holder_token = NULL, deadline = NULL, scope = NULL, all_sessions = 0,"
                " revoked = 0 WHERE id = 1 AND epoch = ?",
                (self.epoch,),
            )

    # --- the command -------------------------------------------------------

    def spawn(self, command: Sequence[str]) -> tuple[int, int, int, socket.socket]:
        """Start CMD in a new session with the broker fds at exactly 3, 4, 5.

        posix_spawn's dup2 file actions place the fds (no preexec_fn: this
        process has threads); the sources are moved above 9 first so a dup2
        never lands on itself and keeps its close-on-exec flag.
        """
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (req_w, resp_r)]
        high.append(fcntl.fcntl(theirs.fileno(), fcntl.F_DUPFD_CLOEXEC, 10))
        env = {**os.environ, "SPEXSUP_MAINTENANCE_BROKER_FDS": BROKER_FDS}
        env["SPEXSUP_HOME"] = str(self.spex.home)
        try:
            pid = os.posix_spawnp(
                command[0],
                list(command),
                env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, high[0], 3),
                    (os.POSIX_SPAWN_DUP2, high[1], 4),
                    (os.POSIX_SPAWN_DUP2, high[2], 5),
                ],
                setsid=True,
            )
        except OSError as e:
            raise CommandNotFound(f"cannot run {command[0]!r}: {e.strerror}") from None
        finally:
            for fd in (req_w, resp_r, *high):
                os.close(fd)
            theirs.close()
        return pid, req_r, resp_w, ours

    def run(self, command: Sequence[str]) -> int:
        """Acquire, run CMD, broker its requests; the exit code per DESIGN §5."""
        if not command:
            raise Invalid("spex maint needs a command after --", hint="spex maint ... -- CMD")
        self.acquire()
        try:
            pid, req_r, resp_w, sock = self.spawn(command)
        except BaseException:
            self.release()
            raise
        return Broker(self, pid, req_r, resp_w, sock).serve()


class Broker:
    def __init__(
        self, maint: Maintenance, pid: int, req_r: int, resp_w: int, sock: socket.socket
    ) -> None:
        self.maint = maint
        self.pid = pid
        self.req_r = req_r
        self.resp_w = resp_w
        self.sock = sock
        self.buffer = b""
        self.discarding = False  # dropping the rest of an oversize frame
        self.token_out = False  # a response was sent and its token not yet returned
        self.pidfd = os.pidfd_open(pid)

    def serve(self) -> int:
        interval = heartbeat_interval(self.maint.ttl)
        forward = {s: signal.signal(s, self._forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.sock.sendall(TOKEN)
            next_beat = time.monotonic() + interval
            while True:
                timeout = max(0.0, next_beat - time.monotonic())
                watched: list[int] = [self.req_r, self.sock.fileno(), self.pidfd]
                ready, _, _ = select.select(watched, [], [], timeout)
                if time.monotonic() >= next_beat:
                    self.maint.heartbeat()
                    next_beat = time.monotonic() + interval
                # Tokens and requests first: a client's last token may arrive
                # together with the command's exit.
                ended = self.pidfd in ready
                if self.sock.fileno() in ready and not self._token_returned() and not ended:
                    ended = self._exiting("the command closed the turn-token channel (fd 5)")
                if self.req_r in ready and not ended and not self._read_requests():
                    ended = self._exiting("the command closed the broker request pipe (fd 3)")
                if ended:
                    return self._command_ended()
        except AuthorityLost as e:
            return self._lose(str(e))
        finally:
            for s, h in forward.items():
                signal.signal(s, h)

    def _forward(self, signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)

    def _token_returned(self) -> bool:
        """Take a returned token and hand out the next; False if the channel closed."""
        try:
            data = self.sock.recv(1)
        except ConnectionResetError:
            return False
        if data == b"":
            return False
        if data != TOKEN:
            raise AuthorityLost(f"turn token corrupted ({data!r})")
        self.token_out = False
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.sock.sendall(TOKEN)
        return True

    def _exiting(self, what: str) -> bool:
        """A broker channel closed: the command is exiting (True), or authority is lost.

        An exiting process closes its fds a moment before it can be reaped,
        so give its exit a moment to show before calling it a loss.
        """
        ready, _, _ = select.select([self.pidfd], [], [], 0.5)
        if not ready:
            raise AuthorityLost(what)
        return True

    def _read_requests(self) -> bool:
        """Read and answer complete request lines; False at end of file."""
        data = os.read(self.req_r, MAX_FRAME + 1)
        if data == b"":
            return False
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            if self.discarding:  # the tail of an oversize frame, already answered
                self.discarding = False
                continue
            self._answer(self.handle(line))
        if len(self.buffer) > MAX_FRAME and not self.discarding:
            self.discarding = True
            self._answer(
                response(None, "refused", "maintenance_invalid", "frame longer than 4096 bytes")
            )
        if self.discarding:
            self.buffer = b""
        return True

    def _answer(self, reply: dict[str, Any]) -> None:
        os.write(self.resp_w, json.dumps(reply).encode() + b"\n")
        self.token_out = True

    def handle(self, line: bytes) -> dict[str, Any]:
        """One request: validate, match the plan, run the operation, map the outcome."""
        try:
            frame = parse_frame(line)
        except FrameError as e:
            return response(e.frame_id, "refused", "maintenance_invalid", str(e))
        maint = self.maint
        index = next(
            (
                i
                for i, c in enumerate(maint.plan)
                if c.op == frame.op and c.session == frame.session and (c.force or not frame.force)
            ),
            None,
        )
        if index is None:
            return response(
                frame.id,
                "refused",
                "maintenance_capability_missing",
                f"{frame.op} {frame.session}{' --force' if frame.force else ''} is not in the plan",
            )
        maint.heartbeat()
        with maint.spex.store.tx() as db:
            cur = db.execute(
                "UPDATE capabilities SET state = 'inflight'"
                " WHERE epoch = ? AND idx = ? AND state = 'unused'",
                (maint.epoch, index),
            )
            claimed = cur.rowcount == 1
        if not claimed:
            return response(
                frame.id,
                "refused",
                "maintenance_capability_used",
                f"{frame.op} {frame.session} was already used",
            )
        try:
            if frame.op == "stop":
                control.stop(maint.spex, frame.session, bearer=maint.epoch)
            else:
                control.resume(maint.spex, frame.session, force=frame.force, bearer=maint.epoch)
        except Refused as e:
            self._mark(index, "unused")
            return response(frame.id, "refused", "refused", e.line())
        except Exception as e:
            self._mark(index, "indeterminate")
            return response(frame.id, "indeterminate", "indeterminate", str(e))
        self._mark(index, "committed")
        return response(frame.id, "committed")

    def _mark(self, index: int, state: str) -> None:
        with self.maint.spex.store.tx() as db:
            db.execute(
                "UPDATE capabilities SET state = ?"
                " WHERE epoch = ? AND idx = ? AND state = 'inflight'",
                (state, self.maint.epoch, index),
            )

    def _command_ended(self) -> int:
        _, status = os.waitpid(self.pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        rc = 128 - rc if rc < 0 else rc
        returned, _, _ = select.select([self.sock.fileno()], [], [], 0)
        if returned:
            self._token_returned()
        # A request the command wrote but never saw answered is pending too;
        # it is not carried out for a command that is gone.
        unread, _, _ = select.select([self.req_r], [], [], 0)
        if unread and os.read(self.req_r, MAX_FRAME + 1):
            self.buffer += b"?"
        if self.buffer or self.token_out:
            print(
                "spex: maint: the command exited with a broker request pending"
                " (lease left for recovery)",
                file=sys.stderr,
            )
            return 1
        self.maint.release()
        return rc

    def _lose(self, reason: str) -> int:
        print(
            f"spex: maint: authority lost: {reason}; stopping the command"
            " (lease left for recovery)",
            file=sys.stderr,
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        select.select([self.pidfd], [], [], KILL_AFTER)
        # Whatever is left of the group (the leader may have gone first).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        return 1
