"""spexsup: supervise coding-agent sessions that live in tmux panes.

Kept import-light on purpose: the exit reporter (`spex internal turn-exit`)
imports this package on every turn end.
"""

from __future__ import annotations

__version__ = "0.1.0"
