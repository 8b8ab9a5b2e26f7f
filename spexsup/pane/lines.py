"""A turn's output read back a line at a time, each line bounded (DESIGN §6).

An agent may write a line of any length (a minified bundle, a base64 image,
50 MB without a newline); no reader holds one whole. A line longer than its
bound shows its first bytes (cut at a UTF-8 character's start) and then
`… [N bytes cut]`, N the bytes it left out. output.log itself keeps every
byte. Memory stays within a bound and a chunk whatever the output holds.

- `Cut` streams (raw `spex log`): bytes pass as they come, up to the bound
  of each line; nothing waits for a line's end.
- `Lines` splits (the renderings, which need a whole JSON event): each line
  as its first `limit` bytes and the count of the rest.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, BinaryIO

from spexsup import lazyre

if TYPE_CHECKING:
    from pathlib import Path

# `spex log` without --pretty: each line of output.log up to this.
RAW_LINE = 64 * 1024
# A line a person reads (--pretty, the pane, the web page, `spex top`).
SHOWN_LINE = 16 * 1024
# The longest line parsed as a JSON event; a longer one is shown cut, unread.
PARSE_LINE = 1 << 20
# What a JSON event too long to parse shows of itself (its type).
EVENT_HEAD = 120
CHUNK = 65536


def note(cut: int) -> bytes:
    """What ends a cut line: ` … [N bytes cut]`."""
    return f" … [{cut} bytes cut]".encode()


def head(data: bytes, limit: int) -> bytes:
    """`data`'s first `limit` bytes at most, never ending inside a UTF-8
    character (a cut one is left out whole)."""
    if len(data) <= limit:
        return data
    end = limit
    while end > 0 and end > limit - 3 and data[end] & 0xC0 == 0x80:
        end -= 1  # data[end] continues a character: cut before its start
    return data[:end]


def shown(data: bytes, limit: int, cut: int = 0) -> bytes:
    """One line (no newline) within `limit` and its note: `cut` bytes of it
    were left out already."""
    kept = head(data, limit)
    left = cut + len(data) - len(kept)
    return kept + note(left) if left else kept


_NOTED = lazyre.compile(r" … \[(\d+) bytes cut\]$")


def shorter(line: str, limit: int) -> str:
    """A shown line cut to `limit` bytes for a narrower view (`spex top`'s
    cell, a failure's message), its note counting every byte left out,
    those a note already said included."""
    noted = _NOTED.search(line)
    text = line[: noted.start()] if noted else line
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return line
    earlier = int(noted.group(1)) if noted else 0
    return shown(data, limit, earlier).decode("utf-8", "replace")


def line_start(f: BinaryIO, pos: int) -> int:
    """Where the line that byte `pos - 1` of `f` is in begins: after the last
    newline before `pos`, else 0. Reads backwards, a block at a time."""
    while pos > 0:
        size = min(CHUNK, pos)
        pos -= size
        f.seek(pos)
        at = f.read(size).rfind(b"\n")
        if at >= 0:
            return pos + at + 1
    return 0


def _unfinished(data: bytes) -> int:
    """How many bytes at the end of `data` start a UTF-8 character that
    continues after it (0 when its last character is whole)."""
    for back in range(1, min(3, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation: its lead is further back
        if byte < 0xC0:
            return 0
        need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
        return back if need > back else 0
    return 0


class Cut:
    """Streams output with each line cut to `limit` bytes; the note follows
    at the line's end (or at `end()` for a last line with none). A character
    a chunk ends inside waits for its rest (3 bytes at most), so that a cut
    never leaves half of one."""

    def __init__(self, limit: int = RAW_LINE) -> None:
        self.limit = limit
        self.used = 0  # bytes of the current line passed
        self.cut = 0  # bytes of the current line left out
        self.held = b""  # the start of a character the last chunk ended in

    def feed(self, data: bytes) -> bytes:
        data, self.held = self.held + data, b""
        out = bytearray()
        start = 0
        while start < len(data):
            nl = data.find(b"\n", start)
            stop = len(data) if nl < 0 else nl
            room = self.limit - self.used
            if self.cut == 0 and stop - start <= room:
                piece = data[start:stop]
                if nl < 0 and (back := _unfinished(piece)):
                    piece, self.held = piece[:-back], piece[-back:]
                out += piece
                self.used += len(piece)
            else:
                kept = head(data[start : start + room + 3], room) if room > 0 else b""
                out += kept
                self.used = self.limit
                self.cut += stop - start - len(kept)
            if nl < 0:
                break
            out += self.end() + b"\n"
            start = nl + 1
        return bytes(out)

    def stream(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """`chunks` cut, as they come, and the note of a cut last line."""
        for chunk in chunks:
            if kept := self.feed(chunk):
                yield kept
        if said := self.end():
            yield said

    def end(self) -> bytes:
        """What is left of the current line (a character it ended inside,
        the note if it was cut); the next line starts."""
        said = self.held + (note(self.cut) if self.cut else b"")
        self.used = self.cut = 0
        self.held = b""
        return said


class Lines:
    """Splits output into lines (without their newline), each as its first
    `limit` bytes and how many bytes after them were left out."""

    def __init__(self, limit: int = PARSE_LINE) -> None:
        self.limit = limit
        self.line = bytearray()
        self.cut = 0

    def feed(self, data: bytes) -> list[tuple[bytes, int]]:
        done: list[tuple[bytes, int]] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            stop = len(data) if nl < 0 else nl
            take = min(self.limit - len(self.line), stop - start)
            self.line += data[start : start + take]
            self.cut += stop - start - take
            if nl < 0:
                return done
            done.append((bytes(self.line), self.cut))
            self.line.clear()
            self.cut = 0
            start = nl + 1

    def end(self) -> tuple[bytes, int] | None:
        """The last line, when the output did not end with a newline."""
        if not self.line and not self.cut:
            return None
        last = (bytes(self.line), self.cut)
        self.line.clear()
        self.cut = 0
        return last


def last_lines(path: Path, size: int, limit: int = PARSE_LINE) -> list[tuple[bytes, int]]:
    """The lines of the last `size` bytes of `path` as `Lines` gives them,
    the first one whole (read from its start, however far back that is: its
    bytes past `limit` are counted, not read). [] when there is no file.

    Reads `size` bytes and `limit` more at most, and backwards to the first
    line's start: a 50 MB last line costs a scan, never 50 MB of memory."""
    try:
        f = path.open("rb")
    except OSError:
        return []
    with f:
        end = f.seek(0, os.SEEK_END)
        window = max(0, end - size)
        start = line_start(f, window)
        lines = Lines(limit)
        f.seek(start)
        first = min(window - start, limit)
        lines.feed(f.read(first))  # no newline before `window`: no line ends here
        lines.cut += window - start - first
        f.seek(window)
        done: list[tuple[bytes, int]] = []
        left = end - window
        while left > 0 and (chunk := f.read(min(CHUNK, left))):
            left -= len(chunk)
            done += lines.feed(chunk)
        if (last := lines.end()) is not None:
            done.append(last)
        return done
