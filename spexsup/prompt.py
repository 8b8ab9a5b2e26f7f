"""A prompt's exact bytes, read once and bounded: TEXT, `-f FILE` or `-f -` (stdin).

Every door that takes a prompt (wake, new, resume, fanout, and the remote
router that forwards one to another host) reads it here, so the bound and
the refusals are the same everywhere. The bytes are delivered as read:
nothing is decoded, trimmed or re-quoted.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from spexsup.errors import Invalid

MAX_PROMPT = 1 << 20


def read(text: str | None, file: str | None) -> bytes:
    """TEXT, or the file's bytes, or stdin's for `-` (at most 1 MiB, never empty)."""
    if (text is None) == (file is None):
        raise Invalid("give the prompt as TEXT or with -f FILE (or -f - for stdin), not both")
    if text is not None:
        return checked(os.fsencode(text))
    if file == "-":
        return checked(sys.stdin.buffer.read(MAX_PROMPT + 1))
    assert file is not None
    try:
        with Path(file).open("rb") as f:
            return checked(f.read(MAX_PROMPT + 1))
    except OSError as e:
        raise Invalid(f"cannot read prompt file {file!r}: {e.strerror}") from None


def checked(data: bytes) -> bytes:
    if len(data) > MAX_PROMPT:
        raise Invalid("the prompt is larger than 1 MiB")
    if not data:
        raise Invalid("the prompt is empty")
    return data
