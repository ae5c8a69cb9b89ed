"""Registers the ``uvlp`` trainer written for the installed MMF (imported by
:mod:`mmf_uvlp.plugin`)."""

from __future__ import annotations

try:  # MMF main: callbacks and MMFTrainer
    import mmf.trainers.mmf_trainer  # noqa: F401
except ImportError:  # MMF 1.0.0rc10: one BaseTrainer
    from mmf_uvlp.trainers.rc10_trainer import UVLPTrainer
else:
    from mmf_uvlp.trainers.mmf_main_trainer import UVLPTrainer  # type: ignore[assignment]

__all__ = ["UVLPTrainer"]
