"""Where spexsup keeps its state, and how it writes files there.

The state dir is 0700 and every file in it 0600 (DESIGN §7). Every file that
a reader may see half-written is written atomically: a temp file in the same
directory, fsync'd, then renamed over the target.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from spexsup.errors import Failed, Invalid

PACKAGE_DIR = Path(__file__).resolve().parent


def own_python(module: str) -> list[str]:
    """argv that runs `python -m module` of this spex whatever the cwd and env.

    It runs in sessions' projects with their env: -P keeps the cwd off
    sys.path and -E ignores PYTHONPATH (a session's relative PYTHONPATH would
    resolve inside the project), so a project's own json.py is never what
    spex imports; -E only when spex itself is importable without PYTHONPATH.
    """
    import sys

    flags = ["-P"]
    entries = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    if str(PACKAGE_DIR.parent) not in {os.path.realpath(e) for e in entries}:
        flags.append("-E")
    return [sys.executable, *flags, "-m", module]


def resolve_home(explicit: str | os.PathLike[str] | None = None) -> Path:
    """`--home`, else `SPEXSUP_HOME`, else `$XDG_STATE_HOME/spexsup`, else ~/.local/state."""
    if explicit:
        return Path(explicit).expanduser().absolute()
    env = os.environ.get("SPEXSUP_HOME")
    if env:
        return Path(env).expanduser().absolute()
    return default_home()


def default_home() -> Path:
    """`$XDG_STATE_HOME/spexsup`, else ~/.local/state/spexsup."""
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return (base / "spexsup").absolute()


def existing_home(explicit: str | os.PathLike[str] | None) -> Path:
    """A home named by `--home DIR` or SPEXSUP_HOME that is no directory is a
    typo until `--create` says otherwise: Invalid, and nothing is made. Only
    the default home is made on first use (nobody typed it)."""
    path = resolve_home(explicit)
    if not path.is_dir() and (explicit or path != default_home()):
        via = "" if explicit else " (SPEXSUP_HOME)"
        raise Invalid(f"no state home at {path}{via}", hint="give --create to make a new one")
    return path


def ensure_private_dir(path: Path, under: Path | None = None) -> Path:
    """Create `path` 0700 whatever the umask, and return it.

    With `under` (the state home), every directory from `under` down to
    `path` is made or checked the same way; else missing parents are made
    0700. Each must be a real directory of ours: a symlink in its place
    (spex never makes one), a file, or another user's directory is refused
    with the path named, never followed or written through.
    """
    if under is None:
        chain = []
        at = path
        while not at.exists() and not at.is_symlink() and at != at.parent:
            chain.append(at)
            at = at.parent
        chain.reverse()
        if path not in chain:
            chain.append(path)
    else:
        chain = [
            under / Path(*path.relative_to(under).parts[: i + 1])
            for i in range(len(path.relative_to(under).parts))
        ]
    for directory in chain:
        _private_dir(directory)
    return path


def _private_dir(path: Path) -> None:
    # Already there, or made by a concurrent spex: checked below either way.
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        st = path.lstat()
    except FileNotFoundError:
        raise Failed(f"cannot create directory {path}") from None
    if stat.S_ISLNK(st.st_mode):
        raise Failed(f"{path} is a symlink; spex does not follow it", hint="remove it")
    if not stat.S_ISDIR(st.st_mode):
        raise Failed(f"{path} is not a directory", hint="point SPEXSUP_HOME at a directory")
    if st.st_uid != os.geteuid():
        raise Failed(
            f"{path} belongs to uid {st.st_uid}, not to you",
            hint="use a state home of your own (SPEXSUP_HOME or --home)",
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        # Through a descriptor of the very directory checked above: a symlink
        # swapped in since then is refused (O_NOFOLLOW), never chmod'ed.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            raise Failed(f"{path} changed while spex checked it", hint="look at it") from None
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino, now.st_uid) != (st.st_dev, st.st_ino, st.st_uid):
                raise Failed(f"{path} changed while spex checked it", hint="look at it")
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write `data` to `path` with mode 0600 so readers see old or new, never half.

    `durable` also fsyncs before the rename, so a crash cannot leave an empty
    file behind; files that die with the turn they prepare skip it (it costs
    milliseconds on every wake).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
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


def disk_full(e: BaseException) -> bool:
    """Is `e` a full disk (or quota): an OSError, or SQLite's SQLITE_FULL?"""
    import errno

    if isinstance(e, OSError):
        return e.errno in (errno.ENOSPC, errno.EDQUOT)
    return type(e).__module__ == "sqlite3" and "disk is full" in str(e)


def no_space(path: Path) -> str:
    """`no space left on /mnt (holding /mnt/state): 0 bytes free`, naming the
    file system that holds `path`."""
    mount = Path(os.path.realpath(path))
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    try:
        st = os.statvfs(path)
        free = f": {st.f_bavail * st.f_frsize} bytes free"
    except OSError:
        free = ""
    held = "" if mount == path else f" (holding {path})"
    return f"no space left on {mount}{held}{free}"


def remove_tree(path: Path) -> list[str]:
    """Remove `path` without following symlinks; the paths that could not be
    removed. What another process removed meanwhile (a wake undoing its
    admission, another `rm`) is gone, as asked: never one of them."""
    problems: list[str] = []

    def failed(func: object, where: str, exc: object) -> None:
        problems.append(where)

    if path.is_symlink():
        path.unlink(missing_ok=True)
    elif path.exists():
        import shutil

        shutil.rmtree(path, onerror=failed)
    return [where for where in problems if os.path.lexists(where)]
