"""The modules of the `streameval` namespace import each other without a cycle, and the Core
and the adapters never import the scorer.

Every module under the folders pyproject.toml maps into the namespace is parsed, not
imported. Every import statement counts, at module level, inside a function or under
`if TYPE_CHECKING:`: a deferred import only hides a cycle until it runs.
"""

from __future__ import annotations

import ast
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
