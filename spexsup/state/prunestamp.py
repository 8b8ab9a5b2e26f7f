"""The writers' opportunistic prune's hourly stamp (`settings.pruned_at`).

Its own small module: every writer command asks whether the prune is due
after its work, and most find it is not; answering that must not import
`spexsup.core.retention` or open the store as a writer.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

# At most one opportunistic prune per home in this many seconds.
AUTO_INTERVAL = 3600.0


def pruned_lately(home: Path) -> bool:
    """Did a writer prune `home` within AUTO_INTERVAL? One read-only query;
    False when it cannot tell (no database yet, no settings table), and
    `retention.maybe_prune` then decides, under its compare-and-swap."""
    try:
        db = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        row = db.execute("SELECT value FROM settings WHERE key = 'pruned_at'").fetchone()
    except sqlite3.Error:
        return False
    finally:
        db.close()
    return row is not None and time.time() - float(row[0]) < AUTO_INTERVAL
