"""A prompt's exact bytes, read once and bounded: TEXT…, `-m TEXT`, `-f FILE`
or `-f -` (stdin).

Every door that takes a prompt (wake, new, resume, fanout, and the remote
router that forwards one to another host) reads it here, so the bound and
the refusals are the same everywhere. The bytes are delivered as read:
nothing is decoded, trimmed or re-quoted.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from spexsup.errors import Invalid

MAX_PROMPT = 1 << 20


def read(
    words: Sequence[str] | str | None,
    file: str | None,
    *,
    message: str | None = None,
    forms: str = "TEXT… or -m TEXT",
) -> bytes:
    """The prompt, given exactly one way: TEXT words (joined by one space, as a
    shell passed them), `-m TEXT`, or the file's bytes (stdin's for `-`); at
    most 1 MiB, never empty. `forms` is how this command takes it as text,
    for the hint of a prompt given no way or two."""
    if isinstance(words, str):
        words = [words]
    words = list(words or ())
    given = (bool(words), message is not None, file is not None)
    if not any(given):
        raise Invalid("no prompt given", hint=f"give it as {forms}, or -f FILE (-f - reads stdin)")
    if sum(given) > 1:
        raise Invalid(
            "the prompt is given more than one way", hint=f"give it one way: {forms} or -f FILE"
        )
    if file is None:
        return checked(os.fsencode(" ".join(words) if words else (message or "")))
    if file == "-":
        return checked(sys.stdin.buffer.read(MAX_PROMPT + 1))
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
