"""Notification hooks: `[[hook]]` tables in config.toml, each run once per event.

A hook is `on = [kinds…]` (or `["*"]`), optional `sessions = [globs…]`, and
either `run = [argv…]` (placeholders such as `{session}` filled in each word;
never a shell string) or `url = "http…"` (the event POSTed as JSON, 5 s
timeout); optional `name` and `timeout` (seconds, default 30, for `run`).

The process that commits an event fires its hooks: inside the transaction
that records the event it claims each matching (event, hook) pair in SQLite
(`claim`; `hook_runs`, first claim wins), and after the COMMIT it starts a
detached runner (`spawn`: `python -m spexsup.hooks`, its own session, no tty, none of
the turn's SPEXSUP_* variables) that runs the hook and appends what happened
to `$SPEXSUP_HOME/hooks.log`. The committer never waits for it, so a slow or
broken hook can delay or change no verdict.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import events
from spexsup.errors import Failed, clip
from spexsup.paths import own_python

if TYPE_CHECKING:
    import sqlite3

    from spexsup.store import Store

URL_TIMEOUT = 5.0
DEFAULT_TIMEOUT = 30.0
OUTPUT_LIMIT = 16384
PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
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

    def matches(self, kind: str, session: str | None) -> bool:
        if "*" not in self.on and kind not in self.on:
            return False
        if not self.sessions:
            return True
        return session is not None and any(fnmatch.fnmatchcase(session, g) for g in self.sessions)

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "on": list(self.on),
            "sessions": list(self.sessions),
            "run": list(self.run) if self.run else None,
            "url": self.url,
            "timeout": self.timeout,
        }


def _strings(value: object) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(v, str) and v and "\0" not in v for v in value):
        return tuple(value)
    return None


def parse(raw: object) -> list[Hook]:
    """Validate the `[[hook]]` tables; Failed naming the table and field."""
    if not isinstance(raw, list):
        raise Failed("config.toml: hook must be an array of tables ([[hook]])")
    out: list[Hook] = []
    for number, table in enumerate(raw, 1):
        where = f"config.toml: [[hook]] #{number}"
        if not isinstance(table, dict):
            raise Failed(f"{where} must be a table")
        unknown = sorted(set(table) - set(FIELDS))
        if unknown:
            raise Failed(
                f"{where}: unknown field {clip(repr(unknown[0]))}",
                hint=f"known: {', '.join(FIELDS)}",
            )
        on = _strings(table.get("on"))
        if not on or any(k != "*" and k not in events.KINDS for k in on):
            raise Failed(
                f"{where}: 'on' must be a list of event kinds",
                hint=f"one or more of: {', '.join(events.KINDS)}, or *",
            )
        sessions = _strings(table.get("sessions", []))
        if sessions is None:
            raise Failed(f"{where}: 'sessions' must be a list of name globs")
        run = _strings(table["run"]) if "run" in table else None
        url = table.get("url")
        if ("run" in table) == ("url" in table):
            raise Failed(f"{where}: give exactly one of 'run' (an argv list) or 'url'")
        if "run" in table and run is None:
            raise Failed(
                f"{where}: 'run' must be a non-empty list of strings (argv, not a shell line)"
            )
        if url is not None and (not isinstance(url, str) or not re.match(r"https?://", url)):
            raise Failed(f"{where}: 'url' must be an http:// or https:// URL")
        timeout = table.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise Failed(f"{where}: 'timeout' must be a number of seconds")
        if not 0.1 <= timeout <= 3600:
            raise Failed(f"{where}: 'timeout' must be between 0.1 and 3600 seconds")
        name = table.get("name")
        if name is not None and not (isinstance(name, str) and re.fullmatch(r"[\w.-]{1,64}", name)):
            raise Failed(f"{where}: 'name' must be 1-64 of letters, digits, _ . -")
        digest = hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()[:12]
        key = name or f"hook-{digest}"
        out.append(Hook(key, on, sessions, run, url, float(timeout)))
    return out


def load(home: Path) -> list[Hook]:
    from spexsup import config

    raw = config.load(home).raw.get("hook")
    return parse(raw) if raw else []


# --- firing, from the committing process ---------------------------------------


Claimed = list[tuple[dict[str, Any], "Hook"]]


def claim(db: sqlite3.Connection, ids: Sequence[int], hooks: Sequence[Hook]) -> Claimed:
    """Inside the transaction that records events `ids`: claim every (event,
    matching hook) pair (first claim wins), so a hook is claimed exactly when
    its event commits. Returns the pairs this call claimed, to `spawn` after
    the COMMIT."""
    if not hooks or not ids:
        return []
    marks = ",".join("?" * len(ids))
    rows = db.execute(f"SELECT * FROM events WHERE id IN ({marks})", tuple(ids)).fetchall()
    claimed: Claimed = []
    for row in rows:
        for h in hooks:
            if not h.matches(row["kind"], row["session"]):
                continue
            cur = db.execute(
                "INSERT OR IGNORE INTO hook_runs (event, hook, claimed_at, pid)"
                " VALUES (?, ?, ?, ?)",
                (row["id"], h.key, time.time(), os.getpid()),
            )
            if cur.rowcount:
                claimed.append((events.as_json(row), h))
    return claimed


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in TURN_ENV and not k.startswith("SPEX_")}


def spawn(home: Path, event: dict[str, Any], hook: Hook) -> None:
    """Start the runner detached: its own session, stdio away from our tty."""
    argv = [*own_python("spexsup.hooks"), str(home), json.dumps(event)]
    argv.append(json.dumps(hook.as_json()))
    try:
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            env=_clean_env(),
        )
    except OSError as e:
        events.log_line(
            home, f"event {event['id']} {event['kind']} hook {hook.key}: not started: {e}"
        )


# --- running one hook -------------------------------------------------------------


def summary_of(home: Path, event: dict[str, Any]) -> str:
    """The last non-empty line of the event's turn output ("" without a turn)."""
    if not event.get("session") or not event.get("turn"):
        return ""
    from spexsup.report import last_line

    return last_line(home / "turns" / event["session"] / event["turn"]) or ""


def variables(home: Path, event: dict[str, Any]) -> dict[str, str]:
    """What placeholders and SPEX_* variables hold for one event."""

    def text(value: object) -> str:
        return "" if value is None else str(value)

    return {
        "id": text(event["id"]),
        "event": event["kind"],
        "kind": event["kind"],
        "session": text(event.get("session")),
        "turn": text(event.get("turn")),
        "verdict": event["kind"],
        "rc": text(event.get("rc")),
        "cause": text(event.get("cause")),
        # What a failed end was (`rate-limited`, `usage-limit`, …); `cause` is its message.
        "reason": text((event.get("payload") or {}).get("reason")),
        "summary": summary_of(home, event),
        "at": text(event.get("at_iso")),
        "home": str(home),
    }


def fill(word: str, values: dict[str, str]) -> str:
    """`{session}` etc. replaced in one argv word; unknown braces are kept as written."""
    return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), word)


@dataclass
class Outcome:
    ok: bool
    detail: str  # "exit 0", "exit 3", "timed out after 5s", "HTTP 200", "no such file …"


def run_hook(home: Path, event: dict[str, Any], hook: Hook) -> Outcome:
    """Run one hook now, in the foreground; what happened goes to hooks.log."""
    values = variables(home, event)
    head = f"event {event['id']} {event['kind']} {values['session'] or '-'} hook {hook.key}"
    started = time.monotonic()
    output = b""
    if hook.url is not None:
        outcome = _post(hook.url, {**event, "summary": values["summary"]})
    else:
        assert hook.run is not None
        argv = [fill(w, values) for w in hook.run]
        env = {**_clean_env(), **{f"SPEX_{k.upper()}": v for k, v in values.items()}}
        outcome, output = _run(argv, env, hook.timeout)
    took = time.monotonic() - started
    text = f"{head}: {'ok' if outcome.ok else 'failed'}, {outcome.detail} ({took:.2f}s)"
    if output.strip():
        body = output[-OUTPUT_LIMIT:].decode("utf-8", "replace").rstrip("\n")
        text += "\n" + "\n".join(f"  | {line}" for line in body.splitlines())
    events.log_line(home, text)
    return outcome


def _run(argv: list[str], env: dict[str, str], timeout: float) -> tuple[Outcome, bytes]:
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        return Outcome(False, f"cannot run {argv[0]!r}: {e.strerror or e}"), b""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return Outcome(False, f"timed out after {timeout:g}s, killed"), out
    return Outcome(proc.returncode == 0, f"exit {proc.returncode}"), out


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


def test(home: Path, store: Store, event_id: int) -> list[tuple[Hook, Outcome]]:
    """`spex hooks test`: run the hooks that match one event, now, unclaimed."""
    from spexsup.errors import Refused

    row = store.db.execute("SELECT * FROM events WHERE id = ?", (event_id,)).fetchone()
    if row is None:
        raise Refused(f"no event {event_id}", hint="see spex events")
    hooks = [h for h in load(home) if h.matches(row["kind"], row["session"])]
    if not hooks:
        raise Refused(
            f"no hook matches event {event_id} ({row['kind']})",
            hint="see the [[hook]] tables in config.toml",
        )
    event = events.as_json(row)
    return [(h, run_hook(home, event, h)) for h in hooks]


def _main(argv: list[str]) -> int:
    """The detached runner: `python -m spexsup.hooks HOME EVENT_JSON HOOK_JSON`."""
    home, event, spec = Path(argv[0]), json.loads(argv[1]), json.loads(argv[2])
    hook = Hook(
        spec["key"],
        tuple(spec["on"]),
        tuple(spec["sessions"]),
        tuple(spec["run"]) if spec["run"] else None,
        spec["url"],
        float(spec["timeout"]),
    )
    outcome = run_hook(home, event, hook)
    try:
        from spexsup.store import Store

        store = Store(home)
        with store.tx() as db:
            db.execute(
                "UPDATE hook_runs SET outcome = ? WHERE event = ? AND hook = ?",
                (outcome.detail, event["id"], hook.key),
            )
    except Exception as e:
        events.log_line(home, f"event {event['id']} hook {hook.key}: outcome not recorded: {e}")
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
