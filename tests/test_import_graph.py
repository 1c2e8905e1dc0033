"""The modules of the `streameval` namespace import each other without a cycle, the Core
and the adapters never import the scorer, and each room (a subpackage, or a top-level
module of the Core) imports only the sibling rooms its docstring lists after "May import:".

Every module under the folders pyproject.toml maps into the namespace is parsed, not
imported. Every import statement counts, at module level, inside a function or under
`if TYPE_CHECKING:`: a deferred import only hides a cycle until it runs.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
Graph = Mapping[str, set[str]]


def modules() -> dict[str, Path]:
    """Every module of the namespace, by dotted name (a package by its own name)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    found = {}
    for package, folder in pyproject["tool"]["setuptools"]["package-dir"].items():
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _imported_names(module: str, path: Path) -> Iterator[str]:
    """Each name an import statement of the module reaches, absolute: `a.b` for
    `import a.b`, `a.b.c` for `from a.b import c` (which is a module or a name in a.b)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _owner(name: str, known: Mapping[str, Path]) -> str | None:
    """The namespace module a dotted name lies in (None: outside the namespace)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module -> the namespace modules it imports."""
    known = modules()
    graph = {}
    for module, path in known.items():
        targets = {_owner(name, known) for name in _imported_names(module, path)}
        graph[module] = {target for target in targets if target not in (None, module)}
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_is_imported_back_by_what_it_imports() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_core_and_the_adapters_never_import_the_scorer() -> None:
    crossing = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if module.startswith(("streameval.core", "streameval.adapters"))
        for target in targets
        if target.startswith("streameval.scorer")
    )
    assert not crossing, "\n".join(crossing)


def test_the_graph_sees_every_import_form() -> None:
    """A guard against a vacuous pass: known edges of each kind are found."""
    graph = import_graph()
    # `from streameval.core.cli import commands as core_cli`: a module named in a from-import.
    assert "streameval.core.cli.commands" in graph["streameval.cli"]
    assert "streameval.scorer.service.cli" in graph["streameval.cli"]
    # `from streameval.scorer.metrics.registry import FAMILIES`: a name in a module.
    assert "streameval.scorer.metrics.registry" in graph["streameval.scorer.metrics.record"]
    # An import inside a function (the scorer's CLI defers report and uvicorn).
    assert "streameval.scorer.report" in graph["streameval.scorer.service.cli"]


def test_a_cycle_is_found_however_it_is_closed() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]


# The packages whose rooms declare their imports; every top-level module of the Core
# declares too, so that nothing sits beside the rooms undeclared.
DECLARING_PACKAGES = ("streameval.core", "streameval.scorer", "streameval.adapters")
EVERY_MODULE_DECLARES = ("streameval.core",)
_MAY_IMPORT = re.compile(r"^May import: (.*?)\.?$", re.MULTILINE)


def declared_imports(path: Path) -> set[str] | None:
    """The sibling rooms a module's or package's docstring allows ("May import: a, b."),
    None where it declares nothing; "nothing ..." declares the empty set."""
    docstring = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
    found = _MAY_IMPORT.search(docstring)
    if found is None:
        return None
    names = found.group(1)
    return set() if names.startswith("nothing") else {n.strip() for n in names.split(",")}


def rooms() -> dict[str, tuple[Path, set[str] | None]]:
    """Each room by dotted name: the file that declares it (a package's __init__.py) and
    what it declares. A room is a subpackage anywhere below a declaring package, or a
    top-level module of a package where every module declares."""
    known = modules()
    found = {}
    for name, path in known.items():
        parent = name.rpartition(".")[0]
        inside = any(name.startswith(f"{package}.") for package in DECLARING_PACKAGES)
        is_package = path.name == "__init__.py"
        if inside and (is_package or parent in EVERY_MODULE_DECLARES):
            found[name] = (path, declared_imports(path))
    return found


def _room_of(module: str, room_names: set[str]) -> str | None:
    """The innermost room a module lies in."""
    while module and module not in room_names:
        module = module.rpartition(".")[0]
    return module or None


def undeclared_imports() -> list[str]:
    """Imports from one room into a sibling room (same parent) its docstring does not list."""
    declared = rooms()
    room_names = set(declared)
    wrong = []
    for module, targets in import_graph().items():
        for target in targets:
            source_room = _room_of(module, room_names)
            for room in _enclosing(source_room, room_names):
                sibling = _sibling_room(room, target, room_names)
                allowed = declared[room][1] or set()
                if sibling is not None and sibling.rpartition(".")[2] not in allowed:
                    wrong.append(f"{module} -> {target} ({room} may not import {sibling})")
    return sorted(set(wrong))


def _enclosing(room: str | None, room_names: set[str]) -> Iterator[str]:
    """A room and the rooms it lies in, innermost first."""
    while room is not None:
        yield room
        room = _room_of(room.rpartition(".")[0], room_names)


def _sibling_room(room: str, target: str, room_names: set[str]) -> str | None:
    """The room beside `room` (same parent) that `target` lies in, if any."""
    parent = room.rpartition(".")[0]
    if not target.startswith(f"{parent}.") or target == room or target.startswith(f"{room}."):
        return None
    sibling = ".".join(target.split(".")[: room.count(".") + 1])
    return sibling if sibling in room_names else None


def test_every_room_declares_what_it_may_import() -> None:
    silent = sorted(name for name, (_, allowed) in rooms().items() if allowed is None)
    assert not silent, "no 'May import:' line in the docstring of: " + ", ".join(silent)


def test_every_room_declares_only_rooms_that_exist_beside_it() -> None:
    declared = rooms()
    unknown = sorted(
        f"{name}: {other}"
        for name, (_, allowed) in declared.items()
        for other in allowed or ()
        if f"{name.rpartition('.')[0]}.{other}" not in modules()
    )
    assert not unknown, "declared rooms that do not exist: " + ", ".join(unknown)


def test_the_declared_rooms_have_no_cycle() -> None:
    """The declarations themselves point one way: rooms form layers, no upward arrow."""
    declared = rooms()
    graph = {
        name: {f"{name.rpartition('.')[0]}.{other}" for other in allowed or ()}
        for name, (_, allowed) in declared.items()
    }
    assert not cycles(graph)


def test_each_room_imports_only_what_it_declares() -> None:
    wrong = undeclared_imports()
    assert not wrong, "\n".join(wrong)


def test_an_undeclared_import_is_found() -> None:
    """A guard against a vacuous pass: the session room does not declare the run room."""
    declared = rooms()
    assert "run" not in (declared["streameval.core.session"][1] or set())
    assert (
        _sibling_room("streameval.core.session", "streameval.core.run.runner", set(declared))
        == "streameval.core.run"
    )
    # A top-level module of the Core is a room of its own, declaring like a package.
    assert declared["streameval.core.errors"][1] == set()
