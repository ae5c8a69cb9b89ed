"""Every reference-model config through a real `mmf_run` on the tiny toy world (a few updates of a
tiny model): VisualBERT, ViLBERT and VL-BERT pre-training, fine-tuning on the four tasks from
the pre-trained weights, RefCOCO+ val/testA/testB inference, and the pre-trained weights
arriving in each fine-tuning model (lr 0: the encoder equals the pre-trained one)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from mmf_uvlp.reference_models import REFERENCE_MODELS, SYSTEMS
from mmf_uvlp.tasks import METRICS, TASKS
from mmf_uvlp.tasks import REFCOCO_PLUS_SPLIT_DATASETS as REFCOCO_SPLITS

from helpers import REPO, mmf_run, train_log


FEATURE_DIM = 64  # the tiny preset's
TINY_MODEL = {
    "visual_bert": "configs/models/visual_bert/tiny_random.yaml",
    "vilbert": "configs/models/vilbert/tiny_random.yaml",
    "vl_bert": "configs/models/vl_bert/tiny_random.yaml",
}
PRETRAIN_DATASETS = {
    "visual_bert": ["masked_aligned_vlp"],
    "vilbert": ["masked_aligned_vlp"],
    "vl_bert": ["aligned_vlp", "u_visualbert_text"],
}
FINAL = {
    "visual_bert": "visual_bert_uvlp_final.pth",
    "vilbert": "vilbert_uvlp_final.pth",
    "vl_bert": "vl_bert_final.pth",
}  # of the RefCOCO+ fine-tuning model
ENCODER = {
    "visual_bert": ("model.bert.",),
    "vilbert": ("model.bert.",),
    "vl_bert": ("embeddings.", "encoder.", "pooler."),
}

pytestmark = pytest.mark.slow

TINY = """
includes:
- {config}
- {model}
training:
  batch_size: 8
  max_updates: {updates}
  log_interval: 1
  evaluation_interval: {updates}
  checkpoint_interval: {updates}
scheduler:
  params:
    num_warmup_steps: 1
"""


def _mmf_run(system: str, config: str, updates: int, folder: Path, world: Path, *opts: str) -> str:
    path = folder / "run.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(
        TINY.format(config=REPO / config, model=REPO / TINY_MODEL[system], updates=updates)
    )
    """The run's full log (train.log: MMF's full progress lines)."""
    mmf_run(
        f"config={path}",
        f"env.data_dir={world}",
        f"env.save_dir={folder / 'save'}",
        *SYSTEMS[system].feature_dim(FEATURE_DIM),
        *opts,
    )
    return train_log(folder / "save")


@pytest.fixture(scope="module")
def pretrained(tiny_world, tmp_path_factory) -> Dict[str, tuple]:
    """Each reference model pre-trained for 3 updates: system -> (its full log, weights)."""
    runs = {}
    for system in REFERENCE_MODELS:
        folder = tmp_path_factory.mktemp(f"{system}_pretrain")
        holdout = [f"dataset_config.{name}.holdout_every=6" for name in PRETRAIN_DATASETS[system]]
        output = _mmf_run(system, SYSTEMS[system].pretrain_config, 3, folder, tiny_world, *holdout)
        runs[system] = (output, folder / "save" / SYSTEMS[system].final_weights)
    return runs


@pytest.mark.parametrize("system", REFERENCE_MODELS)
def test_pretraining_config_through_mmf_run(system, pretrained):
    output, weights = pretrained[system]
    updates = [int(n) for n in re.findall(r"progress: (\d+)/3, train/total_loss", output)]
    assert updates == [1, 2, 3]
    assert weights.is_file()
    if system == "vl_bert":
        for name in (
            "val/aligned_vlp/uvla_mlm",
            "val/aligned_vlp/uvla_mrc",
            "val/u_visualbert_text/uvla_mlm",
        ):
            assert name in output, name
        assert "itm" not in output.split("Starting training")[-1]
    else:
        assert "masked_aligned_vlp/train/masked_lm_loss" in output
        assert "masked_aligned_vlp/train/itm_loss" in output
        assert "masked_aligned_vlp/val/masked_lm_loss" in output
        if system == "vilbert":
            assert "masked_aligned_vlp/train/masked_img_loss" in output


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("system", REFERENCE_MODELS)
def test_finetuning_config_through_mmf_run(system, task, pretrained, tiny_world, tmp_path):
    seed_system = SYSTEMS[system]
    output = _mmf_run(
        system,
        seed_system.finetune(task),
        2,
        tmp_path / task,
        tiny_world,
        *seed_system.start_from(pretrained[system][1]),
        "run_type=train_inference",
    )
    assert re.findall(r"progress: (\d+)/2, train/total_loss", output) == ["1", "2"]
    metric = f"test/{task}/{METRICS[task]}"
    values = [float(v) for v in re.findall(rf"{metric}: ([0-9.]+)", output)]
    assert len(values) == 1 and 0 <= values[0] <= 1, output[-2000:]
    if task != "refcoco_plus":
        return
    checkpoint = tmp_path / task / "save" / "current.ckpt"
    splits = _mmf_run(
        system,
        seed_system.finetune(task),
        2,
        tmp_path / "splits",
        tiny_world,
        *seed_system.evaluate_from(checkpoint),
        "run_type=inference",
        f"datasets={','.join(REFCOCO_SPLITS)}",
    )
    for view in REFCOCO_SPLITS:
        assert re.search(rf"test/{view}/refcoco_accuracy: [0-9.]+", splits), view


def _weights(path: Path) -> Dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=False)
    state = state.get("model", state)
    return {key.removeprefix("module."): value for key, value in state.items()}


def _encoder(state: Dict[str, torch.Tensor], system: str) -> Dict[str, torch.Tensor]:
    return {key: value for key, value in state.items() if key.startswith(ENCODER[system])}


@pytest.mark.parametrize("system", REFERENCE_MODELS)
def test_pretrained_weights_reach_the_finetuning_model(system, pretrained, tiny_world, tmp_path):
    """RefCOCO+ fine-tuning with lr 0 for one update: started from the pre-trained weights,
    the encoder is exactly the pre-trained one (and the region head, which pre-training
    has not, is there); started from the BERT init, it is not."""
    seed_system = SYSTEMS[system]
    source = _encoder(_weights(pretrained[system][1]), system)
    assert source, f"no encoder weights in {pretrained[system][1]}"
    finals: List[Dict[str, torch.Tensor]] = []
    for name, weights in (("loaded", pretrained[system][1]), ("init", None)):
        folder = tmp_path / name
        _mmf_run(
            system,
            seed_system.finetune("refcoco_plus"),
            1,
            folder,
            tiny_world,
            *seed_system.start_from(weights),
            "optimizer.params.lr=0.0",
            "run_type=train",
        )
        finals.append(_weights(folder / "save" / FINAL[system]))
    loaded, init = finals
    assert set(source) <= set(loaded)
    different = [key for key in source if not torch.equal(loaded[key], source[key])]
    assert different == [], different[:5]
    assert any("classifier" in key or "heads.region_scorer" in key for key in loaded)
    assert any(not torch.equal(init[key], source[key]) for key in source)
