"""The maintenance broker (DESIGN §5): serve the command's requests under the lease.

`run` is one `spex maint` from start to end: take the lease, spawn the
command, broker its frames, and end. The broker hands out one turn token at
start and answers each returned token with a new one, so requests never
interleave; any other byte is corruption. Only the command and its
descendants (or members of the session it leads) are served, and only while
one of them holds the turn token: a frame that arrives while the token sits
unread in the socket, or from any other process, is refused
(`maintenance_invalid`) and never counts as a pending request.

Loss of authority (heartbeat failure, a broker channel closed while the
command lives, token corruption): stop brokering, SIGTERM the command's
process group, SIGKILL after 1 s, exit 1, and do not release (recovery does).
The command exiting with a request pending: exit 1, no release. Otherwise
kill what is left of its session and group, release, and exit with the
command's exit code (128+N when `spex maint` itself got signal N).

The command is recorded with the lease (pid and start token of its session
leader) so recovery kills it. Nor does anything that kept its broker fds
outlive the lease: after the reap, the lease is released only once every
copy of fds 3, 4, 5 is closed (2 s, then their holders, found in
`/proc/*/fd`, are killed with their groups; if they stay open, exit 1 and no
release). Each operation runs in a thread of its own (`Operation`), so the
broker acts on a loss of authority at once and answers `indeterminate` at
the operation's deadline, min(OP_DEADLINE, ttl).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import select
import signal
import socket
import struct
import sys
import termios
import threading
import time
from collections.abc import Sequence
from typing import Any

from spexsup.adapters.home import TmuxHome
from spexsup.adapters.mainwait import SIGNAL_CHECK
from spexsup.adapters.procs import belongs_to, fd_holders, kill_members
from spexsup.conductors.broker.command import Signals, signal_with_groups, spawn, start_token_of
from spexsup.conductors.broker.holder import AuthorityLost, Heartbeat, Maintenance
from spexsup.conductors.broker.protocol import (
    MAX_FRAME,
    TOKEN,
    Frame,
    FrameError,
    parse_frame,
    response,
)
from spexsup.core.spex import Spex, open_store
from spexsup.errors import Invalid, Refused
from spexsup.turn.stop import resume, stop

KILL_AFTER = 1.0
# After the command is reaped, how long its broker fds may stay open elsewhere
# (a `setsid` child that kept them) before their holders are killed.
HOLDERS_WAIT = 2.0
# A brokered operation answers within min(OP_DEADLINE, ttl), `indeterminate`
# if it has not ended by then.
OP_DEADLINE = 5.0


def run(maint: Maintenance, command: Sequence[str]) -> int:
    """Acquire, run CMD, broker its requests; the exit code per DESIGN §5."""
    if not command:
        raise Invalid("spex maint needs a command after --", hint="spex maint ... -- CMD")
    maint.check_plan()
    maint.acquire()
    with Signals() as signals:
        try:
            pid, req_r, resp_w, sock, peer = spawn(command, maint.spex.home)
        except BaseException:
            maint.release()
            raise
        token = start_token_of(pid)
        maint.record_command(pid, token)
        signals.target = pid
        signals.forward()  # a signal that came while spawning
        return Broker(maint, pid, token, req_r, resp_w, sock, peer, signals).serve()


class _CommandExited(Exception):
    """A broker channel failed because the command is exiting, not a loss."""


class Operation:
    """One brokered operation, carried out in a thread of its own with its own
    connection and tmux handle, so the broker keeps watching the command, the
    token and the heartbeat while it runs, and answers `indeterminate` at
    its deadline, min(OP_DEADLINE, ttl), if it has not ended by then.

    The thread records what the operation did in the capability (committed,
    unused after a refusal, indeterminate after an error) whenever it ends,
    deadline or not; `reply` and `answered` are settled under `lock`.
    """

    def __init__(self, broker: Broker, frame: Frame, index: int) -> None:
        self.maint = broker.maint
        self.frame = frame
        self.index = index
        self.what = f"{frame.op} {frame.session}"
        self.limit = min(OP_DEADLINE, self.maint.ttl)
        self.deadline = time.monotonic() + self.limit
        self.lock = threading.Lock()
        self.reply: dict[str, Any] | None = None  # set by the thread as it ends
        self.answered = False  # by the broker: at the deadline
        self.lost: str | None = None  # authority lost, found by the operation
        self._done_w = broker.done_w
        self.thread = threading.Thread(target=self._run, name="spex-maint-op", daemon=True)

    def _run(self) -> None:
        reply = response(self.frame.id, "indeterminate", "indeterminate", "the operation failed")
        try:
            reply = self._carry_out()
        except AuthorityLost as e:
            self.lost = str(e)
        except Exception as e:
            reply = response(self.frame.id, "indeterminate", "indeterminate", str(e))
        finally:
            with self.lock:
                self.reply = reply
            os.write(self._done_w, b".")

    def _carry_out(self) -> dict[str, Any]:
        maint, frame, index = self.maint, self.frame, self.index
        tmux = maint.spex.tmux
        home = TmuxHome(tmux.socket_name, tmux.socket_path, home=tmux.home)
        spex = Spex(maint.spex.home, open_store(maint.spex.home), home)
        try:
            maint.heartbeat(store=spex.store)
            with spex.store.tx() as db:
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
                    f"{self.what} was already used",
                )
            try:
                if frame.op == "stop":
                    # Half the deadline as the turn's grace: SIGKILL and its
                    # rescans must fit in the rest.
                    grace = self.limit / 2
                    stop(spex, frame.session, grace=grace, bearer=maint.epoch)
                else:
                    resume(spex, frame.session, force=frame.force, bearer=maint.epoch)
            except Refused as e:
                self._mark(spex, "unused")
                return response(frame.id, "refused", "refused", e.line())
            except Exception as e:
                self._mark(spex, "indeterminate")
                return response(frame.id, "indeterminate", "indeterminate", str(e))
            self._mark(spex, "committed")
            return response(frame.id, "committed")
        finally:
            spex.close()

    def _mark(self, spex: Spex, state: str) -> None:
        with spex.store.tx() as db:
            db.execute(
                "UPDATE capabilities SET state = ?"
                " WHERE epoch = ? AND idx = ? AND state = 'inflight'",
                (state, self.maint.epoch, self.index),
            )


class Broker:
    def __init__(
        self,
        maint: Maintenance,
        pid: int,
        token: str,
        req_r: int,
        resp_w: int,
        sock: socket.socket,
        peer: int,
        signals: Signals,
    ) -> None:
        self.maint = maint
        self.pid = pid
        self.token = token  # the command's start token
        self.req_r = req_r
        self.resp_w = resp_w
        self.sock = sock
        self.signals = signals
        # What `/proc/<pid>/fd` shows for the command's ends of the channels.
        self.links = {
            f"pipe:[{os.fstat(req_r).st_ino}]",
            f"pipe:[{os.fstat(resp_w).st_ino}]",
            f"socket:[{peer}]",
        }
        self.buffer = b""
        self.discarding = False  # dropping the rest of an oversize frame
        self.token_out = False  # a response was sent and its token not yet returned
        self.pidfd = os.pidfd_open(pid)
        self.heart = Heartbeat(maint)
        self.poller = select.poll()
        # The operation being carried out (one at a time), and the pipe its
        # thread wakes the broker through when it ends.
        self.op: Operation | None = None
        self.done_r, self.done_w = os.pipe()

    def serve(self) -> int:
        self.heart.start()
        try:
            # A command that has already exited closed fd 5: its exit, seen
            # through the pidfd below, decides the outcome, not EPIPE here.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.sock.sendall(TOKEN)
            poller = self.poller
            for fd in (self.pidfd, self.sock.fileno(), self.req_r, self.heart.wake_r, self.done_r):
                poller.register(fd, select.POLLIN)
            # No events asked: a pipe's write end reports POLLERR once its
            # reader is gone, i.e. the command closed fd 4.
            poller.register(self.resp_w, 0)
            while True:
                # Woken at least every SIGNAL_CHECK: a SIGTERM the kernel
                # gave the heartbeat's thread runs its handler only here.
                wait = SIGNAL_CHECK
                if self.op is not None and not self.op.answered:
                    wait = min(wait, max(self.op.deadline - time.monotonic(), 0.0))
                ready = {fd for fd, _ in poller.poll(math.ceil(wait * 1000))}
                self._check_heartbeat()
                if self.done_r in ready:
                    self._operation_done()
                op = self.op
                if op is not None and not op.answered and time.monotonic() >= op.deadline:
                    self._operation_overdue()
                # Tokens and requests first: a client's last token may arrive
                # together with the command's exit.
                ended = self.pidfd in ready
                if self.sock.fileno() in ready and not ended and not self._token_returned():
                    ended = self._exiting("the command closed the turn-token channel (fd 5)")
                if self.resp_w in ready and not ended:
                    ended = self._exiting("the command closed the broker response pipe (fd 4)")
                if self.req_r in ready and not ended and not self._read_requests():
                    ended = self._exiting("the command closed the broker request pipe (fd 3)")
                if ended:
                    return self._command_ended()
        except _CommandExited:
            return self._command_ended()
        except AuthorityLost as e:
            return self._lose(str(e))
        finally:
            self.heart.stop()
            os.close(self.done_r)
            os.close(self.done_w)

    def _check_heartbeat(self) -> None:
        if self.heart.lost:
            raise AuthorityLost(self.heart.lost)

    def _token_unread(self) -> bool:
        """Is the token we handed out still unread in the socket (no client holds it)?"""
        queued = fcntl.ioctl(self.sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
        return bool(struct.unpack("i", queued)[0])

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
        """Read and answer complete request lines; False at end of file.

        While an operation awaits its answer, nothing is read (its client
        holds the token, so nobody entitled can be writing); the pipe is only
        watched for its close (see `_start`)."""
        if self.op is not None and not self.op.answered:
            return False  # watched for POLLHUP only: the command closed fd 3
        data = os.read(self.req_r, MAX_FRAME + 1)
        if data == b"":
            return False
        # Whoever holds the token has taken it from the socket; a frame that
        # arrives while it is still unread there was sent by nobody entitled.
        self.buffer += data
        self._serve_buffer(held=not self._token_unread())
        return True

    def _serve_buffer(self, held: bool) -> None:
        """Answer the complete lines read so far, stopping at one that starts an
        operation: the rest waits for its answer."""
        while b"\n" in self.buffer and (self.op is None or self.op.answered):
            line, self.buffer = self.buffer.split(b"\n", 1)
            if self.discarding:  # the tail of an oversize frame, already answered
                self.discarding = False
                continue
            answer = self.handle(line, held)
            if answer is not None:
                self._answer(*answer)
        if len(self.buffer) > MAX_FRAME and not self.discarding:
            self.discarding = True
            self._answer(
                response(None, "refused", "maintenance_invalid", "frame longer than 4096 bytes"),
                held,
            )
        if self.discarding:
            self.buffer = b""

    def _answer(self, reply: dict[str, Any], pending: bool) -> None:
        """Write one response; `pending` when a token holder now awaits it."""
        if pending:
            self.token_out = True
        try:
            os.write(self.resp_w, json.dumps(reply).encode() + b"\n")
        except OSError:
            self.token_out = True  # an answer nobody received
            if self._exiting("the command closed the broker response pipe (fd 4)"):
                raise _CommandExited from None

    def handle(self, line: bytes, held: bool = True) -> tuple[dict[str, Any], bool] | None:
        """One request: validate, match the plan, and start the operation.

        Returns the response and whether a token holder is waiting for it
        (never for a refused stranger, so a stranger cannot leave a request
        "pending" and cost the holder its lease), or None when an operation
        started: its answer comes when it ends or at its deadline.
        """
        try:
            frame = parse_frame(line)
        except FrameError as e:
            return response(e.frame_id, "refused", "maintenance_invalid", str(e)), held
        if not held:
            error = "request sent without holding the turn token (fd 5)"
            return response(frame.id, "refused", "maintenance_invalid", error), False
        if not belongs_to(frame.client_pid, self.pid, self.token):
            error = (
                f"client pid {frame.client_pid} is neither the maintenance command"
                " nor one of its descendants"
            )
            return response(frame.id, "refused", "maintenance_invalid", error), False
        maint = self.maint
        index = next(
            (
                i
                for i, c in enumerate(maint.plan)
                if (c.op, c.session, c.force) == (frame.op, frame.session, frame.force)
            ),
            None,
        )
        if index is None:
            error = (
                f"{frame.op} {frame.session}{' --force' if frame.force else ''}"
                " was not granted by this lease"
            )
            return response(frame.id, "refused", "maintenance_capability_missing", error), True
        if self.op is not None:
            error = f"{self.op.what} passed its deadline and is still running"
            return response(frame.id, "refused", "maintenance_busy", error), True
        self._start(Operation(self, frame, index))
        return None

    def _start(self, op: Operation) -> None:
        self.op = op
        # Until it is answered only the pipe's close is of interest (POLLHUP).
        self.poller.modify(self.req_r, 0)
        op.thread.start()

    def _operation_done(self) -> None:
        """The operation's thread ended: answer it unless its deadline already did."""
        os.read(self.done_r, 1)
        op = self.op
        assert op is not None
        op.thread.join()
        self.op = None
        if op.lost is not None:
            raise AuthorityLost(op.lost)
        if not op.answered:
            assert op.reply is not None
            self._reopen(op.reply)

    def _operation_overdue(self) -> None:
        """Its deadline passed: `indeterminate`, and the broker serves on while
        it runs (its thread records what it did, if it ever ends)."""
        op = self.op
        assert op is not None
        with op.lock:
            if op.reply is not None:
                return  # it has just ended: its own answer follows
            op.answered = True
        error = f"{op.what} did not finish within {op.limit:g}s; it may still take effect"
        self._reopen(response(op.frame.id, "indeterminate", "maintenance_deadline", error))

    def _reopen(self, reply: dict[str, Any]) -> None:
        """Answer the operation's client, then read requests again."""
        self._answer(reply, True)
        self.poller.modify(self.req_r, select.POLLIN)
        self._serve_buffer(held=False)  # queued behind an awaited answer: nobody entitled

    def _unanswered(self) -> bool:
        """Was a request written that the exited command never saw answered?

        Its operation is not carried out for a command that is gone. A frame
        from a live process outside the command is a stranger's and ignored.
        """
        while select.select([self.req_r], [], [], 0)[0]:
            data = os.read(self.req_r, 65536)
            if not data:
                break
            self.buffer += data
        if self.discarding:
            return False
        lines = self.buffer.split(b"\n")
        if lines[-1]:
            return True  # a partial frame
        for line in lines[:-1]:
            try:
                frame = parse_frame(line)
            except FrameError:
                return True
            if not belongs_to(frame.client_pid, self.pid, self.token):
                continue
            return True
        return False

    def _command_ended(self) -> int:
        # What the command left behind (`sleep 123 &`) dies before the lease
        # is released; the unreaped leader keeps its pid and group id ours.
        kill_members(self.pid, self.token, grace=KILL_AFTER)
        _, status = os.waitpid(self.pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        rc = 128 - rc if rc < 0 else rc
        if self.signals.received is not None:
            rc = 128 + self.signals.received
        # Whatever escaped the session with fds 3, 4, 5 (a double fork with
        # setsid) still speaks for the lease: it must be gone before release.
        holders = self._close_channels()
        if holders is not None:
            who = (
                f"held by process(es) {', '.join(map(str, holders))}, which survived SIGKILL"
                if holders
                else "held by no process we can see (in flight in a unix socket?)"
            )
            print(
                f"spex: maint: the broker fds (3, 4, 5) are still open after the command"
                f" ended, {who} (lease left for recovery)",
                file=sys.stderr,
            )
            return rc if self.signals.received is not None else 1
        try:  # a lease revoked behind our back is not ours to release
            self._check_heartbeat()
            self.maint.heartbeat()
            running = self._still_running()
        except AuthorityLost as e:
            print(f"spex: maint: authority lost: {e} (lease left for recovery)", file=sys.stderr)
            return 1
        if select.select([self.sock.fileno()], [], [], 0)[0]:
            with contextlib.suppress(AuthorityLost):
                self._token_returned()
        if running:
            print(
                f"spex: maint: the command exited while {running} was still running"
                " (lease left for recovery)",
                file=sys.stderr,
            )
            return rc if self.signals.received is not None else 1
        if self.token_out or self._unanswered():
            print(
                "spex: maint: the command exited with a broker request pending"
                " (lease left for recovery)",
                file=sys.stderr,
            )
            return rc if self.signals.received is not None else 1
        self.maint.release()
        return rc

    def _still_running(self) -> str | None:
        """The operation still running (past its deadline or unanswered), if any.
        One that ended unanswered leaves its request pending (`token_out`)."""
        op = self.op
        if op is None:
            return None
        with op.lock:
            ended = op.reply is not None
        if not ended:
            return op.what
        if op.lost is not None:
            raise AuthorityLost(op.lost)
        if not op.answered:
            self.token_out = True
        self.op = None
        return None

    def _channels_closed(self, seconds: float) -> bool:
        """Wait up to `seconds` until every copy of the command's ends of the
        broker channels is closed: POLLHUP on the request pipe and the socket,
        POLLERR on the response pipe. No events are asked for, so a frame or a
        token still queued does not count as open."""
        pending = {self.req_r, self.resp_w, self.sock.fileno()}
        poller = select.poll()
        for fd in pending:
            poller.register(fd, 0)
        until = time.monotonic() + seconds
        while True:
            left = max(until - time.monotonic(), 0.0)
            for fd, _ in poller.poll(math.ceil(left * 1000)):
                pending.discard(fd)
                poller.unregister(fd)
            if not pending:
                return True
            if time.monotonic() >= until:
                return False

    def _close_channels(self) -> list[int] | None:
        """After the reap: None once the broker channels are closed everywhere,
        waiting up to HOLDERS_WAIT; else whoever holds them (found in
        `/proc/*/fd`) gets SIGTERM with its process group, SIGKILL after
        KILL_AFTER, rescanning for what forked meanwhile. Returns the holders
        last found when the channels stay open (empty: held by no process we
        can see, e.g. an fd in flight in a unix socket)."""
        if self._channels_closed(HOLDERS_WAIT):
            return None
        holders: list[int] = []
        rounds = (
            (signal.SIGTERM, KILL_AFTER),
            (signal.SIGKILL, 0.5),
            (signal.SIGKILL, 0.5),
            (signal.SIGKILL, HOLDERS_WAIT),
        )
        for sig, wait in rounds:
            holders = fd_holders(self.links, skip={os.getpid()})
            if not holders:
                break
            signal_with_groups(holders, sig)
            if self._channels_closed(wait):
                return None
        return None if self._channels_closed(0) else holders

    def _lose(self, reason: str) -> int:
        print(
            f"spex: maint: authority lost: {reason}; stopping the command"
            " (lease left for recovery)",
            file=sys.stderr,
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        select.select([self.pidfd], [], [], KILL_AFTER)
        # Whatever is left of the group and session (the leader may have gone first).
        kill_members(self.pid, self.token, grace=0)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        self._close_channels()  # and whatever escaped the session with its fds
        return 1
