"""`spex worktree [ls] | diff | keep`, `spex trust [ls]`."""

import os
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from spexsup import ids, lazyre
from spexsup.cli import complete, decl
from spexsup.cli.app import ListingGroup, app
from spexsup.cli.decl import command, open_spex
from spexsup.cli.params import JsonOpt, NameArg, NamesArg, TurnOpt
from spexsup.present.render import age, argv_word, document, print_json, table, with_iso
from spexsup.record import Record

if TYPE_CHECKING:
    from spexsup.core.salvage import Salvage
    from spexsup.core.spex import Spex
    from spexsup.core.worktree import Setup, Worktree

worktree_app = typer.Typer(cls=ListingGroup, invoke_without_command=True)
app.add_typer(worktree_app, name="worktree")


@worktree_app.callback()
def worktree_group(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """Git worktrees of worktree sessions.

    Bare `spex worktree` lists them, as `spex worktree ls` does
    (`spex worktree status` is its old name).

    \b
    Examples:
      spex worktree ls
    """
    if ctx.invoked_subcommand is None:
        status(ctx, None, as_json=as_json)


@worktree_app.command("ls")
def status(
    ctx: decl.Context,
    names: NamesArg = None,
    as_json: JsonOpt = False,
) -> None:
    """Per worktree session: branch, ahead/behind base, dirty and untracked
    counts, unsaved work, last commit; then the salvage branches (spex rm
    --salvage and spex keep made them) with their commit, age and session.

    NAME…: those sessions (default: all) and their salvage branches. --json: one
    document per worktree (kind "worktree") and per salvage branch (kind
    "salvage").

    \b
    Examples:
      spex worktree ls
      spex worktree ls fix --json
      spex worktree ls --json | jq -r '.[] | select(.kind == "salvage") | .branch'
    """
    from spexsup.core import salvage, sessions

    for n in names or []:
        ids.validate_name(n)
    spex = open_spex(ctx)
    rows = sessions.status_rows(spex, names or [])
    found = salvage.find(spex, sessions=names or [])
    if as_json:
        docs = [document({"kind": "worktree", **r}) for r in rows]
        print_json(docs + [document(s.public()) for s in found])
        return
    if not rows and not names:
        decl.echo("no worktree sessions (create one with: spex new NAME --worktree)")

    for r in rows:
        decl.echo(f"{r['name']}: {r['branch']} in {r['path']}")
        if r.get("error"):
            decl.echo(f"  {r['error']}")
        elif r["state"] == "missing":
            decl.echo("  worktree missing (removed behind spex)")
        else:
            decl.echo(
                f"  {r['ahead']} ahead, {r['behind']} behind base;"
                f" {r['modified']} modified, {r['untracked']} untracked"
            )
            decl.echo(f"  last commit: {r['last_commit'] or '-'}")
        if not r.get("error"):
            decl.echo(f"  unsaved: {r['unsaved'] or 'nothing'}")
    if found:
        decl.echo("")
        decl.echo("salvage branches (git log BRANCH shows one; spex prune --salvage deletes them):")
        salvage_table(found)


worktree_app.command("status", hidden=True)(status)  # `ls`'s old name


def salvage_table(found: "Sequence[Salvage]") -> None:
    """Salvage branches, one a row: branch, commit, age, session, repository."""
    now = time.time()
    rows = [
        [
            s.branch,
            s.short,
            age(now - s.created_at),
            s.session or "-",
            s.repo + (f" ({s.error})" if s.error else ""),
        ]
        for s in found
    ]
    table(["BRANCH", "COMMIT", "AGE", "SESSION", "REPO"], rows, squeeze="REPO")


@command()
def diff(
    ctx: decl.Context,
    name: NameArg,
    turn: TurnOpt = None,
    stat: Annotated[bool, decl.Option("--stat", help="Only the diffstat.")] = False,
    no_pager: Annotated[
        bool, decl.Option("--no-pager", help="On a terminal too, print the diff as it is.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show what a turn changed in its git working tree (from its start to its end:
    the next turn's start, or now for the latest turn).

    NAME is the session; --turn takes an id, a prefix of it, last or last~N.
    Says `no changes` when the turn changed nothing. On a terminal, coloured
    as git colours it (not with NO_COLOR set) and paged through
    $SPEXSUP_PAGER, else $PAGER, else less -FRX (an empty one, cat, or one
    not installed: no pager); through a pipe, plain text.

    \b
    Examples:
      spex diff fix
      spex diff fix --turn last~1 --stat
      spex diff fix --no-pager | grep '^+'
      spex diff fix --json | jq -r '.files[].path'
    """
    from spexsup.conductors import diff

    ids.validate_name(name)
    r = diff.turn_range(open_spex(ctx), name, turn)
    if as_json:
        print_json(document({**r.public(), "files": diff.diff_files(r)}))
        return
    if not diff.changed(r):
        decl.echo("no changes")
        return
    tty = sys.stdout.isatty()
    color = tty and not os.environ.get("NO_COLOR")
    through = diff.pager(os.environ) if tty and not no_pager else None
    sys.stdout.flush()
    rc = diff.show_diff(r, stat=stat, color=color, through=through)
    if rc != 0:
        raise decl.Exit(130 if rc == 130 else 1)


@command()
def keep(
    ctx: decl.Context,
    wave: Annotated[
        str,
        decl.Argument(
            metavar="WAVE",
            help="A wave id, a unique prefix of its random part, last or last~N.",
            autocompletion=complete.wave_ids,
        ),
    ],
    leg: Annotated[str, decl.Argument(metavar="LEG", help="The leg to keep: its session, or 1…N.")],
    force: Annotated[
        bool, decl.Option("--force", help="Stop other legs' running turns first.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Keep one leg of a best-of-N wave; remove the others (salvaging unsaved work).

    WAVE is a wave id, a prefix of it, last or last~N; LEG the leg's session
    or its number. Every leg is checked first: while one cannot go (a
    running turn without --force) nothing is kept or removed. Then prints
    the next step: the git commands that merge
    the kept branch into its base, and the branches (spex/salvage/…) the
    other legs' unsaved work went to.

    \b
    Examples:
      spex keep last try-2
      spex keep 3fa 1 --force
    """
    from spexsup.conductors import bestof

    spex = open_spex(ctx)
    outcomes = bestof.keep(spex, wave, leg, force=force)
    if as_json:
        print_json([document(o.public()) for o in outcomes])
    else:
        for o in outcomes:
            decl.echo(f"{o.session}: {o.outcome}" + "".join(f"\n  {d}" for d in o.detail))
        for line in bestof.next_steps(spex, outcomes):
            decl.echo(line)
    worst = max(o.exit_code for o in outcomes)
    if worst:
        raise decl.Exit(worst)


# --- fanout --keep-best ------------------------------------------------------------


class Kept(Record):
    """What `fanout --keep-best` did, as its JSON (`keep`) and its lines."""

    ok: bool
    doc: dict[str, Any]
    lines: list[str]

    def public(self) -> dict[str, Any]:
        return self.doc


def keep_best_leg(spex: "Spex", wave: dict[str, Any], pick: str) -> Kept:
    """Keep the wave's best leg by its check (`bestof.choose`) as `spex keep`
    does; when no leg passed, nothing is removed and each leg's check says why."""
    from spexsup.conductors import bestof

    choice = bestof.choose(spex, wave, pick)
    doc: dict[str, Any] = {**choice.public(), "outcomes": []}
    if choice.leg is None:
        lines = ["no leg passed its check: nothing kept, nothing removed"]
        if all(c is None for c in choice.checks.values()):
            lines[0] = "no leg ran a check (give --verify CMD): nothing kept, nothing removed"
        for name, c in choice.checks.items():
            if c is not None:
                said = f"rc {c['rc']}" if c["rc"] is not None else c["state"]
                lines.append(f"  {name}: check `{c['command']}` failed ({said})"
                             + (f": {c['tail']}" if c["tail"] else ""))  # fmt: skip
        return Kept(False, doc, lines)
    outcomes = bestof.keep(spex, wave["id"], choice.leg)
    doc["outcomes"] = [o.public() for o in outcomes]
    how = "the first to pass its check" if pick == "first" else "the smallest diff that passed"
    lines = [f"kept {choice.leg} ({how}): {choice.diffstat or 'no changes'}"]
    for o in outcomes:
        lines.append(f"{o.session}: {o.outcome}" + "".join(f"\n  {d}" for d in o.detail))
    lines += bestof.next_steps(spex, outcomes)
    return Kept(max(o.exit_code for o in outcomes) == 0, doc, lines)


# --- trust in a repository's post_create ----------------------------------------

# Controls (C0, DEL, C1) a config file may hide in an argv word: shown escaped.
_CONTROLS = lazyre.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown_argv(argv: Sequence[str]) -> str:
    """A config file's argv as a person must read it before running it: shell
    quoting, and every control character visible as an escape (`$'…'`)."""

    def word(w: str) -> str:
        if not _CONTROLS.search(w):
            return argv_word(w)
        body = w.replace("\\", "\\\\").replace("'", "\\'")
        return "$'" + _CONTROLS.sub(lambda m: _escape(m.group()), body) + "'"

    return " ".join(word(w) for w in argv)


def _escape(c: str) -> str:
    named = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}
    return named.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x80 else f"\\u{ord(c):04x}")


def confirm_post_create(setup: "Setup") -> bool:
    """On a terminal, show the post_create of an untrusted file and ask; a yes
    trusts that file's bytes (the caller records it). False off a terminal."""
    if not sys.stdin.isatty():
        return False
    decl.echo(f"{setup.path} runs this in the new worktree (post_create):", err=True)
    decl.echo(f"  {shown_argv(setup.post_create)}", err=True)
    # EOF or Ctrl-C at the prompt: no
    return decl.confirm(f"Trust this file (sha256 {setup.sha256[:12]}) and run it?")


def ran_post_create(w: "Worktree") -> str | None:
    """The line that says what post_create ran, if it ran."""
    if not w.post_create:
        return None
    return f"ran post_create of {w.repo}/.spexsup.toml: {shown_argv(w.post_create)}"


@command()
def trust(
    ctx: decl.Context,
    path: Annotated[
        str | None,
        decl.Argument(
            metavar="[PATH]",
            help="A .spexsup.toml, or the repository that holds it.",
            show_default=False,
        ),
    ] = None,
    revoke: Annotated[bool, decl.Option("--revoke", help="Forget the trust of PATH.")] = False,
    list_: Annotated[bool, decl.Option("--list", help="List what is trusted.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Trust a repository's .spexsup.toml: its post_create (arbitrary commands)
    then runs at spex new --worktree without asking. Recorded by the file's
    content hash: a changed file needs trusting again.

    `spex trust ls` (or bare `spex trust`, or `--list`) lists what is trusted;
    a repository in a directory named ls is `spex trust ./ls`.

    \b
    Examples:
      spex trust ~/src/api             # after reading ~/src/api/.spexsup.toml
      spex trust ls
      spex trust --revoke ~/src/api
    """
    from spexsup.core import trust as trusts
    from spexsup.errors import Invalid

    if path in (None, "ls") and not revoke:
        list_, path = True, None
    if list_ == (path is not None) or (revoke and path is None):
        raise Invalid("give PATH, --revoke PATH or ls", hint="see spex trust --help")
    spex = open_spex(ctx)
    if list_:
        rows = [t.public() for t in trusts.trusted(spex.home)]
        if as_json:
            print_json(with_iso(rows))
            return
        if not rows:
            decl.echo("nothing trusted (trust a repository's .spexsup.toml with: spex trust PATH)")
        for r in rows:
            decl.echo(f"{r['path']}  sha256 {r['sha256'][:12]}  {r['state']}")
            if r["post_create"]:
                decl.echo(f"  post_create: {shown_argv(r['post_create'])}")
        return
    assert path is not None
    t = trusts.revoke_trust(spex.home, path) if revoke else trusts.trust(spex.home, path)
    if as_json:
        print_json(with_iso(t.public()))
        return
    verb = "no longer trusted" if revoke else "trusted"
    decl.echo(f"{verb}: {t.path} (sha256 {t.sha256[:12]})")
    if not revoke:
        decl.echo(f"  post_create: {shown_argv(t.post_create) if t.post_create else '(none)'}")
