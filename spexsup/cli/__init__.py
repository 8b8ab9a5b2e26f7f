"""The `spex` command: parse, call the core, render. No logic lives here.

`run` answers what it can before typer is imported: the exit reporter's path
(`spex internal turn-exit`, on every turn end), `--version`, and shell
completion of names and ids (on every TAB), and every well-formed command
line (`spexsup.cli.lean`). Help, groups and mistakes go to typer.
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any

from spexsup.cli.failure import fail
from spexsup.errors import SpexError


class Signalled(BaseException):
    """SIGINT or SIGTERM, raised in the main thread so cleanups run; exits
    128+signal. Not a KeyboardInterrupt, which typer would swallow into a
    bare exit code, losing the notes that say what was left running."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # What the signal's clean-up asks of tmux gets the short bound, whether or
    # not a tmux call was in flight (a frozen server must not hold the exit),
    # and a stop under way kills now rather than wait out its grace.
    from spexsup.adapters import home, procs

    home.hurry()
    procs.hurry()
    raise Signalled(signum)


_REPLACED: list[Any] = []


def guard_stdout() -> None:
    """Make a failed write to stdout name stdout: `spex ls >/dev/full` says
    `cannot write to stdout: No space left on device` (one line, exit 1); a
    closed pipe stays a BrokenPipeError, which ends the command quietly.
    After the first failure the rest of the output is dropped, so it is
    reported once."""
    import io

    class Stdout(io.FileIO):
        failed = False

        def write(self, data: Any) -> int:
            if self.failed:
                return len(data)
            try:
                return super().write(data)
            except BrokenPipeError:
                self.failed = True
                raise
            except OSError as e:
                self.failed = True
                raise OSError(e.errno, f"cannot write to stdout: {e.strerror}") from None

    try:
        sys.stdout.flush()
        fd = sys.stdout.fileno()
    except (OSError, ValueError):
        return  # no usable stdout to wrap (closed at start): leave it be
    old = sys.stdout
    # Held for the life of the process: the wrapper shares `old`'s descriptor
    # without owning it, and an `old` nothing else held (a caller's own file
    # as sys.stdout) would close it when collected; the store would then open
    # state.db on that number and the output be written over it.
    _REPLACED.append(old)
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(Stdout(fd, "w", closefd=False)),
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=bool(old.line_buffering),
    )


def hoist_home(argv: list[str]) -> list[str]:
    """Move `--home DIR` / `--home=DIR` (and `--create`) from anywhere before
    `--` to the front, where the root command parses them: they work anywhere
    on the line."""
    end = argv.index("--") if "--" in argv else len(argv)
    front: list[str] = []
    create: list[str] = []
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
        elif word == "--create":
            create = [word]
        else:
            rest.append(word)
        i += 1
    return [*front, *create, *rest, *argv[end:]]


def no_hooks(argv: list[str]) -> list[str]:
    """`--no-hooks` anywhere before `--` turns hooks off for whatever this
    process commits (SPEXSUP_NO_HOOKS=1 does the same from the environment)."""
    end = argv.index("--") if "--" in argv else len(argv)
    if "--no-hooks" not in argv[:end]:
        return argv
    from spexsup.core import spex

    spex.NO_HOOKS = True
    return [w for w in argv[:end] if w != "--no-hooks"] + argv[end:]


def status_line(argv: list[str]) -> int | None:
    """`spex [--home DIR] status-line [--format T]`, answered before anything
    else is imported (see `statusline`): a tmux status bar runs it every few
    seconds. None for anything else (`--help`, a mistake: typer says it)."""
    if "status-line" not in argv:
        return None
    home, rest = _split_home(hoist_home(argv))
    if rest[:1] != ["status-line"]:
        return None
    fmt = None
    if len(rest) == 3 and rest[1] == "--format":
        fmt = rest[2]
    elif len(rest) == 2 and rest[1].startswith("--format="):
        fmt = rest[1].partition("=")[2]
    elif len(rest) != 1:
        return None
    from spexsup.adapters import statusline

    try:
        line = statusline.render(statusline.read(statusline.home_dir(home)), fmt)
    except statusline.UnknownField as e:
        fields = ", ".join("{" + f + "}" for f in statusline.FIELDS)
        return fail(f"unknown field {{{e}}} in --format (fields: {fields})", 2)
    sys.stdout.write(line + "\n")
    return 0


def sandbox_form(argv: list[str]) -> list[str]:
    """`--sandbox=optional` (and `=on`, `=off`) as the flags click parses:
    a flag that may take a value is not something click does. Before `--`."""
    end = argv.index("--") if "--" in argv else len(argv)
    forms = {
        "--sandbox=optional": "--sandbox-optional",
        "--sandbox=on": "--sandbox",
        "--sandbox=true": "--sandbox",
        "--sandbox=off": "--no-sandbox",
        "--sandbox=false": "--no-sandbox",
    }
    words = argv[:end]
    for word in words:
        if word.startswith("--sandbox=") and word not in forms:
            from spexsup.errors import Invalid

            raise Invalid(
                f"{word}: --sandbox takes no value but optional",
                hint="--sandbox, --sandbox=optional or --no-sandbox",
            )
    return [forms.get(w, w) for w in words] + argv[end:]


def run(argv: list[str]) -> int:
    argv = no_hooks(argv)
    fast = status_line(argv)
    if fast is not None:
        return fast
    if "internal" in argv[:3]:  # ([--home DIR] internal …): no other command imports it
        from spexsup.cli import internal

        fast = internal.fast_path(argv)
        if fast is not None:
            return fast
    argv = hoist_home(argv)
    options = argv[: argv.index("--")] if "--" in argv else argv
    if "--version" in options and "--help" not in options and "-h" not in options:
        from spexsup import __version__

        if "--json" in options:  # what another host's spex asks (spexsup.adapters.hosts)
            print(f'{{"schema_version": 1, "version": "{__version__}"}}')
        else:
            print(f"spex {__version__}")
        return 0
    if "-H" in options or any(w.startswith("--host") or ":" in w for w in options):
        # A command for another host, perhaps (HOST:NAME or -H HOST).
        from spexsup.cli import remote

        routed = remote.route(argv)
        if routed is not None:
            return routed
    completing = os.environ.get("_SPEX_COMPLETE")
    if completing:
        from spexsup.cli import complete

        answered = complete.fast_path()
        if answered is not None:
            return answered
    # Ctrl-C must reach us even when started with SIGINT ignored (a
    # background job of a script): it decides what a wake leaves behind.
    # (signal, json and sqlite3 are imported here, not at the top: the exit
    # reporter's path above must stay lean.)
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _on_signal)
    guard_stdout()
    try:
        return _dispatch(argv, options, completing)
    except (KeyboardInterrupt, Signalled) as e:
        return interrupted(e)
    finally:
        from spexsup.errors import WARNINGS

        for warning in WARNINGS:
            print(f"spex: warning: {warning}", file=sys.stderr)


def interrupted(e: BaseException) -> int:
    """Exit 130/143; the exception's notes say what the interrupted command
    leaves behind (a turn that keeps running, one that was aborted)."""
    for note in getattr(e, "__notes__", ()):
        print(f"spex: {note}", file=sys.stderr)
    return 128 + e.signum if isinstance(e, Signalled) else 130


def _dispatch(argv: list[str], options: list[str], completing: str | None) -> int:
    as_json = "--json" in options
    home, rest = _split_home(options)
    if not completing and rest[:1] == ["help"] and options == argv and "--help" not in rest:
        # `spex help WORDS…` is `spex WORDS… --help` (see spexsup.cli.manual).
        argv = options = [*options[: len(options) - len(rest)], *rest[1:], "--help"]
        home, rest = _split_home(options)
    from spexsup.cli.decl import Exit

    try:
        if any(w.startswith("--sandbox=") for w in argv):
            argv = sandbox_form(argv)
            home, rest = _split_home(argv[: argv.index("--")] if "--" in argv else argv)
        if rest[:1] == ["wake"]:
            from spexsup.cli.turns import check_dashed_prompt

            check_dashed_prompt(argv)
        code = None
        if not completing and "--create" not in options and _is_dequeue(rest):
            from spexsup.cli import internal

            code = internal.dequeue(home, rest[2])
        elif not completing:
            from spexsup.cli import lean

            # (home and --create lead argv, hoisted; the words run past --)
            code = lean.run(argv, home, "--create" in options, _split_home(argv)[1])
        if code is None and not completing and _asks_help(options, rest):
            code = _help(argv, rest, as_json)
        elif code is None:
            code = _typer(argv, rest, completing, as_json)
    except Exit as e:
        return e.exit_code
    except SpexError as e:
        return fail(e.line(), e.exit_code, as_json)
    except BrokenPipeError:
        return 1
    except OSError as e:
        # The environment, not a bug: a state home that is a file, a
        # read-only disk, a working directory deleted under the shell.
        where = f": {e.filename}" if e.filename else ""
        from spexsup.paths import disk_full

        if disk_full(e) and e.filename:  # (stdout's own is said above as is)
            return fail(_full(home, e.filename), 1, as_json)
        return fail(f"{e.strerror or e}{where}", 1, as_json)
    except Exception as e:
        from spexsup.paths import disk_full

        if _is_sqlite_error(e) and disk_full(e):
            return fail(f"state database: {_full(home, None)}", 1, as_json)
        if _is_sqlite_error(e):
            if "locked" in str(e) or "busy" in str(e):
                return fail(f"state database: {e} (another process holds it)", 1, as_json)
            from spexsup.state.store import damaged

            if damaged(e):
                return fail(f"state database: {e} (spex doctor says what to do)", 1, as_json)
            return fail(f"state database: {e} (check SPEXSUP_HOME and its permissions)", 1, as_json)
        # a bug of ours: still one line, never a traceback
        return fail(f"internal error: {type(e).__name__}: {e} (please report this)", 1, as_json)
    from spexsup.cli.table import WRITERS

    if not completing and rest and rest[0] in WRITERS:
        _housekeep(home)
    return code


def _asks_help(options: list[str], rest: list[str]) -> bool:
    """A help page and nothing else: a bare `spex`, or `spex WORDS… --help`
    (or -h) where no word is an option, so the flag cannot be one's value."""
    if not rest:
        return options == rest
    *words, last = rest
    return last in ("--help", "-h") and not any(w.startswith("-") for w in words)


def _help(argv: list[str], rest: list[str], as_json: bool) -> int:
    """The page kept from the last identical request (spexsup.cli.helpcache),
    else typer's, kept for the next."""
    import io

    from spexsup.cli import helpcache

    page_key = helpcache.key(argv)
    kept = helpcache.read(page_key)
    if kept is not None:
        sys.stdout.write(kept[1])
        return kept[0]
    out, page = sys.stdout, io.StringIO()
    sys.stdout = page
    try:
        code = _typer(argv, rest, None, as_json)
    finally:
        sys.stdout = out
        out.write(page.getvalue())
    if code in (0, 2) and page.getvalue():
        helpcache.keep(page_key, code, page.getvalue())
    return code


def _typer(argv: list[str], rest: list[str], completing: str | None, as_json: bool) -> int:
    """The line read by typer: help, completion, groups, and every mistake."""
    import typer

    from spexsup.cli.app import app, keep_only, register

    if completing:
        from typer._completion_classes import completion_init

        completion_init()
    if not completing and rest and not rest[0].startswith("-"):
        register(rest[0])
        keep_only(rest[0])
    else:
        register()
    try:
        code = app(args=argv, prog_name="spex", standalone_mode=False, obj=list(argv))
    except typer.Abort as e:  # click's wrapping of a Ctrl-C
        return interrupted(e.__cause__ or KeyboardInterrupt())
    except typer.TyperException as e:
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            # A bare `spex`: the overview (examples, the commands by panel);
            # a bare group: its help. Either exits 2.
            command = ctx.command
            print(command.overview(ctx) if ctx.parent is None else ctx.get_help())
            return 2
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        path = ctx.command_path.split(" ", 1) if ctx else []
        where = f"spex {path[1]} --help" if len(path) == 2 else "spex --help"
        first = " ".join(str(message).split())
        unknown = getattr(e, "option_name", None)
        if type(e).__name__ == "NoSuchOption" and unknown:
            # click lists every option that starts alike; name the one meant.
            import difflib

            known = sorted(getattr(e, "possibilities", None) or _options_of(ctx))
            close = difflib.get_close_matches(unknown, known, n=1, cutoff=0.6)
            first = f"no such option {unknown!r}"
            where = f"did you mean {close[0]}? see {where}" if close else f"see {where}"
            return fail(f"{first} ({where})", 2, as_json)
        return fail(f"{first} (see {where})", getattr(e, "exit_code", 2), as_json)
    return code if isinstance(code, int) else 0


def _options_of(ctx: Any) -> list[str]:
    """Every option spelling of the command that refused one."""
    command = getattr(ctx, "command", None)
    return [o for p in getattr(command, "params", ()) for o in getattr(p, "opts", ())]


def _full(home: str | None, filename: str | None) -> str:
    """The full file system named: the one holding the file, else the state home."""
    from pathlib import Path

    from spexsup.paths import no_space, resolve_home

    try:
        path = Path(filename).parent if filename else resolve_home(home)
    except SpexError:
        return "no space left on device"
    return no_space(path)


def _is_sqlite_error(e: Exception) -> bool:
    """Without importing sqlite3 for commands that never open the store."""
    sqlite3 = sys.modules.get("sqlite3")
    return sqlite3 is not None and isinstance(e, sqlite3.Error)


def _is_dequeue(rest: list[str]) -> bool:
    """`internal dequeue NAME`, the launcher every turn's end may start: read
    here, not by typer (a hidden group, which the lean path leaves to typer,
    whose import cost ~25 ms of each end-to-next-launch)."""
    return len(rest) == 3 and rest[:2] == ["internal", "dequeue"] and not rest[2].startswith("-")


def _split_home(options: list[str]) -> tuple[str | None, list[str]]:
    """(--home's value, the words after it and --create); `hoist_home` put them first."""
    home, rest = None, options
    if options[:1] == ["--home"] and len(options) > 1:
        home, rest = options[1], options[2:]
    elif options[:1] and options[0].startswith("--home="):
        home, rest = options[0].partition("=")[2], options[1:]
    return home, rest[1:] if rest[:1] == ["--create"] else rest


def _housekeep(home: str | None) -> None:
    """The writers' opportunistic prune, after the command's work is printed:
    stdout is handed to /dev/null first, so a pipe reading the verdict sees its
    end at once. At most once an hour per home and bounded (retention.maybe_prune);
    a failure here must not change the command's exit code."""
    import sqlite3

    from spexsup.paths import resolve_home

    try:
        sys.stdout.flush()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
        path = resolve_home(home)
        from spexsup.state.prunestamp import pruned_lately

        if pruned_lately(path):
            return  # most writers: not due, and nothing imported for it
        from spexsup.core import retention

        retention.maybe_prune(path)
    except (SpexError, OSError, sqlite3.Error):
        pass  # housekeeping only; the next writer an hour on tries again


def main() -> None:
    code = run(sys.argv[1:])
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = code or 1
    except OSError as e:
        code = fail(str(e.strerror or e), 1)
    try:
        sys.stderr.flush()
    except OSError:
        code = code or 1
    # The work is done and recorded; the interpreter's teardown would only
    # collect garbage and checkpoint SQLite's WAL on close (50-150 ms on a
    # wake, and on every turn's exit reporter, before the verdict). Committed
    # transactions are already in the WAL; the next connection reads it.
    os._exit(code)
