"""Maintenance leases (DESIGN §5). Placeholder until the lease issue lands:
no lease exists, so admission is never barred."""

from __future__ import annotations

import sqlite3


def check_admission(db: sqlite3.Connection, session: str, op: str) -> None:
    """Raise Refused when a maintenance lease bars `op` on `session`."""
    return None
