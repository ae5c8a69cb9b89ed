"""Real `mmf_run` subprocesses: MMF's own visual_bert on MMF's own builders, on the tiny toy world."""

import re
from pathlib import Path

import pytest
import torch

from helpers import REPO, train_log
from helpers.visual_bert import TRAINING, num_answers, run_visual_bert


pytestmark = pytest.mark.slow


def _config(tmp_path: Path, includes, body: str = "") -> Path:
    lines = ["includes:"] + [f"- {REPO / include}" for include in includes]
    path = tmp_path / "run.yaml"
    path.write_text("\n".join(lines) + "\n" + body)
    return path


def _progress(log: str, split: str):
    """(num_updates, {metric: value}) for each of MMF's full progress lines of ``split``."""
    rows = []
    for line in log.splitlines():
        if f" {split}/" not in line or "progress:" not in line:
            continue
        values = dict(re.findall(r"(\S+): ([0-9.]+)", line))
        rows.append(values)
    return rows


def _task_opts(task: str, world: Path):
    if task == "vqa2":
        return [f"model_config.visual_bert.num_labels={num_answers(world)}"]
    return []


@pytest.mark.parametrize("task", ["vqa2", "nlvr2", "visual_entailment"])
def test_train_validate_checkpoint_resume_and_test(task, tiny_world, tmp_path):
    config = _config(
        tmp_path,
        [
            f"projects/baselines/visual_bert/{task}.yaml",
            "configs/models/visual_bert/tiny_random.yaml",
        ],
        TRAINING,
    )
    save = tmp_path / "save"
    base = ["model=visual_bert", f"dataset={task}", *_task_opts(task, tiny_world)]

    run_visual_bert(config, tiny_world, save, *base, "run_type=train")
    first = train_log(save)
    assert [row["num_updates"] for row in _progress(first, "train")] == ["2", "4"]
    validation = _progress(first, "val")
    assert (
        validation
        and f"val/{task}/accuracy" in validation[0]
        or f"val/{task}/vqa_accuracy" in validation[0]
    )
    for name in ("model_2.ckpt", "model_4.ckpt"):
        assert (save / "models" / name).is_file()
    assert torch.load(save / "current.ckpt", weights_only=False)["num_updates"] == 4

    before = len(first)
    resumed = run_visual_bert(
        config,
        tiny_world,
        save,
        *base,
        "run_type=train",
        "checkpoint.resume=True",
        "training.max_updates=6",
    )
    assert "Loading checkpoint" in resumed
    assert [row["num_updates"] for row in _progress(train_log(save)[before:], "train")] == ["6"]
    assert torch.load(save / "current.ckpt", weights_only=False)["num_updates"] == 6

    tested = run_visual_bert(
        config,
        tiny_world,
        tmp_path / "inference",
        *base,
        "run_type=inference",
        f"checkpoint.resume_file={save / 'current.ckpt'}",
    )
    assert "Starting inference on test set" in tested
    test_rows = _progress(train_log(tmp_path / "inference"), "test")
    assert test_rows and any(key.startswith(f"test/{task}/") for key in test_rows[-1])


MULTI = """
model_config:
  visual_bert:
    training_head_type: classification
    losses:
    - type: cross_entropy
evaluation:
  metrics:
  - accuracy
training:
  batch_size: 16
  max_updates: 14
  log_interval: 7
  evaluation_interval: 7
  checkpoint_interval: 7
  num_workers: 0
  seed: 1
  early_stop:
    criteria: total_loss
    minimize: true
scheduler:
  params:
    num_warmup_steps: 1
    num_training_steps: 14
"""


def test_multi_dataset_run_over_several_epochs(tiny_world, tmp_path):
    """vqa2 (197-way soft targets) and visual_entailment (3-way) share one classifier."""
    config = _config(
        tmp_path,
        [
            "projects/baselines/visual_bert/vqa2.yaml",
            "configs/datasets/toy_world/visual_entailment.yaml",
            "configs/models/visual_bert/tiny_random.yaml",
        ],
        MULTI,
    )
    run_visual_bert(
        config,
        tiny_world,
        tmp_path / "save",
        "model=visual_bert",
        "datasets=vqa2,visual_entailment",
        f"model_config.visual_bert.num_labels={num_answers(tiny_world)}",
        timeout=300,
    )
    output = train_log(tmp_path / "save")
    train = _progress(output, "train")
    assert int(train[-1]["num_updates"]) == 14
    # 36 + 36 training samples at batch 16 are 5 updates per epoch: 14 updates reach epoch 3
    assert int(train[-1]["epoch"]) >= 3, train
    validation = _progress(output, "val")[-1]
    assert "val/vqa2/accuracy" in validation and "val/visual_entailment/accuracy" in validation


def test_two_process_gloo_run_keeps_ranks_in_sync(tiny_world, tmp_path):
    config = _config(
        tmp_path,
        [
            "projects/baselines/visual_bert/visual_entailment.yaml",
            "configs/models/visual_bert/tiny_random.yaml",
        ],
        TRAINING,
    )
    save = tmp_path / "save"
    output = run_visual_bert(
        config,
        tiny_world,
        save,
        "model=visual_bert",
        "dataset=visual_entailment",
        "run_type=train",
        "distributed.world_size=2",
        "training.trainer=rank_dump",
        f"env.user_dir={REPO / 'tests/plugins/rank_dump'}",
    )
    assert "Distributed Init (Rank 1)" in output or "Initialized Host" in output
    ranks = [torch.load(save / f"params_final_rank{r}_of2.pt") for r in (0, 1)]
    assert ranks[0].keys() == ranks[1].keys()
    for name in ranks[0]:
        assert torch.equal(ranks[0][name], ranks[1][name]), name
    saved = {
        u: torch.load(save / f"models/model_{u}.ckpt", weights_only=False)["model"] for u in (2, 4)
    }
    key = lambda name: f"model.{name}" if f"model.{name}" in saved[4] else name  # noqa: E731
    names = [name for name in ranks[0] if key(name) in saved[4]]
    assert names, (list(ranks[0])[:5], list(saved[4])[:5])
    assert all(torch.equal(ranks[0][n], saved[4][key(n)]) for n in names), (
        "rank 0 differs from update 4"
    )
    assert any(not torch.equal(saved[2][key(n)], saved[4][key(n)]) for n in names), "no training"
