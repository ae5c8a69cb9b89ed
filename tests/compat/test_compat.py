"""The compatibility layer: every fix repairs what it claims, and only for MMF rc10."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import compat_checks
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
# process; so does resumable_checkpoints (rc10's _torch_load swaps modules for Pythia
# checkpoints, which later Configuration builds in the same process trip over).
FRESH_PROCESS_ONLY = {"quiet_known_warnings", "resumable_checkpoints"}


def _run_check(name, disabled=""):
    env = dict(os.environ, **{compat.DISABLE_VARIABLE: disabled})
    return subprocess.run(
        [sys.executable, str(CHECKS_SCRIPT), name], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("name", FIX_NAMES)
def test_fix_repairs_its_error(name):
    if name in FRESH_PROCESS_ONLY:
        result = _run_check(name)
        assert result.returncode == 0, result.stderr[-2000:]
    else:
        compat_checks.CHECKS[name]()


@pytest.mark.parametrize("name", FIX_NAMES)
def test_check_fails_without_the_fix(name):
    result = _run_check(name, disabled=name)
    assert result.returncode != 0, f"{name}: the check passed with the fix disabled\n{result.stderr[-2000:]}"


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
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True)
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
        [sys.executable, "-m", "mmf_uvlp.doctor", "--quiet"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "anomaly_detection_switch" in result.stdout and "PROBLEMS" in result.stdout
