"""The installable app's manifest and icons (a PWA: Chromium installs a page
whose manifest names it, says how it opens, and has a square icon of at
least 144 pixels). The icons are drawn here: a PNG is a few rows of pixels
through zlib, so no image library and no binary file in the package."""

from __future__ import annotations

import functools
import struct
import zlib
from typing import Any

BACKGROUND = (0x1B, 0x1F, 0x24)
RING = (0x2E, 0x7D, 0x32)
DOT = (0xC6, 0x28, 0x28)

SVG = f"""<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64">
<rect width="64" height="64" rx="12" fill="#{bytes(BACKGROUND).hex()}"/>
<circle cx="32" cy="32" r="19" fill="none" stroke="#{bytes(RING).hex()}" stroke-width="7"/>
<circle cx="32" cy="32" r="6" fill="#{bytes(DOT).hex()}"/>
</svg>
"""

# Every URL relative to the manifest's own: the app opens, and stays, where
# it was installed from, under any prefix.
MANIFEST: dict[str, Any] = {
    "name": "spex: your agents",
    "short_name": "spex",
    "description": "The sessions spex supervises: what needs you, what runs, what waits.",
    "id": "./",
    "start_url": "./",
    "scope": "./",
    "display": "standalone",
    "background_color": "#" + bytes(BACKGROUND).hex(),
    "theme_color": "#" + bytes(BACKGROUND).hex(),
    "icons": [
        {"src": "icon-192.png", "sizes": "192x192", "type": "image/png", "purpose": "any"},
        {"src": "icon-512.png", "sizes": "512x512", "type": "image/png", "purpose": "any"},
        {"src": "icon.svg", "sizes": "any", "type": "image/svg+xml", "purpose": "any"},
    ],
}


def png(size: int) -> bytes:
    """The icon as a square RGB PNG `size` pixels wide: a ring round a dot, as the SVG."""
    c = (size - 1) / 2
    outer, inner, dot = size * 0.37, size * 0.24, size * 0.1
    raw = bytearray()
    for y in range(size):
        raw.append(0)  # no filter
        for x in range(size):
            r = ((x - c) ** 2 + (y - c) ** 2) ** 0.5
            raw += bytes(DOT if r <= dot else RING if inner <= r <= outer else BACKGROUND)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(raw), 9))
        + chunk(b"IEND", b"")
    )


FILES = {"icon.svg": "image/svg+xml", "icon-192.png": "image/png", "icon-512.png": "image/png"}


@functools.cache
def file(name: str) -> tuple[bytes, str]:
    """One of FILES: its bytes and media type (drawn once)."""
    if name.endswith(".png"):
        return png(int(name[len("icon-") : -len(".png")])), FILES[name]
    return SVG.encode(), FILES[name]
