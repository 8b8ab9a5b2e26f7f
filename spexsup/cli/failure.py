"""How a command that failed says so: one line on stderr, and with --json a document.

Imported by the CLI's entry point and by the remote router alike: cheap.
"""

from __future__ import annotations

import sys


def fail(line: str, code: int, as_json: bool = False) -> int:
    """One line on stderr; with --json also a document on stdout (DESIGN §8 "JSON")."""
    if as_json:
        import json

        doc = {"schema_version": 1, "ok": False, "error": line, "exit_code": code}
        try:
            sys.stdout.write(json.dumps(doc) + "\n")
            sys.stdout.flush()
        except OSError:
            pass  # stdout is what failed (closed, full): the line below still says why
    from spexsup.pane.pretty import one_line

    print(f"spex: {one_line(line)}", file=sys.stderr)
    return code
