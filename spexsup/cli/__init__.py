"""The `spex` command: parse, call the core, render. No logic lives here.

`main` keeps the exit reporter's path (`spex internal turn-exit`) free of
typer and rich: it runs on every turn end and must start fast.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from spexsup.errors import SpexError


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so cleanups run; exits 143."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def fail(line: str, code: int) -> int:
    print(f"spex: {line}", file=sys.stderr)
    return code


def run(argv: list[str]) -> int:
    from spexsup.cli import internal

    fast = internal.fast_path(argv)
    if fast is not None:
        return fast
    signal.signal(signal.SIGTERM, _on_sigterm)
    import typer

    from spexsup.cli.app import app

    try:
        code = app(args=argv, prog_name="spex", standalone_mode=False)
    except SpexError as e:
        return fail(e.line(), e.exit_code)
    except typer.Abort:
        return 130
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 143
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
    except Exception as e:  # a bug of ours: still one line, never a traceback
        return fail(f"internal error: {type(e).__name__}: {e} (please report this)", 1)
    return code if isinstance(code, int) else 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))
