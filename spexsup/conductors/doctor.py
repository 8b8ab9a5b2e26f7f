"""`spex doctor`: is this machine ready to run sessions?

Its "config" checks read every config file it knows on their own (both
config.toml, both harnesses.toml, their `[[hook]]` and `[[notify]]` tables, and the
`.spexsup.toml` of the current git work tree) and name every problem: an
unknown key is a warning (as every command warns of it), a bad value, a
hook's unknown event kind or a `run` that is no argv list is an error, and
an error fails the doctor.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import stat
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from spexsup import errors
from spexsup.adapters.procs import Liveness
from spexsup.adapters.registry import BUILT_IN, load_registry
from spexsup.core.spex import Spex
from spexsup.errors import SpexError


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    required: bool = True

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def _version(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if out.returncode == 0 and text else None


def config_checks(home: Path, cwd: Path) -> list[Check]:
    """One "config" check per problem in the config files (see the module's
    docstring), or one that says all is well; the unknown keys' warnings are
    taken from `errors.WARNINGS` into these checks."""
    from spexsup import config
    from spexsup.adapters import registry
    from spexsup.core import hooks, worktree
    from spexsup.core.setupfile import SETUP_FILE

    before = list(errors.WARNINGS)
    errors.WARNINGS.clear()
    found: list[SpexError] = []
    read = []
    try:
        for path in config.config_files(home):
            problems, raw = config.check_file(path)
            found += problems
            if path.exists():
                read.append(path)
            if "hook" in raw:
                found += hooks.check(raw["hook"], str(path))[1]
            if "notify" in raw:
                from spexsup.core import notify

                found += notify.check(raw["notify"], str(path))[1]
        read += [p for p in registry.config_files(home) if p.exists()]
        found += registry.load_registry(home).errors.values()
        top = _toplevel(cwd)
        if top is not None and (top / SETUP_FILE).exists():
            read.append(top / SETUP_FILE)
            try:
                worktree.load_setup(top)
            except SpexError as e:
                found.append(e)
        warned = list(errors.WARNINGS)
    finally:
        errors.WARNINGS[:] = before
    checks = [Check("config", False, e.line()) for e in found]
    checks += [Check("config", False, w, required=False) for w in warned]
    if not checks:
        checks.append(Check("config", True, f"{len(read)} file(s) read, no problems"))
    return checks


def _toplevel(cwd: Path) -> Path | None:
    """The git work tree `cwd` is in, or None."""
    from spexsup.adapters.git import git

    try:
        top = git(cwd, "rev-parse", "--show-toplevel", check=False).strip()
    except (SpexError, OSError):
        return None
    return Path(top) if top else None


def run_checks(spex: Spex, cwd: Path | None = None) -> list[Check]:
    checks = config_checks(spex.home, cwd or Path.cwd())
    # Said once, as checks: the loads below warn of the same unknown keys again.
    reported = {c.detail for c in checks if not c.required}
    tmux = shutil.which("tmux")
    version = _version([tmux, "-V"]) if tmux else None
    ok = False
    if version:
        try:
            major, minor = version.split()[1].rstrip("abcdefghijklmnopqrstuvwxyz").split(".")[:2]
            ok = (int(major), int(minor)) >= (3, 2)
        except (IndexError, ValueError):
            ok = False
    checks.append(Check("tmux", ok, version or "not found on PATH (need tmux >= 3.2)"))
    census = spex.tmux.census()
    where = spex.tmux.where()
    server = {
        Liveness.ALIVE: f"private server {where} running, {len(census.panes)} pane(s)",
        Liveness.DEAD: f"private server {where} not running (starts on first use)",
        Liveness.UNPROVEN: f"private server {where}: {census.error}",
    }[census.liveness]
    checks.append(Check("server", census.liveness is not Liveness.UNPROVEN, server))
    mode = stat.S_IMODE(spex.home.stat().st_mode)
    checks.append(Check("state", mode == 0o700, f"{spex.home} mode {mode:o}"))
    database = _database(spex)
    checks.append(database)
    if database.ok:  # else what it holds cannot be read: the check says so
        notices = spex.store.db.execute("SELECT message FROM notices ORDER BY at")
        checks.extend(Check("notice", False, n["message"], required=False) for n in notices)
    checks.append(_schedules(spex, read=database.ok))
    damaged = _crontab(spex)
    if damaged is not None:
        checks.append(damaged)
    checks.append(sandbox_check(spex, read=database.ok))
    login_path = _login(spex, checks)
    registry = load_registry(spex.home)
    for name, error in registry.errors.items():
        checks.append(Check(f"harness {name}", False, error.line(), required=False))
    for name, h in registry.harnesses.items():
        source = registry.sources.get(name, BUILT_IN)
        # Where it comes from, unless it is a built-in as shipped.
        origin = "" if source == BUILT_IN else f"from {source}"
        if h.binary is None:
            detail = ", ".join(x for x in (h.notes, origin) if x) or BUILT_IN
            checks.append(Check(f"harness {name}", True, detail, required=False))
            continue
        # As a turn finds it: on the login PATH (spex new checks the same).
        path = shutil.which(h.binary, path=login_path) if login_path is not None else None
        mine = None if path else shutil.which(h.binary)
        if path or mine:
            found = path or mine or ""
            detail = f"{found} {_version([found, *h.version_args]) or '(version unknown)'}"
            if not path:
                detail += " (not on the login PATH: spex new makes its turns run this path)"
        elif login_path is None:
            detail = "not checked: no login environment"
        else:
            detail = "not installed or not on your login PATH"
        if origin:
            detail += f" ({origin})"
        checks.append(Check(f"harness {name}", path is not None, detail, required=False))
    errors.WARNINGS[:] = [w for w in errors.WARNINGS if w not in reported]
    return checks


def _database(spex: Spex) -> Check:
    """The state database whole: its schema and `PRAGMA quick_check` (every
    command fails on a malformed one, so the doctor must not say ok)."""
    from spexsup.state.store import MIGRATIONS, damaged_hint

    problems = database_problems(spex.store.db)
    if not problems:
        detail = f"{spex.store.path}: schema {len(MIGRATIONS)}, quick_check ok"
        return Check("state database", True, detail)
    return Check(
        "state database",
        False,
        f"{spex.store.path} is damaged: {'; '.join(problems)} ({damaged_hint(spex.home)})",
    )


# How many of quick_check's findings `database_problems` names.
_SHOWN = 3
# The schema's own tables and indexes (not SQLite's automatic ones).
_NAMES = "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite^_%' ESCAPE '^'"


def database_problems(db: sqlite3.Connection) -> list[str]:
    """What is wrong with a state database (none when nothing is): its
    schema version against this spex's, a table or index of the schema
    missing, and the first of `PRAGMA quick_check`'s findings (pages,
    indexes, NOT NULLs); a check that cannot run says why. Reads every
    page: for the doctor, never on the way of a command."""
    from spexsup.state.store import MIGRATIONS

    found: list[str] = []
    try:
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        if version != len(MIGRATIONS):
            found.append(f"schema {version}, where this spex keeps {len(MIGRATIONS)}")
        lacking = sorted(_schema_names() - {r[0] for r in db.execute(_NAMES)})
        if lacking:
            found.append(f"the schema lacks {', '.join(lacking[:5])}")
        rows = [str(r[0]) for r in db.execute(f"PRAGMA quick_check({_SHOWN + 1})")]
    except sqlite3.DatabaseError as e:
        return [*found, str(e)]
    # One row may hold several lines, headed `*** in database main ***`.
    lines = [x for r in rows for x in r.splitlines() if x != "ok" and not x.startswith("***")]
    return found + lines[:_SHOWN] + (["and more"] if len(lines) > _SHOWN else [])


def _schema_names() -> set[str]:
    """The tables and indexes the migrations make (on a database in memory)."""
    from spexsup.state.store import MIGRATIONS

    db = sqlite3.connect(":memory:")
    try:
        for migration in MIGRATIONS:
            for statement in migration.split(";"):
                if statement.strip():
                    db.execute(statement)
        return {r[0] for r in db.execute(_NAMES)}
    finally:
        db.close()


def _schedules(spex: Spex, *, read: bool) -> Check:
    """Which engine a new schedule uses (and whether it fires), and the
    engines this home's schedules use (when its database can be `read`)."""
    from spexsup.adapters import schedule

    ok, detail = schedule.engine_report()
    rows = (
        spex.store.db.execute(
            "SELECT engine, count(*) AS n FROM schedules GROUP BY engine ORDER BY engine"
        ).fetchall()
        if read
        else []
    )
    if rows:
        detail += "; this home: " + ", ".join(f"{r['n']} on {r['engine']}" for r in rows)
    return Check("schedules", ok, detail, required=False)


def _crontab(spex: Spex) -> Check | None:
    """A failing check when this home's block of the user's crontab has a
    mark without its pair: `spex schedule` refuses to edit it until it is
    mended (whichever engine schedules use: the block is this home's)."""
    from spexsup.adapters import schedule

    damage = schedule.check_block(spex.home)
    return None if damage is None else Check("crontab", False, damage)


def _login(spex: Spex, checks: list[Check]) -> str | None:
    """The login environment's checks (its shell and flags, how long it took,
    whether cached, its PATH); its PATH, or None when there is none."""
    import os

    from spexsup import config
    from spexsup.adapters import login

    try:
        settings = config.load(spex.home)
    except SpexError:
        return None  # the config check reports it
    if not settings.login_shell:
        checks.append(
            Check("login", True, "off (login_shell = false): turns use the pane's environment")
        )
        path = os.environ.get("PATH", os.defpath)
        checks.append(Check("PATH", True, path, required=False))
        return path
    try:
        found = login.resolve(spex.home, settings.login_timeout)
    except SpexError as e:
        checks.append(Check("login", False, e.line()))
        return None
    took = f"{found.seconds * 1000:.0f} ms" if found.seconds < 1 else f"{found.seconds:.1f} s"
    source = f"cached (the shell took {took})" if found.cached else f"took {took}, now cached"
    checks.append(Check("login", True, f"{found.shell}: {source}"))
    checks.append(Check("login PATH", True, found.path))
    return found.path


def sandbox_check(spex: Spex, *, read: bool = True) -> Check:
    """Which engine sandboxed sessions use, and whether it holds here: the
    probe every sandboxed turn runs (shell/turn.sh), in a sandbox of the
    default policy with no network. Required once a session or config.toml
    asks for sandboxes."""
    import tempfile

    from spexsup import config
    from spexsup.adapters import sandbox as sandboxes
    from spexsup.pane import turndir
    from spexsup.paths import wrapper_path

    wanted = read and any(
        (p := sandboxes.Policy.loads(r["sandbox"])) is not None and p.enabled
        for r in spex.store.db.execute("SELECT sandbox FROM sessions WHERE sandbox NOT NULL")
    )
    with contextlib.suppress(SpexError):  # config.toml's own check says what is wrong
        wanted = wanted or config.load(spex.home).sandbox in ("on", "optional")
    engine = sandboxes.engine()
    if engine is None:
        return Check(
            "sandbox",
            False,
            "bubblewrap (bwrap) is not installed: no session can be sandboxed"
            f" ({sandboxes.INSTALL})",
            required=wanted,
        )
    version = _version([engine, "--version"]) or "bubblewrap"
    with tempfile.TemporaryDirectory(prefix="doctor-probe-", dir=spex.home) as where:
        probe = Path(where)
        (probe / "work").mkdir()
        policy = sandboxes.Policy(sandboxes.Mode.ON, sandboxes.Network.NONE)
        plan = sandboxes.plan(
            policy,
            sandboxes.Needs(),
            cwd=probe / "work",
            spex_home=spex.home,
            turn_dir=probe,
            env={},
        )
        argv = sandboxes.bwrap_argv(plan, engine)
        turndir.write_probe(probe, argv, plan)
        try:
            ran = subprocess.run(
                ["bash", str(wrapper_path()), "--sandbox-probe", str(probe)],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return Check(
                "sandbox", False, f"{version}: the probe did not run: {e}", required=wanted
            )
    if ran.returncode != 0:
        said = (ran.stdout or ran.stderr).strip().replace("\n", "; ")[:300]
        return Check(
            "sandbox", False, f"{version} ({engine}): it does not hold here: {said}", wanted
        )
    return Check(
        "sandbox",
        True,
        f"{version} ({engine}): a probe held (no write outside, no state home, no host"
        " network or processes)",
        required=False,
    )
