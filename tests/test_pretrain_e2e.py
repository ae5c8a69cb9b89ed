"""μ-VLA pre-training through a real `mmf_run`, on the tiny toy world and its corpus."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
MMF_RUN = str(Path(sys.executable).with_name("mmf_run"))

pytestmark = pytest.mark.slow

TINY = """
includes:
- {repo}/projects/uvla/pretrain.yaml
- {repo}/configs/models/uvla/tiny_random.yaml
model_config:
  uvla:
    feature_dim: 64
optimizer:
  params:
    lr: 1e-3
training:
  batch_size: 16
  log_interval: 1
  evaluation_interval: 1000
  checkpoint_interval: 4
  seed: 3
"""
HOLDOUT = [f"dataset_config.uvla_{name}.holdout_every=6" for name in ("region_tag", "region_phrase", "image_sentence")]


def run(tmp_path: Path, world: Path, save: Path, *opts: str, config: str = TINY) -> str:
    path = tmp_path / "pretrain.yaml"
    path.write_text(config.format(repo=REPO))
    command = [MMF_RUN, f"config={path}", f"env.data_dir={world}", f"env.save_dir={save}", *HOLDOUT, *opts]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


def train_rows(output: str):
    rows = []
    for line in output.splitlines():
        if "progress:" in line and "train/total_loss:" in line:
            rows.append(dict(re.findall(r"(\S+): ([0-9.e-]+)", line)))
    return rows


def test_pretraining_total_loss_decreases(tiny_corpus, tmp_path):
    output = run(tmp_path, tiny_corpus.parent, tmp_path / "save", "training.max_updates=40",
                 "scheduler.params.num_warmup_steps=2", "scheduler.params.num_training_steps=40")
    losses = [float(row["train/total_loss"]) for row in train_rows(output)]
    assert len(losses) == 40
    first, last = sum(losses[:8]) / 8, sum(losses[-8:]) / 8
    assert last < 0.8 * first, (first, last)
    for name in ("uvla_region_tag", "uvla_region_phrase", "uvla_image_sentence"):
        assert f"train/{name}/uvla_mlm" in output


def test_resume_continues_the_same_schedule(tiny_corpus, tmp_path):
    world, opts = tiny_corpus.parent, ["scheduler.params.num_warmup_steps=2", "scheduler.params.num_training_steps=8"]
    straight = train_rows(run(tmp_path, world, tmp_path / "straight", "training.max_updates=8", *opts))
    run(tmp_path, world, tmp_path / "resumed", "training.max_updates=4", *opts)
    checkpoint = torch.load(tmp_path / "resumed/current.ckpt", weights_only=False)
    assert checkpoint["num_updates"] == 4
    resumed = train_rows(
        run(tmp_path, world, tmp_path / "resumed", "training.max_updates=8", "checkpoint.resume=True", *opts)
    )
    assert [row["num_updates"] for row in resumed] == ["5", "6", "7", "8"]
    # the learning-rate schedule and the curriculum both derive from num_updates
    assert [row["lr"] for row in resumed] == [row["lr"] for row in straight[4:]]


def test_two_process_gloo_pretraining_keeps_ranks_in_sync(tiny_corpus, tmp_path):
    save = tmp_path / "save"
    run(tmp_path, tiny_corpus.parent, save, "training.max_updates=4", "distributed.world_size=2",
        "training.trainer=rank_dump", f"env.user_dir={REPO / 'tests/plugins/rank_dump'}",
        "scheduler.params.num_warmup_steps=1", "scheduler.params.num_training_steps=4")
    ranks = [torch.load(save / f"params_rank{r}_of2.pt") for r in (0, 1)]
    assert ranks[0].keys() == ranks[1].keys()
    for name in ranks[0]:
        assert torch.equal(ranks[0][name], ranks[1][name]), name
