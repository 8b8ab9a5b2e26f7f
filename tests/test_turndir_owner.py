"""One owner of the turn directory: only `spexsup/pane/turndir.py` writes its files.

The names it owns are its own string constants (every file of a turn's
directory: `prompt`, `argv`, `env`, `outcome`, `ended`, `meta.json`,
`stop-requested`, `verify.log`…; not `turns`, the directory of
them all). A write is a call of `write_atomic`, `write_text`, `write_bytes`,
`touch`, `mkdir`, `unlink`, `replace` and `rename` (a path's: one
argument), `open` (or `os.open`)
with a mode that writes, whose target (its receiver or arguments) names
one of them: as `turndir.NAME`, as an alias a module keeps of it
(`check.RC = turndir.VERIFY_RC`), or as the literal string.

What the check cannot see: a path built from a variable (a loop over a
dict of names: that loop is turndir's `write_plan`), and the writers
outside Python: the wrapper (shell/turn.sh) and the network gate
(`spexsup.pane.netgate`, exempt below: it must not import pathlib or json,
which turndir does).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "spexsup"
OWNER = PACKAGE / "pane" / "turndir.py"
# Modules that write a turn's files themselves, and why.
EXEMPT = {
    PACKAGE / "pane" / "netgate.py": "starts in every sandboxed turn: stdlib and os.path only",
}
WRITERS = frozenset(
    {"write_atomic", "write_text", "write_bytes", "touch", "mkdir", "unlink", "replace", "rename"}
)


def owned_names() -> dict[str, str]:
    """turndir's constants that name a file of a turn's directory: NAME -> file name."""
    found = {}
    for node in ast.parse(OWNER.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(target := node.targets[0], ast.Name)
            and target.id.isupper()
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and target.id != "TURNS"
        ):
            found[target.id] = node.value.value
    return found


def aliases(tree: ast.Module, owned: dict[str, str]) -> set[str]:
    """The module-level names a module binds to one of turndir's (`RC = turndir.VERIFY_RC`)."""
    found: set[str] = set()
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "turndir"
            and node.value.attr in owned
        ):
            found.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return found


def opens_to_write(call: ast.Call) -> bool:
    """Does this `open(path, mode)`, `os.open(path, flags)` or `path.open(mode)` write?"""
    func = call.func
    on_path = isinstance(func, ast.Attribute) and ast.unparse(func.value) != "os"
    given = call.args[0:1] if on_path else call.args[1:2]
    for arg in [*given, *(k.value for k in call.keywords if k.arg in ("mode", "flags"))]:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            if set(arg.value) & set("wax+"):
                return True
        elif any(flag in ast.unparse(arg) for flag in ("O_WRONLY", "O_RDWR", "O_CREAT")):
            return True
    return False


def names_owned(node: ast.AST, owned: dict[str, str], alias: set[str]) -> str | None:
    """The first owned file name `node` spells, or None."""
    files = set(owned.values())
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Name)
            and ((sub.value.id == "turndir" and sub.attr in owned) or sub.attr in alias)
        ):
            return ast.unparse(sub)
        if isinstance(sub, ast.Name) and sub.id in alias:
            return sub.id
        if isinstance(sub, ast.Constant) and sub.value in files:
            return repr(sub.value)
    return None


def turn_dir_writes(source: str, all_aliases: set[str]) -> list[str]:
    """`line: call` for each write in `source` whose target names an owned file."""
    owned = owned_names()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("replace", "rename") and len(node.args) != 1:
            continue  # str.replace(old, new): no path's
        if not (opens_to_write(node) if name == "open" else name in WRITERS):
            continue
        parts: list[ast.AST] = [*node.args, *(k.value for k in node.keywords)]
        if isinstance(func, ast.Attribute):
            parts.append(func.value)
        for part in parts:
            if (what := names_owned(part, owned, all_aliases)) is not None:
                found.append(f"{node.lineno}: {ast.unparse(node)[:100]} ({what})")
                break
    return found


def every_alias() -> set[str]:
    owned = owned_names()
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if path != OWNER:
            found |= aliases(ast.parse(path.read_text()), owned)
    return found


def test_the_owned_names_are_the_files_of_a_turn() -> None:
    owned = owned_names()
    for name in ("prompt", "argv", "env", "outcome", "ended", "meta.json", "stop-requested"):
        assert name in owned.values()
    assert "turns" not in owned.values()


def test_only_turndir_writes_into_a_turn_directory() -> None:
    alias = every_alias()
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == OWNER or path in EXEMPT:
            continue
        found = turn_dir_writes(path.read_text(), alias)
        if found:
            offenders[str(path.relative_to(PACKAGE.parent))] = found
    assert not offenders, f"write through spexsup.pane.turndir instead: {offenders}"


def test_the_check_finds_a_write() -> None:
    alias = {"RC"}
    for source in (
        "write_atomic(directory / turndir.ENDED, b'x')",
        "(turn_dir / turndir.STOP_REQUEST).write_text('stopped')",
        "(turn_dir / 'outcome').write_bytes(b'exit:0:cas:0')",
        "open(os.path.join(turn_dir, 'denied-net'), 'a')",
        "(turn_dir / turndir.VERIFY_LOG).open('ab')",
        "os.open(turn_dir / turndir.OUTPUT, os.O_WRONLY | os.O_CREAT)",
        "(turn_dir / turndir.OUTPUT).replace(turn_dir / 'kept')",
        "(turn_dir / RC).unlink()",
    ):
        assert turn_dir_writes(source, alias), source
    for source in (
        "(turn_dir / turndir.OUTPUT).read_text()",
        "(turn_dir / turndir.VERIFY_LOG).open('rb')",
        "open(os.path.join(turn_dir, 'sandbox-gate'))",
        "write_atomic(home / 'hosts.json', b'{}')",
        "turndir.write_ended(turn_dir, text)",
    ):
        assert not turn_dir_writes(source, alias), source
