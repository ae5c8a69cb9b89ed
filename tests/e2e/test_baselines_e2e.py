"""Each baseline's pre-training config through a real `mmf_run` on the tiny toy world (a few
updates of a tiny random uvla), and fine-tuning from a baseline's `uvla_final.pth`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from helpers import REPO, mmf_run, tiny_uvla_template, train_log


BUILD_CORPUS = [sys.executable, str(REPO / "tools" / "build_corpus.py"), "run", "--no-progress"]
UVLA_DATASETS = ["uvla_region_tag", "uvla_region_phrase", "uvla_image_sentence"]

pytestmark = pytest.mark.slow

TINY = tiny_uvla_template(
    "{config}",
    batch_size=8,
    max_updates=3,
    log_interval=1,
    evaluation_interval=1000,
    checkpoint_interval=1000,
    scheduler={"num_warmup_steps": 1},
)

FINETUNE = tiny_uvla_template(
    "uvla/finetune/vqa2.yaml",
    batch_size=8,
    max_updates=2,
    log_interval=1,
    evaluation_interval=2,
    checkpoint_interval=2,
    scheduler={"num_warmup_steps": 1},
)

# config -> the datasets it trains on (the tiny world's 48 images: every 6th is held out)
SYSTEMS = {
    "baselines/aligned_vlp/pretrain.yaml": ["aligned_vlp"],
    "baselines/u_visualbert/pretrain.yaml": ["u_visualbert_text", "u_visualbert_image"],
    "baselines/random_pairs/pretrain.yaml": ["random_pairs"],
    "baselines/paired_ratio/true_pairs_40.yaml": ["random_pairs"],
    "baselines/uvla_bc/random_pairs.yaml": ["random_pairs"],
    "baselines/uvla_bc/pretrain.yaml": UVLA_DATASETS,
    "uvla/ablations/topk10.yaml": UVLA_DATASETS,
    "uvla/ablations/curriculum_early.yaml": UVLA_DATASETS,
    "uvla/ablations/paper_settings.yaml": UVLA_DATASETS,
}


def _mmf_run(config_text: str, path: Path, *opts: str) -> str:
    path.write_text(config_text)
    return mmf_run(f"config={path}", *opts)


def _build_corpus(world: Path, out: str, *options: str) -> None:
    if (world / out / "annotations" / "index.json").exists():
        return
    command = [
        *BUILD_CORPUS,
        "--predictions",
        str(world / "detections/cc/predictions.tsv"),
        *options,
        "--out",
        str(world / out),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=600)


@pytest.fixture(scope="module")
def world(tiny_world, tiny_corpus, tmp_path_factory) -> Path:
    """A copy of the tiny world with its corpus (``tiny_corpus``), and the corpora μ-VLA_BC
    (narrative text only) and top-K (K = 10) read, built into the copy (the session's world
    stays as generated)."""
    world = tmp_path_factory.mktemp("baselines") / "tiny"
    shutil.copytree(tiny_world, world)
    text = world / "text"
    _build_corpus(world, "corpus_bc", "--corpus", str(text / "narrative_corpus.txt"))
    _build_corpus(
        world,
        "corpus_k10",
        "--corpus",
        str(text / "caption_corpus.txt"),
        str(text / "narrative_corpus.txt"),
        "--captions-gt",
        str(text / "captions_gt.tsv"),
        "--exclude-own-caption",
        "--k",
        "10",
    )
    return world


def _pretrain(config: str, world: Path, save: Path) -> str:
    holdout: List[str] = [f"dataset_config.{name}.holdout_every=6" for name in SYSTEMS[config]]
    return _mmf_run(
        TINY.format(repo=REPO, config=config),
        save.parent / "pretrain.yaml",
        f"env.data_dir={world}",
        f"env.save_dir={save}",
        *holdout,
    )


@pytest.mark.parametrize("config", sorted(SYSTEMS))
def test_baseline_pretrains_through_mmf_run(config, world, tmp_path):
    save = tmp_path / "save"
    _pretrain(config, world, save)
    output = train_log(save)
    updates = [int(n) for n in re.findall(r"progress: (\d+)/3, train/total_loss", output)]
    assert updates == [1, 2, 3]
    for name in SYSTEMS[config]:  # every dataset is evaluated on its held-out split
        assert f"val/{name}/uvla_mlm" in output, name
    if config.startswith("baselines/aligned_vlp"):
        assert "val/aligned_vlp/uvla_itm" in output
    assert (save / "uvla_final.pth").is_file()


def test_finetuning_starts_from_a_baseline(world, tmp_path):
    pretrained = tmp_path / "u_visualbert"
    _pretrain("baselines/u_visualbert/pretrain.yaml", world, pretrained)
    output = _mmf_run(
        FINETUNE.format(repo=REPO),
        tmp_path / "finetune.yaml",
        f"env.data_dir={world}",
        f"env.save_dir={tmp_path / 'vqa2'}",
        f"model_config.uvla.pretrained_checkpoint={pretrained / 'uvla_final.pth'}",
    )
    assert re.search(r"uvla: loaded \d+ pre-trained tensors", output)
    assert "val/vqa2/vqa_accuracy" in train_log(tmp_path / "vqa2")
