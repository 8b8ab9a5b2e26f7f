"""The lease holder's side of `spex maint` (DESIGN §5): take, keep and give back
the maintenance lease.

`Maintenance` is one run's claim on the lease: it takes it (`draining`) within
--wait, waits for the older operations in scope to drain (`active`), extends
it by heartbeat while the command runs, and releases it. The lease token (32
random bytes) lives only in this process's memory; the database holds its
sha256. Heartbeats run in a thread of their own (`Heartbeat`), so a slow
brokered operation cannot let the lease lapse; a beat that finds the lease no
longer ours exactly as granted is `AuthorityLost`, which the broker acts on.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence

from spexsup import states
from spexsup.adapters.procs import own_identity
from spexsup.core.spex import Spex, open_store
from spexsup.errors import Invalid, Refused
from spexsup.state import events, lease
from spexsup.state.lease import Capability
from spexsup.state.store import Store

DRAIN_LIMIT = 60.0


def heartbeat_interval(ttl: float) -> float:
    return min(max(ttl / 3, 0.25), 1.0)


class AuthorityLost(Exception):
    pass


class Maintenance:
    """One `spex maint` run's claim on the lease: its plan, ttl and token.

    The broker (`spexsup.conductors.broker.serve.run`) spawns and serves the command."""

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
        # Hears what the run is waiting for, once per change (`spex maint` prints it).
        self.on_wait: Callable[[str], None] | None = None
        self._waiting_for = ""

    def _say_waiting(self, what: str) -> None:
        if self.on_wait is not None and what != self._waiting_for:
            self._waiting_for = what
            self.on_wait(what)

    def check_plan(self) -> None:
        """Every session the plan names must exist: refused before anything runs."""
        known = {r["name"] for r in self.spex.store.db.execute("SELECT name FROM sessions")}
        unknown = sorted({c.session for c in self.plan} - known)
        if unknown:
            raise Invalid(
                f"the plan names unknown session(s): {', '.join(unknown)}", hint="see spex ls"
            )

    # --- the lease ---------------------------------------------------------

    def acquire(self) -> None:
        """Take the lease (`draining`) within --wait, then wait for `active`.

        Interrupted after taking it, the lease is released before re-raising.
        """
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
                        " all_sessions = ?, acquired_at = ?, revoked = 0,"
                        " command_pid = NULL, command_token = NULL WHERE id = 1",
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
                    events.record(
                        db,
                        states.EventKind.LEASE_ACQUIRED,
                        epoch=self.epoch,
                        scope="all" if self.all_sessions else scope,
                        holder=self.pid,
                    )
                    break
                holder = row["holder_pid"]
            if time.monotonic() >= give_up:
                raise Refused(
                    f"no maintenance lease within {self.wait:g}s"
                    f" (lease {row['epoch']} is still {row['state']}, held by pid {holder})",
                    hint="spex maint ls",
                )
            who = f"held by pid {holder}" if holder else "its holder is gone, recovering"
            self._say_waiting(
                f"waiting up to {self.wait:g}s for the maintenance lease"
                f" (lease {row['epoch']} is {row['state']}, {who})"
            )
            time.sleep(0.1)
        try:
            self._wait_active(time.monotonic() + max(self.wait, DRAIN_LIMIT))
        except BaseException:  # interrupted too (SIGINT, the CLI's SIGTERM)
            self.release()
            raise

    def _wait_active(self, drain_until: float) -> None:
        while not self.heartbeat(want="active"):
            if time.monotonic() >= drain_until:
                raise Refused("older operations on the leased sessions did not finish")
            self._say_waiting(self._draining())
            time.sleep(0.05)

    def _draining(self) -> str:
        """What the lease waits for while draining: the older operations in scope."""
        db = self.spex.store.db
        row = db.execute("SELECT * FROM lease WHERE id = 1").fetchone()
        ops = sorted(
            {
                f"{t['op']} {t['session']}"
                for t in db.execute(
                    "SELECT op, session FROM tickets WHERE created_at < ?", (row["acquired_at"],)
                )
                if lease.in_scope(row, t["session"])
            }
        )
        return (
            f"maintenance lease {self.epoch} taken; waiting for earlier operations to finish"
            f" ({', '.join(ops) or 'none left'})"
        )

    def heartbeat(self, want: str = "active", store: Store | None = None) -> bool:
        """Extend the deadline if the lease is still ours exactly as granted.

        With want="active" while still draining, returns False (not yet) and
        raises AuthorityLost if the lease is no longer ours at all. `store`
        is the caller's own connection (the heartbeat thread has one).
        """
        with (store or self.spex.store).tx() as db:
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
                raise AuthorityLost(f"maintenance lease {self.epoch} is no longer ours")
            db.execute(
                "UPDATE lease SET deadline = ? WHERE id = 1 AND epoch = ?",
                (time.time() + self.ttl, self.epoch),
            )
            return bool(row["state"] == want)

    def release(self) -> None:
        with self.spex.store.tx() as db:
            cur = db.execute(
                "UPDATE lease SET state = 'open', token_hash = NULL, holder_pid = NULL,"
                " holder_token = NULL, deadline = NULL, scope = NULL, all_sessions = 0,"
                " revoked = 0, command_pid = NULL, command_token = NULL"
                " WHERE id = 1 AND epoch = ?",
                (self.epoch,),
            )
            if cur.rowcount:
                events.record(db, states.EventKind.LEASE_RELEASED, epoch=self.epoch)
        # Prompts queued while the lease held their sessions start now.
        from spexsup.adapters import dequeuer

        dequeuer.start_waiting(self.spex.store.db, self.spex.home)

    def record_command(self, pid: int, token: str) -> None:
        """Name the command with the lease, so recovery can kill it."""
        with self.spex.store.tx() as db:
            db.execute(
                "UPDATE lease SET command_pid = ?, command_token = ? WHERE id = 1 AND epoch = ?",
                (pid, token, self.epoch),
            )


class Heartbeat:
    """Heartbeats from a thread with its own connection, every clamp(ttl/3, 0.25 s, 1 s),
    so a brokered operation slower than the ttl cannot let the lease lapse.
    A failed beat is reported through `lost` and a byte on `wake_r`."""

    def __init__(self, maint: Maintenance) -> None:
        self.maint = maint
        self.interval = heartbeat_interval(maint.ttl)
        self.done = threading.Event()
        self.lost: str | None = None
        self.wake_r, self.wake_w = os.pipe()
        self.thread = threading.Thread(target=self._run, name="spex-heartbeat", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        store = open_store(self.maint.spex.home)
        try:
            while not self.done.wait(self.interval):
                try:
                    self.maint.heartbeat(store=store)
                except AuthorityLost as e:
                    self.lost = str(e)
                except Exception as e:
                    self.lost = f"heartbeat failed: {e}"
                if self.lost:
                    os.write(self.wake_w, b"!")
                    return
        finally:
            store.close()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()
        os.close(self.wake_r)
        os.close(self.wake_w)
