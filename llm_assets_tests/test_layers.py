"""Layers run one way: no import cycle among the package's modules, the lower layers (kernels,
compute, warehouse) import nothing above them, and Dagster's private API is used in one module.

Read from the source with :mod:`ast` (every import, including those inside functions), so a lazy
import cannot hide a cycle that only shows when the code runs.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llm_assets"

LOWER_LAYERS = ("llm_assets.kernels", "llm_assets.compute", "llm_assets.warehouse")
ABOVE_THEM = ("llm_assets.stages", "llm_assets.bench", "llm_assets.assets")
"""What the lower layers must not import: the stages (driver and worker halves), the benchmark
and the assets."""
DAGSTER_RESOURCES = ("llm_assets.compute.resource", "llm_assets.warehouse.resource")
"""The Dagster resources of the compute and warehouse layers: the only modules there that may
import Dagster (the rest runs in workers, scripts and the benchmark without it)."""
DAGSTER_INTERNALS = "llm_assets.orchestration.instance"
"""The one module allowed to import ``dagster._core``; its docstring says why."""

KNOWN_EXCEPTIONS: tuple[tuple[str, str], ...] = ()
"""Imports (importer, imported) that break the rules today and are left out of the checks."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:``: imports for annotations only are never
    executed, so they make no cycle (they let a module name a type its importer defines)."""
    for node in ast.iter_child_nodes(tree):
        test = node.test if isinstance(node, ast.If) else None
        name = getattr(test, "id", None) or getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in _runtime_nodes_and_self(child))
            continue
        yield node
        yield from _runtime_nodes(node)


def _runtime_nodes_and_self(node: ast.AST) -> Iterator[ast.AST]:
    yield node
    yield from _runtime_nodes(node)


def _imported(path: Path, module: str) -> Iterator[str]:
    """Every module name ``path`` imports, absolute (``from x import y`` yields ``x`` and
    ``x.y``: ``y`` may be a submodule)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, without :data:`KNOWN_EXCEPTIONS`."""
    modules = _modules()
    known = set(KNOWN_EXCEPTIONS)
    return {
        module: {
            name
            for name in _imported(path, module)
            if name in modules and name != module and (module, name) not in known
        }
        for module, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def _within(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_lower_layers_import_nothing_above_them():
    graph = _graph()
    wrong = sorted(
        (module, name)
        for module, names in graph.items()
        if _within(module, LOWER_LAYERS)
        for name in names
        if _within(name, ABOVE_THEM)
    )
    assert wrong == []


@pytest.mark.parametrize("module", sorted(m for m in _modules() if _within(m, LOWER_LAYERS)))
def test_lower_layers_use_dagster_only_in_their_resources(module):
    if module in DAGSTER_RESOURCES:
        return
    names = set(_imported(_modules()[module], module))
    assert not any(_within(name, "dagster") for name in names), module


def test_dagster_internals_in_one_module():
    users = sorted(
        module
        for module, path in _modules().items()
        if any(_within(name, "dagster._core") for name in _imported(path, module))
    )
    assert users == [DAGSTER_INTERNALS]
    docstring = ast.get_docstring(ast.parse(_modules()[DAGSTER_INTERNALS].read_text()))
    assert docstring and "dagster._core" in docstring


def test_loading_the_definitions_imports_neither_torch_nor_ray():
    """Every run, the UI and every sensor tick load the definitions: torch (the reader's optional
    DataLoader base) and Ray (a backend) cost seconds to import, and are imported where used."""
    code = (
        "import sys, llm_assets.definitions; "
        "print(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
