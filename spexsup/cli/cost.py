"""`spex cost`: the tokens and cost of the turns, summed (issue 26)."""

import time
from typing import TYPE_CHECKING, Annotated

from spexsup.cli import decl
from spexsup.cli.decl import command, open_spex, settings
from spexsup.cli.params import DURATION, JsonOpt
from spexsup.present.render import document, print_json, table

if TYPE_CHECKING:
    from spexsup.usage import Spend

BY = ("session", "harness", "model", "day", "wave")


@command()
def cost(
    ctx: decl.Context,
    by: Annotated[
        str,
        decl.Option(
            "--by",
            metavar="KEY",
            help=f"Sum per {', '.join(BY[:-1])} or {BY[-1]} (every leg and attempt of a wave).",
        ),
    ] = "session",
    since: Annotated[
        str | None,
        decl.Option(
            "--since",
            metavar="DURATION",
            help=f"Only what turns recorded in the last DURATION ({DURATION}, 7d).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """What the agents' turns spent: tokens and cost, summed by session,
    harness, model, day or wave.

    A cost is what the CLI reported ($1.23), or estimated from
    [pricing."MODEL"] in config.toml (~$0.40), never added silently
    ($1.23 + ~$0.40). A sum that includes a turn whose spend is unknown is a
    floor (≥$1.23); nothing known is ?, never $0. Usage outlives spex rm;
    spex prune forgets it after keep_days.

    \b
    Examples:
      spex cost
      spex cost --by model --since 7d
      spex cost --by day --json | jq '.total.cost'
    """
    from spexsup import durations, usage
    from spexsup.errors import Invalid
    from spexsup.ids import iso

    if by not in BY:
        raise Invalid(f"invalid --by {by!r}", hint=f"one of: {', '.join(BY)}")
    seconds = None
    if since is not None:
        seconds = durations.parse(since, "--since", maximum=None)
    spex = open_spex(ctx)
    pricing = settings(ctx, spex).pricing
    start = time.time() - seconds if seconds is not None else None
    groups = usage.summary(spex.store.db, by, pricing, since=start)
    whole = usage.grand(groups.values())
    if as_json:
        print_json(
            document(
                {
                    "by": by,
                    "since": start,
                    "since_iso": iso(start),
                    "currency": usage.CURRENCY,
                    "groups": [{"key": k, **s.as_json()} for k, s in groups.items()],
                    "total": whole.as_json(),
                }
            )
        )
        return
    if not groups:
        decl.echo("no usage recorded" + (f" in the last {since}" if since else " yet"))
        return
    rows = [_cells(k, s) for k, s in groups.items()]
    if len(groups) > 1:
        rows.append(_cells("TOTAL", whole))
    table([by.upper(), "TURNS", "INPUT", "OUTPUT", "CACHE R/W", "COST"], rows)
    if whole.n_estimated:
        decl.echo('~ estimated from [pricing."MODEL"] in config.toml (USD per million tokens)')
    if not whole.exact:
        decl.echo(
            "≥ a floor: some turns' usage or cost is unknown (no usage printed, or a model"
            " with no price)"
        )


def _cells(key: str, spend: "Spend") -> list[str]:
    return [
        key,
        str(spend.turns),
        spend.tokens_text("input"),
        spend.tokens_text("output"),
        spend.cache_text(),
        spend.cost_text(),
    ]
