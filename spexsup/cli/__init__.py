"""The `spex` command: parse, call the core, render. No logic lives here.

`run` answers what it can before typer is imported: the exit reporter's path
(`spex internal turn-exit`, on every turn end), `--version`, and shell
completion of names and ids (on every TAB). Everything else goes to typer.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from types import FrameType

from spexsup.errors import SpexError


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so cleanups run; exits 143."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def fail(line: str, code: int, as_json: bool = False) -> int:
    """One line on stderr; with --json also a document on stdout (DESIGN §8 "JSON")."""
    if as_json:
        doc = {"schema_version": 1, "ok": False, "error": line, "exit_code": code}
        sys.stdout.write(json.dumps(doc) + "\n")
        sys.stdout.flush()
    print(f"spex: {line}", file=sys.stderr)
    return code


def hoist_home(argv: list[str]) -> list[str]:
    """Move `--home DIR` / `--home=DIR` from anywhere before `--` to the front,
    where the root command parses it: `--home` works anywhere on the line."""
    end = argv.index("--") if "--" in argv else len(argv)
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < end:
        word = argv[i]
        if word == "--home" and i + 1 < end:
            front = ["--home", argv[i + 1]]
            i += 2
            continue
        if word.startswith("--home="):
            front = [word]
        else:
            rest.append(word)
        i += 1
    return [*front, *rest, *argv[end:]]


def run(argv: list[str]) -> int:
    from spexsup.cli import internal

    fast = internal.fast_path(argv)
    if fast is not None:
        return fast
    argv = hoist_home(argv)
    options = argv[: argv.index("--")] if "--" in argv else argv
    if "--version" in options and "--help" not in options and "-h" not in options:
        from spexsup import __version__

        print(f"spex {__version__}")
        return 0
    completing = os.environ.get("_SPEX_COMPLETE")
    if completing:
        from spexsup.cli import complete

        answered = complete.fast_path()
        if answered is not None:
            return answered
    as_json = "--json" in options
    signal.signal(signal.SIGTERM, _on_sigterm)
    import typer

    from spexsup.cli.app import app, keep_only

    if completing:
        from typer._completion_classes import completion_init

        completion_init()
    else:
        rest = options[2:] if options[:1] == ["--home"] else options
        if rest and not rest[0].startswith("-"):
            keep_only(rest[0])
    try:
        code = app(args=argv, prog_name="spex", standalone_mode=False, obj=list(argv))
    except SpexError as e:
        return fail(e.line(), e.exit_code, as_json)
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
        return fail(f"{first} (see {where})", getattr(e, "exit_code", 2), as_json)
    except BrokenPipeError:
        return 1
    except Exception as e:  # a bug of ours: still one line, never a traceback
        return fail(f"internal error: {type(e).__name__}: {e} (please report this)", 1, as_json)
    return code if isinstance(code, int) else 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))
