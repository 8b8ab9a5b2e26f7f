"""The one command table: every `spex` command, the module that declares it,
and whether it writes. Read before typer is imported (spexsup.cli.lean)."""

from spexsup.record import Record


class Command(Record):
    """One `spex` command or command group."""

    name: str
    # The module of spexsup.cli that registers it: `spex NAME` imports that
    # one only (and what it imports), so no command pays for the others'.
    module: str
    # A writer: the state home may be pruned after it (DESIGN: writers prune).
    writes: bool = False


# The one command table, in the order `spex --help` lists the commands: the
# order a session lives through them. tests/test_cli.py checks it against
# the commands the modules really register.
#
# These modules (and params.py) do NOT use `from __future__ import
# annotations`, unlike the rest of the code: the lean path (spexsup.cli.lean)
# reads each parameter's `Annotated[…, decl.Option(…)]` from the function's
# annotations as objects, and typer would compile and evaluate each string
# anew (3x slower for `spex --help`, which builds all commands). Names
# imported only for type checking are quoted instead. tests/test_cli.py
# keeps it so.
COMMANDS = (
    Command("new", "new", writes=True),
    Command("wake", "turns", writes=True),
    Command("wait", "turns"),
    Command("queue", "queue", writes=True),
    Command("schedule", "schedule", writes=True),
    Command("log", "turns"),
    Command("verify", "verify", writes=True),
    Command("attach", "sessions"),
    Command("stop", "turns", writes=True),
    Command("resume", "turns", writes=True),
    Command("up", "sessions", writes=True),
    Command("ls", "sessions"),
    Command("show", "sessions"),
    Command("edit", "edit", writes=True),
    Command("top", "top"),
    Command("rm", "sessions", writes=True),
    Command("fanout", "fanout", writes=True),
    Command("wave", "waves"),
    Command("waves", "waves"),  # hidden: `spex wave`'s old name
    Command("cost", "cost"),
    Command("maint", "maint"),
    Command("prune", "housekeeping"),
    Command("du", "housekeeping"),
    Command("doctor", "sessions"),
    Command("harness", "harnesses"),
    Command("hosts", "hosts"),
    Command("events", "events"),
    Command("hooks", "events"),
    Command("notify", "notify", writes=True),
    Command("status-line", "events"),
    Command("mcp", "mcp_door"),
    Command("serve", "serve"),
    Command("completion", "sessions"),
    Command("diff", "worktree"),
    Command("keep", "worktree"),
    Command("trust", "worktree"),
    Command("maint-op", "maint"),  # hidden
    Command("internal", "maint"),  # hidden
    Command("worktree", "worktree"),
    Command("help", "manual"),
)
COMMAND_MODULES = {c.name: c.module for c in COMMANDS}
WRITERS = frozenset(c.name for c in COMMANDS if c.writes)
