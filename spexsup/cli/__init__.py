"""The `spex` command: parse, call the core, render. No logic lives here.

`main` keeps the exit reporter's path (`spex internal turn-exit`) free of
typer and rich: it runs on every turn end and must start fast.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
from types import FrameType

from spexsup.errors import SpexError


class Signalled(BaseException):
    """SIGINT or SIGTERM, raised in the main thread so cleanups run; exits
    128+signal. Not a KeyboardInterrupt, which typer would swallow into a
    bare exit code, losing the notes that say what was left running."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Signalled(signum)


def fail(line: str, code: int) -> int:
    print(f"spex: {line}", file=sys.stderr)
    return code


def run(argv: list[str]) -> int:
    from spexsup.cli import internal

    fast = internal.fast_path(argv)
    if fast is not None:
        return fast
    # Ctrl-C must reach us even when started with SIGINT ignored (a
    # background job of a script): it decides what a wake leaves behind.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _on_signal)
    try:
        return _dispatch(argv)
    except (KeyboardInterrupt, Signalled) as e:
        return interrupted(e)


def interrupted(e: BaseException) -> int:
    """Exit 130/143; the exception's notes say what the interrupted command
    leaves behind (a turn that keeps running, one that was aborted)."""
    for note in getattr(e, "__notes__", ()):
        print(f"spex: {note}", file=sys.stderr)
    return 128 + e.signum if isinstance(e, Signalled) else 130


def _dispatch(argv: list[str]) -> int:
    import typer

    from spexsup.cli.app import app
    from spexsup.cli.turns import check_dashed_prompt

    try:
        check_dashed_prompt(argv)
        code = app(args=argv, prog_name="spex", standalone_mode=False)
    except SpexError as e:
        return fail(e.line(), e.exit_code)
    except typer.Abort as e:  # click's wrapping of a Ctrl-C
        return interrupted(e.__cause__ or KeyboardInterrupt())
    except typer.TyperException as e:
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())
            return 2
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        path = ctx.command_path.split(" ", 1) if ctx else []
        where = f"spex {path[1]} --help" if len(path) == 2 else "spex --help"
        first = " ".join(str(message).split())
        return fail(f"{first} (see {where})", getattr(e, "exit_code", 2))
    except BrokenPipeError:
        return 1
    except sqlite3.Error as e:
        return fail(f"state database: {e} (check SPEXSUP_HOME and its permissions)", 1)
    except OSError as e:
        # The environment, not a bug: a state home that is a file, a
        # read-only disk, a working directory deleted under the shell.
        where = f": {e.filename}" if e.filename else ""
        return fail(f"{e.strerror or e}{where}", 1)
    except Exception as e:  # a bug of ours: still one line, never a traceback
        return fail(f"internal error: {type(e).__name__}: {e} (please report this)", 1)
    return code if isinstance(code, int) else 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))
