"""Registers the ``uvlp`` trainer written for the installed MMF (imported by
:mod:`mmf_uvlp.plugin`)."""

from __future__ import annotations

from mmf_uvlp.utils.mmf_version import mmf_main_installed

if mmf_main_installed():  # MMF main: callbacks and MMFTrainer
    from mmf_uvlp.trainers.mmf_main_trainer import UVLPTrainer
else:  # MMF 1.0.0rc10: one BaseTrainer
    from mmf_uvlp.trainers.rc10_trainer import UVLPTrainer  # type: ignore[assignment]

__all__ = ["UVLPTrainer"]
