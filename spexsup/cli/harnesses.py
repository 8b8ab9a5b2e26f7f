"""`spex harness [ls] | show`: what each harness runs, and where it is defined."""

from typing import Annotated, Any

import typer

from spexsup.cli import complete, decl
from spexsup.cli.app import ListingGroup, app
from spexsup.cli.params import JsonOpt
from spexsup.present.render import argv_text, print_json

harness_app = typer.Typer(cls=ListingGroup, invoke_without_command=True)
app.add_typer(harness_app, name="harness")


@harness_app.callback()
def harness_group(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """What each harness runs, and where it is defined.

    Bare `spex harness` lists them, as `spex harness ls` does.

    \b
    Examples:
      spex harness ls
      spex harness show claude
    """
    if ctx.invoked_subcommand is None:
        harness_ls(ctx, as_json=as_json)


def _registry(ctx: decl.Context) -> Any:
    from spexsup.adapters import registry
    from spexsup.paths import resolve_home

    return registry.load_registry(resolve_home(ctx.find_root().obj))


def argv_lines(view: dict[str, Any]) -> list[str]:
    """`fresh   claude -p … {args} -- {prompt}` and its resume twin."""
    if view["fresh"] is None:
        return [f"notes   {view['notes']}"]
    out = [f"fresh   {argv_text(view['fresh'])}"]
    out.append(f"resume  {argv_text(view['resume']) if view['resume'] else '- (never resumes)'}")
    return out


@harness_app.command("ls")
def harness_ls(ctx: decl.Context, as_json: JsonOpt = False) -> None:
    """List harnesses: fresh and resume argv, where each is defined.

    {args} marks where a session's own arguments go (spex new NAME
    --harness H -- ARGS…). A broken harnesses.toml entry is listed with its
    error.

    \b
    Examples:
      spex harness ls
      spex harness ls --json | jq -r '.[] | select(.source != "built in") | .name'
    """
    from spexsup.adapters import registry

    views = registry.describe_all(_registry(ctx))
    if as_json:
        print_json(views)
        return
    from spexsup.errors import clip

    # A name comes from harnesses.toml: a 5 MB one is shown cut, not padded to.
    width = max(len(clip(v["name"] or "", 64)) for v in views)
    for view in views:
        name = clip(view["name"] or "(harness file)", 64)
        _echo(f"{name.ljust(width)}  {view['source']}" + _overrides(view))
        lines = [f"error   {view['error']}"] if view["error"] else argv_lines(view)
        for line in lines:
            _echo(f"  {line}")


def _overrides(view: dict[str, Any]) -> str:
    return " (overrides the built-in)" if view.get("overrides_builtin") else ""


@harness_app.command("show")
def harness_show(
    ctx: decl.Context,
    name: Annotated[
        str,
        decl.Argument(
            metavar="NAME", help="A harness name.", autocompletion=complete.harness_names
        ),
    ],
    as_json: JsonOpt = False,
) -> None:
    """Show one harness: argv forms, prompt delivery, id pattern, source.

    \b
    Examples:
      spex harness show claude
      spex harness show myagent --json
    """
    from spexsup.adapters import registry

    view = registry.describe(_registry(ctx), name)
    if as_json:
        print_json(view)
        return
    _echo(f"harness {view['name']}")
    _echo(f"source  {view['source']}" + _overrides(view))
    for line in argv_lines(view):
        _echo(line)
    if view["fresh"] is not None:
        via = {"arg": "as an argument", "stdin": "on stdin", "append": "appended"}
        prompt = via.get(str(view["prompt_via"]), str(view["prompt_via"]))
        if view["prompt_via"] == "arg" and view["stdin_fallback"]:
            prompt += " (on stdin when too big for argv)"
        _echo(f"prompt  {prompt}")
        _echo(
            "args    a session's own arguments go at {args}"
            f" (spex new NAME --harness {view['name']} -- ARGS…)"
        )
    for key, label in (
        ("binary", "binary "),
        ("window", "window "),
        ("id_pattern", "id     "),
        ("timeout", "timeout"),
    ):
        if view.get(key) is not None:
            value = view[key]
            _echo(f"{label} {value:g}s" if isinstance(value, float) else f"{label} {value}")
    if view["fresh"] is not None and view["notes"]:
        _echo(f"notes   {view['notes']}")


def _echo(line: str) -> None:
    """A line that shows harnesses.toml's text: printable (no escapes from the file)."""
    from spexsup.pane.pretty import one_line

    decl.echo(one_line(line))
