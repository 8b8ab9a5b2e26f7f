from __future__ import annotations

from spexsup.cli import main

main()
