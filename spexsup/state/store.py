"""The SQLite state: WAL, a busy timeout, every change in `BEGIN IMMEDIATE`.

Schema changes are numbered migrations keyed on `PRAGMA user_version`, applied
in order inside one immediate transaction, so two processes opening a new home
at once cannot both migrate it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from spexsup.adapters.group import held
from spexsup.errors import Failed
from spexsup.paths import ensure_private_dir
from spexsup.state.storelock import locked_message, writer

BUSY_TIMEOUT_MS = 30_000


class StateLocked(Failed):
    """Another process held the state database's write lock past our wait."""


# Usage per model per attempt of a turn (issue 26), written by
# `ledger.record_usage` with the turn's end. Tokens are Anthropic's convention
# (input without the cache); NULL tokens: the attempt's spend is unknown.
# `cost` is what the CLI reported (USD), NULL when none (estimates are made
# at read time from `[pricing]`). `exact` 0: the counts may be short of what
# the attempt used. `running`: codex's conversation running total (JSON
# [input, output, cache_read, cache_write]), from which the next turn of that
# `conversation` takes its own share. `turn_first` is 1 on a turn's first
# row, `model_first` on its first row of each model: sums count turns by
# them. Rows outlive `spex rm` (cost history); retention prunes them by age.
# `usage_days` sums them per local day and (session, harness, model, wave,
# cost reported?, tokens known?, exact), '' for a NULL, in the same
# transaction (`ledger.record_usage`): `spex cost` reads it, not 100 000 rows.
USAGE_MIGRATION = """
    CREATE TABLE usage (
        id INTEGER PRIMARY KEY,
        turn TEXT NOT NULL,
        attempt INTEGER NOT NULL DEFAULT 1,
        session TEXT NOT NULL,
        harness TEXT,
        wave TEXT,
        model TEXT,
        cause TEXT,
        input INTEGER,
        output INTEGER,
        cache_read INTEGER,
        cache_write INTEGER,
        cost REAL,
        exact INTEGER NOT NULL DEFAULT 0,
        conversation TEXT,
        running TEXT,
        turn_first INTEGER NOT NULL DEFAULT 0,
        model_first INTEGER NOT NULL DEFAULT 0,
        at REAL NOT NULL
    );
    CREATE INDEX usage_by_turn ON usage (turn, attempt);
    CREATE INDEX usage_by_session ON usage (session, at);
    CREATE INDEX usage_by_at ON usage (at);
    CREATE INDEX usage_by_wave ON usage (wave) WHERE wave IS NOT NULL;
    CREATE INDEX usage_by_conversation ON usage (conversation, id) WHERE running IS NOT NULL;
    CREATE TABLE usage_days (
        day TEXT NOT NULL,
        session TEXT NOT NULL,
        harness TEXT NOT NULL,
        model TEXT NOT NULL,
        wave TEXT NOT NULL,
        priced INTEGER NOT NULL,
        known INTEGER NOT NULL,
        exact INTEGER NOT NULL,
        rows INTEGER NOT NULL,
        turns INTEGER NOT NULL,
        model_turns INTEGER NOT NULL,
        input INTEGER NOT NULL,
        output INTEGER NOT NULL,
        cache_read INTEGER NOT NULL,
        cache_write INTEGER NOT NULL,
        cost REAL NOT NULL,
        PRIMARY KEY (day, session, harness, model, wave, priced, known, exact)
    ) WITHOUT ROWID;
"""

# Ended waves whose on-complete was claimed, never started (turn.reconcile,
# wavedoc.resume ask): one text for migration 26's partial index and its
# queries, as SQLite uses it only for a WHERE holding its terms as written.
WAVE_HOOK_UNSTARTED = (
    "ended_at IS NOT NULL"
    " AND json_extract(doc, '$.on_complete.claimed_at') IS NOT NULL"
    " AND json_type(doc, '$.on_complete.started_at') = 'null'"
)

MIGRATIONS: tuple[str, ...] = (
    # 1: sessions, turns, tickets.
    """
    CREATE TABLE sessions (
        name TEXT PRIMARY KEY,
        harness TEXT NOT NULL,
        command TEXT,
        cwd TEXT NOT NULL,
        env TEXT NOT NULL DEFAULT '{}',
        window REAL,
        state TEXT NOT NULL DEFAULT 'idle',
        harness_session_id TEXT,
        current_turn TEXT,
        created_at REAL NOT NULL
    );
    CREATE TABLE turns (
        id TEXT PRIMARY KEY,
        session TEXT NOT NULL,
        state TEXT NOT NULL,
        verdict TEXT,
        rc INTEGER,
        pid INTEGER,
        error TEXT,
        attempts INTEGER NOT NULL DEFAULT 1,
        resumed TEXT,
        launcher_pid INTEGER,
        launcher_token TEXT,
        started_at REAL NOT NULL,
        ended_at REAL
    );
    CREATE INDEX turns_by_session ON turns (session, started_at);
    CREATE TABLE tickets (
        id INTEGER PRIMARY KEY,
        session TEXT NOT NULL,
        op TEXT NOT NULL,
        pid INTEGER NOT NULL,
        start_token TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    """,
    # 2: fan-out waves; the document is the record, mirrored here for listing.
    """
    CREATE TABLE waves (
        id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        ended_at REAL,
        doc TEXT NOT NULL
    );
    """,
    # 3: the maintenance lease (one row) and its capability plans.
    """
    CREATE TABLE lease (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        state TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        token_hash TEXT,
        holder_pid INTEGER,
        holder_token TEXT,
        deadline REAL,
        scope TEXT,
        all_sessions INTEGER NOT NULL DEFAULT 0,
        acquired_at REAL,
        revoked INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO lease (id, state, epoch) VALUES (1, 'open', 0);
    CREATE TABLE capabilities (
        epoch INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        op TEXT NOT NULL,
        session TEXT NOT NULL,
        force INTEGER NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (epoch, idx)
    );
    """,
    # 4: launch fencing and incarnations. A session's `launch_fence` grows with
    # every launch attempt and is mirrored on its pane; a turn remembers the
    # fence of its latest attempt. `incarnation` tells a name's successive
    # sessions apart in tmux. `notices` keeps problems for `spex doctor`.
    """
    ALTER TABLE sessions ADD COLUMN incarnation TEXT;
    ALTER TABLE sessions ADD COLUMN launch_fence INTEGER NOT NULL DEFAULT 0;
    UPDATE sessions SET incarnation = lower(hex(randomblob(6))) WHERE incarnation IS NULL;
    ALTER TABLE turns ADD COLUMN fence INTEGER;
    CREATE TABLE notices (
        key TEXT PRIMARY KEY,
        message TEXT NOT NULL,
        at REAL NOT NULL
    );
    """,
    # 5: one tmux server per state home, and the boot each turn ran under. A
    # home that already had sessions keeps the old shared socket, where its
    # sessions' panes live.
    """
    CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO settings (key, value)
        SELECT 'tmux_socket', 'spexsup' WHERE EXISTS (SELECT 1 FROM sessions);
    ALTER TABLE turns ADD COLUMN boot_id TEXT;
    """,
    # 6: the maintenance command's identity (its session/group leader), so that
    # recovery can kill it before releasing; and which turns are wave legs, so
    # a turn's end can settle its wave without a daemon.
    """
    ALTER TABLE lease ADD COLUMN command_pid INTEGER;
    ALTER TABLE lease ADD COLUMN command_token TEXT;
    CREATE TABLE wave_turns (
        turn TEXT PRIMARY KEY,
        wave TEXT NOT NULL
    );
    """,
    # 7: a worktree session's worktree (JSON: repo, branch, base, base_ref,
    # path, copy, symlink; see spexsup.core.worktree.Worktree); NULL for others.
    """
    ALTER TABLE sessions ADD COLUMN worktree TEXT;
    """,
    # 8: honest outcomes (issue 14). Per session: a turn time limit (seconds),
    # strict mode (any outcome flag fails the turn), what a usage limit does
    # ('wait[:DURATION]'). Per turn: the outcome flags (a JSON list), its time
    # limit and strictness, the named cause of a failed end (`timed-out`,
    # `strict`, `agent-error`, `usage-limit`, `not-found`, `no-login-shell`),
    # a usage limit's reset time, and while the wrapper waits for it in the
    # pane (`--on-limit wait`), when it will run the harness again.
    """
    ALTER TABLE sessions ADD COLUMN timeout REAL;
    ALTER TABLE sessions ADD COLUMN strict INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN on_limit TEXT;
    ALTER TABLE turns ADD COLUMN flags TEXT;
    ALTER TABLE turns ADD COLUMN timeout REAL;
    ALTER TABLE turns ADD COLUMN strict INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE turns ADD COLUMN cause TEXT;
    ALTER TABLE turns ADD COLUMN limit_reset REAL;
    ALTER TABLE turns ADD COLUMN waiting_until REAL;
    """,
    # 9: the event log (see `events`) and the hook claims: one row per
    # (event, hook) that some process took on to run, so each runs once; and
    # a turn's `launched` event, recorded once by whoever commits it first.
    """
    ALTER TABLE turns ADD COLUMN launched_event INTEGER;
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        session TEXT,
        turn TEXT,
        rc INTEGER,
        cause TEXT,
        payload TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX events_by_session ON events (session, id);
    CREATE TABLE hook_runs (
        event INTEGER NOT NULL,
        hook TEXT NOT NULL,
        claimed_at REAL NOT NULL,
        pid INTEGER,
        outcome TEXT,
        PRIMARY KEY (event, hook)
    );
    """,
    # 10: a harness binary found by `spex new` only on the caller's PATH, not
    # on the login PATH: its absolute path, which the session's turns run.
    """
    ALTER TABLE sessions ADD COLUMN binary TEXT;
    """,
    # 11: a hook claim is a queue entry (see `hooks`): the claimer's start
    # token beside its pid, and when a runner (pid, token) took it on. Claims
    # made before this have been handed to a runner already: never again.
    """
    ALTER TABLE hook_runs ADD COLUMN token TEXT;
    ALTER TABLE hook_runs ADD COLUMN started_at REAL;
    ALTER TABLE hook_runs ADD COLUMN runner_pid INTEGER;
    ALTER TABLE hook_runs ADD COLUMN runner_token TEXT;
    UPDATE hook_runs SET started_at = claimed_at;
    CREATE INDEX hook_runs_queued ON hook_runs (claimed_at) WHERE started_at IS NULL;
    """,
    # 12: the pids that survived SIGKILL when a turn's time limit ended it
    # (a JSON list; see `spexsup.pane.deadline`), NULL when none did.
    """
    ALTER TABLE turns ADD COLUMN survivors TEXT;
    """,
    # 13: one word for a non-complete end (`error` became `failed`), and an
    # event's `cause` is what the end was (`rate-limited`, …; it was in the
    # payload's `reason`), its message `error` (it was in `cause`). A wave's
    # end state moves from `cause` into the payload.
    """
    UPDATE turns SET state = 'failed' WHERE state = 'error';
    UPDATE sessions SET state = 'failed' WHERE state = 'error';
    ALTER TABLE events RENAME COLUMN cause TO error;
    ALTER TABLE events ADD COLUMN cause TEXT;
    UPDATE events SET cause = json_extract(payload, '$.reason')
        WHERE json_valid(payload) AND json_type(payload, '$.reason') = 'text';
    UPDATE events SET payload = json_set(payload, '$.state', error), error = NULL
        WHERE kind = 'wave-ended' AND json_valid(payload);
    """,
    # 14: the salvage branches spex made (see `spexsup.core.salvage`), so that
    # they can be found once no session in their repository is left.
    """
    CREATE TABLE salvages (
        repo TEXT NOT NULL,
        branch TEXT NOT NULL,
        commit_sha TEXT NOT NULL,
        session TEXT,
        created_at REAL NOT NULL,
        PRIMARY KEY (repo, branch)
    );
    """,
    # 15: queued prompts (see `spexsup.turn.queue`): one row per prompt
    # waiting for its session, in `seq` order; its bytes in queue/ID.prompt.
    """
    CREATE TABLE queue (
        id TEXT PRIMARY KEY,
        session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        created_at REAL NOT NULL,
        options TEXT NOT NULL DEFAULT '{}',
        first_line TEXT,
        after_turn TEXT
    );
    CREATE INDEX queue_by_session ON queue (session, seq);
    """,
    # 16: idempotent wakes (see `spexsup.turn.keys`): a `--key` names the turn
    # (or the queue entry, then the turn it became) its first wake started.
    """
    CREATE TABLE wake_keys (
        key TEXT PRIMARY KEY,
        session TEXT NOT NULL,
        turn TEXT,
        queued TEXT,
        created_at REAL NOT NULL
    );
    CREATE INDEX wake_keys_by_turn ON wake_keys (turn);
    CREATE INDEX wake_keys_by_queued ON wake_keys (queued);
    CREATE INDEX wake_keys_by_session ON wake_keys (session);
    """,
    # 17: a running-turn limit (`max_running`, `fanout --max-running`) counts
    # the active turns at every admission: an index of only those; a
    # session's own `--queue` default.
    """
    CREATE INDEX turns_active ON turns (state) WHERE state IN ('starting', 'running');
    CREATE INDEX wave_turns_by_wave ON wave_turns (wave);
    ALTER TABLE sessions ADD COLUMN queue INTEGER NOT NULL DEFAULT 0;
    """,
    # 18: models (see `spexsup.pane.fallback`): a session's model and models
    # to fall back to (a JSON list); the model a turn's attempt runs, and the
    # attempts it fell back from (a JSON list of {model, cause, error, …}).
    """
    ALTER TABLE sessions ADD COLUMN model TEXT;
    ALTER TABLE sessions ADD COLUMN fallback TEXT;
    ALTER TABLE turns ADD COLUMN model TEXT;
    ALTER TABLE turns ADD COLUMN fallbacks TEXT;
    """,
    # 19: schedules (see
    # `spexsup.turn.scheduled`): when a session is woken by the clock, the
    # engine that keeps the clock, and its last firing. The prompt's bytes
    # in schedules/ID.prompt; `env` the variables a firing restores.
    """
    CREATE TABLE schedules (
        id TEXT PRIMARY KEY,
        session TEXT NOT NULL,
        cron TEXT NOT NULL,
        every REAL,
        overlap TEXT NOT NULL,
        options TEXT NOT NULL DEFAULT '{}',
        env TEXT NOT NULL DEFAULT '{}',
        engine TEXT NOT NULL,
        first_line TEXT,
        created_at REAL NOT NULL,
        last_fired_at REAL,
        last_slot TEXT,
        last_verdict TEXT,
        last_turn TEXT,
        last_queued TEXT,
        last_error TEXT,
        last_repeat INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX schedules_by_session ON schedules (session);
    """,
    # 20: usage and cost (issue 26, see `spexsup.usage`).
    USAGE_MIGRATION,
    # 21: verification (issue 27, DESIGN §16). A session's own verify argv
    # (JSON; NULL: the repository's, else the harness's; []: none) and its
    # time limit. One row per run of a turn's check: attempt 1 by the turn's
    # wrapper, later ones by `spex verify`; `state` is one of
    # states.VERIFICATIONS, `tail` the last lines of its verify.log.
    """
    ALTER TABLE sessions ADD COLUMN verify TEXT;
    ALTER TABLE sessions ADD COLUMN verify_timeout REAL;
    CREATE TABLE verifications (
        turn TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        session TEXT NOT NULL,
        command TEXT NOT NULL,
        state TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL,
        rc INTEGER,
        tail TEXT,
        PRIMARY KEY (turn, attempt)
    ) WITHOUT ROWID;
    CREATE INDEX verifications_by_session ON verifications (session);
    """,
    # 22: sandboxed sessions (DESIGN §19): a session's sandbox policy (JSON,
    # `spexsup.adapters.sandbox.Policy`; NULL: the harness's or config.toml's).
    """
    ALTER TABLE sessions ADD COLUMN sandbox TEXT;
    """,
    # 23: a turn's run time (seconds) as its wrapper measured it, from its
    # start to its end (`ran:` in its final marker); NULL for a turn that
    # never ran (or whose wrapper died unheard). Older ended turns that
    # launched keep what spex showed for them then, end minus admission.
    """
    ALTER TABLE turns ADD COLUMN ran REAL;
    UPDATE turns SET ran = max(0.0, ended_at - started_at)
        WHERE ended_at IS NOT NULL AND launched_event IS NOT NULL;
    """,
    # 24: a key remembers what its first wake asked (`keys.fingerprint`: the
    # prompt and the turn's options), so a reuse for another prompt is
    # refused, not answered as a repeat. NULL (older keys): not compared.
    """
    ALTER TABLE wake_keys ADD COLUMN fingerprint TEXT;
    """,
    # 25: a session's newest turn (`ls`, `show`) is one entry of this index,
    # where (session, started_at) left the tie on id to a sort of its history.
    """
    DROP INDEX turns_by_session;
    CREATE INDEX turns_by_session ON turns (session, started_at, id);
    """,
    # 26: every reconcile parsed each ended wave's document to find none of
    # these (13 ms of `spex ls` with 500 waves); ended waves' writes pay.
    f"""
    CREATE INDEX waves_hook_unstarted ON waves (id) WHERE {WAVE_HOOK_UNSTARTED};
    """,
)


def session_names(db: sqlite3.Connection) -> list[str]:
    """Every session's name (for `UnknownSession` to name the one meant)."""
    return [row[0] for row in db.execute("SELECT name FROM sessions ORDER BY name")]


def damaged_hint(home: Path) -> str:
    """What to do about a state.db that SQLite cannot read (the store and
    the doctor say it alike)."""
    return (
        f"with no spex running, in {home}: restore state.db from a backup, or rebuild what"
        " SQLite can still read (sqlite3's .recover or .dump) into a new state.db, the old"
        " state.db-wal and state.db-shm moved aside"
    )


def _empty(path: Path) -> bool:
    """No database file, or one of zero bytes (a new home, or a lost state)."""
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True
    except OSError:  # SQLite says what it is
        return False


def damaged(e: BaseException) -> bool:
    """Whether SQLite found the file not a database or its pages malformed
    (not locked, busy, read-only or out of room: those are the moment's)."""
    name = getattr(e, "sqlite_errorname", "")
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))


def missing_sessions(home: Path) -> tuple[list[str], str]:
    """The sessions a home has beyond its database (see `Store`): the
    directories of `turns/` and the tmux sessions of its server tagged by
    this home, by name; and that server as tmux's flags spell it."""
    from spexsup.adapters.home import TmuxHome, home_digest
    from spexsup.errors import SpexError

    names: set[str] = set()
    try:
        with os.scandir(home / "turns") as found:
            names.update(e.name for e in found if e.is_dir(follow_symlinks=False))
    except OSError:
        pass
    tmux = TmuxHome(home=home)
    mine = f"{home_digest(home)}-"
    try:
        census = tmux.census()
    except SpexError:  # tmux not installed: it holds nothing of ours
        return sorted(names), tmux.where()
    names.update(p.session_name for p in census.panes.values() if p.owner.startswith(mine))
    return sorted(names), tmux.where()


class CommitListener(Protocol):
    """What a store tells about its transactions (a module may be one).

    The store knows nothing of what listens: `spexsup.core.spex.open_store`
    registers the event log and the hooks. Each method runs in the process
    that holds the transaction, in the order the listeners were given, and
    must not raise: the transition commits (or not) whatever happens there.
    """

    def migrated(self, store: Store) -> None:
        """Inside the migration's transaction, after the schema changed."""

    def before_commit(self, store: Store) -> None:
        """Inside the write lock, after the body of `tx()`, before its COMMIT:
        what is written here commits with the transaction or not at all."""

    def after_commit(self, store: Store) -> None:
        """After the COMMIT, outside the write lock."""

    def discard(self, db: sqlite3.Connection) -> None:
        """The transaction rolled back (or its COMMIT failed): forget it."""


def _connect(path: Path) -> sqlite3.Connection:
    """A connection as every store has it: no implicit transactions (`tx`
    opens its own), rows by column name, SQLite's busy handler waiting
    BUSY_TIMEOUT_MS. (`synchronous = NORMAL` follows once the database is
    known to be in WAL mode; DESIGN "Durability".)"""
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    db.row_factory = sqlite3.Row
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return db


class Store:
    """One connection to `<home>/state.db`; use `tx()` for every change.

    `listeners` hear of every transaction (see `CommitListener`); a store
    opened without them changes state as well, but announces nothing: use
    `spexsup.core.spex.open_store` unless that is what you want.
    """

    def __init__(self, home: Path, listeners: Sequence[CommitListener] = ()) -> None:
        self.home = ensure_private_dir(home)
        self.path = home / "state.db"
        self.listeners = tuple(listeners)
        self.writer = writer(self.path)
        # One stat, before SQLite opens the file: on an empty database it
        # deletes the -wal file beside it, which may hold the lost state.
        empty = _empty(self.path)
        if empty:
            self._refuse_a_lost_state("")
        try:
            self.db = _connect(self.path)
            self.path.chmod(0o600)
            version = self._version()
            if version == 0 and not empty:
                self._refuse_a_lost_state("it holds no schema")
            self._use_wal()
            self.db.execute("PRAGMA synchronous = NORMAL")
            self._migrate(version)
        except (sqlite3.DatabaseError, OSError) as e:
            why = str(e.strerror or e) if isinstance(e, OSError) else str(e)
            if damaged(e):
                self._refuse_a_lost_state(why)
            raise Failed(
                f"cannot open state database {self.path}: {why}",
                hint=damaged_hint(self.home)
                if damaged(e)
                else "it must be a writable file of yours; see SPEXSUP_HOME / --home",
            ) from None

    def sibling(self) -> Store:
        """Another connection to this database, for another thread (a
        connection belongs to its thread): the checks this one's opening
        made (the home, the file, its schema, WAL) hold for it too, so it
        only connects (a wave opened one per leg, each re-checking all)."""
        other = object.__new__(Store)
        other.home, other.path, other.listeners = self.home, self.path, self.listeners
        other.writer = self.writer
        other.db = _connect(self.path)
        other.db.execute("PRAGMA synchronous = NORMAL")  # in WAL mode already
        return other

    def _version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _refuse_a_lost_state(self, why: str) -> None:
        """Failed, changing nothing, when the home has sessions (a directory
        in turns/, a tmux session tagged by this home) while its database
        holds no state (gone, empty, without a schema, unreadable: `why`):
        it would otherwise become a fresh home whose `spex new a` takes over
        the old pane and turns/a/. Asked only of such a database, never on
        the way of a working home."""
        names, where = missing_sessions(self.home)
        if not names or self._schema_came():
            return
        if not why:
            why = "it is gone" if not self.path.exists() else "it is empty"
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        raise Failed(
            f"the state of {len(names)} session{'s' * (len(names) != 1)} is missing:"
            f" {shown} ({self.path}: {why})",
            hint=f"restore {self.path.name} from a backup; to start afresh instead, kill their"
            f" tmux sessions (tmux {where} kill-session -t =NAME) and move {self.home}/turns"
            " aside; nothing was changed",
        )

    def _schema_came(self) -> bool:
        """Whether another process made this new home's schema meanwhile (it
        migrates before it makes a session): then those sessions are its."""
        if _empty(self.path):
            return False
        try:
            return not hasattr(self, "db") or self._version() != 0
        except sqlite3.DatabaseError:
            return False

    def _use_wal(self) -> None:
        """Switch a new database to WAL. SQLite does not wait on its busy
        handler for this switch: commands racing on a fresh home (three
        `spex new` at once) got `database is locked` at once. Tried again,
        a little later each time, within the busy timeout."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause = 0.005
        while True:
            try:
                if self.db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    self.db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _migrate(self, version: int) -> None:
        if version == len(MIGRATIONS):
            return
        with self.tx():
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version > len(MIGRATIONS):
                raise Failed(
                    f"state database {self.path} has schema {version}, newer than this spex",
                    hint="upgrade spexsup",
                )
            for number in range(version, len(MIGRATIONS)):
                for statement in MIGRATIONS[number].split(";"):
                    if statement.strip():
                        self.db.execute(statement)
            self.db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
            for listener in self.listeners:
                listener.migrated(self)

    @contextmanager
    def tx(self, wait: float | None = None) -> Iterator[sqlite3.Connection]:
        """An immediate (write-locked) transaction: commit on success, else roll back.

        Waits up to `wait` seconds (default BUSY_TIMEOUT_MS) for the write
        lock (this process's `writer`, then SQLite's: threads of one process,
        a wave's legs, take turns as the last commits, where SQLite's busy
        handler sleeps up to 100 ms between tries), then raises StateLocked
        naming its holder. The listeners' `before_commit` runs inside it,
        before the COMMIT, `after_commit` after it; a rollback calls `discard`.
        """
        waited = BUSY_TIMEOUT_MS / 1000 if wait is None else wait
        with held(self.writer, waited, lambda: StateLocked(locked_message(self.path, waited))):
            self._begin(wait)
            try:
                yield self.db
                for listener in self.listeners:
                    listener.before_commit(self)
            except BaseException:
                self._discard()
                self.db.execute("ROLLBACK")
                raise
            try:
                self.db.execute("COMMIT")
            except BaseException:
                self._discard()
                raise
        for listener in self.listeners:
            listener.after_commit(self)

    def _discard(self) -> None:
        for listener in self.listeners:
            listener.discard(self.db)

    def _begin(self, wait: float | None) -> None:
        if wait is not None:
            self.db.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
            waited = BUSY_TIMEOUT_MS / 1000 if wait is None else wait
            raise StateLocked(
                locked_message(self.path, waited),
                hint="that process holds a write transaction open; retry once it ends",
            ) from None
        finally:
            if wait is not None:
                self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    def setting(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        self.db.close()
