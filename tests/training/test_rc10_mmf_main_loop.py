"""The ``uvlp`` trainer on MMF 1.0.0rc10 stops at ``training.max_updates`` and evaluates per
dataset, as MMF main does; MMF's own ``base_trainer`` keeps rc10's loop (N+1 updates, one
report for every dataset)."""

import types
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from mmf_uvlp import compat

pytestmark = pytest.mark.skipif(
    compat.installed_mmf_version() != "1.0.0rc10",
    reason="rc10's BaseTrainer (MMF main's loop has both already)",
)


def _counting(trainer_class: type) -> Any:
    """A ``trainer_class`` whose train loop only counts updates (10 batches, max_updates 3)."""
    from omegaconf import OmegaConf

    from mmf.common.registry import registry

    silent = types.SimpleNamespace(write=lambda *a, **k: None)
    registry.register("writer", silent)

    class Counting(trainer_class):
        def __init__(self) -> None:
            self.config = OmegaConf.create({"training": {}})
            self.writer, self.model, self.run_type = silent, torch.nn.Linear(1, 1), "train"
            self.max_epochs, self.max_updates, self.num_updates = None, 3, 0
            self.current_epoch = self.current_iteration = 0
            self.log_interval = 1000
            self.dataset_loader = types.SimpleNamespace(seed_sampler=lambda *a: None)
            self.train_loader = list(range(10))

        def profile(self, *args: Any) -> None:
            pass

        def _forward_pass(self, batch: Any) -> None:
            return None

        def _extract_loss(self, report: Any) -> None:
            return None

        def _backward(self, loss: Any) -> None:
            self.num_updates += 1

        def _try_snapshot(self) -> None:
            pass

        def _try_full_validation(self, force: bool = False) -> bool:
            return False

        def finalize(self) -> None:
            pass

    return Counting()


def test_the_uvlp_trainer_makes_max_updates_updates_and_mmf_s_own_keeps_its_count():
    from mmf.trainers.base_trainer import BaseTrainer

    from mmf_uvlp.trainers.rc10_trainer import UVLPTrainer

    uvlp, own = _counting(UVLPTrainer), _counting(BaseTrainer)
    uvlp.train()
    own.train()
    assert (uvlp.num_updates, own.num_updates) == (3, 4)


def _evaluating(trainer_class: type) -> Any:
    from mmf.common.report import Report
    from mmf.modules.metrics import Metrics

    from mmf_uvlp.trainers.finite_loss import NonFiniteLossStop
    from mmf_uvlp.trainers.seeding import RandomState

    trainer = trainer_class.__new__(trainer_class)
    trainer.random_state, trainer.non_finite = RandomState(), NonFiniteLossStop()
    trainer.model, trainer.metrics = torch.nn.Linear(1, 1), Metrics(["accuracy"])
    trainer._forward_pass = lambda item: Report(*item)
    trainer.meter = None
    trainer.config = OmegaConf.create({"evaluation": {"metrics": ["accuracy"]}})
    return trainer


def _batches() -> list:
    from mmf.common.sample import Sample, SampleList

    def batch(name: str, width: int, hit: bool) -> tuple:
        sample_list = SampleList(
            [Sample({"targets": torch.tensor(1)}), Sample({"targets": torch.tensor(0)})]
        )
        sample_list.dataset_name, sample_list.dataset_type = name, "val"
        scores = torch.zeros(2, width)
        scores[0, 1 if hit else 0] = 5.0
        return sample_list, {"scores": scores, "losses": {f"val/{name}/loss": torch.tensor(1.0)}}

    return [batch("wide", 5, True), batch("narrow", 2, False), batch("wide", 5, True)]


def test_the_uvlp_trainer_evaluates_per_dataset_and_mmf_s_own_concatenates():
    from mmf.trainers.base_trainer import BaseTrainer

    from mmf_uvlp.trainers.rc10_trainer import UVLPTrainer

    _, meter = _evaluating(UVLPTrainer).evaluate(_batches())
    values = {key: meter.meters[key].global_avg for key in meter.meters}
    assert values["val/wide/accuracy"] == 1.0, values
    # narrow: row 0 predicts 0 for target 1, row 1 predicts 0 for target 0
    assert values["val/narrow/accuracy"] == 0.5, values
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        _evaluating(BaseTrainer).evaluate(_batches())  # rc10's own: one torch.cat of all scores
