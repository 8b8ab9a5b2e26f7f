"""Shell completion: the scripts (`spex completion SHELL`) and what words complete to.

The shell calls `spex` back on every TAB with `_SPEX_COMPLETE` set (typer's
protocol for bash, zsh and fish). Session names, wave ids, turn ids and
harness names are answered by `fast_path` from SQLite without importing
typer, so a TAB costs about a bare interpreter's start; commands and options
fall through to typer's own completion. `SPEC` says which word of which
command completes to what; tests/test_completion.py checks it against the
typer app so the two cannot drift apart.

Imports no typer: `fast_path` runs before it would be imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3

COMPLETE_VAR = "_SPEX_COMPLETE"
SHELLS = ("bash", "zsh", "fish")

# command: (the kinds of its positional words, "*" meaning the one before it
#           repeats; its options that take a value -> the kind of that value)
SPEC: dict[str, tuple[tuple[str, ...], dict[str, str | None]]] = {
    "new": (
        (),
        {
            "--harness": "harness",
            "--cwd": None,
            "--env": None,
            "--window": None,
            "--branch": None,
            "--base": None,
            "--repo": None,
            "--worktree-dir": None,
            "--timeout": None,
            "--on-limit": None,
            "--model": None,
            "--fallback-model": None,
            "--verify": None,
            "--verify-timeout": None,
            "--allow-write": None,
            "--deny-read": None,
            "--network": "network",
            "--allow-host": None,
        },
    ),
    "wake": (
        ("session",),
        {
            "-f": None,
            "--file": None,
            "-m": None,
            "--message": None,
            "--window": None,
            "--timeout": None,
            "--on-limit": None,
            "--key": None,
            "--after": "session",
            "--after-any": "session",
            "--model": None,
            "--fallback-model": None,
            "--verify": None,
            "--verify-timeout": None,
            "--budget": None,
        },
    ),
    "wait": (("session", "*"), {"--timeout": None, "--match": None}),
    "log": (("session",), {"--turn": "turn", "--tail": None, "-n": None}),
    "verify": (
        ("session",),
        {"--turn": "turn", "--verify": None, "--verify-timeout": None},
    ),
    "attach": (("session",), {}),
    "up": (
        ("session", "*"),
        {"-m": None, "--message": None, "-f": None, "--file": None, "--stagger": None},
    ),
    "stop": (("session", "*"), {"--grace": None, "--match": None}),
    "resume": (
        ("session", "*"),
        {
            "--match": None,
            "--window": None,
            "-m": None,
            "--message": None,
            "-f": None,
            "--file": None,
        },
    ),
    "ls": (
        ("session", "*"),
        {"--hosts": None, "--match": None, "--state": "state", "--color": "color"},
    ),
    "serve": ((), {"--host": None, "--port": None}),
    "hosts": ((), {}),
    "show": (("session",), {"--color": "color"}),
    "edit": (
        ("session",),
        {
            "--harness": "harness",
            "--cwd": None,
            "--env": None,
            "--unset-env": None,
            "--window": None,
            "--timeout": None,
            "--on-limit": None,
            "--model": None,
            "--fallback-model": None,
            "--verify": None,
            "--verify-timeout": None,
            "--allow-write": None,
            "--deny-read": None,
            "--network": "network",
            "--allow-host": None,
        },
    ),
    "top": ((), {"--color": "color"}),
    "rm": (("session", "*"), {"--match": None}),
    "fanout": (
        ("session", "*"),
        {
            "--match": None,
            "-m": None,
            "--message": None,
            "-f": None,
            "--file": None,
            "--max-concurrent": None,
            "--window": None,
            "--stagger": None,
            "--retry-failed": "wave",
            "--on-complete": None,
            "--worktrees": None,
            "--repo": None,
            "--base": None,
            "--prefix": None,
            "--harness": "harness",
            "--worktree-dir": None,
            "--hosts": None,
            "--timeout": None,
            "--on-limit": None,
            "--key": None,
            "--max-running": None,
            "--budget": None,
            "--after": "session",
            "--after-any": "session",
            "--model": None,
            "--fallback-model": None,
            "--verify": None,
            "--verify-timeout": None,
            "--pick": None,
            "--allow-write": None,
            "--deny-read": None,
            "--network": "network",
            "--allow-host": None,
        },
    ),
    "waves": ((), {}),
    "wave": (("wave",), {}),
    "cost": ((), {"--by": "cost-by", "--since": None}),
    "events": (
        (),
        {
            "--since": None,
            "--session": "session",
            "--kind": "event-kind",
            "-n": None,
            "--tail": None,
        },
    ),
    "status-line": ((), {"--format": None}),
    "mcp": ((), {}),
    "prune": ((), {"--older-than": None, "--session": "session"}),
    "du": ((), {}),
    "diff": (("session",), {"--turn": "turn"}),
    "keep": (("wave", "session"), {}),
    "completion": (("shell",), {}),
    "help": (("command", "*"), {}),
    # A group's command: its two words.
    "harness ls": ((), {}),
    "harness show": (("harness",), {}),
    "worktree ls": (("session", "*"), {}),
    "worktree status": (("session", "*"), {}),
    "wave ls": ((), {}),
    "wave show": (("wave",), {}),
    "waves ls": ((), {}),
    "waves show": (("wave",), {}),
    "hosts ls": ((), {}),
    "queue ls": (("session", "*"), {}),
    "hooks ls": ((), {}),
    "notify ls": ((), {}),
    "schedule ls": (("session", "*"), {}),
    "schedule add": (
        ("session",),
        {
            "--every": None,
            "--cron": None,
            "-m": None,
            "--message": None,
            "-f": None,
            "--file": None,
            "--overlap": "overlap",
            "--timeout": None,
        },
    ),
    "schedule rm": (("schedule", "*"), {}),
    "schedule run": (("schedule",), {}),
}
# The global options that take a value, before the command (`-H HOST`).
GLOBAL: dict[str, str | None] = {"-H": "host", "--host": "host", "--home": None}
GROUPS = (
    "harness",
    "worktree",
    "hooks",
    "notify",
    "schedule",
    "wave",
    "waves",
    "hosts",
    "queue",
)


def _db(home: str | None) -> sqlite3.Connection | None:
    import sqlite3

    from spexsup.paths import resolve_home

    path = resolve_home(home) / "state.db"
    if not path.is_file():
        return None
    try:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
    except sqlite3.Error:
        return None


def values(kind: str, home: str | None, session: str | None = None) -> list[str]:
    """What a word of `kind` may be; [] when the state cannot be read."""
    if kind == "harness":
        from spexsup.adapters import registry
        from spexsup.paths import resolve_home

        return registry.load_registry(resolve_home(home)).names()
    if kind in WORDS:
        return WORDS[kind]()
    if kind == "host":
        from spexsup import config
        from spexsup.adapters import hosts
        from spexsup.errors import SpexError
        from spexsup.paths import resolve_home

        try:
            return sorted(hosts.configured(config.load(resolve_home(home))))
        except SpexError:
            return []
    if kind == "color":
        return ["auto", "always", "never"]
    import sqlite3

    db = _db(home)
    if db is None:
        return []
    try:
        if kind == "session":
            rows = db.execute("SELECT name FROM sessions ORDER BY name").fetchall()
        elif kind == "wave":
            rows = db.execute("SELECT id FROM waves ORDER BY created_at DESC").fetchall()
            rows = [("last",), *rows]
        elif kind == "schedule":
            rows = db.execute("SELECT id FROM schedules ORDER BY created_at DESC").fetchall()
            rows = [("last",), *rows]
        elif kind == "turn":
            rows = db.execute(
                "SELECT id FROM turns WHERE session = ? ORDER BY started_at DESC", (session,)
            ).fetchall()
            rows = [("last",), *rows]
        else:
            return []
    except sqlite3.Error:
        return []
    finally:
        db.close()
    return [r[0] for r in rows]


def classify(args: Sequence[str]) -> tuple[str | None, str | None] | None:
    """(kind of the next word, session named so far) for `spex ARGS… <TAB>`.

    None when typer must answer (a command or option name, or a word this
    table does not know); kind None when the word is free text.
    """
    words: list[str] = []
    it = iter(args)
    for word in it:
        if word in GLOBAL:
            if next(it, None) is None:  # the value is the word being completed
                return (GLOBAL[word], None)
        elif word not in ("--create", "--no-hooks") and not word.startswith(("--home=", "--host=")):
            words.append(word)
    if words[:1] and words[0] in GROUPS and len(words) > 1:
        words = [" ".join(words[:2]), *words[2:]]
    if not words or words[0] not in SPEC:
        return None
    positional, options = SPEC[words[0]]
    taken: list[str] = []
    want: str | None = None
    for word in words[1:]:
        if want is not None:
            want = None
            continue
        if word == "--":
            return (None, None)
        if word in options:
            want = word
        elif not word.startswith("-"):
            taken.append(word)
    session = taken[0] if taken else None
    if want is not None:
        return (options[want], session)
    if positional[-1:] == ("*",) and len(taken) >= len(positional) - 1:
        return (positional[-2], session)
    if len(taken) < len(positional):
        return (positional[len(taken)], session)
    return (None, session)


def _home(args: Sequence[str]) -> str | None:
    for i, word in enumerate(args):
        if word == "--home" and i + 1 < len(args):
            return args[i + 1]
        if word.startswith("--home="):
            return word.partition("=")[2]
    return None


def _split(line: str) -> list[str]:
    import shlex

    lex = shlex.shlex(line, posix=True)
    lex.whitespace_split = True
    lex.commenters = ""
    out: list[str] = []
    try:
        out.extend(lex)
    except ValueError:  # an unclosed quote: complete the partial word as it is
        out.append(lex.token)
    return out


def _request(shell: str) -> tuple[list[str], str]:
    """(words before the cursor, the word being completed), as typer's classes read them."""
    if shell == "bash":
        words = _split(os.environ.get("COMP_WORDS", ""))
        cword = int(os.environ.get("COMP_CWORD", "0") or 0)
        return words[1:cword], (words[cword] if cword < len(words) else "")
    line = os.environ.get("_TYPER_COMPLETE_ARGS", "")
    words = _split(line)[1:]
    if words and not line.endswith(" "):
        return words[:-1], words[-1]
    return words, ""


def fast_path() -> int | None:
    """Answer a completion request for names and ids; None to let typer answer."""
    instruction = os.environ.get(COMPLETE_VAR, "")
    action, _, shell = instruction.partition("_")
    if action != "complete" or shell not in SHELLS:
        return None
    try:
        args, incomplete = _request(shell)
    except ValueError:
        return None
    if incomplete.startswith("-"):
        return None
    found = classify(args)
    if found is None:
        return None
    kind, session = found
    hits = (
        [v for v in values(kind, _home(args), session) if v.startswith(incomplete)] if kind else []
    )
    if shell == "fish" and os.environ.get("_TYPER_COMPLETE_FISH_ACTION") == "is-args":
        return 0 if hits else 1
    if shell == "zsh":
        quoted = "\n".join(f'"{v}"' for v in hits)
        sys.stdout.write(f"_arguments '*: :(({quoted}))'\n" if hits else "_files\n")
    elif hits:
        sys.stdout.write("\n".join(hits) + "\n")
    return 0


def script(shell: str) -> str:
    """The script that `spex completion SHELL` prints, to be sourced by that shell."""
    from typer._completion_shared import get_completion_script

    return get_completion_script(prog_name="spex", complete_var=COMPLETE_VAR, shell=shell)


# Callbacks for typer's own completion path (zsh/fish asking about options, a
# word typed after an option this table lists): same sources, home from --home.


def _root_home(ctx: Any) -> str | None:
    home = ctx.find_root().params.get("home")
    return str(home) if home else None


def _commands() -> list[str]:
    from spexsup.cli.table import COMMANDS

    return [c.name for c in COMMANDS if c.name not in ("maint-op", "internal")]


def _event_kinds() -> list[str]:
    from spexsup.state.events import KINDS

    return list(KINDS)


def _states() -> list[str]:
    from spexsup.states import SESSION_STATES

    return list(SESSION_STATES)


def _overlaps() -> list[str]:
    return ["skip", "queue"]


def _cost_groups() -> list[str]:
    return ["session", "harness", "model", "day", "wave"]


def _networks() -> list[str]:
    return ["allow", "none", "open"]


# Kinds whose words are fixed lists, not read from the state home.
WORDS = {
    "shell": lambda: list(SHELLS),
    "command": _commands,
    "event-kind": _event_kinds,
    "state": _states,
    "overlap": _overlaps,
    "cost-by": _cost_groups,
    "network": _networks,
}


def shell_names(ctx: Any, incomplete: str) -> list[str]:
    return [s for s in SHELLS if s.startswith(incomplete)]


def session_names(ctx: Any, incomplete: str) -> list[str]:
    return [n for n in values("session", _root_home(ctx)) if n.startswith(incomplete)]


def wave_ids(ctx: Any, incomplete: str) -> list[str]:
    return [n for n in values("wave", _root_home(ctx)) if n.startswith(incomplete)]


def schedule_ids(ctx: Any, incomplete: str) -> list[str]:
    return [n for n in values("schedule", _root_home(ctx)) if n.startswith(incomplete)]


def overlap_words(ctx: Any, incomplete: str) -> list[str]:
    return [w for w in WORDS["overlap"]() if w.startswith(incomplete)]


def harness_names(ctx: Any, incomplete: str) -> list[str]:
    return [n for n in values("harness", _root_home(ctx)) if n.startswith(incomplete)]


def turn_ids(ctx: Any, incomplete: str) -> list[str]:
    session = ctx.params.get("name")
    found = values("turn", _root_home(ctx), session) if session else []
    return [n for n in found if n.startswith(incomplete)]
