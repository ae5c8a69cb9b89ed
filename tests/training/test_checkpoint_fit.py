"""A resumed checkpoint is checked against the run's model, task and weights
(mmf_uvlp/trainers/checkpoint.py); through ``mmf_run``: tests/e2e/test_quick_start.py."""

from __future__ import annotations

import logging

import pytest
from omegaconf import OmegaConf
from torch import nn

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.trainers.checkpoint import check_checkpoint_fits, differences


class Model(nn.Module):
    def __init__(self, head: str, size: int = 4):
        super().__init__()
        self.encoder = nn.Linear(size, size)
        self.heads = nn.ModuleDict({head: nn.Linear(size, 2)})


def _run(datasets="refcoco_plus_val,refcoco_plus_testA", accept=False):
    return OmegaConf.create(
        {"model": "uvla", "datasets": datasets, "checkpoint": {"accept_mismatch": accept}}
    )


def _checkpoint(model, datasets, name="uvla"):
    return {"model": model.state_dict(), "config": {"model": name, "datasets": datasets}}


def test_a_checkpoint_of_the_same_task_and_model_fits():
    model = Model("region_scorer")
    assert differences(_checkpoint(model, "refcoco_plus"), model.state_dict(), _run()) == []
    # weights saved from a distributed run carry module.
    state = {f"module.{key}": value for key, value in model.state_dict().items()}
    assert differences(state, model.state_dict(), _run()) == []


def test_another_tasks_checkpoint_is_refused_naming_what_differs():
    run = Model("region_scorer")
    checkpoint = _checkpoint(Model("pooled_classifier"), "vqa2")
    with pytest.raises(UserConfigError) as refused:
        check_checkpoint_fits(checkpoint, run, _run(), "save/uvla_vqa2/current.ckpt")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        "checkpoint save/uvla_vqa2/current.ckpt does not fit this run: "
        "it was trained on vqa2, this run is on "
        "refcoco_plus_val,refcoco_plus_testA; it lacks 2 tensors of this "
        "model (heads.region_scorer); it holds 2 that this model has not "
        "(heads.pooled_classifier)"
    )
    assert message.endswith("load it anyway with checkpoint.accept_mismatch=True")


def test_another_model_and_other_sizes_are_named():
    found = differences(
        _checkpoint(Model("h", size=8), "vqa2", name="visual_bert"),
        Model("h").state_dict(),
        _run("vqa2"),
    )
    assert found[0] == "it is a visual_bert model, this run's is uvla"
    assert found[1].startswith(
        "3 tensors differ in shape (e.g. encoder.weight: (8, 8) there, (4, 4) here)"
    )


def test_accept_mismatch_loads_with_a_warning(caplog):
    checkpoint = _checkpoint(Model("pooled_classifier"), "vqa2")
    with caplog.at_level(logging.WARNING):
        check_checkpoint_fits(checkpoint, Model("region_scorer"), _run(accept=True), "x.ckpt")
    assert "x.ckpt does not fit this run" in caplog.text
    assert "loading it anyway (checkpoint.accept_mismatch=True)" in caplog.text
