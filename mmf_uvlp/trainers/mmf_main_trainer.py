"""The ``uvlp`` trainer on MMF main: MMF's ``MMFTrainer`` with the plugin's training
behaviour that MMF main lacks (:mod:`.behaviour`).

- every seed seeds, 0 included (``configure_seed``);
- a NaN or infinite training loss stops the run, naming the update, the dataset and the
  samples, without a host sync per update (MMF main's own check, on by the same switch
  ``training.exit_on_nan_losses``, reads every loss on the host and raises a stack trace
  for NaN only): the check is read before every checkpoint and evaluation and at the end
  of training (:func:`.behaviour.stop_on_non_finite_loss`);
- the data order is a function of (seed, epoch) (:mod:`.mmf_main_loaders`), and evaluation
  leaves the training stream as it was (:mod:`.behaviour`);
- checkpoints resume the same run (:class:`UVLPCheckpoint`): they carry the run state
  (random-number states and the position in the epoch:
  :mod:`mmf_uvlp.trainers.checkpoint`), which a resume restores;
- a checkpoint write that fails names its error code and file in one line;
- an evaluation whose predictions collapsed says so in one line
  (:mod:`mmf_uvlp.metrics.collapse`);
- ``training.compile``: the model compiles itself before MMF parallelizes it.

MMF main has mixed precision, the lr scheduler's state in its checkpoints and the
``multitasking`` mix of its own.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from mmf.common.registry import registry
from mmf.trainers.mmf_trainer import MMFTrainer
from mmf.utils.checkpoint import Checkpoint

from mmf_uvlp.errors import CheckpointWriteError
from mmf_uvlp.metrics.collapse import warn_if_collapsed
from mmf_uvlp.trainers.choice import NAME
from mmf_uvlp.trainers.behaviour import (
    compile_model,
    evaluation_stream,
    flush_non_finite_check,
    seed_run,
    stop_on_non_finite_loss,
)
from mmf_uvlp.trainers.mmf_main_loaders import SeededMultiDataModule
from mmf_uvlp.trainers.checkpoint import RUN_STATE_KEY, restore_run_state, run_state

logger = logging.getLogger(__name__)


class UVLPCheckpoint(Checkpoint):
    """MMF main's Checkpoint whose checkpoints carry the run state, restored by a resume, and
    whose writes (``save_func``: checkpoints and the final model) name their error code and
    file in one line (:class:`CheckpointWriteError`)."""

    _run_state: Optional[Dict[str, Any]] = None  # of the save in progress
    _loaded: Optional[Dict[str, Any]] = None  # the checkpoint the load in progress read

    def save(self, update: int, iteration: Optional[int] = None, update_best: bool = False) -> None:
        flush_non_finite_check(self.trainer)  # no checkpoint of a non-finite update
        self._run_state = run_state(self.trainer)
        try:
            super().save(update, iteration, update_best)
        finally:
            self._run_state = None

    def _torch_load(self, file: str) -> Any:
        self._loaded = super()._torch_load(file)
        return self._loaded

    def _load(
        self, file: str, force: bool = False, load_zoo: bool = False, load_pretrained: bool = False
    ) -> Any:
        """MMF main's load; a resume (not MMF's restore of the best checkpoint, nor a
        pre-trained or zoo load, nor ``checkpoint.reset.counts``) restores the run state."""
        self._loaded = None
        result = super()._load(file, force, load_zoo, load_pretrained)
        checkpoint, self._loaded = self._loaded, None
        reset = self.config.checkpoint.reset
        if (
            checkpoint is not None
            and RUN_STATE_KEY in checkpoint
            and not (force or load_zoo or load_pretrained or reset.all or reset.counts)
        ):
            restore_run_state(self.trainer, checkpoint[RUN_STATE_KEY], str(file))
        return result

    def save_func(self, *args: Any) -> Any:
        if self._run_state is not None and args and isinstance(args[0], dict):
            args[0][RUN_STATE_KEY] = self._run_state
        handle = args[1] if len(args) > 1 else None
        try:
            result = super().save_func(*args)
            if hasattr(handle, "flush"):
                handle.flush()  # a full disk shows here, not at close
            return result
        except (OSError, RuntimeError) as raised:
            error = _os_error_in(raised)
            if error is None:
                raise
            if hasattr(handle, "close"):  # its buffered rest would fail again when closed
                try:
                    handle.close()
                except OSError:
                    pass
            raise CheckpointWriteError(str(getattr(handle, "name", handle)), error) from raised


def _os_error_in(raised: BaseException) -> Optional[OSError]:
    """The OSError behind ``raised`` (torch's writer reports a failed write as a RuntimeError
    "unexpected pos" raised while handling it), or None."""
    seen: Optional[BaseException] = raised
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


@registry.register_trainer(NAME)
class UVLPTrainer(MMFTrainer):
    """MMF main's trainer with the plugin's seeding, data order, resumable checkpoint and
    non-finite loss stop."""

    def configure_seed(self) -> None:
        super().configure_seed()
        seed_run(self.config)

    def load_datasets(self) -> None:
        """MMF main's datasets, their order a function of (seed, epoch)."""
        logger.info("Loading datasets")
        self.dataset_loader = SeededMultiDataModule(self.config)
        self.train_loader = self.dataset_loader.train_dataloader()
        self.val_loader = self.dataset_loader.val_dataloader()
        self.test_loader = self.dataset_loader.test_dataloader()

    def parallelize_model(self) -> None:
        """MMF's, after the model compiled itself for ``training.compile``."""
        compile_model(self)
        super().parallelize_model()

    def evaluation_loop(self, *args: Any, **kwargs: Any) -> Any:
        flush_non_finite_check(self)
        with evaluation_stream():
            report, meter = super().evaluation_loop(*args, **kwargs)
        warn_if_collapsed(report, self.config.evaluation.metrics)
        return report, meter

    def configure_callbacks(self) -> None:
        """MMF main's callbacks, their checkpoint (the checkpoint callback's and early
        stopping's) the plugin's."""
        super().configure_callbacks()
        checkpoint = UVLPCheckpoint(self)
        self.checkpoint_callback._checkpoint = checkpoint
        self.early_stop_callback.early_stopping.checkpoint = checkpoint

    def _forward(self, batch: Any) -> Any:
        report = super()._forward(batch)
        stop_on_non_finite_loss(self, self.training_config, report, batch)
        return report

    def _check_nan_losses(self, report: Any) -> None:
        """MMF main's check, replaced by the plugin's (:meth:`_forward`)."""

    def training_loop(self) -> None:
        super().training_loop()
        flush_non_finite_check(self)
