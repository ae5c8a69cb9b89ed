"""The ``uvlp`` trainer on MMF 1.0.0rc10: MMF's ``BaseTrainer`` with the plugin's training
behaviour.

- every seed seeds, 0 included, and the data order is a function of (seed, epoch)
  (:mod:`.rc10_loaders`); evaluation leaves the training stream as it was (:mod:`.behaviour`);
- mixed precision as MMF main spells it (``training.fp16``, ``training.amp_dtype``:
  :mod:`mmf_uvlp.trainers.precision`), which rc10 lacks; bfloat16 by default on a GPU
  that has it, float32 elsewhere;
- checkpoints resume the same run (:mod:`.rc10_checkpoint`): the run state, the lr
  scheduler and the GradScaler are restored;
- a non-finite training loss stops the run, naming its update and samples, without a
  host sync per update: the check is read one update later and before every checkpoint,
  evaluation and the end of training (:func:`.behaviour.stop_on_non_finite_loss`);
- ``multitasking`` (MMF main's per-dataset mix) and ``training.persistent_workers``;
- MMF main's stop at ``training.max_updates`` and per-dataset evaluation (:mod:`.rc10_mmf_main_loop`).
- ``training.compile``: the model compiles itself before MMF parallelizes it.
"""

from __future__ import annotations

from typing import Any

import torch
from mmf.common.meter import Meter
from mmf.common.registry import registry
from mmf.trainers.base_trainer import BaseTrainer
from mmf.utils.build import build_scheduler
from mmf.utils.configuration import get_mmf_env
from mmf.utils.early_stopping import EarlyStopping
from mmf.utils.general import clip_gradients
from mmf.utils.logger import TensorboardLogger

from mmf_uvlp.trainers.choice import NAME
from mmf_uvlp.trainers.behaviour import (
    compile_model,
    evaluation_stream,
    flush_non_finite_check,
    seed_run,
    stop_on_non_finite_loss,
)
from mmf_uvlp.trainers.rc10_checkpoint import UVLPCheckpoint
from mmf_uvlp.trainers.rc10_loaders import SeededDatasetLoader
from mmf_uvlp.trainers.rc10_mmf_main_loop import MMFMainLoop
from mmf_uvlp.trainers.precision import Precision, record_in_config
from mmf_uvlp.trainers.checkpoint import restore_scheduler


@registry.register_trainer(NAME)
class UVLPTrainer(MMFMainLoop, BaseTrainer):
    """MMF 1.0.0rc10's trainer with the plugin's seeding, data order, mixed precision,
    resumable checkpoints and non-finite loss stop."""

    def config_based_setup(self) -> None:
        super().config_based_setup()
        seed_run(self.config)

    def load_datasets(self) -> None:
        self.dataset_loader = SeededDatasetLoader(self.config)
        super().load_datasets()

    def load_extras(self) -> None:
        """rc10's ``load_extras`` with the plugin's checkpoint, the precision and GradScaler
        set up before it loads, and the lr scheduler restored after it is built."""
        self.precision = Precision.from_config(self.config.training, self.device)
        record_in_config(self.precision, self.config.training)
        self.scaler = self.precision.grad_scaler()
        if self.precision.enabled:
            self.writer.write(
                f"Mixed precision: autocast to {self.precision.dtype} on "
                f"{self.precision.device_type}, GradScaler "
                f"{'on' if self.scaler.is_enabled() else 'off'}"
            )
        self.writer.write("Torch version is: " + torch.__version__)
        self.checkpoint = UVLPCheckpoint(self)
        self.meter = Meter()
        self.training_config = training = self.config.training
        self.log_interval = training.log_interval
        self.evaluation_interval = training.evaluation_interval
        self.checkpoint_interval = training.checkpoint_interval
        self.max_updates = training.max_updates
        self.should_clip_gradients = training.clip_gradients
        self.max_epochs = training.max_epochs
        self.early_stopping = EarlyStopping(
            self.model,
            self.checkpoint,
            training.early_stop.criteria,
            patience=training.early_stop.patience,
            minimize=training.early_stop.minimize,
            should_stop=training.early_stop.enabled,
        )
        self.current_epoch = 0
        self.current_iteration = 0
        self.num_updates = 0
        self.scheduler_state = None
        self.checkpoint.load_state_dict()
        self.not_debug = training.logger_level != "debug"
        self.lr_scheduler = None
        if training.lr_scheduler is True:
            self.lr_scheduler = build_scheduler(self.optimizer, self.config)
        self.tb_writer = None
        if training.tensorboard:
            log_dir = get_mmf_env(key="tensorboard_logdir") or self.writer.log_folder
            self.tb_writer = TensorboardLogger(log_dir, self.current_iteration)
        restore_scheduler(self)

    def parallelize_model(self) -> None:
        """MMF's, after the model compiled itself for ``training.compile``."""
        compile_model(self)
        super().parallelize_model()

    def _forward_pass(self, batch: Any) -> Any:
        with self.precision.autocast():
            report = super()._forward_pass(batch)
        stop_on_non_finite_loss(self, self.config.training, report, batch)
        return report

    def predict(self, dataset_type: str) -> Any:
        with self.precision.autocast():
            return super().predict(dataset_type)

    def _backward(self, loss: torch.Tensor) -> None:
        """rc10's ``_backward``, through MMF main's GradScaler steps when it is on (float16):
        gradients are unscaled before clipping, and an update whose gradients are not finite
        is skipped, as on MMF main."""
        if not self.scaler.is_enabled():
            return super()._backward(loss)
        self.optimizer.zero_grad()
        self.scaler.scale(loss).backward()
        if self.should_clip_gradients:
            self.scaler.unscale_(self.optimizer)
            clip_gradients(self.model, self.num_updates, self.tb_writer, self.config)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._run_scheduler()
        self.num_updates += 1
        self.profile("Backward time")

    def finalize(self) -> None:
        flush_non_finite_check(self)  # the last update's loss, before the final validation
        super().finalize()

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        flush_non_finite_check(self)
        with evaluation_stream():
            return super().evaluate(*args, **kwargs)
