"""The ``uvlp`` trainer on MMF main: MMF's ``MMFTrainer`` wired to the trainer's components
(one module each) through MMF main's own methods, for what MMF main lacks.

- :class:`~.seeding.RandomState`: every seed seeds, 0 included (``configure_seed``);
  evaluation leaves the training stream as it was;
- :class:`~.finite_loss.NonFiniteLossStop`: a NaN or infinite training loss stops the run,
  naming the update, the dataset and the samples, without a host sync per update (MMF
  main's own check, on by the same switch ``training.exit_on_nan_losses``, reads every
  loss on the host and raises a stack trace for NaN only);
- :class:`~.data_order.DataOrder` over the loaders of :mod:`.mmf_main_loaders`: the data
  order is a function of (seed, epoch), its position in the epoch resumed;
- :class:`UVLPCheckpoint`: checkpoints carry the components' states
  (:class:`~.checkpoint.RunState`), which a resume hands back; they load as plain data;
  a write that fails names its error code and file in one line;
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
from mmf.trainers.callbacks.checkpoint import CheckpointCallback
from mmf.trainers.mmf_trainer import MMFTrainer
from mmf.utils.checkpoint import Checkpoint
from mmf.utils.file_io import PathManager

from mmf_uvlp.errors import CheckpointWriteError
from mmf_uvlp.metrics.collapse import warn_if_collapsed
from mmf_uvlp.trainers.choice import NAME
from mmf_uvlp.trainers import console_log
from mmf_uvlp.trainers.checkpoint import (
    RUN_STATE_KEY,
    LrScheduleResume,
    RunState,
    load_run_checkpoint,
    omegaconf_containers,
)
from mmf_uvlp.trainers.data_order import DataOrder
from mmf_uvlp.trainers.finite_loss import NonFiniteLossStop
from mmf_uvlp.trainers.mmf_main_loaders import SeededMultiDataModule
from mmf_uvlp.trainers.seeding import RandomState
from mmf_uvlp.trainers.throughput import compile_model

logger = logging.getLogger(__name__)


class UVLPCheckpoint(Checkpoint):
    """MMF main's Checkpoint whose checkpoints carry the trainer's run state, handed back by a
    resume, which loads as plain data (and omegaconf's containers, which MMF main's
    checkpoints hold), and whose writes (``save_func``: checkpoints and the final model) name
    their error code and file in one line (:class:`CheckpointWriteError`)."""

    _run_state: Optional[Dict[str, Any]] = None  # of the save in progress
    _loaded: Optional[Dict[str, Any]] = None  # the checkpoint the load in progress read

    def save(self, update: int, iteration: Optional[int] = None, update_best: bool = False) -> None:
        self._run_state = self.trainer.run_state.state_dict()  # the non-finite check first
        try:
            super().save(update, iteration, update_best)
        finally:
            self._run_state = None

    def _torch_load(self, file: str) -> Any:
        local_path = PathManager.get_local_path(file, force=True)
        device = self.device if "cuda" in str(self.device) else "cpu"
        self._loaded = load_run_checkpoint(self, file, local_path, device, omegaconf_containers())
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
            self.trainer.run_state.load_state_dict(checkpoint[RUN_STATE_KEY], str(file))
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


class UVLPCheckpointCallback(CheckpointCallback):
    """MMF main's checkpoint callback over the plugin's checkpoint (:class:`UVLPCheckpoint`),
    which early stopping then saves with too."""

    def __init__(self, config: Any, trainer: Any):
        super().__init__(config, trainer)
        self._checkpoint = UVLPCheckpoint(trainer)


@registry.register_trainer(NAME)
class UVLPTrainer(MMFTrainer):
    """MMF main's trainer with the plugin's components: random state, data order, the
    resumable checkpoint and the non-finite loss stop."""

    def __init__(self, config: Any):
        super().__init__(config)
        self.random_state = RandomState()
        self.non_finite = NonFiniteLossStop()
        self.data_order = DataOrder(self)
        self.run_state = RunState(
            self.non_finite, self.random_state, self.data_order, LrScheduleResume(self)
        )

    @property
    def checkpoint_callback(self) -> UVLPCheckpointCallback:
        """The plugin's checkpoint callback (MMF main's ``configure_callbacks`` builds MMF's
        and assigns it here: the trainer's is built in its place, before early stopping
        takes its checkpoint)."""
        return self._checkpoint_callback

    @checkpoint_callback.setter
    def checkpoint_callback(self, callback: Any) -> None:
        if not isinstance(callback, UVLPCheckpointCallback):
            callback = UVLPCheckpointCallback(self.config, self)
        self._checkpoint_callback = callback

    def configure_seed(self) -> None:
        super().configure_seed()
        self.random_state.seed(self.config.training)
        console_log.install(self.config)

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
        self.non_finite.flush()
        with self.random_state.evaluation():
            report, meter = super().evaluation_loop(*args, **kwargs)
        warn_if_collapsed(report, self.config.evaluation.metrics)
        return report, meter

    def _forward(self, batch: Any) -> Any:
        report = super()._forward(batch)
        self.non_finite.check(
            self.model, self.training_config, report, batch, self.num_updates + 1, self.optimizer
        )
        return report

    def _check_nan_losses(self, report: Any) -> None:
        """MMF main's check, replaced by the plugin's (:meth:`_forward`)."""

    def training_loop(self) -> None:
        super().training_loop()
        self.non_finite.flush()
