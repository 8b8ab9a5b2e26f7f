"""Sessions: named and durable (a tmux pane, a cwd, a harness).

The record in SQLite is the truth; the session's pane (its tmux session,
window and pane on the private server) is recreated on demand when it has
vanished (killed, server gone, reboot)."""

from __future__ import annotations

import fnmatch
import json
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import ids, lazyre
from spexsup.adapters.home import Census, Launch, after_startup, owner_tag, write_shell_env
from spexsup.adapters.procs import Liveness, reap, turn_processes
from spexsup.core.spex import Spex
from spexsup.core.tickets import ticket
from spexsup.errors import Failed, Invalid, Refused, UnknownSession
from spexsup.pane import marker, turndir
from spexsup.pane.marker import Marker, Stage
from spexsup.paths import ensure_private_dir, remove_tree, wrapper_path
from spexsup.record import Record
from spexsup.state import events
from spexsup.state.store import session_names

# The ledger and the sandbox module are imported where a session is made or
# has a sandbox: `spex ls` and `show` read sessions without either (issue 40).

if TYPE_CHECKING:
    from spexsup.adapters import harness as harnesses
    from spexsup.adapters.sandbox import Policy
    from spexsup.core.worktree import Plan, Request, Setup, Worktree


ENV_KEY_RE = lazyre.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Session(Record):
    name: str
    harness: str
    command: tuple[str, ...] | None
    cwd: str
    env: Mapping[str, str]
    window: float | None
    state: str
    harness_session_id: str | None
    current_turn: str | None
    created_at: float
    incarnation: str
    launch_fence: int
    worktree: Worktree | None = None
    timeout: float | None = None
    strict: bool = False
    on_limit: str | None = None
    # A named harness's own arguments (`spex new NAME --harness H -- ARGS…`).
    harness_args: tuple[str, ...] = ()
    # The harness binary's absolute path, when `spex new` found it only on
    # the caller's PATH (see `check_binary`): turns run it instead of the name.
    binary: str | None = None
    # `spex wake` queues its prompt when the session is busy (as --queue).
    queue: bool = False
    # The model its turns run (None: the harness's), and the models a turn
    # falls back to, in order (None: the harness's list).
    model: str | None = None
    fallback: tuple[str, ...] | None = None
    # The check of its turns' work (`--verify`; None: the repository's, else
    # the harness's; (): none), and its time limit (None: theirs, else 10m).
    verify: tuple[str, ...] | None = None
    verify_timeout: float | None = None
    # Its sandbox (DESIGN §19); None: the harness's, else config.toml's.
    sandbox: Policy | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Session:
        # One column, `command`, holds the argv after `--`: the command harness's
        # command, or a named harness's own arguments (no migration needed).
        after = tuple(json.loads(row["command"])) if row["command"] else ()
        named = row["harness"] != "command"
        return cls(
            name=row["name"],
            harness=row["harness"],
            command=None if named or not after else after,
            harness_args=after if named else (),
            cwd=row["cwd"],
            env=json.loads(row["env"]),
            window=row["window"],
            state=row["state"],
            harness_session_id=row["harness_session_id"],
            current_turn=row["current_turn"],
            created_at=row["created_at"],
            incarnation=row["incarnation"],
            launch_fence=row["launch_fence"],
            worktree=_worktree(row["worktree"]),
            timeout=row["timeout"],
            strict=bool(row["strict"]),
            on_limit=row["on_limit"],
            binary=row["binary"],
            queue=bool(row["queue"]),
            model=row["model"],
            fallback=tuple(json.loads(row["fallback"])) if row["fallback"] else None,
            verify=tuple(json.loads(row["verify"])) if row["verify"] is not None else None,
            verify_timeout=row["verify_timeout"],
            sandbox=_policy(row["sandbox"]),
        )

    def adapter(self, home: Path) -> harnesses.Harness:
        # (Here: `spex ls` reads sessions without loading the harness registry.)
        from spexsup.adapters import registry

        found = registry.resolve(self.harness, self.command, home, self.harness_args)
        return found.pinned(self.binary) if self.binary else found

    def owner(self, home: Path) -> str:
        """The tag on this session's pane (see `home.owner_tag`)."""
        return owner_tag(home, self.incarnation)


def _policy(text: str | None) -> Policy | None:
    # Imported only for a session with a sandbox of its own: `spex ls` of
    # the others never loads the sandbox module (issue 40).
    if not text:
        return None
    from spexsup.adapters.sandbox import Policy

    return Policy.loads(text)


def _worktree(text: str | None) -> Worktree | None:
    # Imported only for worktree sessions: `spex ls` of others never loads git code.
    if not text:
        return None
    from spexsup.core.worktree import Worktree  # dataclasses: only worktree sessions pay

    return Worktree.from_json(text)


class Binary(Record):
    """Where a harness binary resolves for a session's turns."""

    path: str
    # Not where turns look (the login PATH, or the session's --env PATH) but
    # on the caller's own PATH: the session's turns run this path.
    pinned: bool = False
    # Where turns look, for messages: "your login PATH".
    where: str = "your login PATH"


def check_binary(home: Path, binary: str, env: Mapping[str, str] | None = None) -> Binary:
    """Where `binary` resolves as a turn will resolve it: on the session's
    `--env PATH` when it sets one (it wins), else on the login shell's PATH,
    else (config.toml's login_shell = false) on ours. Not there but on the
    caller's own PATH: that path, `pinned`. Refused naming it when neither
    has it, or when no login shell answers (see `login.resolve`)."""
    import shutil

    from spexsup import config
    from spexsup.adapters import login

    settings = config.load(home)
    if env is not None and "PATH" in env:
        path, where = env["PATH"], "the session's --env PATH"
    elif settings.login_shell:
        path, where = login.resolve(home, settings.login_timeout).path, "your login PATH"
    else:
        path, where = os.environ.get("PATH", os.defpath), "your PATH"
    found = shutil.which(binary, path=path)
    if found is not None:
        return Binary(str(Path(found).absolute()), where=where)
    mine = shutil.which(binary)
    if mine is not None:
        return Binary(str(Path(mine).absolute()), pinned=True, where=where)
    raise Refused(f"{binary} is not installed or not on {where}", hint="spex doctor; or --no-check")


def pinned_note(session: Session) -> str | None:
    """What `spex new` says when the session's turns run a pinned binary."""
    if session.binary is None:
        return None
    from spexsup.adapters import login

    if "PATH" in session.env:
        where, fix = "the session's --env PATH", "add its directory to --env PATH to use that PATH"
    else:
        where = "your login PATH"
        fix = f"add its directory to PATH in {login.rc_file()} to use the login PATH"
    name = Path(session.binary).name
    return f"{name} is not on {where}; turns will run {session.binary} ({fix} instead)"


def check_command(argv0: str, cwd: Path) -> None:
    """A command given as a path (`-- ./agent.sh`, relative to the session's
    cwd) must be an executable file; refused naming it otherwise. A bare
    name is looked up on the turn's PATH when it runs."""
    if "/" not in argv0:
        return
    target = cwd / argv0
    shown = argv0 if argv0.startswith("/") else f"{argv0} (in {cwd})"
    if not target.exists():
        raise Refused(f"{shown} does not exist", hint="the command's path, or --no-check")
    if target.is_dir() or not os.access(target, os.X_OK):
        what = "a directory" if target.is_dir() else "not executable"
        raise Refused(f"{shown} is {what}", hint="chmod +x it, or --no-check")


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not ENV_KEY_RE.fullmatch(key) or "\0" in value:
            raise Invalid(f"invalid --env {pair!r}", hint="use KEY=VALUE")
        check_env_key(key, f"--env {pair!r}")
        env[key] = value
    return env


def check_env_key(key: str, shown: str) -> None:
    """A name a session's env may set or unset; `shown` is what the message quotes."""
    if not ENV_KEY_RE.fullmatch(key):
        raise Invalid(f"invalid {shown}", hint="a name of letters, digits and _")
    if key.startswith("SPEXSUP_"):
        # The wrapper and the reaper rely on these naming the turn.
        raise Invalid(f"invalid {shown}: SPEXSUP_* names are reserved for spex")


def validate_window(window: float | None) -> float | None:
    if window is not None and not (0.05 <= window <= 3600):
        raise Invalid(f"invalid window {window}", hint="between 0.05 and 3600 seconds")
    return window


def no_harness(home: Path, *, command: bool = True) -> Invalid:
    """The refusal of a session that names no harness: never a silent default,
    a session must say what it runs (`command`: `-- CMD…` is a way out)."""
    from spexsup.adapters import registry

    names = ", ".join(registry.load_registry(home).names())
    return Invalid(
        "no harness given and no default_harness in config.toml",
        hint=f"--harness one of: {names}" + ("; or -- CMD ARGS…" if command else ""),
    )


def check_harness(
    home: Path,
    harness: str | None,
    command: Sequence[str] | None,
    harness_args: Sequence[str],
    env: Mapping[str, str],
    *,
    check: bool,
) -> tuple[str, str | None]:
    """What a session runs, checked as `spex new` and `spex edit` check it:
    the harness's name (`command` with a command and no harness) and, with
    `check`, the binary pinned when turns would not find it on their PATH
    (`check_binary`; None when they do). Invalid for a harness that is not
    known or does not fit `command` and `harness_args`."""
    if command and harness is None:
        harness = "command"
    if harness is None:
        raise no_harness(home)
    from spexsup.adapters import registry

    if harness != "command":
        adapter = registry.load_registry(home).get(harness)
    if harness == "command" and not command:
        raise Invalid("the command harness needs a command", hint="spex new NAME -- CMD ARGS…")
    if command and harness != "command":
        raise Invalid(f"a command after -- needs --harness command, not {harness!r}")
    if harness_args and harness == "command":
        raise Invalid("the command harness takes its arguments in its command")
    for arg in [*(command or ()), *harness_args]:
        if not isinstance(arg, str) or "\0" in arg:
            raise Invalid(f"invalid argument for {harness}: {arg!r}", hint="strings with no NUL")
    if not check or harness == "command" or not adapter.binary:
        return harness, None
    found = check_binary(home, adapter.binary, env)
    return harness, found.path if found.pinned else None


def working_directory(
    cwd: str | None, command: Sequence[str] | None, *, check: bool, made: bool = True
) -> Path:
    """A session's cwd, absolute (default: here): an existing directory
    unless it is not `made` yet (a worktree to come), where a command given
    as a path must be an executable (with `check`; of a directory not made,
    only an absolute path can be checked)."""
    try:
        directory = Path(cwd or ".").expanduser().resolve()
    except FileNotFoundError:
        raise Invalid(
            "the current directory no longer exists", hint="cd somewhere, or pass --cwd DIR"
        ) from None
    if made and not directory.is_dir():
        raise Invalid(f"no such directory {str(directory)!r}", hint="--cwd DIR")
    if check and command and (made or command[0].startswith("/")):
        check_command(command[0], directory)
    return directory


class Spec(Record):
    """What a new session is asked to be, as `spex new` says it (None: not
    said; the harness, config.toml or a built-in default decide).

    `command` is the command harness's argv; `harness_args` are a named
    harness's own arguments, added to both of its argv forms. `worktree`:
    made in a new worktree (its cwd). The rest are its turns' own rules,
    kept as the session's columns."""

    harness: str | None = None
    command: Sequence[str] | None = None
    harness_args: Sequence[str] = ()
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    window: float | None = None
    worktree: Request | None = None
    timeout: float | None = None
    strict: bool = False
    on_limit: str | None = None
    queue: bool = False
    model: str | None = None
    fallback: Sequence[str] | None = None
    verify: Sequence[str] | None = None
    verify_timeout: float | None = None
    sandbox: Policy | None = None


def create(
    spex: Spex,
    name: str,
    spec: Spec,
    *,
    check: bool = True,
    confirm: Callable[[Setup], bool] | None = None,
) -> Session:
    """Record the session `name` as `spec` asks, then build its pane; undo
    the record if tmux fails.

    Two racing creates of one name: the primary key lets exactly one win.
    With a worktree, the session is recorded `creating` (no wake admitted)
    and, holding its ticket, gets its branch, worktree (its cwd), pane
    and post_create; any failure undoes all of them (see `worktree.add`).
    A post_create whose file is not trusted is refused before anything is
    made, unless `confirm` (the CLI's prompt on a terminal) says yes.
    `check`: the harness binary must be found (`check_harness`).
    """
    from spexsup.state import ledger

    ids.validate_name(name)
    validate_window(spec.window)
    command, harness_args = spec.command, spec.harness_args
    env = parse_env([f"{k}={v}" for k, v in (spec.env or {}).items()])
    harness, pinned = check_harness(
        spex.home, spec.harness, command, harness_args, env, check=check
    )
    from spexsup.adapters import registry

    if (spec.model or spec.fallback) and not registry.resolve(
        harness, command, spex.home, tuple(harness_args)
    ).takes_model():
        raise Invalid(
            f"harness {harness} has no way to pass a model",
            hint="give the harness model_flag or {model} in harnesses.toml",
        )
    after = list(command) if command else list(harness_args)
    plan, cwd = None, spec.cwd
    if spec.worktree is not None:
        from spexsup.core import worktree as worktrees
        from spexsup.core.trust import require_trust

        if cwd is not None:
            raise Invalid("--cwd and --worktree: the worktree is the cwd", hint="--repo DIR")
        if spex.store.db.execute("SELECT 1 FROM sessions WHERE name = ?", (name,)).fetchone():
            raise Refused(f"session {name!r} already exists", hint="see spex ls")
        plan = worktrees.plan(name, spec.worktree)
        require_trust(spex.home, plan.setup, confirm)
        cwd = plan.worktree.path
    directory = working_directory(cwd, command, check=check, made=plan is None)
    incarnation = os.urandom(6).hex()  # secrets' source, without its hmac import
    try:
        with spex.store.tx() as db:
            ledger.insert_session(
                db,
                creating=plan is not None,
                name=name,
                harness=harness,
                command=json.dumps(after) if after else None,
                cwd=str(directory),
                env=json.dumps(env),
                window=spec.window,
                created_at=time.time(),
                incarnation=incarnation,
                worktree=None if plan is None else plan.worktree.to_json(),
                timeout=spec.timeout,
                strict=int(spec.strict),
                on_limit=spec.on_limit,
                binary=pinned,
                queue=int(spec.queue),
                model=spec.model,
                fallback=_json_list(spec.fallback),
                verify=_json_list(spec.verify),
                verify_timeout=spec.verify_timeout,
                sandbox=spec.sandbox.dumps() if spec.sandbox is not None else None,
            )
    except sqlite3.IntegrityError:
        raise Refused(f"session {name!r} already exists", hint="see spex ls") from None
    try:
        session = get(spex, name)
        if plan is None:
            _clear_stale_pane(spex, session)
            spex.tmux.create(
                name, str(directory), session.owner(spex.home), shell_env(spex, session)
            )
        else:
            _create_in_worktree(spex, session, plan)
    except BaseException:
        with spex.store.tx() as db:
            ledger.discard_session(db, name)
        (turndir.of_session(spex.home, name) / PANE_ENV).unlink(missing_ok=True)
        raise
    if plan is None:
        events.emit(spex.store, "created", session=name, harness=harness, cwd=str(directory))
    return get(spex, name) if plan is not None else session


def _json_list(values: Sequence[str] | None) -> str | None:
    return json.dumps(list(values)) if values is not None else None


def _create_in_worktree(spex: Spex, session: Session, plan: Plan) -> None:
    """Holding the session's ticket (a lease or a concurrent rm must not race
    it): the branch and worktree, the pane in it, post_create; then
    `idle`. On failure the pane, the worktree and the branch are undone."""
    from spexsup.core import worktree as worktrees
    from spexsup.state import ledger

    name = session.name
    with ticket(spex, name, "new"):
        made_parent = worktrees.add(plan)
        try:
            _clear_stale_pane(spex, session)
            spex.tmux.create(name, session.cwd, session.owner(spex.home), shell_env(spex, session))
            if plan.setup.post_create:
                post_create(spex, session, plan.setup.post_create)
        except BaseException as e:
            spex.tmux.kill(name, session.owner(spex.home))
            worktrees.discard(plan.worktree, made=True, made_parent=made_parent, cause=e)
            remove_tree(turndir.of_session(spex.home, name))
            raise
        with spex.store.tx() as db:
            ledger.mark_created(db, name, harness=session.harness, cwd=session.cwd, worktree=True)


def _clear_stale_pane(spex: Spex, session: Session) -> None:
    """Kill a pane left by an earlier incarnation of this name in this state home.

    Only a pane tagged with this state home's digest is ours to kill; a
    foreign or untagged one makes `create` refuse instead.
    """
    pane = spex.tmux.pane(session.name)
    ours = session.owner(spex.home)
    home_digest = ours.split("-", 1)[0]
    if pane is not None and pane.owner != ours and pane.owner.startswith(home_digest + "-"):
        spex.tmux.kill(session.name, pane.owner)


def get(spex: Spex, name: str) -> Session:
    ids.validate_name(name)
    row = spex.store.db.execute("SELECT * FROM sessions WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise UnknownSession(name, session_names(spex.store.db))
    return Session.from_row(row)


def ensure_pane(spex: Spex, session: Session) -> bool:
    """Recreate the session's pane if it vanished (True if this call did); the
    record survives in SQLite."""
    owner = session.owner(spex.home)
    return spex.tmux.create(session.name, session.cwd, owner, shell_env(spex, session))


# The session's --env for its pane's shell, in the session's turns dir (the
# file keeps the name it had when the pane was called the session's home).
PANE_ENV = "home.env"


def shell_env(spex: Spex, session: Session) -> Path | None:
    """The file the pane's shell takes the session's env from
    (`turns/NAME/home.env`, 0600), written afresh on every call, so a pane
    recreated after the file was lost still gets it; None when the session
    sets no env. Gone with the session's turns on rm."""
    if not session.env:
        return None
    directory = ensure_private_dir(turndir.of_session(spex.home, session.name), under=spex.home)
    return write_shell_env(directory / PANE_ENV, session.env)


def pane_status(census: Census, session: Session, home: Path) -> str:
    """`ok`, `missing` (spex up recreates it), `dead` (its pane's process has
    exited, e.g. the shell was left with `exit`; spex up respawns it), `foreign`
    (a tmux session of that name that is not this session's pane), or
    `unknown` (tmux can't tell)."""
    if census.liveness is Liveness.UNPROVEN:
        return "unknown"
    pane = census.panes.get(session.name)
    if pane is None:
        return "missing"
    if pane.owner not in (session.owner(home), ""):
        return "foreign"
    return "dead" if pane.pane_dead else "ok"


class PaneReport(Record):
    name: str
    status: str  # ok | recreated | respawned | dead | cwd missing | foreign | unknown
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "recreated", "respawned")

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


def up(spex: Spex, names: Sequence[str] | None = None) -> list[PaneReport]:
    """Recreate every missing pane (a shell in the session's cwd with its env)
    of `names` (default: all sessions). Never starts a turn; one `list-panes`
    for the whole census."""
    sessions = [get(spex, n) for n in dict.fromkeys(names)] if names else all_sessions(spex)
    census = spex.tmux.census()
    out = []
    for session in sessions:
        status = pane_status(census, session, spex.home)
        if status == "dead" and Path(session.cwd).is_dir():
            pane = census.panes[session.name]
            owner = session.owner(spex.home)
            if spex.tmux.respawn_shell(
                session.name, owner, pane.turn, session.cwd, shell_env(spex, session)
            ):
                status = "respawned"
        if status == "missing" and not Path(session.cwd).is_dir():
            out.append(PaneReport(session.name, "cwd missing", session.cwd))
            continue
        if status == "missing":
            try:
                created = ensure_pane(spex, session)
            except Refused as e:
                out.append(PaneReport(session.name, "foreign", e.line()))
                continue
            if created:  # a concurrent `spex up` may have made it first
                events.emit(spex.store, events.PANE_RECREATED, session=session.name)
            status = "recreated" if created else "ok"
        out.append(PaneReport(session.name, status, session.cwd))
    return out


def all_sessions(spex: Spex) -> list[Session]:
    rows = spex.store.db.execute("SELECT * FROM sessions ORDER BY name").fetchall()
    return [Session.from_row(r) for r in rows]


def select(
    spex: Spex,
    names: Sequence[str],
    *,
    all_: bool = False,
    match: str | None = None,
    none: str = "no sessions",
) -> list[str]:
    """The sessions a multi-session command acts on: the names given (checked,
    in order, without repeats), or every session, or those matching a glob;
    `none` (exit 3) when no session is there to act on."""
    if sum((bool(names), all_, match is not None)) != 1:
        raise Invalid("name the sessions, or give --all, or --match GLOB (exactly one)")
    if names:
        for n in names:
            ids.validate_name(n)
        return list(dict.fromkeys(names))
    rows = spex.store.db.execute("SELECT name FROM sessions ORDER BY name").fetchall()
    chosen = [r["name"] for r in rows if match is None or fnmatch.fnmatchcase(r["name"], match)]
    if not chosen:
        raise Refused(none + (f" match {match!r}" if match else ""), hint="see spex ls")
    return chosen


def post_create(spex: Spex, session: Session, argv: Sequence[str]) -> None:
    """Run `.spexsup.toml`'s post_create in the session's pane, in the new
    worktree, through the turn wrapper (so its output shows in the pane and
    lands in `turns/NAME/post-create/output.log`); wait for its exit.

    The pane is launched with a fence like a turn's, so a later turn's launch
    supersedes it. Failed when it exits non-zero or its wrapper dies; on any
    exception its processes are killed before this returns.
    """
    from spexsup.adapters.watch import DirWatch  # watchdog: only a post_create pays for it
    from spexsup.core.setupfile import SETUP_FILE
    from spexsup.core.worktree import POST_CREATE  # see _worktree
    from spexsup.state import ledger

    name = session.name
    tag = f"{POST_CREATE}-{os.urandom(3).hex()}"
    directory = ensure_private_dir(turndir.path(spex.home, name, POST_CREATE), under=spex.home)
    run = turndir.Invocation([os.fsencode(a) for a in argv], b"", on_stdin=False)
    # The wrapper passes the rc to its reporter; nothing is recorded.
    turndir.write_launch(directory, run, env=session.env, reporter=["true"])
    with spex.store.tx() as db:
        fence = ledger.claim_pane_fence(db, name)
    env = {"SPEXSUP_SESSION": name, "SPEXSUP_TURN": tag, "SPEXSUP_TURN_DIR": str(directory)}
    wrapper = os.environ.get("SPEXSUP_WRAPPER") or str(wrapper_path())
    owner = session.owner(spex.home)
    since = time.time()
    with DirWatch([directory]) as watch:

        def attempt() -> Launch:
            argv = ["bash", wrapper, str(directory)]
            return spex.tmux.launch(name, owner, fence, tag, session.cwd, env, argv)

        # The pane is moments old: its shell may still run its rc files.
        result = after_startup(attempt(), attempt)
        if result.outcome != "launched":
            raise Failed(f"{name}: could not start post_create in the pane ({result.outcome})")

        def check(m: Marker) -> None:
            why = None
            if m.stage is Stage.INVALID:
                why = f"invalid outcome marker {m.text!r}"
            elif (
                m.pid is not None
                and turndir.wrapper_liveness(m.pid, directory) is Liveness.DEAD
                # It may have written its exit and exec'd the shell meanwhile.
                and marker.read(directory).stage is not Stage.EXIT
            ):
                why = "its wrapper died without an exit status"
            elif m.stage is Stage.NONE and spex.tmux.pane(name) is None:
                why = "the pane vanished before it started"
            if why:
                raise Failed(f"{name}: post_create: {why}; the worktree was removed")

        try:
            while (m := marker.read(directory)).stage is not Stage.EXIT:
                check(m)
                watch.wait(1.0)
        except BaseException:
            reap(lambda: turn_processes(tag, result.pane_pid, since=since), 0.5)
            raise
    if m.rc != 0:
        tail = turndir.output_tail(directory)
        raise Failed(
            f"{name}: post_create {' '.join(argv)!r} exited rc={m.rc}"
            + (f": {tail}" if tail else "")
            + "; the worktree was removed",
            hint=f"fix {SETUP_FILE}, then spex new again",
        )


def status_rows(spex: Spex, names: Sequence[str]) -> list[dict[str, Any]]:
    """`spex worktree ls`: every worktree session (or those named)."""
    from spexsup.core.worktree import describe as worktree_view  # see _worktree

    if names:
        chosen = [get(spex, n) for n in names]
        for s in chosen:
            if s.worktree is None:
                raise Refused(f"session {s.name!r} has no worktree", hint="see spex ls")
    else:
        rows = spex.store.db.execute(
            "SELECT name FROM sessions WHERE worktree IS NOT NULL ORDER BY name"
        ).fetchall()
        chosen = [get(spex, r["name"]) for r in rows]
    return [worktree_view(s.name, s.worktree) for s in chosen if s.worktree is not None]
