"""The package's shape: imports point one way, and functions stay short.

Walks ``dynagent``'s sources with ``ast`` (no third-party tool), so a circle between
modules or an overlong function fails ``make test`` the moment it comes back.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import dynagent

PACKAGE = Path(dynagent.__file__).parent
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imported(module: str, path: Path) -> set[str]:
    """The package's modules that ``module`` imports, type-checking imports included:
    a circle hidden behind ``TYPE_CHECKING`` is still one concept split badly."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = {f"{source}.{alias.name}" for alias in node.names} & MODULES.keys()
            # ``from . import admin`` imports the submodule, not the package itself.
            targets.update(submodules or {source})
    return (targets & MODULES.keys()) - {module}


GRAPH = {module: _imported(module, path) for module, path in MODULES.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root, targets in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(targets)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
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
                    circles.append(sorted(component))
    return circles


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]


def test_no_two_modules_import_each_other() -> None:
    assert _circles(GRAPH) == []


def test_the_lower_layers_never_import_the_upper_ones() -> None:
    """Down the data path: http and the CLI sit on top; nothing below reaches up."""
    upward = {
        (module, target)
        for module, targets in GRAPH.items()
        for target in targets
        for top in ("dynagent.http", "dynagent.cli", "dynagent.__main__")
        if (target == top or target.startswith(top + "."))
        and not (module == top or module.startswith(top + "."))
        and not module.startswith(("dynagent.cli.", "dynagent.__main__"))
        and module != "dynagent.cli"
    }
    assert upward == set()


def test_nothing_imports_the_old_package_name() -> None:
    old = {
        (module, target)
        for module, path in MODULES.items()
        for target in _all_imports(path)
        if target == "service" or target.startswith("service.")
    }
    assert old == set()


def _all_imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module


def _long_functions() -> list[str]:
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(f"{module}.{node.name}: {lines} lines")
    return found


def test_no_function_is_longer_than_sixty_lines() -> None:
    assert _long_functions() == []


MAX_MODULE_LINES = 400
MAX_ROOT_MODULES = 8


def test_no_module_is_longer_than_four_hundred_lines() -> None:
    long = {
        module: lines
        for module, path in MODULES.items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_the_package_root_holds_at_most_eight_modules() -> None:
    """Everything else lives in the package of its layer or feature."""
    root = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


def test_only_the_http_adapter_imports_aiohttp_web() -> None:
    """The service exists without HTTP: its core, features and runtime use aiohttp's
    client at most. ``_compat`` reaches aiohttp's server internals for the adapter alone,
    importing ``aiohttp.web`` only when the adapter calls it."""
    beyond = {
        m: p for m, p in MODULES.items() if not m.startswith(("dynagent.http", "dynagent._compat"))
    }
    outside = {
        (module, target)
        for module, path in beyond.items()
        for target in _all_imports(path)
        if target == "aiohttp.web" or target.startswith("aiohttp.web_")
    } | {
        (module, "aiohttp.web")
        for module, path in beyond.items()
        if "from aiohttp import web" in path.read_text(encoding="utf-8")
    }
    assert outside == set()
