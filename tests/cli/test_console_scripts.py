"""The console scripts of pyproject.toml: each names a ``main`` of ``mmf_uvlp.cli``, and
each ``tools/<module>.py`` of a checkout runs the same ``main`` (the wheel's installed
scripts: tests/cli/test_wheel.py)."""

import importlib
import subprocess
import sys
import tomllib

from helpers import REPO


SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
CHECKOUT_ONLY = {"demo"}  # tools/demo.py drives `make demo` from a checkout


def test_every_script_names_a_main_of_the_cli_package_and_is_named_after_it():
    modules = set()
    for script, target in SCRIPTS.items():
        module, function = target.split(":")
        assert script.startswith("uvlp-") and module.startswith("mmf_uvlp.cli."), target
        assert script == "uvlp-" + module.rsplit(".", 1)[1].replace("_", "-"), (script, target)
        assert callable(getattr(importlib.import_module(module), function)), target
        modules.add(module.rsplit(".", 1)[1])
    wrappers = {path.stem for path in (REPO / "tools").glob("*.py")} - CHECKOUT_ONLY
    assert wrappers == modules
    for name in wrappers:
        assert f"from mmf_uvlp.cli.{name} import main" in (REPO / "tools" / f"{name}.py").read_text()


def test_a_tools_wrapper_runs_the_checkout_s_package(tmp_path):
    """Run from another folder, a wrapper runs this checkout's package."""
    program = (f"import runpy, sys; runpy.run_path({str(REPO / 'tools' / 'report.py')!r}); "
               "print(sys.modules['mmf_uvlp.cli.report'].__file__)")
    loaded = subprocess.run([sys.executable, "-c", program], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.strip() == str(REPO / "mmf_uvlp" / "cli" / "report.py")
    result = subprocess.run([sys.executable, str(REPO / "tools" / "report.py"), "--help"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("usage: report.py") and "--run" in result.stdout
