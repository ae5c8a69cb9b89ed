"""The console scripts of pyproject.toml: each names a ``main`` of ``mmf_uvlp.cli`` and is
named after its module (the wheel's installed scripts: tests/cli/test_wheel.py); ``tools/``
keeps only the two wrappers the study's archived commands spell, and changes no ``sys.path``."""

import ast
import importlib
import json
import subprocess
import sys
import tomllib

from helpers import REPO


SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
FRONT_DOOR = ("uvlp", "mmf_uvlp.cli.overview:main")  # lists the run configs and the tools
ARCHIVED = {"make_toy_world", "build_corpus"}  # python tools/<name>.py in results/archive


def test_every_script_names_a_main_of_the_cli_package_and_is_named_after_it():
    assert SCRIPTS[FRONT_DOOR[0]] == FRONT_DOOR[1]
    modules = {"overview"}
    for script, target in SCRIPTS.items():
        if script == FRONT_DOOR[0]:
            continue
        module, function = target.split(":")
        assert script.startswith("uvlp-") and module.startswith("mmf_uvlp.cli."), target
        assert script == "uvlp-" + module.rsplit(".", 1)[1].replace("_", "-"), (script, target)
        assert callable(getattr(importlib.import_module(module), function)), target
        modules.add(module.rsplit(".", 1)[1])
    cli = {path.stem for path in (REPO / "mmf_uvlp" / "cli").glob("*.py")} - {"__init__"}
    assert modules == cli  # every module of the cli package is a console script


def test_tools_keeps_only_the_wrappers_the_archived_commands_spell():
    """Each ``tools/<name>.py`` is a command some archived record runs, and runs that
    command's ``main``."""
    wrappers = {path.stem for path in (REPO / "tools").glob("*.py")}
    assert wrappers == ARCHIVED
    recorded = set()
    for path in (REPO / "results" / "archive").rglob("*.json"):
        command = json.loads(path.read_text()).get("command") or []
        recorded |= {
            arg[len("tools/") : -len(".py")]
            for arg in command[1:2]
            if arg.startswith("tools/") and arg.endswith(".py")
        }
    assert recorded == ARCHIVED
    for name in wrappers:
        assert (
            f"from mmf_uvlp.cli.{name} import main" in (REPO / "tools" / f"{name}.py").read_text()
        )


def test_no_file_of_tools_changes_sys_path():
    """The package comes from the environment (the checkout installed editable), not from a
    path a script inserts."""
    offenders = []
    for path in sorted((REPO / "tools").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "path"
                and isinstance(node.value, ast.Name)
                and node.value.id == "sys"
            ):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_an_archived_wrapper_runs_the_installed_package(tmp_path):
    """Run from another folder, ``tools/make_toy_world.py`` runs the package of the
    environment (this checkout, installed editable)."""
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "make_toy_world.py"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("usage: make_toy_world.py") and "--preset" in result.stdout
