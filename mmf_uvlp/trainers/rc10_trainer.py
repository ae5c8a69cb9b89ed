"""The ``uvlp`` trainer on MMF 1.0.0rc10: MMF's ``BaseTrainer`` wired to the trainer's
components (one module each) through rc10's own methods.

- :class:`~.seeding.RandomState`: every seed seeds, 0 included; evaluation leaves the
  training stream as it was;
- :class:`~.data_order.DataOrder` over the loaders of :mod:`.rc10_loaders`: the data order
  is a function of (seed, epoch), its position in the epoch resumed; ``multitasking``
  (MMF main's per-dataset mix) and ``training.persistent_workers``;
- :class:`~.precision.MixedPrecision`: mixed precision as MMF main spells it
  (``training.fp16``, ``training.amp_dtype``), which rc10 lacks; bfloat16 by default on a
  GPU that has it, float32 elsewhere;
- :class:`~.finite_loss.NonFiniteLossStop`: a non-finite training loss stops the run,
  naming its update and samples, without a host sync per update;
- :mod:`.rc10_checkpoint`: checkpoints that resume the same run, collecting the
  components' states (:class:`~.checkpoint.RunState`), the lr scheduler's and the
  GradScaler's included;
- MMF main's stop at ``training.max_updates`` and per-dataset evaluation (:mod:`.rc10_mmf_main_loop`);
- ``training.compile``: the model compiles itself before MMF parallelizes it.
"""

from __future__ import annotations

from typing import Any

import torch
from mmf.common.registry import registry
from mmf.trainers.base_trainer import BaseTrainer
from mmf.utils.general import clip_gradients

from mmf_uvlp.trainers import console_log
from mmf_uvlp.trainers.checkpoint import LrScheduleResume, RunState
from mmf_uvlp.trainers.choice import NAME
from mmf_uvlp.trainers.data_order import DataOrder
from mmf_uvlp.trainers.finite_loss import NonFiniteLossStop
from mmf_uvlp.trainers.precision import MixedPrecision
from mmf_uvlp.trainers.rc10_checkpoint import UVLPCheckpoint
from mmf_uvlp.trainers.rc10_loaders import SeededDatasetLoader
from mmf_uvlp.trainers.rc10_mmf_main_loop import MMFMainLoop
from mmf_uvlp.trainers.seeding import RandomState
from mmf_uvlp.trainers.throughput import compile_model


@registry.register_trainer(NAME)
class UVLPTrainer(MMFMainLoop, BaseTrainer):
    """MMF 1.0.0rc10's trainer with the plugin's components: random state, data order,
    mixed precision, non-finite loss stop and the resumable checkpoint."""

    def __init__(self, config: Any):
        super().__init__(config)
        self.random_state = RandomState()
        self.non_finite = NonFiniteLossStop()
        self.lr_schedule = LrScheduleResume(self)
        self.data_order = DataOrder(self)
        self.run_state = RunState(
            self.non_finite, self.random_state, self.data_order, self.lr_schedule
        )

    @property
    def checkpoint(self) -> UVLPCheckpoint:
        """The plugin's checkpoint (rc10's ``load_extras`` builds MMF's and assigns it here:
        the trainer's is built in its place, before early stopping and the resume use it)."""
        return self._checkpoint

    @checkpoint.setter
    def checkpoint(self, checkpoint: Any) -> None:
        self._checkpoint = (
            checkpoint if isinstance(checkpoint, UVLPCheckpoint) else UVLPCheckpoint(self)
        )

    def config_based_setup(self) -> None:
        super().config_based_setup()
        self.random_state.seed(self.config.training)
        console_log.install(self.config)

    def load_datasets(self) -> None:
        self.dataset_loader = SeededDatasetLoader(self.config)
        super().load_datasets()

    def load_extras(self) -> None:
        """rc10's ``load_extras`` (which builds the checkpoint and resumes), the precision set
        up before it, the lr scheduler's resumed state restored after it built one."""
        self.mixed_precision = MixedPrecision.from_config(
            self.config.training, self.device, self.writer
        )
        super().load_extras()
        self.lr_schedule.restore()

    def parallelize_model(self) -> None:
        """MMF's, after the model compiled itself for ``training.compile``."""
        compile_model(self)
        super().parallelize_model()

    def _forward_pass(self, batch: Any) -> Any:
        with self.mixed_precision.autocast():
            report = super()._forward_pass(batch)
        self.non_finite.check(
            self.model, self.config.training, report, batch, self.num_updates + 1, self.optimizer
        )
        return report

    def predict(self, dataset_type: str) -> Any:
        with self.mixed_precision.autocast():
            return super().predict(dataset_type)

    def _backward(self, loss: torch.Tensor) -> None:
        """rc10's ``_backward``; with the GradScaler on (float16), its steps as MMF main's
        (no hook of rc10's serves them): gradients are unscaled before clipping, and an
        update whose gradients are not finite is skipped."""
        scaler = self.mixed_precision.scaler
        if not scaler.is_enabled():
            return super()._backward(loss)
        self.optimizer.zero_grad()
        scaler.scale(loss).backward()
        if self.should_clip_gradients:
            scaler.unscale_(self.optimizer)
            clip_gradients(self.model, self.num_updates, self.tb_writer, self.config)
        scaler.step(self.optimizer)
        scaler.update()
        self._run_scheduler()
        self.num_updates += 1
        self.profile("Backward time")

    def finalize(self) -> None:
        self.non_finite.flush()  # the last update's loss, before the final validation
        super().finalize()

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        self.non_finite.flush()
        with self.random_state.evaluation():
            return super().evaluate(*args, **kwargs)
