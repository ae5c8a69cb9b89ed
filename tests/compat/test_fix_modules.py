"""``compat/rc10.py`` and ``compat/mmf_main.py`` hold registrations: each fix names the error it
repairs, and a body longer than a few lines lives in the module of its concern."""

import ast

import pytest

from helpers import REPO
from mmf_uvlp import compat

FIX_SET_MODULES = ("rc10.py", "mmf_main.py")
LONGEST_BODY = 20  # lines of a function defined in a fix-set module


@pytest.mark.parametrize("name", FIX_SET_MODULES)
def test_a_fix_set_module_holds_short_bodies_and_no_classes(name):
    tree = ast.parse((REPO / "mmf_uvlp/compat" / name).read_text())
    classes = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > LONGEST_BODY
    ]
    assert (classes, long) == ([], []), f"compat/{name}: move these into a module of their concern"


@pytest.mark.parametrize("version", ["1.0.0rc10", compat.MMF_MAIN_VERSION])
def test_every_fix_names_its_error_once(version):
    fixes = compat.fix_set_for(version).fixes
    names = [fix.name for fix in fixes]
    assert len(set(names)) == len(names), names
    vague = [fix.name for fix in fixes if len(fix.error) < 60 or "(" not in fix.error]
    assert vague == [], f"fixes whose error says neither what fails nor where: {vague}"
