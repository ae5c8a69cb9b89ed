"""Every ``make`` target ends with a plain line saying what it did: the cheap ones run as a
user runs them (``env -i`` with a home and a plain PATH), and the Makefile's recipes are read
for the others."""

import re
import subprocess
from pathlib import Path

import pytest

from helpers import REPO

# targets whose last command prints its own summary line (the study runner's "N of M steps
# ran ...; written: ...", the wheel folder's and the GPU carry's sizes, the doctor's OK)
OWN_SUMMARY = {
    "wheelhouse": "tools/wheelhouse.sh",
    "gpu-carry": "tools/bench/gpu_carry.sh",
    "doctor": "mmf_uvlp.doctor",
    "replicate": "mmf_uvlp.cli.replicate",
}


def _make(home: Path, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [
            "env",
            "-i",
            f"HOME={home}",
            "PATH=/usr/bin:/bin",
            "bash",
            "-lc",
            "make " + " ".join(args),
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def _recipes() -> dict:
    """Each target of the Makefile and its recipe's lines (continuations joined)."""
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    recipes, target = {}, None
    for line in text.splitlines():
        if line.startswith("\t") and target:
            recipes[target].append(line.strip())
        elif re.match(r"^[a-z-]+:( |$)", line) and ":=" not in line:
            target = line.split(":")[0]
            recipes[target] = []
        elif not line.startswith("\t"):
            target = None
    return recipes


def test_every_phony_target_ends_with_a_summary_line():
    recipes = _recipes()
    phony = set()
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith(".PHONY:"):
            phony.update(line.split(":", 1)[1].split())
    assert phony and phony <= set(recipes), phony - set(recipes)
    for target in sorted(phony):
        last = recipes[target][-1]
        if target in OWN_SUMMARY:
            assert OWN_SUMMARY[target] in last, (target, last)
        elif target == "test":  # both branches of its last command end with one
            assert last.count('echo "test: ') == 2, last
        elif target == "setup":
            assert "SETUP_SUMMARY" in last, last
        else:
            assert last.startswith(f'@echo "{target}: '), (target, last)


def test_setup_and_toy_world_end_with_what_they_did(tmp_path):
    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    lines = _make(home, "toy-world", "PRESET=tiny", f"DATA={data}").stdout.splitlines()
    [setup] = [line for line in lines if line.startswith("setup: .venv ready")]
    assert re.fullmatch(
        r"setup: \.venv ready \(python 3\.\d+\.\d+, mmf [0-9a-z.]+, torch \S+, mmf_uvlp \S+\)",
        setup,
    ), setup
    assert lines[-1] == f"toy-world: the tiny world (seed 0) is in {data}/toy_world_tiny"
    assert (data / "toy_world_tiny" / "world.json").is_file()


def test_clean_says_what_it_removed(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    for folder in ("data", "save", "runs"):
        (tmp_path / folder / "x").mkdir(parents=True)
    result = _make(home, "-f", str(REPO / "Makefile"), "clean", cwd=tmp_path)
    assert result.stdout.splitlines()[-1] == "clean: removed data, save and runs"
    assert not any((tmp_path / folder).exists() for folder in ("data", "save", "runs"))


@pytest.mark.slow
def test_lint_ends_with_what_it_checked(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    last = _make(home, "lint").stdout.splitlines()[-1]
    assert (
        last
        == "lint: ruff check and ruff format --check passed on mmf_uvlp tests tools hatch_build.py"
    )
