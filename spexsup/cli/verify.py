"""`spex verify`: run a finished turn's check again (see spexsup.conductors.verify)."""

import sys
from typing import Annotated

from spexsup import ids, states
from spexsup.cli import decl
from spexsup.cli.decl import command, open_spex
from spexsup.cli.params import JsonOpt, NameArg, TurnOpt, VerifyTimeoutOpt, verify_rules
from spexsup.pane.pretty import one_line
from spexsup.present.render import document, print_json, with_iso


@command()
def verify(
    ctx: decl.Context,
    name: NameArg,
    turn: TurnOpt = None,
    command: Annotated[
        str | None,
        decl.Option(
            "--verify",
            metavar="CMD",
            help="The check to run (by sh -c). [default: the one the turn ran, else the"
            " session's, the repository's or the harness's]",
            show_default=False,
        ),
    ] = None,
    verify_timeout: VerifyTimeoutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a finished turn's check again, in its worktree, and record the result.

    The check runs here in the foreground, in the session's cwd, its output
    shown and appended to the turn's verify.log, as a new attempt of the
    turn's verification (not a new turn). When the turn's end was its check's
    (complete, or failed with cause verify), the end follows the new result;
    a turn that failed on its own keeps its end. Exit 0 when the check
    passed, 1 when it failed.

    \b
    Examples:
      spex verify api
      spex verify api --turn last~1
      spex verify api --verify 'make test' --verify-timeout 20m --json
    """
    from spexsup.conductors.verify import interrupted_by_signal, rerun

    ids.validate_name(name)
    check, limit = verify_rules(command, False, verify_timeout)
    spex = open_spex(ctx)
    done = rerun(
        spex,
        name,
        turn,
        check=check,
        timeout=limit,
        out=None if as_json else sys.stdout.buffer,
        interrupted=interrupted_by_signal(),
    )
    if as_json:
        print_json(document(with_iso(done.as_json())))
    else:
        c = done.check
        said = "passed" if done.ok else f"failed (rc {c['rc']})"
        if c["state"] == states.VERIFY_TIMED_OUT:
            said = "ran past its time limit"
        if done.interrupted:
            said = f"was interrupted (signal {done.interrupted})"
        line = f"{name}: turn {done.turn} check `{c['command']}` {said} (attempt {c['attempt']})"
        line += f"; the turn {'is now' if done.changed else 'stays'} {done.state}"
        decl.echo(one_line(line))  # the command is the user's: no control bytes reach us
    if done.exit_code:
        raise decl.Exit(done.exit_code)
