"""make demo's chain through the study runner (``uvlp-replicate --recipe demo``), kept tiny:
on the tiny world, Base fine-tuned on VQA2 for 2 updates with the tiny random model. A part of
the chain first (``--steps``, as ``make finetune``: no tables), then the whole call, which
finds the run done and prints the demo's Table 1."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow


def _demo(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mmf_uvlp.cli.replicate", "--recipe", "demo", *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_tiny_demo_runs_through_the_study_runner(tiny_world, tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    options = [
        "--world",
        str(tiny_world),
        "--runs",
        str(runs),
        "--out",
        str(out),
        "--systems",
        "base",
        "--tasks",
        "vqa2",
        "--finetune-updates",
        "2",
        "--model-config",
        "configs/models/uvla/tiny_random.yaml",
    ]
    part = _demo(*options, "--steps", "finetune")
    assert part.returncode == 0, (part.stdout + part.stderr)[-4000:]
    assert "fine-tune Base, seed 0 on vqa2" in part.stdout
    assert (
        f"1 of the 1 steps of finetune ran, the others were already done:\n"
        f"    fine-tune Base, seed 0 on vqa2: {runs / 'base' / 'seed0' / 'vqa2'} (ran)\n"
        "The tables need every step of the study"
    ) in part.stdout
    assert not out.exists()
    finetuned = runs / "base" / "seed0" / "vqa2"
    assert "test/vqa2/vqa_accuracy" in (finetuned / "train.log").read_text()
    command = (finetuned / "step.json").read_text()
    assert "model_config.uvla.losses=[{'type':'softmax_kldiv'}]" in command  # the recipe's

    whole = _demo(*options)
    assert whole.returncode == 0, (whole.stdout + whole.stderr)[-4000:]
    assert "0 of 1 steps ran" in whole.stdout and "already done" in whole.stdout
    table = (out / "table1.md").read_text()
    assert table in whole.stdout and "recipe `configs/study/demo.yaml`" in table
    base = next(line for line in table.splitlines() if line.startswith("| Base |"))
    assert base.endswith(" | 1 |")  # one seed
