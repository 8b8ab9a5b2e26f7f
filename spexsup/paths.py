"""Where spexsup keeps its state, and how it writes files there.

The state dir is 0700 and every file in it 0600 (DESIGN §7). Every file that
a reader may see half-written is written atomically: a temp file in the same
directory, fsync'd, then renamed over the target.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def resolve_home(explicit: str | os.PathLike[str] | None = None) -> Path:
    """`--home`, else `SPEXSUP_HOME`, else `$XDG_STATE_HOME/spexsup`, else ~/.local/state."""
    if explicit:
        return Path(explicit).expanduser().absolute()
    env = os.environ.get("SPEXSUP_HOME")
    if env:
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return (base / "spexsup").absolute()


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and parents) and force it to 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write `data` to `path` with mode 0600 so readers see old or new, never half.

    `durable` also fsyncs before the rename, so a crash cannot leave an empty
    file behind; files that die with the turn they prepare skip it (it costs
    milliseconds on every wake).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def wrapper_path() -> Path:
    """The turn wrapper: inside the package in a wheel, at the repo top otherwise."""
    for candidate in (PACKAGE_DIR / "shell" / "turn.sh", PACKAGE_DIR.parent / "shell" / "turn.sh"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("shell/turn.sh is missing from this spexsup install")
