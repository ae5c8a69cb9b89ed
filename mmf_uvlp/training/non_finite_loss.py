"""A non-finite training loss stops the run before its update, naming the update, the
dataset and the samples (:mod:`mmf_uvlp.utils.finite_loss`); ``training.exit_on_nan_losses=False``
(MMF main's switch) turns the check off."""

from __future__ import annotations

import functools
from typing import Any


def install() -> None:
    """MMF 1.0.0rc10's ``BaseTrainer._forward_pass`` checks the training loss."""
    from mmf.trainers.base_trainer import BaseTrainer
    from mmf_uvlp.utils.finite_loss import check_finite_loss

    forward_pass = BaseTrainer._forward_pass

    @functools.wraps(forward_pass)
    def _forward_pass(self: BaseTrainer, batch: Any) -> Any:
        report = forward_pass(self, batch)
        if self.model.training and self.config.training.get("exit_on_nan_losses", True):
            check_finite_loss(report.get("losses") or {}, batch, report.get("dataset_name", "?"),
                              self.num_updates + 1, self.model)
        return report

    BaseTrainer._forward_pass = _forward_pass


def install_on_mmf_main() -> None:
    """MMF main's ``TrainerTrainingLoopMixin._forward`` checks the training loss (MMF main's
    own check, on by the same switch, raises a stack trace for NaN only)."""
    from mmf.trainers.core.training_loop import TrainerTrainingLoopMixin
    from mmf_uvlp.utils.finite_loss import check_finite_loss

    forward = TrainerTrainingLoopMixin._forward

    @functools.wraps(forward)
    def _forward(self: Any, batch: Any) -> Any:
        report = forward(self, batch)
        if self.model.training and self.training_config.get("exit_on_nan_losses", True):
            check_finite_loss(report.get("losses") or {}, batch, report.get("dataset_name", "?"),
                              self.num_updates + 1, self.model)
        return report

    TrainerTrainingLoopMixin._forward = _forward
