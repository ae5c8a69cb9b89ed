"""A training run does not write into a folder that holds another run's final checkpoint.

MMF writes ``<model>_final.pth``, ``current.ckpt`` and ``best.ckpt`` into ``env.save_dir``
whatever that folder holds: a fine-tuning pointed at the pre-training's folder replaces the
pre-trained weights without a word. With the plugin, a training run (``run_type`` with
``train``) into a folder holding a ``*_final.pth`` stops before MMF starts, in one line::

    mmf_run: error: save/uvla_pretrain holds the final checkpoint of another run
    (uvla_final.pth, written 2026-01-02 10:00 UTC); ...

unless it continues that run (``checkpoint.resume=True`` with the run's checkpoints there:
``current.ckpt``, ``best.ckpt`` or ``models/model_N.ckpt``)
or asks to replace it (``checkpoint.overwrite=True``). Inference and prediction runs write
no checkpoint and are never refused.
"""

from __future__ import annotations

import glob
import os
from datetime import datetime, timezone
from typing import Any, Optional

OVERWRITE_KEY = "checkpoint.overwrite"


def _is_training(config: Any) -> bool:
    return "train" in str(config.get("run_type", "train"))


def another_runs_final_checkpoint(config: Any) -> Optional[str]:
    """The one-line refusal of a training run into a folder holding another run's final
    checkpoint, or None when the run may write there."""
    if not _is_training(config) or bool(config.checkpoint.get("overwrite", False)):
        return None
    folder = str(config.env.save_dir)
    finals = sorted(glob.glob(os.path.join(glob.escape(folder), "*_final.pth")))
    if not finals:
        return None
    own = [
        os.path.join(glob.escape(folder), pattern)
        for pattern in ("*current.ckpt", "*best.ckpt", os.path.join("models", "model_*.ckpt"))
    ]
    if config.checkpoint.get("resume", False) and any(glob.glob(path) for path in own):
        return None  # continues the run that wrote it
    name = str(config.training.get("experiment_name", ""))
    elsewhere = (
        "training.experiment_name=<name> or env.save_dir=<folder>"
        if name and os.path.basename(os.path.normpath(folder)) == name
        else "env.save_dir=<folder>"
    )
    written = datetime.fromtimestamp(os.path.getmtime(finals[0]), timezone.utc)
    return (
        f"{folder} holds the final checkpoint of another run ({os.path.basename(finals[0])}, "
        f"written {written:%Y-%m-%d %H:%M} UTC); train into another folder ({elsewhere}), "
        "continue that run "
        f"with checkpoint.resume=True, or replace it with {OVERWRITE_KEY}=True"
    )
