"""The state database's write lock: who holds it.

In this process, one lock per database (`writer`), taken before SQLite's
`BEGIN IMMEDIATE`: threads of one process (a wave's legs) then take turns
the moment the last commits, where SQLite's busy handler sleeps between
tries (up to 100 ms) and had them write at the pace of its sleeps. Across
processes, SQLite's own lock, whose holder `/proc/locks` names
(`write_lock_holder`, `locked_message`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from spexsup.adapters.group import named_lock

# SQLite's WAL write lock: byte 120 of the -shm file (WALINDEX_LOCK_OFFSET).
_WAL_WRITE_LOCK = 120


def writer(db_path: Path) -> threading.RLock:
    """This process's write lock of the database at `db_path` (by its real path)."""
    return named_lock(os.path.realpath(db_path))


def write_lock_holder(db_path: Path) -> int | None:
    """The pid holding the WAL write lock of `db_path`, from /proc/locks (Linux), or None."""
    try:
        st = (db_path.parent / (db_path.name + "-shm")).stat()
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in text.splitlines():
        # `1: POSIX  ADVISORY  WRITE 4242 00:2d:1234 120 120`
        parts = line.split()
        if len(parts) < 8 or parts[1] != "POSIX" or parts[3] != "WRITE" or parts[5] != device:
            continue
        try:
            start, end = int(parts[6]), (None if parts[7] == "EOF" else int(parts[7]))
            if start <= _WAL_WRITE_LOCK and (end is None or end >= _WAL_WRITE_LOCK):
                return int(parts[4])
        except ValueError:
            continue
    return None


def locked_message(db_path: Path, waited: float) -> str:
    """`state database … is write-locked by pid N (its command) for more than N s`."""
    holder = write_lock_holder(db_path)
    who = ""
    if holder is not None:
        who = f" by pid {holder}"
        try:
            words = Path(f"/proc/{holder}/cmdline").read_bytes().split(b"\0")
            command = " ".join(w.decode(errors="replace") for w in words if w)[:120]
            if command:
                who += f" ({command})"
        except OSError:
            pass
    return f"state database {db_path} is write-locked{who} for more than {waited:g} s"
