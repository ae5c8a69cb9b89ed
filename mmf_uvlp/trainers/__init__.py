"""The plugin's trainer: MMF's own trainer with the plugin's training behaviour, registered
as ``uvlp`` (``training.trainer: uvlp``, which the plugin's configs set).

On MMF 1.0.0rc10 it is a subclass of ``BaseTrainer`` (:mod:`.rc10_trainer`), on MMF main of
``MMFTrainer`` (:mod:`.mmf_main_trainer`); what both share lives in :mod:`.behaviour`. A run
that chooses another trainer (MMF's ``base_trainer``, ``mmf``, ``lightning``) is MMF's own.

Importing this package is cheap: it touches neither torch nor MMF.
"""

from __future__ import annotations

from typing import Any

NAME = "uvlp"


def chosen_by(config: Any) -> bool:
    """Whether the run of ``config`` (MMF's config, or None) trains with the plugin's trainer."""
    if config is None:
        return False
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(config, "training.trainer", default=None) == NAME
    except Exception:  # an unresolvable interpolation elsewhere does not matter here
        return False
