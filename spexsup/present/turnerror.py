"""What a line that shows a turn says of its error.

Apart from `turn.confirm`, whose `failure_message` writes the forms read
here: a line that shows a turn (`ls`, `show`, a wave's legs) must not import
the confirmer and what it needs (issue 40).
"""

from __future__ import annotations


def beyond_exit(error: str | None, rc: int | None) -> str | None:
    """What a turn's error says beyond its state and rc, for a line that
    says those already (`failed rc=1`), or None: `exited rc=1` alone says
    nothing more; of `exited rc=7: boom` it is `boom`, of `overloaded:
    exited rc=1` `overloaded` (the forms `turn.confirm.failure_message`
    writes). JSON keeps the whole error."""
    if not error or rc is None:
        return error or None
    said = f"exited rc={rc}"
    if error == said:
        return None
    if error.startswith(f"{said}: "):
        return error[len(said) + 2 :]
    if error.endswith(f": {said}"):
        return error[: -len(said) - 2]
    return error.replace(f": {said}: ", ": ", 1)
