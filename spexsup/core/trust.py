"""Trust in a repository's post_create (`spex trust`).

A `.spexsup.toml` post_create is arbitrary code: it runs only once the user
trusted that file's exact bytes (`spex trust`, or a confirmation on a
terminal), recorded by content hash under the state home, one JSON file per
trusted file. Editing the file withdraws the trust.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spexsup.core.setupfile import SETUP_FILE, governing_file
from spexsup.core.worktree import Setup, load_setup, sha256
from spexsup.errors import Invalid, Refused
from spexsup.paths import ensure_private_dir, write_atomic

# Under the state home: one JSON file per trusted .spexsup.toml.
TRUST_DIR = "trust"


@dataclass(frozen=True)
class Trust:
    """A `.spexsup.toml` (by real path) whose post_create the user trusted, by
    the sha256 of its bytes: a changed file is not trusted until trusted
    again. It covers the file, not the scripts its argv may name."""

    path: str
    sha256: str
    trusted_at: float
    post_create: tuple[str, ...]

    def state(self) -> str:
        """`current` (the file still has these bytes), `changed` or `missing`."""
        try:
            digest = sha256(Path(self.path).read_bytes())
        except OSError:
            return "missing"
        return "current" if digest == self.sha256 else "changed"

    def public(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "path": self.path,
            "sha256": self.sha256,
            "trusted_at": self.trusted_at,
            "post_create": list(self.post_create),
            "state": self.state(),
        }


def setup_path(word: str) -> Path:
    """PATH as `spex trust` takes it: a `.spexsup.toml`, or a directory that
    holds one; its real path (which need not exist, for a revoke)."""
    path = Path(word).expanduser()
    if path.name != SETUP_FILE:
        path = path / SETUP_FILE
    return Path(os.path.realpath(path))


def _entry(home: Path, path: str) -> Path:
    return home / TRUST_DIR / f"{sha256(os.fsencode(path))[:32]}.json"


def _read_trust(entry: Path) -> Trust | None:
    try:
        data = json.loads(entry.read_bytes())
        return Trust(
            str(data["path"]),
            str(data["sha256"]),
            float(data["trusted_at"]),
            tuple(str(a) for a in data["post_create"]),
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None  # absent, or not ours: trusts nothing


def trust(home: Path, word: str) -> Trust:
    """Trust the post_create of the `.spexsup.toml` at `word` as it is now
    (replacing an earlier trust of that file). Invalid when there is no such
    file or it is not a valid setup file; nothing is recorded then."""
    path = setup_path(word)
    # Read where it was named: a `.spexsup.toml` that is a symlink is read
    # through it, as a wake reads it (its real path is what trust names).
    given = Path(word).expanduser()
    if given.name != SETUP_FILE:
        given = given / SETUP_FILE
    if not given.is_file():
        raise Invalid(f"no {SETUP_FILE} at {path}", hint="spex trust REPO or REPO/.spexsup.toml")
    return record_trust(home, load_setup(given.parent))


def record_trust(home: Path, setup: Setup) -> Trust:
    """Record trust in exactly the bytes `setup` was read from (atomically)."""

    t = Trust(setup.path, setup.sha256, time.time(), setup.post_create)
    ensure_private_dir(home / TRUST_DIR, under=home)
    write_atomic(_entry(home, setup.path), json.dumps(asdict(t)).encode())
    return t


def revoke_trust(home: Path, word: str) -> Trust:
    """Forget the trust of the `.spexsup.toml` at `word`; Refused if it has none."""
    path = setup_path(word)
    entry = _entry(home, str(path))
    t = _read_trust(entry)
    if t is None:
        raise Refused(f"{path} is not trusted", hint="see spex trust ls")
    entry.unlink(missing_ok=True)
    return t


def trusted(home: Path) -> list[Trust]:
    """Every recorded trust, by path."""
    try:
        entries = sorted((home / TRUST_DIR).glob("*.json"))
    except OSError:
        return []
    found = (_read_trust(e) for e in entries)
    return sorted((t for t in found if t is not None), key=lambda t: t.path)


def require_trust(home: Path, setup: Setup, confirm: Callable[[Setup], bool] | None) -> None:
    """Pass when `setup` has no post_create or its exact bytes are trusted;
    else ask `confirm` (the CLI's prompt on a terminal), recording the trust
    when it says yes. Refused otherwise: nothing has been made yet."""
    if not setup.post_create:
        return
    t = _read_trust(_entry(home, setup.path))
    if t is not None and t.sha256 == setup.sha256:
        return
    if confirm is not None and confirm(setup):
        record_trust(home, setup)
        return
    why = "changed since it was trusted" if t is not None else "not trusted"
    raise Refused(
        f"the post_create of {setup.path} is {why}; it runs arbitrary commands",
        hint=f"read it, then: spex trust {setup.path}",
    )


def repo_check(cwd: Path, repo: str | None = None) -> Setup | None:
    """The `verify` of the `.spexsup.toml` that governs a session: the one of
    its worktree's repository (`repo`), else of the git work tree holding
    `cwd`; None when there is none or it asks for no check. Only the verify
    keys are read (a turn never fails on a copy list). Invalid when they, or
    the file, are malformed."""
    path = governing_file(cwd, repo)
    if path is None:
        return None
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Invalid(f"cannot read {path}: {e}") from None
    import tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as e:
        raise Invalid(f"cannot read {path}: {e}") from None
    if "verify" not in data:
        return None
    from spexsup import durations
    from spexsup.adapters.harness import verify_argv

    verify = verify_argv(data["verify"], str(path))
    limit = data.get("verify_timeout")
    if limit is not None:
        limit = durations.parse(limit, f"{path}: verify_timeout", maximum=durations.WEEK)
    if not verify:
        return None
    return Setup(
        verify=verify,
        verify_timeout=limit,
        path=os.path.realpath(path),
        sha256=sha256(raw),
    )


def require_check_trust(home: Path, setup: Setup, shown: Path | None = None) -> None:
    """Pass when the `.spexsup.toml` whose verify `setup` holds is trusted as
    it is now; Refused otherwise: its check is arbitrary code, never run
    unread, and a turn it was meant to check is not started unchecked.
    `shown`: the file as its repository holds it, for the hint (`spex trust`
    of a symlink's target would look for a .spexsup.toml in it)."""
    t = _read_trust(_entry(home, setup.path))
    if t is not None and t.sha256 == setup.sha256:
        return
    why = "changed since it was trusted" if t is not None else "not trusted"
    raise Refused(
        f"the verify of {setup.path} is {why}; it runs arbitrary commands",
        hint=f"read it, then: spex trust {shown or setup.path} (or wake --no-verify)",
    )
