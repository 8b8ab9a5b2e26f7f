"""`spex doctor`: is this machine ready to run sessions?"""

from __future__ import annotations

import shutil
import stat
import subprocess
from dataclasses import asdict, dataclass

from spexsup import harness
from spexsup.procs import Liveness
from spexsup.spex import Spex


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


def run_checks(spex: Spex) -> list[Check]:
    checks = []
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
        Liveness.ALIVE: f"private server {where} running, {len(census.panes)} home(s)",
        Liveness.DEAD: f"private server {where} not running (starts on first use)",
        Liveness.UNPROVEN: f"private server {where}: {census.error}",
    }[census.liveness]
    checks.append(Check("server", census.liveness is not Liveness.UNPROVEN, server))
    notices = spex.store.db.execute("SELECT message FROM notices ORDER BY at")
    checks.extend(Check("notice", False, n["message"], required=False) for n in notices)
    mode = stat.S_IMODE(spex.home.stat().st_mode)
    checks.append(Check("state", mode == 0o700, f"{spex.home} mode {mode:o}"))
    registry = harness.load_registry(spex.home)
    for name, error in registry.errors.items():
        checks.append(Check(f"harness {name}", False, error.line(), required=False))
    for name, h in registry.harnesses.items():
        source = registry.sources.get(name, harness.BUILT_IN)
        # Where it comes from, unless it is a built-in as shipped.
        origin = "" if source == harness.BUILT_IN else f"from {source}"
        if h.binary is None:
            detail = ", ".join(x for x in (h.notes, origin) if x) or harness.BUILT_IN
            checks.append(Check(f"harness {name}", True, detail, required=False))
            continue
        # As a turn finds it: on the login shell's PATH (spex new checks the same).
        from spexsup.errors import SpexError
        from spexsup.sessions import check_binary

        try:
            path: str | None = check_binary(spex.home, h.binary)
            detail = ""
        except SpexError as e:
            path, detail = None, e.message
        if path:
            detail = f"{path} {_version([path, *h.version_args]) or '(version unknown)'}"
        if origin:
            detail += f" ({origin})"
        checks.append(Check(f"harness {name}", path is not None, detail, required=False))
    return checks
