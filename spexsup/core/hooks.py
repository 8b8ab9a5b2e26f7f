"""Notification hooks: `[[hook]]` tables in config.toml, each run once per event.

A hook is `on = [kinds…]` (or `["*"]`), optional `sessions = [globs…]`, and
either `run = [argv…]` (placeholders such as `{session}` filled in each word;
never a shell string) or `url = "http…"` (the event POSTed as JSON, 5 s
timeout); optional `name` and `timeout` (seconds, default 30, for `run`).

Firing is a queue in SQLite. The process that commits an event claims each
matching (event, hook) pair inside the transaction that records the event
(`claim`: a `hook_runs` row, first claim wins, naming the claimer by pid and
start token), so a hook is claimed exactly when its event commits. After the
COMMIT it starts up to one detached runner per claim (`start_runners`:
`python -m spexsup.core.hooks HOME FD`, its own session, no tty, none of the
turn's SPEXSUP_* variables), each holding one of `SLOTS` slot files of
`$SPEXSUP_HOME/hooks/` locked (flock): so no more than `SLOTS` runners ever
run per home, and when none is free the claims wait in the table. A runner
takes the oldest claim nobody took (`started_at`, set in a transaction of
its own, so each claim is taken once), runs it, records its outcome, and
takes the next until none is left; then it unlocks its slot and looks once
more, so a claim committed meanwhile is never left behind (its committer
found the slot free, or this runner sees the claim).

A claimer that dies between its COMMIT and starting a runner leaves its
claims untaken: the next reconciling reader (`resume`: `spex ls`, `show`,
`wait`, `events`…) starts runners for claims whose claimer is dead or that
waited `STALE` seconds. The runner learns the event and the hook from SQLite
and config.toml, never from its argv, which every local user can read (a
webhook URL is a secret). It is a child subreaper: whatever the hook leaves
running is its child, waited for until the hook's timeout and then killed.
Output is kept up to `hookproc.OUTPUT_LIMIT` bytes (the head), the rest counted and
dropped, and goes to `$SPEXSUP_HOME/hooks.log`. The committer never waits
for any of it, so a slow or broken hook can delay or change no verdict.

The test suite loses a claim with the fault point `after-hook-claim`
(spexsup.faults): the committer SIGKILLs itself right after its COMMIT.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import durations, lazyre
from spexsup.adapters.procs import (
    Liveness,
    become_subreaper,
    identity_liveness,
    own_identity,
)
from spexsup.core import hookproc
from spexsup.errors import Failed, Invalid, Refused, SpexError, clip, unknown_key
from spexsup.paths import ensure_private_dir, own_python
from spexsup.state import events

if TYPE_CHECKING:
    import sqlite3

    from spexsup.state.store import Store

URL_TIMEOUT = 5.0
DEFAULT_TIMEOUT = 30.0
# Runners at once per home: an 80-leg fan-out must not start 160 of them.
SLOTS = 4
SLOT_DIR = "hooks"
# A claim nobody took this long after its COMMIT is a reader's to start,
# even under a live claimer (one stopped between COMMIT and start).
STALE = 10.0
PLACEHOLDER = lazyre.compile(r"\{([a-z_]+)\}")
# A hook started from the exit reporter must not look like the turn's process,
# nor find spex's private tmux server in TMUX (its tmux commands reach the user's).
TURN_ENV = (
    "TMUX",
    "TMUX_PANE",
    "SPEXSUP_SESSION",
    "SPEXSUP_TURN",
    "SPEXSUP_TURN_DIR",
    "SPEXSUP_PROMPT_FILE",
    "SPEXSUP_MAINTENANCE_BROKER_FDS",
)
FIELDS = ("on", "sessions", "run", "url", "name", "timeout")


@dataclass(frozen=True)
class Hook:
    key: str  # name, else a digest of the table: what a claim is keyed on
    on: tuple[str, ...]
    sessions: tuple[str, ...]
    run: tuple[str, ...] | None
    url: str | None
    timeout: float
    # A `[[notify]]` target (`spexsup.core.notify.Target`) riding this queue, or None.
    target: Any = None

    def matches(self, kind: str, session: str | None) -> bool:
        """`kind` as stored (an event recorded under an old name matches its new one)."""
        if "*" not in self.on and events.kind_of(kind) not in self.on:
            return False
        return not self.sessions or (
            session is not None and any(fnmatch.fnmatchcase(session, g) for g in self.sessions)
        )


def _strings(value: object) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(v, str) and v and "\0" not in v for v in value):
        return tuple(value)
    return None


def _parse_one(source: str, number: int, table: object) -> Hook:
    """The `number`th `[[hook]]` table of `source`, or Failed naming both and the field."""
    where = f"{source}: [[hook]] #{number}"
    if not isinstance(table, dict):
        raise Failed(f"{where} must be a table")
    for key in sorted(set(table) - set(FIELDS)):
        unknown_key(source, key, FIELDS, f"[[hook]] #{number}")
    table = {k: v for k, v in table.items() if k in FIELDS}
    on = _strings(table.get("on"))
    kinds = f"one or more of: {', '.join(events.KINDS)}, or *"
    if not on:
        raise Failed(f"{where}: 'on' must be a list of event kinds", hint=kinds)
    for kind in on:
        if kind != "*" and events.kind_of(kind) not in events.KINDS:
            import difflib

            close = difflib.get_close_matches(kind, events.KINDS, n=1)
            raise Failed(
                f"{where}: 'on': unknown event kind {clip(repr(kind))}",
                hint=f"did you mean {close[0]!r}?" if close else kinds,
            )
    on = tuple(events.kind_of(kind) for kind in on)  # an old name still subscribes
    sessions = _strings(table.get("sessions", []))
    if sessions is None:
        raise Failed(f"{where}: 'sessions' must be a list of name globs")
    run = _strings(table["run"]) if "run" in table else None
    url = table.get("url")
    if ("run" in table) == ("url" in table):
        raise Failed(f"{where}: give exactly one of 'run' (an argv list) or 'url'")
    if "run" in table and run is None:
        raise Failed(f"{where}: 'run' must be a non-empty list of strings (argv, not a shell line)")
    if url is not None and (not isinstance(url, str) or not re.match(r"https?://", url)):
        raise Failed(f"{where}: 'url' must be an http:// or https:// URL")
    try:  # seconds, or a duration string
        timeout = durations.parse(
            table.get("timeout", DEFAULT_TIMEOUT), "timeout", minimum=0.1, maximum=3600
        )
    except Invalid:
        raise Failed(f"{where}: 'timeout' must be seconds or a duration from 0.1s to 1h") from None
    name = table.get("name")
    if name is not None and not (isinstance(name, str) and re.fullmatch(r"[\w.-]{1,64}", name)):
        raise Failed(f"{where}: 'name' must be 1-64 of letters, digits, _ . -")
    digest = hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()[:12]
    return Hook(name or f"hook-{digest}", on, sessions, run, url, float(timeout))


def check(raw: object, source: str = "config.toml") -> tuple[list[Hook], list[Failed]]:
    """Every `[[hook]]` table of `source` checked on its own: the good ones, and
    what is wrong with each bad one (`spex doctor` names them all). An unknown
    field is a warning (`errors.unknown_key`) and ignored."""
    if not isinstance(raw, list):
        return [], [Failed(f"{source}: hook must be an array of tables ([[hook]])")]
    good: list[Hook] = []
    bad: list[Failed] = []
    for number, table in enumerate(raw, 1):
        try:
            good.append(_parse_one(source, number, table))
        except Failed as e:
            bad.append(e)
    return good, bad


def parse(raw: object) -> list[Hook]:
    """Validate the `[[hook]]` tables; Failed naming the first bad table and field."""
    good, bad = check(raw)
    if bad:
        raise bad[0]
    return good


def describe(hook: Hook, number: int) -> dict[str, Any]:
    """`spex hooks ls --json`: one hook as read, `number` its place among the tables."""
    return {
        "number": number,
        "name": hook.key,
        "on": list(hook.on),
        "sessions": list(hook.sessions),
        "run": list(hook.run) if hook.run is not None else None,
        "url": hook.url,
        "timeout": hook.timeout,
    }


def load(home: Path) -> list[Hook]:
    """The hooks of the config files (the later file's `[[hook]]` tables win
    whole); Failed on the first bad one."""
    from spexsup import config

    raw = config.load(home).raw.get("hook")
    return parse(raw) if raw else []


def runnable(home: Path) -> list[Hook]:
    """What the queue runs: the `[[hook]]` tables, then each `[[notify]]`
    target as a hook keyed `notify:NAME` (`spexsup.core.notify`); Failed on the
    first bad table."""
    from spexsup import config

    raw = config.load(home).raw
    found = parse(raw["hook"]) if raw.get("hook") else []
    if raw.get("notify"):
        from spexsup.core import notify

        found += [
            Hook(t.key, t.kinds(), t.sessions, None, None, t.timeout, t) for t in notify.load(home)
        ]
    return found


def window_of(hook: Hook) -> float:
    """How long the queue holds a hook's first claim for others to join it (0: not at all)."""
    return float(hook.target.window) if hook.target is not None else 0.0


# --- firing, from the committing process ---------------------------------------


def claim(db: sqlite3.Connection, ids: Sequence[int], hooks: Sequence[Hook]) -> int:
    """Inside the transaction that records events `ids`: claim every (event,
    matching hook) pair (first claim wins), so a hook is claimed exactly when
    its event commits. Returns how many this call claimed: the runners to
    start after the COMMIT (`start_runners`)."""
    if not hooks or not ids:
        return 0
    marks = ",".join("?" * len(ids))
    rows = db.execute(
        f"SELECT id, kind, session, turn, rc, cause FROM events WHERE id IN ({marks})",
        tuple(ids),
    ).fetchall()
    pid, token = own_identity()
    claimed = 0
    for row in rows:
        for h in hooks:
            if not h.matches(row["kind"], row["session"]):
                continue
            if h.target is not None and not h.target.wants(db, row):
                continue
            cur = db.execute(
                "INSERT OR IGNORE INTO hook_runs (event, hook, claimed_at, pid, token)"
                " VALUES (?, ?, ?, ?, ?)",
                (row["id"], h.key, time.time(), pid, token),
            )
            claimed += cur.rowcount
    return claimed


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in TURN_ENV and not k.startswith("SPEX_")}


def _slot_dir(home: Path) -> str:
    return str(ensure_private_dir(home / SLOT_DIR, under=home))


def _free_slot(directory: str) -> int | None:
    """A slot file locked by us (its fd), or None when all `SLOTS` are held."""
    for number in range(SLOTS):
        try:
            fd = os.open(
                f"{directory}/slot-{number}",
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return fd
    return None


def start_runners(home: Path, wanted: int) -> int:
    """Start up to `wanted` detached runners, one per free slot, each holding
    its slot's lock (the fd it inherits) for as long as it lives; returns
    how many started. Claims left over wait for the runners that hold the
    slots. Never raises: failures go to hooks.log, the claims stay queued."""
    started = 0
    try:
        directory = _slot_dir(home)
        while started < wanted:
            fd = _free_slot(directory)
            if fd is None:
                break
            try:
                subprocess.Popen(
                    [*own_python("spexsup.core.hooks"), str(home), str(fd)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    pass_fds=(fd,),
                    env=_clean_env(),
                )
            finally:
                os.close(fd)
            started += 1
    except (OSError, SpexError) as e:
        events.log_line(home, f"hook runner not started: {getattr(e, 'strerror', None) or e}")
    return started


def resume(home: Path, db: sqlite3.Connection) -> int:
    """A reconciling reader's part (`Spex.resume_hooks`): start runners for
    claims nobody took whose claimer is dead (it died between its COMMIT and
    starting them) or that waited `STALE` seconds; returns how many started.
    One indexed query when nothing waits."""
    rows = db.execute(
        "SELECT pid, token, claimed_at FROM hook_runs WHERE started_at IS NULL"
        " ORDER BY claimed_at LIMIT ?",
        (SLOTS,),
    ).fetchall()
    now = time.time()
    orphaned = sum(
        1
        for r in rows
        if now - r["claimed_at"] >= STALE
        or r["pid"] is None
        or identity_liveness(r["pid"], r["token"]) is Liveness.DEAD
    )
    return start_runners(home, orphaned) if orphaned else 0


# --- running one hook -------------------------------------------------------------


def summary_of(home: Path, event: dict[str, Any]) -> str:
    """The last non-empty line of the event's turn output ("" without a turn)."""
    if not event.get("session") or not event.get("turn"):
        return ""
    from spexsup.pane import turndir

    return turndir.last_line(turndir.path(home, event["session"], event["turn"])) or ""


def variables(home: Path, event: dict[str, Any]) -> dict[str, str]:
    """What placeholders and SPEX_* variables hold for one event."""

    def text(value: object) -> str:
        return "" if value is None else str(value)

    payload = event.get("payload") or {}

    return {
        "id": text(event["id"]),
        "event": event["kind"],
        "kind": event["kind"],
        "session": text(event.get("session")),
        "turn": text(event.get("turn")),
        "verdict": event["kind"],
        "rc": text(event.get("rc")),
        # What a failed end was (`rate-limited`, `usage-limit`, …), and its
        # message; `reason` is the old name of `cause`, kept for one release.
        "cause": text(event.get("cause")),
        "error": text(event.get("error")),
        "reason": text(event.get("cause")),
        "summary": summary_of(home, event),
        # The turn's verify command's exit status, on a verified turn's end
        # and on `verifying`/`verified` events ("" when it has none).
        "verify_rc": text(payload.get("verify_rc")),
        # A wave's events (DESIGN §31): the wave, the one it retries, and on
        # `wave-ended` its state and known cost (USD, "" when none is known).
        "wave": text(payload.get("wave")),
        "retry_of": text(payload.get("retry_of")),
        "wave_state": text(payload.get("state") if "wave" in payload else None),
        "cost": text((payload.get("cost") or {}).get("amount")),
        "at": text(event.get("at_iso")),
        "home": str(home),
    }


def fill(word: str, values: dict[str, str]) -> str:
    """`{session}` etc. replaced in one argv word; unknown braces are kept as written."""
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), word)


@dataclass
class Outcome:
    ok: bool
    detail: str  # "exit 0", "exit 3", "timed out after 5s, killed", "HTTP 200", …


def _head(event: dict[str, Any], key: str) -> str:
    return f"event {event['id']} {event['kind']} {event.get('session') or '-'} hook {key}"


def run_hook(home: Path, event: dict[str, Any], hook: Hook) -> Outcome:
    """Run one hook now, in the foreground; what happened goes to hooks.log.

    Call it in a child subreaper (`procs.become_subreaper`) that has no children
    of its own: a `run` hook's leftovers are reaped with `waitpid(-1)`."""
    values = variables(home, event)
    started = time.monotonic()
    output, dropped = b"", 0
    if hook.url is not None:
        outcome = _post(hook.url, {**event, "summary": values["summary"]})
    else:
        assert hook.run is not None
        argv = [fill(w, values) for w in hook.run]
        env = {**_clean_env(), **{f"SPEX_{k.upper()}": v for k, v in values.items()}}
        (ok, detail), output, dropped = hookproc.run(argv, env, hook.timeout)
        outcome = Outcome(ok, detail)
    took = time.monotonic() - started
    text = f"{_head(event, hook.key)}: {'ok' if outcome.ok else 'failed'}, {outcome.detail}"
    text += f" ({took:.2f}s)"
    if output.strip():
        body = output.decode("utf-8", "replace").rstrip("\n")
        text += "\n" + "\n".join(f"  | {line}" for line in body.splitlines())
    if dropped:
        text += f"\n  | [output truncated: {dropped} more bytes after the first {len(output)}]"
    events.log_line(home, text)
    return outcome


def _post(url: str, body: dict[str, Any]) -> Outcome:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "spexsup-hook"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=URL_TIMEOUT) as response:
            status = response.status
    except urllib.error.HTTPError as e:
        return Outcome(False, f"HTTP {e.code}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        return Outcome(False, f"POST failed: {reason}")
    return Outcome(200 <= status < 300, f"HTTP {status}")


def test(
    home: Path, store: Store, event_id: int, only: str | None = None
) -> list[tuple[Hook, Outcome]]:
    """`spex hooks test`: run the hooks that match one event, now, unclaimed.
    `only` picks one hook as `spex hooks ls` shows it: its name, `#N` or `N`."""

    row = store.db.execute("SELECT * FROM events WHERE id = ?", (event_id,)).fetchone()
    if row is None:
        raise Refused(
            f"no event {event_id}", hint="an event id from spex events; --hook names a hook"
        )
    every = load(home)
    if only is not None:
        picked = [h for n, h in enumerate(every, 1) if only in (h.key, f"#{n}", str(n))]
        if not picked:
            raise Refused(f"no hook {only!r}", hint="see spex hooks ls")
        every = picked
    hooks = [h for h in every if h.matches(row["kind"], row["session"])]
    if not hooks:
        raise Refused(
            f"no hook matches event {event_id} ({row['kind']})",
            hint="see the [[hook]] tables in config.toml",
        )
    event = events.as_json(row)
    become_subreaper()
    return [(h, run_hook(home, event, h)) for h in hooks]


# --- the detached runner ----------------------------------------------------------


def _take(store: Store, windows: dict[str, float]) -> tuple[list[int], str] | float | None:
    """The oldest claim nobody took, taken by this runner (in one write
    transaction, so by one runner only): its event and hook. A hook with a
    window (`windows`, a notify target's) is taken once its oldest waiting
    claim is that old, with every claim of it then waiting: one delivery for
    them all. Else the seconds until the next window closes; None when the
    queue is empty."""
    pid, token = own_identity()
    now = time.time()
    with store.tx() as db:
        rows = db.execute(
            "SELECT hook, min(claimed_at) AS first, min(event) AS event FROM hook_runs"
            " WHERE started_at IS NULL GROUP BY hook ORDER BY first"
        ).fetchall()
        wait: float | None = None
        for row in rows:
            window = windows.get(row["hook"], 0.0)
            if window > 0 and row["first"] + window > now:
                left = row["first"] + window - now
                wait = left if wait is None else min(wait, left)
                continue
            if window > 0:
                taken = [
                    int(r["event"])
                    for r in db.execute(
                        "SELECT event FROM hook_runs WHERE hook = ? AND started_at IS NULL"
                        " ORDER BY event",
                        (row["hook"],),
                    )
                ]
            else:
                first = db.execute(
                    "SELECT event FROM hook_runs WHERE hook = ? AND started_at IS NULL"
                    " ORDER BY claimed_at LIMIT 1",
                    (row["hook"],),
                ).fetchone()
                taken = [int(first["event"])]
            marks = ",".join("?" * len(taken))
            db.execute(
                "UPDATE hook_runs SET started_at = ?, runner_pid = ?, runner_token = ?"
                f" WHERE hook = ? AND event IN ({marks})",
                (now, pid, token, row["hook"], *taken),
            )
            return taken, str(row["hook"])
        return wait


def _run_claims(home: Path, store: Store, ids: list[int], key: str) -> None:
    """Run taken claims (one, or a notify target's batch) and record the outcome;
    never raises."""
    if key.startswith("notify:"):
        try:
            hook = next((h for h in runnable(home) if h.key == key), None)
            if hook is None:
                outcome = Outcome(False, "failed: config.toml has no such target now")
            else:
                from spexsup.core.notify.deliver import deliver_claims

                outcome = Outcome(*deliver_claims(home, store, ids, hook.target))
        except Exception as e:
            outcome = Outcome(False, f"failed: runner failed: {e}")
        if not outcome.ok:
            events.log_line(home, f"events {ids[0]}..{ids[-1]} {key}: {outcome.detail}")
        _record(home, store, ids, key, outcome)
    else:
        _run_claim(home, store, ids[0], key)


def _record(home: Path, store: Store, ids: list[int], key: str, outcome: Outcome) -> None:
    try:
        marks = ",".join("?" * len(ids))
        with store.tx() as db:
            db.execute(
                f"UPDATE hook_runs SET outcome = ? WHERE hook = ? AND event IN ({marks})",
                (outcome.detail, key, *ids),
            )
    except Exception as e:
        events.log_line(home, f"events {ids[0]}..{ids[-1]} {key}: outcome not recorded: {e}")


def _windows(home: Path) -> dict[str, float]:
    try:
        return {h.key: window_of(h) for h in runnable(home) if window_of(h) > 0}
    except SpexError:
        return {}


def _run_claim(home: Path, store: Store, event_id: int, key: str) -> None:
    """Run one taken claim and record its outcome; never raises."""
    try:
        row = store.db.execute("SELECT * FROM events WHERE id = ?", (event_id,)).fetchone()
        if row is None:
            outcome = Outcome(False, "not run: its event is no longer kept")
            events.log_line(home, f"event {event_id} hook {key}: {outcome.detail}")
        else:
            event = events.as_json(row)
            why = "not run: config.toml has no such hook now"
            try:
                hook = next((h for h in runnable(home) if h.key == key), None)
            except SpexError as e:
                hook, why = None, f"not run: {e.line()}"
            if hook is None:
                outcome = Outcome(False, why)
                events.log_line(home, f"{_head(event, key)}: failed, {why}")
            else:
                outcome = run_hook(home, event, hook)
    except Exception as e:
        outcome = Outcome(False, f"runner failed: {e}")
        events.log_line(home, f"event {event_id} hook {key}: {outcome.detail}")
    _record(home, store, [event_id], key, outcome)


def _queued(store: Store) -> bool:
    row = store.db.execute("SELECT 1 FROM hook_runs WHERE started_at IS NULL LIMIT 1").fetchone()
    return row is not None


def _main(argv: list[str]) -> int:
    """The detached runner: `python -m spexsup.core.hooks HOME SLOT_FD`, holding the
    slot locked through SLOT_FD. Takes claims until none is left."""
    from spexsup.state.store import Store

    home, slot = Path(argv[0]), int(argv[1])
    # What the hook starts must not hold the slot: the lock ends with us.
    os.set_inheritable(slot, False)
    become_subreaper()
    try:
        # The event log listens, the hooks do not: a runner records no events,
        # and must not fire hooks if it ever did (nor import `spex`, which
        # composes the hooks: `spex.open_store` would close a circle).
        store = Store(home, (events,))
    except SpexError as e:
        events.log_line(home, f"hook runner: {e.line()}")
        return 1
    try:
        while True:
            windows = _windows(home)
            while isinstance(taken := _take(store, windows), tuple):
                _run_claims(home, store, *taken)
            if taken is not None:
                # A notify target's window is open: hold the slot until it
                # closes (at most a few seconds at a time, config re-read).
                time.sleep(min(taken + 0.05, 5.0))
                continue
            os.close(slot)
            # Unlocked first, then looked: a claim committed after this look
            # finds a free slot for its own runner.
            if not _queued(store):
                return 0
            fd = _free_slot(_slot_dir(home))
            if fd is None:
                return 0
            slot = fd
    except Exception as e:  # what it has not taken waits for the next runner or reader
        events.log_line(home, f"hook runner stopped: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
