"""The layer map (docs/architecture.md), enforced.

A module may import only from its own layer or the layers below it; the
import graph of `spexsup` (top-level and deferred imports alike, except those
under `TYPE_CHECKING`) has no cycle; what runs inside the pane pulls in none
of the CLI's heavy third-party modules. A new module must be placed on the
map before it can be imported.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "spexsup"

# Lowest first. A module's layer is the first entry that is it or a package above it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "shared words",
        (
            "spexsup",
            "errors",
            "states",
            "ids",
            "paths",
            "config",
            "durations",
            "prompt",
            "usage",
            "faults",
            "record",
            "lazyre",
        ),
    ),
    ("adapters", ("adapters",)),
    ("the state and its ledger", ("state",)),
    ("inside the pane", ("pane",)),
    ("the session core", ("core",)),
    ("the turn wing", ("turn",)),
    ("the conductors", ("conductors",)),
    ("what both doors render", ("present",)),
    ("the doors", ("cli", "doors", "web", "__main__")),
]
# Run by shell/turn.sh on every turn: their start-up time is part of every verdict.
PANE_FORBIDS = ("typer", "rich", "libtmux", "watchdog", "click")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    """The index of `module`'s layer: its own entry, or its package's."""
    parts = module.split(".")[1:] or ["spexsup"]
    for depth in range(len(parts), 0, -1):
        key = ".".join(parts[:depth])
        for index, (_, members) in enumerate(LAYERS):
            if key in members:
                return index
    raise AssertionError(f"{module} is on no layer of the map: place it in LAYERS")


def imports_of(path: Path, typing_too: bool = False) -> set[str]:
    """The spexsup modules `path` imports anywhere, except under TYPE_CHECKING
    (with `typing_too`, there as well)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                not typing_too
                and isinstance(child, ast.If)
                and "TYPE_CHECKING" in ast.unparse(child.test)
            ):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.split(".")[0] == "spexsup")
            elif (
                isinstance(child, ast.ImportFrom)
                and child.level == 0
                and (child.module or "").split(".")[0] == "spexsup"
            ):
                for alias in child.names:
                    full = f"{child.module}.{alias.name}"
                    found.add(full if full in MODULES else str(child.module))
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in MODULES}


GRAPH = {m: imports_of(p) - {m} for m, p in MODULES.items()}
# With the imports made only for type checking: a circle there is one too.
TYPED_GRAPH = {m: imports_of(p, typing_too=True) - {m} for m, p in MODULES.items()}


def test_every_module_is_on_the_map() -> None:
    for module in MODULES:
        layer_of(module)


def test_no_module_imports_from_a_layer_above_it() -> None:
    upward = [
        f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
        for m, targets in GRAPH.items()
        for t in sorted(targets)
        if layer_of(t) > layer_of(m)
    ]
    assert upward == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles(GRAPH) == []


def test_no_cycle_either_through_imports_for_type_checking() -> None:
    assert cycles(TYPED_GRAPH) == []


def test_the_web_door_does_not_reach_into_the_cli() -> None:
    """web/ renders through present/, as cli/ does; only `spex serve`
    (cli/serve.py) starts it."""
    crossing = [
        f"{m} imports {t}"
        for m, targets in TYPED_GRAPH.items()
        for t in sorted(targets)
        if m.startswith("spexsup.web") and t.startswith("spexsup.cli")
    ]
    assert crossing == []


def test_the_cycle_finder_finds_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


PROBE = """
import json, os, sys
modules = json.loads(sys.argv[1])
out = {}
for module in modules:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        import importlib
        importlib.import_module(module)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"spexsup", *FORBIDS})
        os.write(w, json.dumps(loaded).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    out[module] = json.loads(data or b"null")
print(json.dumps(out))
"""


def loaded_by_importing() -> dict[str, list[str]]:
    """Each module imported alone in a fresh interpreter (a fork of one that
    imported nothing of ours): what it loads at import time."""
    code = PROBE.replace("FORBIDS", repr(PANE_FORBIDS))
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            json.dumps(sorted(m for m in MODULES if m != "spexsup.__main__")),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, list[str]] = json.loads(r.stdout)
    return result


def test_importing_a_module_loads_nothing_above_it() -> None:
    loaded = loaded_by_importing()
    assert None not in loaded.values(), [m for m, v in loaded.items() if v is None]
    upward = [
        f"{m} loads {other}"
        for m, names in loaded.items()
        for other in names
        if other in MODULES and layer_of(other) > layer_of(m)
    ]
    assert upward == []
    pane = {m: [n for n in names if n.split(".")[0] in PANE_FORBIDS] for m, names in loaded.items()}
    heavy = {m: names for m, names in pane.items() if m.startswith("spexsup.pane") and names}
    assert heavy == {}
    assert "typer" in pane["spexsup.cli.app"], "the probe sees typer where it is imported"


def test_no_module_is_over_700_lines() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > 700}
    assert long == {}


def test_the_top_level_holds_only_the_shared_words() -> None:
    """A newcomer sees the layers in `ls spexsup/`: every other module lives
    in its layer's folder, and at most a dozen stay at the top (thirteen:
    `lazyre` joined `record`, both stand-ins for what the standard library
    makes too slowly for every start)."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= 13, top
    words = [m for m in top if m not in ("__init__", "__main__")]
    assert [m for m in words if layer_of(f"spexsup.{m}") != 0] == []


# Issue 39's bounds: no function longer than this, and none outside cli/
# taking more parameters (`*args` and `**kwargs` count one each).
MAX_LINES = 120
MAX_PARAMS = 8  # outside cli/: a command's options are its parameters


def oversized() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
            count = len(params) - (params[:1] != [] and params[0].arg in ("self", "cls"))
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_LINES:
                found[f"{where}:{node.name}"] = "lines"
            elif count > MAX_PARAMS and not where.startswith("spexsup/cli/"):
                found[f"{where}:{node.name}"] = "params"
    return found


def test_functions_stay_within_their_bounds() -> None:
    assert oversized() == {}
