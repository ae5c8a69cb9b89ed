"""The package's modules import each other without a circle (module-level imports, those
under ``TYPE_CHECKING`` included; an import inside a function is a deliberate late one), and
no floor imports a floor above it (any import, late ones too).

The floors, lowest first (``FLOORS``): a module may import its own floor and those below.
A new top-level module or package is given its floor here.
"""

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

from helpers import REPO


FLOORS: Tuple[Tuple[str, ...], ...] = (
    ("errors", "batch"),  # the package's error types; the batch fields
    ("utils",),  # helpers of every floor: safe loading, atomic writes, config files, boxes
    ("data_formats", "tasks"),  # the on-disk formats; the study's tasks and metrics
    ("corpus", "metrics", "reference_models", "report", "toy_world"),
    ("trainers",),  # the uvlp trainer: MMF's trainer and its components, one per concern
    ("training",),  # the command line's run helpers: one-line errors, run lock, run folder
    ("datasets", "extraction", "processors"),
    ("modules",),  # the model's parts, reading collated batches
    ("losses",),
    ("models",),
    ("analysis", "plugin", "replication"),  # what a checkpoint learned; the registration; the study
    ("compat",),  # MMF's fixes, which register the plugin once MMF is imported
    ("cli", "doctor", "__main__", "__init__"),  # entry points; the package itself
)


def floor_of(module: str) -> int:
    """The floor of a module of the package (``mmf_uvlp.<top>...``; the package: ``__init__``)."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return next(number for number, names in enumerate(FLOORS) if top in names)


def upward_imports(graph: Dict[str, Set[str]]) -> List[str]:
    """``importer -> imported`` for every import of a module on a higher floor."""
    return sorted(
        f"{module} -> {other}"
        for module, imported in graph.items()
        for other in imported
        if floor_of(other) > floor_of(module)
    )


def import_graph(package: Path, late: bool = False) -> Dict[str, Set[str]]:
    """Each module of ``package`` -> the modules of ``package`` it imports at module level
    (``late``: anywhere, inside functions too)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        body = tree.body
        nodes = (
            list(ast.walk(tree))
            if late
            else body + [node for block in body if isinstance(block, ast.If) for node in block.body]
        )
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
    assert circles(import_graph(REPO / "mmf_uvlp", late=True)) == []  # late imports too


def test_the_check_finds_an_upward_import():
    graph = {"mmf_uvlp.utils.a": {"mmf_uvlp.corpus.b"}, "mmf_uvlp.corpus.b": {"mmf_uvlp.errors"}}
    assert upward_imports(graph) == ["mmf_uvlp.utils.a -> mmf_uvlp.corpus.b"]


def test_every_top_level_module_has_a_floor():
    package = REPO / "mmf_uvlp"
    tops = {
        path.stem if path.is_file() else path.name
        for path in package.iterdir()
        if path.suffix == ".py" or (path / "__init__.py").exists()
    }
    placed = {name for names in FLOORS for name in names}
    assert tops - placed == set(), "give each new top-level module its floor in FLOORS"
    assert placed - tops == set(), "a floor names a module that is gone"


def test_no_floor_imports_a_floor_above_it():
    assert upward_imports(import_graph(REPO / "mmf_uvlp", late=True)) == []
