"""The package's modules import each other without a circle (module-level imports, those
under ``TYPE_CHECKING`` included; an import inside a function is a deliberate late one)."""

import ast
from pathlib import Path
from typing import Dict, List, Set

from helpers import REPO


def import_graph(package: Path) -> Dict[str, Set[str]]:
    """Each module of ``package`` -> the modules of ``package`` it imports at module level."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        body = ast.parse(path.read_text()).body
        nodes = body + [node for block in body if isinstance(block, ast.If) for node in block.body]
        imported = set()
        for node in nodes:
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:  # `from pkg import module` imports the module
                    sub = f"{node.module}.{alias.name}"
                    imported.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        graph[name] = {other for other in imported if other in modules and other != name}
    return graph


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found: List[List[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_among_the_package_s_modules():
    assert circles(import_graph(REPO / "mmf_uvlp")) == []
