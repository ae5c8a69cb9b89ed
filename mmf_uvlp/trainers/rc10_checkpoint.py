"""MMF 1.0.0rc10's Checkpoint as the ``uvlp`` trainer uses it.

- :meth:`UVLPCheckpoint.save` writes MMF's checkpoint, plus the GradScaler state
  (``fp16_scaler``, MMF main's entry: the trainer's
  :class:`~mmf_uvlp.trainers.precision.MixedPrecision`) and the run state (``uvlp_run_state``:
  the states of the trainer's components, :class:`~mmf_uvlp.trainers.checkpoint.RunState`,
  collected after the non-finite loss check of the last update), each file atomically (a
  temporary file renamed; a write error names its code and file);
- a checkpoint is loaded as plain data only (a file holding anything else is refused,
  naming what it holds; ``checkpoint.trust_resume_file=True`` opts in to a legacy resume
  file), a resumed one is checked against the run
  (:func:`~mmf_uvlp.trainers.checkpoint.check_checkpoint_fits`), and a resume hands the
  run state and the GradScaler state back to the trainer's components;
- a damaged or missing ``current.ckpt`` falls back to the newest complete
  ``models/model_N.ckpt``.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from mmf.common.registry import registry
from mmf.utils.checkpoint import Checkpoint
from mmf.utils.distributed import is_master
from omegaconf import OmegaConf

from mmf_uvlp.trainers.checkpoint import (
    RUN_STATE_KEY,
    atomic_torch_save,
    check_checkpoint_fits,
    load_or_fall_back,
    load_run_checkpoint,
)
from mmf_uvlp.trainers.precision import SCALER_KEY


class UVLPCheckpoint(Checkpoint):
    """MMF 1.0.0rc10's Checkpoint: atomic, plain-data, carrying the run state."""

    def __init__(self, trainer: Any):
        super().__init__(trainer)
        self._loaded: Optional[Dict[str, Any]] = None
        self._check_fit = False  # the load in progress resumes the run: check the file

    def load_state_dict(self) -> Any:
        return load_or_fall_back(self, Checkpoint.load_state_dict)

    def _torch_load(self, file: str) -> Any:
        device = self.device if "cuda" in str(self.device) else "cpu"
        self._loaded = load_run_checkpoint(self, file, file, device)
        if self._check_fit:
            check_checkpoint_fits(
                self._loaded,
                self.trainer.model,
                self.config,
                str(file),
                getattr(self.trainer, "writer", None),
            )
        return self._loaded

    def _load(
        self, file: str, force: bool = False, load_zoo: bool = False, load_pretrained: bool = False
    ) -> Any:
        self._loaded = None
        # not MMF's own restore of the run's best checkpoint, nor a pre-trained load
        self._check_fit = not (force or load_zoo or load_pretrained)
        try:
            result = super()._load(file, force, load_zoo, load_pretrained)
        finally:
            self._check_fit = False
        checkpoint, self._loaded = self._loaded, None
        reset = self.config.checkpoint.reset
        if checkpoint is None or load_pretrained or reset.all:
            return result
        if not reset.get("fp16_scaler", False):
            self.trainer.mixed_precision.load_state_dict(
                checkpoint.get(SCALER_KEY), checkpoint.get("config"), str(file)
            )
        if not (force or reset.counts) and RUN_STATE_KEY in checkpoint:
            self.trainer.run_state.load_state_dict(checkpoint[RUN_STATE_KEY], str(file))
        return result

    def _contents(self, update: int, iteration: int) -> Dict[str, Any]:
        """What MMF 1.0.0rc10's ``save`` writes, with the GradScaler and the run state."""
        trainer = self.trainer
        model = trainer.model
        if registry.get("data_parallel") or registry.get("distributed"):
            model = model.module
        early_stopping = trainer.early_stopping
        contents = {
            "model": model.state_dict(),
            "optimizer": trainer.optimizer.state_dict(),
            "best_iteration": early_stopping.best_monitored_iteration,
            "current_iteration": iteration,
            "current_epoch": trainer.current_epoch,
            "num_updates": update,
            "best_update": early_stopping.best_monitored_update,
            "best_metric_value": early_stopping.best_monitored_value,
            # Convert to container to avoid any dependencies
            "config": OmegaConf.to_container(self.config, resolve=True),
        }
        if self.git_repo:
            contents.update(self._get_vcs_fields())
        contents[SCALER_KEY] = trainer.mixed_precision.state_dict()
        contents[RUN_STATE_KEY] = trainer.run_state.state_dict()
        return contents

    def save(self, update: int, iteration: Optional[int] = None, update_best: bool = False) -> None:
        self.trainer.non_finite.flush()  # no checkpoint of a non-finite update
        if not is_master():
            return
        contents = self._contents(update, iteration or update)
        atomic_torch_save(contents, os.path.join(self.models_foldername, f"model_{update}.ckpt"))
        if update_best:
            atomic_torch_save(
                contents, os.path.join(self.ckpt_foldername, self.ckpt_prefix + "best.ckpt")
            )
        atomic_torch_save(
            contents, os.path.join(self.ckpt_foldername, self.ckpt_prefix + "current.ckpt")
        )

    def finalize(self) -> None:
        self.trainer.non_finite.flush()
        if is_master():
            atomic_torch_save(self.trainer.model.state_dict(), self.pth_filepath)
