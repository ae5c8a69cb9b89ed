"""Only ``mmf_uvlp/compat/`` changes MMF: no other module of the plugin assigns to (or
deletes) an attribute of an MMF class or module. The plugin's behaviour is MMF subclasses
(``mmf_uvlp/trainers``) and registered components instead."""

import ast
from typing import Iterator, List, Set

from helpers import REPO

PACKAGE = REPO / "mmf_uvlp"
MMF_PACKAGES = ("mmf", "mmf_cli")


def _of_mmf(module: str) -> bool:
    return module.split(".")[0] in MMF_PACKAGES


def _root(node: ast.AST) -> str:
    """The name an attribute chain (``a.b.c``) or subscript starts from, or ''."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _mmf_names(tree: ast.AST) -> Set[str]:
    """Names bound in the module to MMF's modules, classes or functions (imports, and
    aliases of those: ``Checkpoint = checkpoint_module.Checkpoint``)."""
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _of_mmf(alias.name):
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and _of_mmf(node.module):
            names.update(alias.asname or alias.name for alias in node.names)
    grown = True
    while grown:
        grown = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _root(node.value) in names:
                for target in node.targets:  # plain names only: `self.x = MMF.y` is no alias
                    if isinstance(target, ast.Name) and target.id not in names:
                        names.add(target.id)
                        grown = True
    return names


def patches_of_mmf(source: str) -> List[int]:
    """Lines of ``source`` that assign to, or delete, an attribute of an MMF name."""
    return sorted(set(_patches(source)))


def _patches(source: str) -> Iterator[int]:
    tree = ast.parse(source)
    names = _mmf_names(tree)
    for node in ast.walk(tree):
        targets: List[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
        ):
            if _root(node.args[0]) in names:
                yield node.lineno
            continue
        for target in targets:
            for element in ast.walk(target):
                if isinstance(element, ast.Attribute) and _root(element) in names:
                    yield node.lineno
                    break


def test_the_check_finds_the_patches_it_looks_for():
    patched = """
import mmf_cli.run as cli
from mmf.trainers.base_trainer import BaseTrainer
from mmf.utils import checkpoint as checkpoint_module

def install():
    Checkpoint = checkpoint_module.Checkpoint
    BaseTrainer.train = lambda self: None
    cli.run = None
    setattr(Checkpoint, "save", None)
    checkpoint_module.torch = None
    self_like = object()
    self_like.x = 1
"""
    assert patches_of_mmf(patched) == [8, 9, 10, 11]


def test_no_module_outside_compat_assigns_to_an_attribute_of_mmf():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "compat":
            continue
        found += [f"mmf_uvlp/{relative}:{line}" for line in patches_of_mmf(path.read_text())]
    assert found == [], "MMF changed outside mmf_uvlp/compat/: " + ", ".join(found)
