"""`spex ls | show | rm | up | attach | doctor | completion` (`spex new` is in cli/new.py)."""

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from spexsup import ids
from spexsup import prompt as prompts
from spexsup.adapters.prefetch import EarlyCensus
from spexsup.cli import complete, decl
from spexsup.cli.decl import command, open_spex, settings
from spexsup.cli.params import (
    AllOpt,
    ColorOpt,
    JsonOpt,
    MatchOpt,
    NameArg,
    NamesArg,
    StaggerOpt,
    confirm_many,
    stagger_seconds,
)
from spexsup.errors import Invalid
from spexsup.present import fit
from spexsup.present.render import (
    document,
    ls_text,
    one_failed,
    print_json,
    refusal_line,
    removed_lines,
    rm_check_document,
    show_lines,
    table,
    use_color,
    would_remove_lines,
)

if TYPE_CHECKING:
    from spexsup.config import Config
    from spexsup.core.spex import Spex
    from spexsup.errors import SpexError


@command("ls")
def ls(
    ctx: decl.Context,
    names: Annotated[
        list[str] | None,
        decl.Argument(
            metavar="[PATTERN]…",
            help="Only sessions whose name matches one of these globs.",
            show_default=False,
            autocompletion=complete.session_names,
        ),
    ] = None,
    match: MatchOpt = None,
    state: Annotated[
        str | None,
        decl.Option(
            "--state",
            metavar="STATE",
            help="Only sessions in STATE (idle, running, failed, stopped, creating, removing).",
        ),
    ] = None,
    quiet: Annotated[bool, decl.Option("-q", "--quiet", help="Names only, one a line.")] = False,
    wide: Annotated[bool, decl.Option("--wide", help="Show whole turn ids.")] = False,
    color: ColorOpt = "auto",
    all_hosts: Annotated[
        bool, decl.Option("--all-hosts", help="This machine's and every host's sessions.")
    ] = False,
    hosts: Annotated[
        str | None,
        decl.Option(
            "--hosts", metavar="HOST,…", help="These hosts' sessions (local is this machine)."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List sessions and their current or last turn (with --all-hosts: on every host).

    One line per session, in natural order (try-2 before try-10); a pipe gets
    every column whole, two spaces apart. The turn shows its outcome flags
    (denied:Bash, max-turns); on a terminal the state is coloured (failed red,
    running green, stopped yellow) unless NO_COLOR is set or --color never.

    \b
    Examples:
      spex ls
      spex ls 'api-*' --state error
      spex ls -q --state stopped | xargs -n1 spex resume
      spex ls --wide
      spex ls --json | jq -r '.[] | select(.state == "error") | .name'
      spex ls --all-hosts
      spex -H box1 ls
    """
    colored = use_color(color)
    if all_hosts or hosts is not None:
        if names or match or state or quiet:
            raise Invalid("PATTERN, --match, --state and -q list this machine's sessions")
        chosen = None if hosts is None else hosts.split(",")
        fleet_ls(ctx, chosen, wide=wide, as_json=as_json, color=colored)
        return
    globs = [*(names or []), *([match] if match else [])]
    spex = open_spex(ctx)
    # The panes are asked for before the reading (and its imports) begins.
    early = EarlyCensus(spex.tmux)
    from spexsup.turn.read import listing

    rows = listing(spex, globs, state=state, early=early)
    if as_json:
        print_json(rows)
    elif quiet:  # for scripts: nothing at all when nothing matches
        for r in rows:
            decl.echo(r["name"])
    elif not rows and (globs or state):
        decl.echo("no sessions match")
    else:
        ls_text(rows, wide=wide, color=colored)


def fleet_ls(
    ctx: decl.Context, names: list[str] | None, *, wide: bool, as_json: bool, color: bool
) -> None:
    """`ls --all-hosts`: one table with a HOST column; a host not reached is one row."""
    from spexsup.adapters import fleet
    from spexsup.paths import resolve_home
    from spexsup.present.render import LS_HEADERS, ls_rows

    state = resolve_home(ctx.find_root().obj)
    rows, reached = fleet.list_sessions(settings_here(state), state, names)
    if as_json:
        print_json(rows)
    else:
        lines = []
        for r in rows:
            if r.get("reachable", True):
                lines.append([r["host"], *ls_rows([r], wide=wide, color=color)[0]])
            else:
                lines.append([r["host"], "-", "-", "unreachable", "-", "-", "-", r["error"]])
        table(["HOST", *LS_HEADERS], lines, narrow=fit.LS_STEPS)
    if not reached:
        raise decl.Exit(1)


def settings_here(state: Path) -> "Config":
    """config.toml for commands that span hosts (no local store needed)."""
    from spexsup import config

    return config.load(state)


@command()
def show(
    ctx: decl.Context, name: NameArg, color: ColorOpt = "auto", as_json: JsonOpt = False
) -> None:
    """Show one session and its recent turns (the state coloured as in `spex ls`).

    \b
    Examples:
      spex show api
      spex show api --json | jq '.turns[0]'
    """
    colored = use_color(color)
    ids.validate_name(name)
    spex = open_spex(ctx)
    early = EarlyCensus(spex.tmux, name)  # as `ls` does
    from spexsup.turn.read import describe

    (row,) = describe(spex, [name], turns=10, worktree_status=True, early=early)
    if as_json:
        print_json(row)
        return
    for line in show_lines(row, color=colored):
        decl.echo(line, color=colored)  # click drops escapes off a terminal unless told


@command()
def rm(
    ctx: decl.Context,
    names: NamesArg = None,
    all_: AllOpt = False,
    match: MatchOpt = None,
    force: Annotated[bool, decl.Option("--force", help="Stop a running turn first.")] = False,
    salvage: Annotated[
        bool,
        decl.Option("--salvage", help="Commit a worktree's unsaved work to a branch first."),
    ] = False,
    keep_worktree: Annotated[
        bool, decl.Option("--keep-worktree", help="Leave the worktree and its branch.")
    ] = False,
    dry_run: Annotated[
        bool,
        decl.Option(
            "--dry-run", help="Print what would go and what would be refused; change nothing."
        ),
    ] = False,
    yes: Annotated[
        bool, decl.Option("--yes", "-y", help="With --all on a terminal: do not ask first.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete sessions and their tmux panes (and worktrees, never with unsaved work).

    Refused while a turn runs, unless --force (which stops it first).

    Several sessions (names, --all, --match) are all checked before any is
    removed: if one would be refused (a running turn, unsaved worktree work,
    unknown), none is removed and each refused one is named (exit 3).
    Checked first, refused cleanly; then removed at once: a turn another
    process starts after the check still refuses that session's removal,
    and the others are removed all the same.
    --all on a terminal asks first (--yes skips the question); off a
    terminal (a script) it does not ask.

    \b
    Examples:
      spex rm api
      spex rm --match 'tmp-*' --force
      spex rm --all --dry-run
      spex rm fix --salvage
    """
    from spexsup.core import sessions
    from spexsup.turn.remove import refusals, remove

    spex = open_spex(ctx)
    chosen = sessions.select(spex, names or [], all_=all_, match=match)
    flags = {"force": force, "salvage": salvage, "keep_worktree": keep_worktree}
    if dry_run or len(chosen) > 1 or not names:
        found = refusals(spex, chosen, **flags)
        if dry_run or any(found.values()):
            _rm_checked(found, dry_run=dry_run, as_json=as_json)
            return
        if all_ and not yes and sys.stdin.isatty() and sys.stdout.isatty():
            _confirm_rm(chosen)
    from spexsup.errors import SpexError
    from spexsup.turn.scheduled import entries

    def removed(mine: "Spex", n: str) -> dict[str, Any]:
        clocks = entries(mine, (n,))
        removal = remove(mine, n, **flags)
        notes = removal.lines() if removal else []
        notes += [f"removed schedule {c.id} ({c.cadence.describe()})" for c in clocks]
        return document({"ok": True, "session": n, "removed": True, "notes": notes})

    if names and len(names) == 1:
        # In a thread too: a signal ends the removal's wait, not its kill.
        ((_, doc),) = spex.at_once(chosen, removed)
        if isinstance(doc, SpexError):
            raise doc
        if as_json:
            print_json(doc)
        else:
            for line in removed_lines(doc):
                decl.echo(line)
        return
    # Several: checked above, then removed at once (DESIGN "spex rm of
    # several"); each said as it is done, in their order.
    done = []
    failed: SpexError | None = None
    for n, outcome in spex.at_once(chosen, removed):
        if isinstance(outcome, SpexError):
            failed = failed or outcome
            outcome = one_failed(n, outcome)
        done.append(outcome)
        if not as_json:
            decl.say_each(outcome, removed_lines)
    if as_json:
        print_json(done)
    if failed is not None:
        raise decl.Exit(failed.exit_code)


def _rm_checked(found: "dict[str, SpexError | None]", *, dry_run: bool, as_json: bool) -> None:
    """Say what the check of several sessions found; exit 3 when any is refused."""
    doc = rm_check_document(found, dry_run=dry_run)
    if as_json:
        print_json(doc)
    elif dry_run:
        for line in would_remove_lines(doc):
            decl.echo(line)
    for n, e in found.items():
        if e is not None:
            decl.echo(f"spex: {refusal_line(n, e.line())}", err=True)
    if not doc["ok"]:
        decl.echo(f"spex: {doc['error']}", err=True)
        raise decl.Exit(doc["exit_code"])


def _confirm_rm(chosen: list[str]) -> None:
    """Ask on the terminal; anything but y or yes (EOF, Ctrl-C too) removes nothing."""
    confirm_many(f"remove {len(chosen)} sessions", chosen, nothing="removed nothing")


@command()
def up(
    ctx: decl.Context,
    names: NamesArg = None,
    all_: AllOpt = False,
    revive: Annotated[
        bool, decl.Option("--revive", help="Re-wake sessions whose turn a reboot interrupted.")
    ] = False,
    message: Annotated[
        str | None,
        decl.Option("-m", "--message", metavar="TEXT", help="The prompt for --revive."),
    ] = None,
    file: Annotated[
        str | None,
        decl.Option(
            "-f", "--file", metavar="FILE", help="Read the prompt for --revive from FILE (- stdin)."
        ),
    ] = None,
    stagger: StaggerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recreate missing panes (never starts a turn); --revive resumes interrupted turns.

    \b
    Examples:
      spex up --all
      spex up api web
      spex up --revive -m "the machine restarted; carry on"
      spex up --revive --stagger 2s
    """
    from spexsup.core import sessions

    if names and all_:
        raise Invalid("name the sessions or give --all, not both")
    if not names and not all_ and not revive:
        raise Invalid("name the sessions to bring up, or give --all")
    if (message is not None or file is not None) and not revive:
        raise Invalid("a prompt (-m, -f) goes with --revive")
    spacing = stagger_seconds(stagger)
    if spacing is not None and not revive:
        raise Invalid("--stagger goes with --revive (spex up starts no turn without it)")
    prompt = None
    if message is not None or file is not None:
        prompt = prompts.read(None, file, message=message, forms="-m TEXT")
    for n in names or []:
        ids.validate_name(n)
    spex = open_spex(ctx)
    reports = sessions.up(spex, names)
    if as_json and not revive:
        print_json([document(r.as_json()) for r in reports])
    elif not as_json:
        for r in reports:
            decl.echo(f"{r.name}: {r.status}" + (f" ({r.detail})" if r.detail else ""))
    if revive:
        from spexsup.cli.runwave import run_wave
        from spexsup.conductors import fanout as plans

        # The pane reports go with the JSON: one not ok is why this exits 1.
        panes = [r.as_json() for r in reports]
        with plans.revive(spex, names, prompt, spacing) as plan:
            if plan.nothing is not None and as_json:
                # `homes`: the old name of `panes`, for one release (DESIGN §24).
                print_json(document({"revived": [], "panes": panes, "homes": panes}))
            elif plan.nothing is not None:
                decl.echo(plan.nothing)
            else:
                run_wave(spex, plan, as_json=as_json, also={"panes": panes})
    if not all(r.ok for r in reports):
        raise decl.Exit(1)


@command()
def attach(
    ctx: decl.Context,
    name: NameArg,
    read_only: Annotated[
        bool, decl.Option("--read-only", "-r", help="Look without typing into the pane.")
    ] = False,
    window: Annotated[
        bool, decl.Option("--window", help="Inside tmux: open in a new window, not a popup.")
    ] = False,
) -> None:
    """Attach this terminal to the session's pane (detach: prefix, d; C-a by default).

    Inside another tmux, the pane opens in a popup of that tmux (or a new
    window with --window); detaching returns to where you were.

    \b
    Examples:
      spex attach api
      spex attach --read-only api
    """
    from spexsup.adapters.home import outer_argv
    from spexsup.core import sessions

    ids.validate_name(name)
    spex = open_spex(ctx)
    s = sessions.get(spex, name)
    sessions.ensure_pane(spex, s)
    tmux = spex.tmux.tmux_argv()
    prefix = settings(ctx, spex).tmux_prefix
    if prefix:
        # The private server's prefix (config.toml's tmux_prefix), set before attaching.
        import subprocess

        subprocess.run(
            [*tmux, "set-option", "-g", "prefix", prefix], check=False, capture_output=True
        )
    flags = ["-r"] if read_only else []
    argv = [*tmux, "attach-session", *flags, "-t", f"={name}:"]
    spex.close()
    if os.environ.get("TMUX"):
        # Our server inside the user's: the outer tmux runs the attach, with
        # TMUX unset so the inner client does not refuse to nest.
        cmd = outer_argv(["env", "-u", "TMUX", *argv], f"spex:{name}" if window else None)
        os.execvp(cmd[0], cmd)
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    os.execvpe(argv[0], argv, env)


@command()
def doctor(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """Check tmux, the state dir, config files and harness binaries.

    \b
    Examples:
      spex doctor
      spex doctor --json
    """
    import platform

    from spexsup import __version__, config
    from spexsup.conductors.doctor import run_checks
    from spexsup.core.spex import Spex
    from spexsup.errors import SpexError

    spex = Spex.open(ctx.find_root().obj)
    candidates = config.config_files(spex.home)
    try:
        loaded = config.load(spex.home)
        config_error = None
    except SpexError as e:  # reported among the checks, and fails the doctor
        loaded, config_error = None, e.line()
    checks = run_checks(spex, Path.cwd())
    tmux = next((c.detail for c in checks if c.name == "tmux"), "?")
    versions = {"spex": __version__, "python": platform.python_version(), "tmux": tmux}
    files = [
        {"path": str(p), "read": bool(loaded and p in loaded.files), "order": i + 1}
        for i, p in enumerate(candidates)
    ]
    if as_json:
        print_json(
            document(
                {
                    "ok": config_error is None and not any(not c.ok and c.required for c in checks),
                    "versions": versions,
                    "config": {
                        "files": files,
                        "error": config_error,
                        "problems": [
                            {"severity": "error" if c.required else "warning", "detail": c.detail}
                            for c in checks
                            if c.name == "config" and not c.ok
                        ],
                    },
                    "checks": [c.as_json() for c in checks],
                }
            )
        )
    else:
        decl.echo(f"spex {__version__}, Python {versions['python']}, {tmux}")
        for f in files:
            state = "read" if f["read"] else "absent"
            decl.echo(f"config {f['order']}: {f['path']} ({state})")
        for c in checks:  # the "config" ones among them name config_error
            decl.echo(
                f"{'ok  ' if c.ok else 'FAIL' if c.required else 'warn'}  {c.name}: {c.detail}"
            )
    if config_error or any(not c.ok and c.required for c in checks):
        raise decl.Exit(1)


@command()
def completion(
    shell: Annotated[
        str,
        decl.Argument(
            metavar="SHELL", help="bash, zsh or fish.", autocompletion=complete.shell_names
        ),
    ],
) -> None:
    """Print the completion script for bash, zsh or fish.

    It completes commands, options, session names, turn and wave ids,
    harness and host names, states and event kinds. To install it, run one
    of these lines, then open a new shell.

    \b
    Examples:
      echo 'eval "$(spex completion bash)"' >> ~/.bashrc
      echo 'eval "$(spex completion zsh)"' >> ~/.zshrc
      spex completion fish > ~/.config/fish/completions/spex.fish
    """
    from spexsup.errors import Invalid

    if shell not in complete.SHELLS:
        raise Invalid(f"unknown shell {shell!r}", hint="bash, zsh or fish")
    decl.echo(complete.script(shell))
