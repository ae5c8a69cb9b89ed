"""The ``uvlp`` trainer on MMF main: MMF's ``MMFTrainer`` with the plugin's training
behaviour that MMF main lacks (:mod:`.behaviour`).

- every seed seeds, 0 included (``configure_seed``);
- a NaN or infinite training loss stops the run before its update, naming the update, the
  dataset and the samples (MMF main's own check, on by the same switch
  ``training.exit_on_nan_losses``, raises a stack trace for NaN only);
- a checkpoint write that fails names its error code and file in one line
  (:class:`UVLPCheckpoint`).

MMF main has mixed precision, the lr scheduler's state in its checkpoints and the
``multitasking`` mix of its own.
"""

from __future__ import annotations

from typing import Any, Optional

from mmf.common.registry import registry
from mmf.trainers.mmf_trainer import MMFTrainer
from mmf.utils.checkpoint import Checkpoint

from mmf_uvlp.trainers import NAME
from mmf_uvlp.trainers.behaviour import seed_run, stop_on_non_finite_loss
from mmf_uvlp.utils.checkpoint_files import CheckpointWriteError


class UVLPCheckpoint(Checkpoint):
    """MMF main's Checkpoint whose writes (``save_func``: checkpoints and the final model)
    name their error code and file in one line (:class:`CheckpointWriteError`)."""

    def save_func(self, *args: Any) -> Any:
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
    """MMF main's trainer with the plugin's seeding, non-finite loss stop and checkpoint."""

    def configure_seed(self) -> None:
        super().configure_seed()
        seed_run(self.config)

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
