"""Fine-tuning uvla: pre-trained weights really load, and every task runs through `mmf_run`."""

import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from mmf.common.registry import registry
from mmf_uvlp.models.uvla import UVLA

from helpers import REPO, mmf_run, tiny_uvla_template, train_log


SIZES = {
    "vocab_size": 30522,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
}


@pytest.fixture(autouse=True)
def mmf_config():
    saved = registry.get("config", None, no_warning=True)
    registry.register("config", OmegaConf.create({"evaluation": {"predict": False}}))
    yield
    registry.register("config", saved)


def _model(seed: int, **overrides) -> UVLA:
    config = {
        "bert_model_name": None,
        "bert_config": dict(SIZES),
        "feature_dim": 8,
        "num_region_classes": 5,
        "heads": ["pooled_classifier"],
        "num_labels": 3,
        "curriculum": {"enabled": False},
        "losses": [],
    }
    config.update(overrides)
    torch.manual_seed(seed)
    model = UVLA(OmegaConf.create(config))
    model.build()
    return model


@pytest.fixture
def pretrained_file(tmp_path):
    """An MMF checkpoint of a 'pre-trained' uvla (pre-training heads, other random weights)."""
    pretrained = _model(1, heads=["mlm", "mrc", "itm", "pooled_classifier"], num_labels=3)
    path = tmp_path / "pretrained.ckpt"
    torch.save({"model": pretrained.state_dict(), "num_updates": 7}, path)
    return path, pretrained.state_dict()


def test_pretrained_checkpoint_loads_embeddings_encoder_and_pooler(pretrained_file):
    path, source = pretrained_file
    init = _model(2).state_dict()
    model = _model(2, pretrained_checkpoint=str(path))
    state = model.state_dict()
    copied = [key for key in state if key.startswith(("embeddings.", "encoder.", "pooler."))]
    assert copied and sorted(copied) == model.pretrained_report["loaded"]
    for key in copied:
        assert torch.equal(state[key], source[key]), key
    assert any(not torch.equal(init[key], source[key]) for key in copied)
    # the task head is the fine-tuning model's own, not the checkpoint's (which has one too)
    head = [k for k in state if k.startswith("heads.pooled_classifier")]
    assert head and all(k in source for k in head)
    assert all(torch.equal(state[k], init[k]) for k in head)
    assert any(not torch.equal(state[k], source[k]) for k in head)
    assert model.pretrained_report["missing"] == [] and model.pretrained_report["unexpected"] == []
    assert model.pretrained_report["not_copied"] == sorted(
        k for k in source if k.startswith("heads.")
    )


def test_pretrained_checkpoint_of_another_size_is_refused(tmp_path):
    deeper = _model(1, bert_config=dict(SIZES, num_hidden_layers=3))
    path = tmp_path / "deeper.pth"
    torch.save(deeper.state_dict(), path)
    with pytest.raises(ValueError, match=r"unexpected \['encoder\.layer\.2\."):
        _model(2, pretrained_checkpoint=str(path))


def test_missing_pretrained_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="pretrained_checkpoint"):
        _model(2, pretrained_checkpoint=str(tmp_path / "absent.pth"))


PRETRAIN = tiny_uvla_template(
    batch_size=16, max_updates=3, log_interval=3, evaluation_interval=1000, checkpoint_interval=3
)

FINETUNE = tiny_uvla_template(
    "uvla/finetune/{task}.yaml",
    batch_size=8,
    max_updates=4,
    log_interval=2,
    evaluation_interval=4,
    checkpoint_interval=4,
    scheduler={"num_warmup_steps": 1, "num_training_steps": 4},
)


def _mmf_run(config_text: str, path: Path, *opts: str) -> str:
    path.write_text(config_text)
    return mmf_run(f"config={path}", *opts)


@pytest.fixture(scope="module")
def tiny_pretrained(tiny_corpus, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pretrain")
    holdout = [
        f"dataset_config.uvla_{n}.holdout_every=6"
        for n in ("region_tag", "region_phrase", "image_sentence")
    ]
    _mmf_run(
        PRETRAIN.format(repo=REPO),
        folder / "pretrain.yaml",
        f"env.data_dir={tiny_corpus.parent}",
        f"env.save_dir={folder}",
        *holdout,
    )
    return folder / "uvla_final.pth"


@pytest.mark.slow
@pytest.mark.parametrize(
    "task,metric",
    [
        ("vqa2", "vqa_accuracy"),
        ("nlvr2", "accuracy"),
        ("visual_entailment", "accuracy"),
        ("refcoco_plus", "refcoco_accuracy"),
    ],
)
def test_each_task_fine_tunes_from_the_pretrained_model(
    task, metric, tiny_world, tiny_pretrained, tmp_path
):
    output = _mmf_run(
        FINETUNE.format(repo=REPO, task=task),
        tmp_path / "finetune.yaml",
        f"env.data_dir={tiny_world}",
        f"env.save_dir={tmp_path / 'save'}",
        f"model_config.uvla.pretrained_checkpoint={tiny_pretrained}",
        "run_type=train_inference",
    )
    assert re.search(r"uvla: loaded \d+ pre-trained tensors", output)
    logged = train_log(tmp_path / "save")  # MMF's full progress lines
    for split in ("val", "test"):
        values = re.findall(rf"{split}/{task}/{metric}: ([0-9.]+)", logged)
        assert values and 0.0 <= float(values[-1]) <= 1.0, (split, values)


def _train_losses(output: str) -> list:
    return [float(v) for v in re.findall(r"train/refcoco_plus/[a-z_]+: ([0-9.]+), ", output)]


@pytest.mark.slow
def test_fine_tuning_learns_against_an_lr0_control(tiny_world, tmp_path):
    """RefCOCO+ region scoring from the BERT init: the same seeded batches, lr vs lr=0."""
    opts = [
        f"env.data_dir={tiny_world}",
        "model_config.uvla.pretrained_checkpoint=None",
        "training.max_updates=30",
        "training.log_interval=1",
        "training.evaluation_interval=30",
        "training.checkpoint_interval=30",
        "scheduler.params.num_training_steps=30",
        "optimizer.params.lr=1e-3",
        "run_type=train",
    ]
    config = FINETUNE.format(repo=REPO, task="refcoco_plus")
    _mmf_run(config, tmp_path / "a.yaml", *opts, f"env.save_dir={tmp_path / 'a'}")
    _mmf_run(
        config,
        tmp_path / "b.yaml",
        *opts,
        f"env.save_dir={tmp_path / 'b'}",
        "optimizer.params.lr=0.0",
    )
    learned, control = (_train_losses(train_log(tmp_path / name)) for name in ("a", "b"))
    assert len(learned) == len(control) == 30
    assert sum(learned[-10:]) < 0.8 * sum(control[-10:]), (learned[-10:], control[-10:])
