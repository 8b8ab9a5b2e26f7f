"""Commands for another host: `spex -H HOST CMD …` and `HOST:NAME` addresses.

`route` runs before typer is imported. It finds the host a command is for
(the global `-H/--host HOST`, or `HOST:NAME` in a command's session
arguments), runs the command there with `ssh … spex … --json` and renders the
document here with the same views the local command uses (cli/render.py),
so text, JSON and exit codes match a local run. `log` streams the remote
output as it comes; other commands pass the remote output through. A prompt
travels on stdin (`-f -`), never on the ssh command line.

`ls --all-hosts/--hosts` and `fanout` with `HOST:NAME` legs are typer
commands of their own (they span hosts): `route` leaves them alone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spexsup import prompt as prompts
from spexsup.errors import Invalid, SpexError

if TYPE_CHECKING:
    from spexsup.adapters.hosts import Answer, Host

# Commands whose --json document is rendered here; the rest pass through.
RENDERED = frozenset({"ls", "show", "wake", "wait", "stop", "rm", "resume"})
# Commands whose prompt option (-m TEXT) is turned into stdin (-f -).
PROMPT_OPTIONS = {"fanout": ("-m", "--message"), "up": ("-m", "--message")}
# Commands that run on this machine only, whose own --host is not the global one.
HERE_ONLY = frozenset({"serve"})


def route(argv: list[str]) -> int | None:
    """The exit code of a command run on another host, or None for a local one."""
    from spexsup.cli.failure import fail

    as_json = "--json" in (argv[: argv.index("--")] if "--" in argv else argv)
    try:
        plan = _plan(argv)
        if plan is None:
            return None
        return _run(*plan, as_json=as_json)
    except SpexError as e:
        return fail(e.line(), e.exit_code, as_json)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1


def _plan(argv: list[str]) -> tuple[str | None, str, list[str], str] | None:
    """(local --home, host, the command's words with bare names, command) or None."""
    from spexsup.cli.complete import SPEC

    end = argv.index("--") if "--" in argv else len(argv)
    home: str | None = None
    host: str | None = None
    words: list[str] = []
    i = 0
    while i < end:
        w = argv[i]
        if w in ("-H", "--host"):
            if i + 1 >= end:
                raise Invalid(f"{w} needs a host name", hint="spex -H HOST COMMAND …")
            host = argv[i + 1]
            i += 2
            continue
        if w.startswith("--host="):
            host = w.partition("=")[2]
        elif w == "--home" and i + 1 < end:
            home = argv[i + 1]
            i += 2
            continue
        elif w.startswith("--home="):
            home = w.partition("=")[2]
        elif w in HERE_ONLY and not any(not x.startswith("-") for x in words):
            # `spex serve --host ADDRESS`: its own option, the address it listens on.
            if host is not None:
                raise Invalid(
                    f"spex {w} serves this machine's state home",
                    hint=f"run spex {w} on {host} and reach it with ssh -L",
                )
            return None
        else:
            words.append(w)
        i += 1
    words += argv[end:]
    command = next((w for w in words if not w.startswith("-")), None)
    if command is None:
        if host is not None:
            raise Invalid("-H HOST needs a command", hint="spex -H HOST ls")
        return None
    if command in ("ls", "fanout") and host is None:
        return None  # they span hosts themselves
    kinds, valued = SPEC.get(command, ((), {}))
    if command == "new":
        kinds = ("session",)  # `new HOST:NAME` creates it there
    at = words.index(command)
    seen = 0
    j = at + 1
    while j < len(words):
        w = words[j]
        if w == "--":
            break
        if w in valued:
            j += 2
            continue
        if w.startswith("-"):
            j += 1
            continue
        repeats = bool(kinds) and kinds[-1] == "*" and kinds[0] == "session"
        if ":" in w and (repeats or (seen < len(kinds) and kinds[seen] == "session")):
            from spexsup.adapters.hosts import check_address

            where, name = check_address(w)
            if where is not None:
                if host is not None and where != host:
                    raise Invalid(
                        f"{w!r} is on host {where!r}, not {host!r}",
                        hint="one host per command (spex fanout spans hosts)",
                    )
                host = where
                words[j] = name
        seen += 1
        j += 1
    if host is None:
        return None
    return home, host, words[at:], command


def _run(home: str | None, host_name: str, words: list[str], command: str, *, as_json: bool) -> int:
    from spexsup import config
    from spexsup.adapters import hosts
    from spexsup.paths import resolve_home

    state = resolve_home(home)
    host = hosts.lookup(config.load(state), host_name)
    if command == "attach":
        return _attach(host, state, words[1:])
    words, stdin = _prompt_to_stdin(command, words)
    if command == "resume" and stdin is not None:
        # `resume NAME -- PROMPT…`: resume there, then wake with the prompt on stdin.
        name = words[1]
        rc = _rendered(host, state, "resume", words, None, as_json)
        if rc != 0:
            return rc
        wake = ["wake", name, "-f", "-"]
        for i, w in enumerate(words[2:], start=2):
            if w == "--json" or w.startswith("--window="):
                wake.append(w)
            elif w == "--window" and i + 1 < len(words):
                wake += [w, words[i + 1]]
        return _rendered(host, state, "wake", wake, stdin, as_json)
    if command in RENDERED and not (command == "ls" and "--help" in words):
        return _rendered(host, state, command, words, stdin, as_json)
    following = command in ("log", "wait") and ("-f" in words or "--follow" in words)
    waiting = f"following {host.name}:{words[1]}'s log" if following else ""
    return hosts.stream(host, state, words, stdin=stdin, waiting=waiting)


def _rendered(
    host: Host, state: Path, command: str, words: list[str], stdin: bytes | None, as_json: bool
) -> int:
    """Run with --json there; print its JSON as it is, or render it as text here."""
    from spexsup.adapters import hosts

    words, color = _color(words) if command in ("ls", "show") else (words, False)
    args = words if "--json" in words else [*words, "--json"]
    waiting = ""
    if command == "wait":
        names = [words[1:][i] for i in _positionals(words[1:], {"--timeout", "--match"})]
        waiting = f"waiting for {', '.join(f'{host.name}:{n}' for n in names) or 'its turns'}"
        answer = _waited(host, state, args, waiting)
    elif command == "wake":
        answer = _woken(host, state, args, stdin)
    else:
        answer = hosts.call(host, state, args, stdin=stdin)
    sys.stderr.write(answer.stderr.decode(errors="replace"))
    if as_json:
        sys.stdout.buffer.write(answer.stdout)
        sys.stdout.flush()
        return answer.rc
    doc = answer.document()
    if doc is None:
        sys.stdout.buffer.write(answer.stdout)  # not JSON: a help text, say
        return answer.rc
    _render(command, words, doc, color=color)
    sys.stdout.flush()
    return answer.rc


def _color(words: list[str]) -> tuple[list[str], bool]:
    """Take `--color WHEN` off the words: the JSON there has no colour, and
    the text is coloured here, for this terminal."""
    from spexsup.present.render import use_color

    choice = "auto"
    rest: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            rest += words[i:]
            break
        if w == "--color" and i + 1 < len(words):
            choice = words[i + 1]
            i += 2
            continue
        if w.startswith("--color="):
            choice = w.partition("=")[2]
        else:
            rest.append(w)
        i += 1
    return rest, use_color(choice)


def _woken(host: Host, state: Path, args: list[str], stdin: bytes | None) -> Answer:
    """`wake` there, under a key (the one given, else `host-<random>` made
    here), asked again after a dropped connection: the retry finds the key
    claimed and answers with the turn it names, so no wake runs twice."""
    import secrets

    from spexsup.adapters import hosts

    return hosts.call_keyed(host, state, args, f"host-{secrets.token_hex(8)}", stdin=stdin)


def _waited(host: Host, state: Path, args: list[str], waiting: str) -> Answer:
    """`wait` there: a dropped connection is Failed, saying the turn runs on."""
    from spexsup.adapters import hosts
    from spexsup.errors import Failed

    try:
        return hosts.call(host, state, args)
    except hosts.ConnectionLost as e:
        raise Failed(
            f"{e.message} while {waiting}", hint=f"the turn keeps running on {host.name}"
        ) from None


def _render(command: str, words: list[str], doc: Any, *, color: bool) -> None:
    from spexsup.present import render

    if command == "rm" and isinstance(doc, dict) and "dry_run" in doc:
        # rm's check of several sessions (refused or --dry-run): what would
        # go, even when some are refused; the refusals came on stderr.
        if doc["dry_run"]:
            sys.stdout.write("".join(f"{line}\n" for line in render.would_remove_lines(doc)))
        return
    if render.failure(doc):
        return  # its one line came on stderr
    out: list[str] = []
    if command == "ls":
        render.ls_text(doc, wide="--wide" in words, color=color)
    elif command == "show":
        out = render.show_lines(doc, color=color)
    elif command == "wake":
        out = [render.verdict_line(doc["session"], doc)]  # the cause said once, there
    elif command == "wait":
        out = [render.ended_line(d) for d in render.as_list(doc)]
    elif command in ("stop", "rm"):
        lines = render.stopped_lines if command == "stop" else render.removed_lines
        out, failed = render.each_said(doc, lines)
        sys.stderr.write("".join(f"{line}\n" for line in failed))
    elif command == "resume":
        out = [render.resumed_line(d) for d in render.as_list(doc)]
    if out:
        sys.stdout.write("\n".join(out) + "\n")


def _prompt_to_stdin(command: str, words: list[str]) -> tuple[list[str], bytes | None]:
    """Take the prompt out of the command line: `wake NAME TEXT`, `-f FILE`,
    `-f -`, `resume NAME -- PROMPT…` and `-m TEXT` all become `-f -` with the
    prompt's bytes on stdin."""
    if command == "wake":
        return _wake_prompt(words)
    if command == "resume":
        # A prompt only with -m, -f or after `--`: other words name sessions
        # (the host's spex refuses a line that reads two ways).
        given = {"-m", "--message", "-f", "--file", "--"}
        if any(w in given or w.startswith(("--message=", "--file=")) for w in words):
            plain, data = _wake_prompt(words, command="resume")
            return plain[:-2], data  # resume there, then the wake takes `-f -`
        return words, None
    options = PROMPT_OPTIONS.get(command)
    if options is None:
        return words, None
    out: list[str] = []
    stdin = None
    i = 0
    while i < len(words):
        if words[i] in options and i + 1 < len(words):
            stdin = prompts.checked(os.fsencode(words[i + 1]))
            out += ["-f", "-"]
            i += 2
            continue
        out.append(words[i])
        i += 1
    if stdin is None and command in ("fanout", "up") and ("-f" in out or "--file" in out):
        return _file_to_stdin(out)
    return out, stdin


def _positionals(words: list[str], valued: set[str]) -> list[int]:
    found: list[int] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            found += range(i + 1, len(words))
            break
        if w in valued:
            i += 2
            continue
        if not w.startswith("-") or w == "-":
            found.append(i)
        i += 1
    return found


def _wake_prompt(words: list[str], command: str = "wake") -> tuple[list[str], bytes | None]:
    """`wake NAME [TEXT…] [-m TEXT] [-f FILE|-] [options]` -> `wake NAME
    [options] -f -` and the bytes (`resume NAME …` alike). Options that take a
    value (`--timeout 30`, `--on-limit wait:2h`) keep it, as the local command
    parses them: it is never taken for the prompt."""
    from spexsup.cli.complete import SPEC

    valued = set(SPEC[command][1]) - {"-f", "--file", "-m", "--message"}
    rest = words[1:]
    name: str | None = None
    text: list[str] = []
    message: str | None = None
    file: str | None = None
    keep: list[str] = []
    i = 0
    dashdash = False
    while i < len(rest):
        w = rest[i]
        if not dashdash and w == "--":
            dashdash = True
        elif not dashdash and w in ("-f", "--file") and i + 1 < len(rest):
            file = rest[i + 1]
            i += 1
        elif not dashdash and w.startswith("--file="):
            file = w.partition("=")[2]
        elif not dashdash and w in ("-m", "--message") and i + 1 < len(rest):
            message = rest[i + 1]
            i += 1
        elif not dashdash and w.startswith("--message="):
            message = w.partition("=")[2]
        elif not dashdash and w in valued and i + 1 < len(rest):
            keep += [w, rest[i + 1]]
            i += 1
        elif not dashdash and w.startswith("-"):
            keep.append(w)
        elif name is None:
            name = w
        else:
            text.append(w)
        i += 1
    if name is None:
        raise Invalid(f"{command} needs a session name", hint=f"spex {command} HOST:NAME TEXT")
    if "-h" in keep or "--help" in keep:
        return [command, name, *keep], None
    return [command, name, *keep, "-f", "-"], prompts.read(text, file, message=message)


def _file_to_stdin(words: list[str]) -> tuple[list[str], bytes | None]:
    out: list[str] = []
    data = None
    i = 0
    while i < len(words):
        if words[i] in ("-f", "--file") and i + 1 < len(words):
            data = prompts.read(None, words[i + 1])
            out += ["-f", "-"]
            i += 2
            continue
        out.append(words[i])
        i += 1
    return out, data


def _attach(host: Host, state: Path, args: list[str]) -> int:
    """`ssh -t HOST spex attach NAME`; inside tmux, in a popup (or a window) of it."""
    from spexsup.adapters import hosts
    from spexsup.adapters.home import outer_argv

    window = "--window" in args
    argv = hosts.attach_argv(host, state, [a for a in args if a != "--window"])
    if os.environ.get("TMUX"):
        name = next((a for a in args if not a.startswith("-")), host.name)
        cmd = outer_argv(argv, f"spex:{host.name}:{name}" if window else None)
        os.execvp(cmd[0], cmd)
    os.execvp(argv[0], argv)
