"""Checkpoints that resume the same run: what the ``uvlp`` trainer's checkpoint
(:mod:`mmf_uvlp.trainers.rc10_checkpoint`) saves and restores beyond MMF's.

A checkpoint carries ``uvlp_run_state``: the random-number states, the data position
(:mod:`mmf_uvlp.training.data_order`), the epoch and the lr scheduler's state. It is written
under a temporary name and renamed (a write error names its code and file), loaded with the
restricted loader of :mod:`mmf_uvlp.training.checkpoint_files` (plain data and numpy arrays;
a legacy ``checkpoint.resume_file`` holding other objects only with
``checkpoint.trust_resume_file=True``), and a damaged or missing ``current.ckpt`` falls back
to the newest complete ``models/model_N.ckpt``.
"""

from __future__ import annotations

import glob
import os
import re
import warnings
from typing import Any, Callable, Dict, Optional, Sequence

from mmf_uvlp.training.data_order import data_position

RUN_STATE_KEY = "uvlp_run_state"


def run_state(trainer: Any) -> Dict[str, Any]:
    """What a checkpoint of ``trainer`` needs beyond MMF's to resume the same run."""
    from mmf_uvlp.training.reproducibility import rng_state

    scheduler = getattr(trainer, "lr_scheduler", None)
    return {
        "rng": rng_state(),
        "data": data_position(trainer.train_loader),
        "epoch": int(trainer.current_epoch),
        "lr_scheduler": None if scheduler is None else scheduler.state_dict(),
    }


TRUST_RESUME_FILE = "checkpoint.trust_resume_file"


def load_run_checkpoint(
    checkpoint: Any, file: str, local_path: str, map_location: Any, allowed: Sequence[Any] = ()
) -> Dict[str, Any]:
    """A checkpoint that MMF's ``checkpoint`` (its Checkpoint) loads (``local_path``: where
    ``file`` lies), as plain data and numpy arrays; the run's ``checkpoint.resume_file``
    loads whatever it holds when ``checkpoint.trust_resume_file`` is true, and a refusal of
    it names that opt-in."""
    from mmf_uvlp.training.checkpoint_files import load_checkpoint

    config = getattr(checkpoint, "config", None)  # None: a Checkpoint built without a run
    checkpoint_config = config.get("checkpoint", {}) if config is not None else {}
    resume_file = checkpoint_config.get("resume_file", None)
    is_resume_file = resume_file is not None and os.path.abspath(
        str(resume_file)
    ) == os.path.abspath(str(file))
    trusted = is_resume_file and bool(checkpoint_config.get("trust_resume_file", False))
    hint = f"set {TRUST_RESUME_FILE}=True (it may then run code)" if is_resume_file else ""
    return load_checkpoint(
        str(local_path), map_location=map_location, allowed=allowed, trust=trusted, trust_hint=hint
    )


def restore_run_state(trainer: Any, state: Dict[str, Any], file: str) -> None:
    """Put ``trainer`` back where the checkpoint ``file`` of ``state`` was written; data of
    other sizes restart the data order with a new epoch (with a warning)."""
    from mmf_uvlp.training.reproducibility import set_rng_state

    set_rng_state(state["rng"])
    loader, data = trainer.train_loader, state["data"]
    if data["sizes"] == [len(dataset) for dataset in loader.datasets]:
        loader.resume_at(data)
        trainer.current_epoch = state["epoch"] - 1  # train() re-enters the epoch in progress
    else:
        warnings.warn(
            f"{file}: its training data ({data['sizes']} samples per dataset) differ from "
            f"this run's; the data order restarts with a new epoch"
        )
    trainer.scheduler_state = state["lr_scheduler"]


def restore_scheduler(trainer: Any) -> None:
    """The lr scheduler state of the resumed checkpoint, and the lr of its next update."""
    state, trainer.scheduler_state = getattr(trainer, "scheduler_state", None), None
    if state is None or trainer.lr_scheduler is None:
        return
    scheduler = trainer.lr_scheduler
    scheduler.load_state_dict(state)
    # Building the scheduler set the lr of step 0; the next update uses the lr of
    # the restored step under this run's schedule (a longer max_updates extends it).
    lambdas = getattr(scheduler, "lr_lambdas", None)
    if lambdas is None:
        rates = scheduler.get_last_lr()
    else:
        rates = [base * fn(scheduler.last_epoch) for base, fn in zip(scheduler.base_lrs, lambdas)]
    for group, rate in zip(trainer.optimizer.param_groups, rates):
        group["lr"] = rate


def newest_complete(checkpoint: Any) -> Optional[str]:
    """Loads the newest models/model_N.ckpt of ``checkpoint`` (MMF's Checkpoint) that can be
    read; its path, or None."""
    from mmf_uvlp.errors import DamagedCheckpoint

    def update_of(path: str) -> int:
        return int(re.search(r"model_(\d+)\.ckpt$", path).group(1))

    candidates = glob.glob(os.path.join(checkpoint.models_foldername, "model_*.ckpt"))
    for candidate in sorted(candidates, key=update_of, reverse=True):
        try:
            checkpoint._load(candidate)
        except DamagedCheckpoint:
            continue
        return candidate
    return None


def _fall_back(checkpoint: Any, message: str) -> None:
    warnings.warn(message)
    checkpoint.trainer.writer.write(message, "warning")


def load_or_fall_back(checkpoint: Any, load_state_dict: Callable[[Any], Any]) -> Any:
    """MMF's ``load_state_dict`` of ``checkpoint``; a resume whose current.ckpt is missing
    or damaged loads the newest complete checkpoint instead (with a warning)."""
    from mmf_uvlp.errors import DamagedCheckpoint

    config = checkpoint.config.checkpoint
    current = os.path.join(checkpoint.ckpt_foldername, checkpoint.ckpt_prefix + "current.ckpt")
    if config.resume and not config.resume_best and not os.path.exists(current):
        # e.g. the disk filled up while the first current.ckpt was written
        fallback = newest_complete(checkpoint)
        if fallback is not None:
            _fall_back(
                checkpoint,
                f"{current} is missing; resuming from {fallback}, the newest complete checkpoint",
            )
            return None
    try:
        return load_state_dict(checkpoint)
    except DamagedCheckpoint as damaged:
        if not config.resume or os.path.abspath(damaged.path) != os.path.abspath(current):
            raise
        fallback = newest_complete(checkpoint)
        if fallback is None:
            raise DamagedCheckpoint(
                damaged.path, f"and no complete checkpoint in {checkpoint.models_foldername}"
            ) from damaged
        _fall_back(
            checkpoint, f"{damaged}; resuming from {fallback}, the newest complete checkpoint"
        )
    return None
