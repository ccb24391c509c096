"""The house's import graph, read from the source (``ast``, nothing imported): no import
circle between modules, and no import from a room to a room above it.

How it checks: every ``import``/``from ... import`` statement of every module under
``src/mptrain`` -- at the top of a module or inside a function, since a lazy import is still
a dependency -- becomes an edge from that module to the module it names (``from .. import
x`` names the module ``x`` when there is one). Imports under ``if TYPE_CHECKING:`` are kept
apart: they never run. Then:

- circles: the strongly connected components of the graph of the imports that run must be
  single modules;
- upward imports: each top-level room (``cli``, ``launch``, ``config``, ``strategies``,
  ``data`` ...) has a place in ``LAYERS``, top first; a module may import its own room and
  rooms below it. The one type-only upward import allowed is ``UPWARD_ALLOWED``.

A new room must be given its place in ``LAYERS`` (the test says which is missing). Inside
``federated`` the maths knows nothing of processes: of ``comm`` it may import only the
averaging maths (``comm.reduce``), and ``federated.robust`` and ``federated.cohorts`` are
rooms of their own that import neither each other nor anything of fedavg's.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "mptrain"

#: The rooms, top first: a room may import the rooms after it, never one before it.
LAYERS = [
    "__main__", "cli", "rl", "bench", "doctor", "devices", "api", "runner", "supervised",
    "result", "launch", "settings", "config", "trackers", "callbacks", "strategies", "report",
    "federated", "engine", "comm", "data", "models", "checkpoint", "files", "signals",
    "background",
    # The package's own __init__: lazy exports and the version, nothing that imports more.
    "mptrain", "imports", "environ", "leftovers", "errors",
]
#: (importer, imported) pairs allowed to point upward: type-only, never run. At most one.
UPWARD_ALLOWED = {("mptrain.strategies.base", "mptrain.config")}
#: What the federated maths may import of ``comm``: the averaging maths, no group.
FEDERATED_MAY_USE = {"mptrain.comm.reduce"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path, modules: set[str]) -> list[tuple[str, bool]]:
    """(imported module, type-only) for every import statement in ``path``."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, type_only) for alias in node.names
                         if alias.name.startswith("mptrain"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("mptrain"):
                for alias in node.names:   # ``from .. import x``: the module x, if one
                    sub = f"{target}.{alias.name}"
                    found.append((sub if sub in modules else target, type_only))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(ast.parse(path.read_text()), False)
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(imports that run, type-only imports), module -> modules it imports."""
    paths = {module_name(p): p for p in SOURCE.rglob("*.py")}
    runs: dict[str, set[str]] = defaultdict(set)
    typed: dict[str, set[str]] = defaultdict(set)
    for name, path in paths.items():
        for target, type_only in imports_of(path, set(paths)):
            while target not in paths and "." in target:   # a name inside a module
                target = target.rpartition(".")[0]
            if target != name:
                (typed if type_only else runs)[name].add(target)
    for name in paths:
        runs.setdefault(name, set())
    return runs, typed


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    rank = {name: place for place, name in enumerate(LAYERS)}
    found = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            if room(source) != room(target) and rank[room(target)] < rank[room(source)] \
                    and (source, target) not in UPWARD_ALLOWED:
                found.append(f"{source} -> {target}")
    return found


def test_every_room_has_a_place_in_the_layers():
    runs, _ = import_graph()
    assert sorted({room(m) for m in runs} - set(LAYERS)) == []


def test_no_import_circle():
    runs, _ = import_graph()
    assert circles(runs) == []


def test_no_import_runs_from_a_room_to_one_above_it():
    runs, typed = import_graph()
    assert upward_imports(runs) == []
    everything = {m: runs[m] | typed.get(m, set()) for m in runs}
    assert upward_imports(everything) == []   # the type-only ones too, but the one allowed


def test_at_most_one_upward_import_is_allowed_and_it_is_type_only():
    runs, typed = import_graph()
    assert len(UPWARD_ALLOWED) <= 1
    for source, target in UPWARD_ALLOWED:
        assert target in typed.get(source, set()) and target not in runs[source]


def federated_imports_out_of_place(graph: dict[str, set[str]]) -> list[str]:
    """Imports of the federated maths that reach processes (``comm`` beyond its maths), or
    that tie its two feature rooms (``robust``, ``cohorts``) to each other."""
    found = []
    for source, targets in sorted(graph.items()):
        if not source.startswith("mptrain.federated"):
            continue
        for target in sorted(targets):
            if room(target) == "comm" and target not in FEDERATED_MAY_USE:
                found.append(f"{source} -> {target}")
            for one, other in (("robust", "cohorts"), ("cohorts", "robust")):
                if source.startswith(f"mptrain.federated.{one}") and \
                        target.startswith(f"mptrain.federated.{other}"):
                    found.append(f"{source} -> {target}")
    return found


def test_the_federated_maths_knows_nothing_of_processes():
    runs, typed = import_graph()
    everything = {m: runs[m] | typed.get(m, set()) for m in runs}
    assert federated_imports_out_of_place(everything) == []


def test_the_check_finds_a_circle_and_an_upward_import():
    graph = {"mptrain.data.a": {"mptrain.data.b"}, "mptrain.data.b": {"mptrain.data.a"},
             "mptrain.engine.c": {"mptrain.config"}, "mptrain.config": set()}
    assert circles(graph) == [["mptrain.data.a", "mptrain.data.b"]]
    assert upward_imports(graph) == ["mptrain.engine.c -> mptrain.config"]
    assert federated_imports_out_of_place(
        {"mptrain.federated.robust.x": {"mptrain.comm.dist", "mptrain.comm.reduce",
                                        "mptrain.federated.cohorts.y"}}) == [
        "mptrain.federated.robust.x -> mptrain.comm.dist",
        "mptrain.federated.robust.x -> mptrain.federated.cohorts.y"]
