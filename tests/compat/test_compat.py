"""The compatibility layer: every fix repairs what it claims, and only for MMF rc10."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, Dict

import pytest

import compat_checks
from helpers import fork_server
from mmf_uvlp import compat

CHECKS_SCRIPT = Path(__file__).with_name("compat_checks.py")
FIX_NAMES = [fix.name for fix in compat.fix_set_for("1.0.0rc10").fixes]


def test_every_fix_has_a_behavioural_check():
    assert sorted(FIX_NAMES) == sorted(compat_checks.CHECKS)


def test_all_fixes_applied_in_this_process():
    import mmf  # noqa: F401
    import mmf_cli.run  # noqa: F401

    fix_set = compat.active_fix_set()
    assert fix_set is not None and fix_set.mmf_version == "1.0.0rc10"
    assert [fix.name for fix in fix_set.fixes if not fix.applied] == []


# pytest resets warning filters around each test, so quiet_known_warnings runs in a fresh
# interpreter (a forked child would inherit the warnings its parent has shown already).
FRESH_INTERPRETER_ONLY = {"quiet_known_warnings"}


def _run_fresh(name: str, disabled: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, **{compat.DISABLE_VARIABLE: disabled})
    return subprocess.run(
        [sys.executable, str(CHECKS_SCRIPT), name],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def forked_check() -> Callable[[str, str], Dict[str, object]]:
    """Runs ``compat_checks.py NAME`` with the fixes named disabled in a child of the fork
    server (``helpers.fork_server``)."""
    return lambda name, disabled: fork_server().run(
        [CHECKS_SCRIPT, name], env=dict(os.environ, **{compat.DISABLE_VARIABLE: disabled})
    )


@pytest.mark.parametrize("name", FIX_NAMES)
def test_fix_repairs_its_error(name, forked_check):
    if name in FRESH_INTERPRETER_ONLY:
        result = _run_fresh(name)
        assert result.returncode == 0, result.stderr[-2000:]
    else:
        compat_checks.CHECKS[name]()


@pytest.mark.parametrize("name", FIX_NAMES)
def test_check_fails_without_the_fix(name, forked_check):
    if name in FRESH_INTERPRETER_ONLY:
        result = _run_fresh(name, disabled=name)
        assert result.returncode != 0, (
            f"{name}: the check passed with the fix disabled\n{result.stderr[-2000:]}"
        )
    else:
        result = forked_check(name, name)
        assert result["returncode"] == 1 and result["error"], (
            f"{name}: with the fix disabled, the check ended {result}"
        )


def test_a_forked_check_passes_with_every_fix_and_an_error_is_told_from_an_exit_or_a_kill(
    forked_check,
):
    assert forked_check("dataset_imdb_attribute", "")["returncode"] == 0
    unknown = forked_check("no_such_check", "")  # argparse's refusal: an exit, not an error
    assert (unknown["returncode"], unknown["error"]) == (2, None)
    assert "invalid choice: 'no_such_check'" in unknown["output"]
    raised = fork_server().run(["-c", "import sys; print('before'); sys.exit(max([]))"])
    assert raised["returncode"] == 1 and raised["error"].startswith("ValueError: max()")
    assert raised["output"].startswith("before\n")
    killed = fork_server().run(["-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert killed["returncode"] is None and "without a result" in killed["error"]
    late = fork_server().run(["-c", "import time; time.sleep(60)"], timeout=1)
    assert late["returncode"] is None and late["error"] == "killed past its timeout of 1 s"


def test_layer_is_inert_for_another_mmf_version(tmp_path):
    fake = tmp_path / "mmf"
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "1.0.0rc9"\n')
    dist_info = tmp_path / "mmf-1.0.0rc9.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: mmf\nVersion: 1.0.0rc9\n")
    program = textwrap.dedent(
        """
        import collections, sys, types
        registered = []
        sys.modules["mmf_uvlp.plugin"] = types.SimpleNamespace(
            register_components=lambda: registered.append(True))
        from mmf_uvlp import compat
        import mmf
        assert mmf.__version__ == "1.0.0rc9", mmf.__file__
        assert compat.active_fix_set() is None
        assert not hasattr(collections, "Mapping")
        assert "transformers.modeling_bert" not in sys.modules
        assert "demjson" not in sys.modules
        assert registered == [True]
        print("inert")
        """
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "inert"


def test_doctor_reports_ok():
    result = subprocess.run(
        [sys.executable, "-m", "mmf_uvlp.doctor"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("OK")
    for name in FIX_NAMES:
        assert f"[applied] {name}:" in result.stdout


def test_doctor_names_a_disabled_fix():
    env = dict(os.environ, **{compat.DISABLE_VARIABLE: "anomaly_detection_switch"})
    result = subprocess.run(
        [sys.executable, "-m", "mmf_uvlp.doctor", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "anomaly_detection_switch" in result.stdout and "PROBLEMS" in result.stdout
