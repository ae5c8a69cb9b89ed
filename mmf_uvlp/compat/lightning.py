"""MMF main's Lightning trainer (``training.trainer=lightning``) follows the ``training`` keys
that MMF's own trainer reads, through their twins in ``trainer.params``."""

from __future__ import annotations

import functools
import logging
from typing import Any, List

logger = logging.getLogger(__name__)

# (training key, its Lightning twin in trainer.params): MMF main's Lightning trainer reads
# only the latter. val_check_interval counts batches, the others updates.
LIGHTNING_TWINS = (
    ("max_updates", "max_steps"),
    ("max_epochs", "max_epochs"),
    ("evaluation_interval", "val_check_interval"),
    ("log_interval", "log_every_n_steps"),
    ("update_frequency", "accumulate_grad_batches"),
)


def lightning_params_from_training(config: Any, defaults: Any) -> List[str]:
    """Make ``config.trainer.params`` follow ``config.training`` (MMF's defaults: ``defaults``).

    A training key the user set (it differs from MMF's default) sets its Lightning twin left
    at MMF's default; a twin the user set sets the training key left at its default (the
    schedule's ``${training.max_updates}`` and the curriculum then see the real run length);
    both set and different is a :class:`UserConfigError`. An evaluation interval in batches
    spans epochs (``check_val_every_n_epoch: null``), as MMF's own trainer counts it.
    Returns one line per key set.
    """
    from omegaconf import open_dict

    from mmf_uvlp.errors import UserConfigError

    training, params = config.training, config.trainer.params
    default_training, default_params = defaults.training, defaults.trainer.params
    batches = int(training.get("update_frequency", 1) or 1)
    if params.get("accumulate_grad_batches", 1) != default_params.get("accumulate_grad_batches", 1):
        batches = int(params.accumulate_grad_batches)
    changed: List[str] = []
    with open_dict(training), open_dict(params):
        for key, twin in LIGHTNING_TWINS:
            scale = batches if twin == "val_check_interval" else 1
            value, twin_value = training.get(key, None), params.get(twin, None)
            wanted = None if value is None else value * scale
            if twin_value == wanted:
                continue
            if twin_value == default_params.get(twin, None):
                params[twin] = wanted
                changed.append(f"trainer.params.{twin}={wanted} (from training.{key})")
            elif value == default_training.get(key, None) and not isinstance(twin_value, float):
                training[key] = None if twin_value is None else twin_value // scale
                changed.append(f"training.{key}={training[key]} (from trainer.params.{twin})")
            else:
                unit = f", counted in batches, {scale} an update" if scale > 1 else ""
                raise UserConfigError(
                    f"training.{key}={value} and trainer.params.{twin}={twin_value} disagree "
                    f"(training.trainer=lightning follows trainer.params.{twin}{unit}); "
                    "set only one of them"
                )
        if (
            isinstance(params.get("val_check_interval"), int)
            and "check_val_every_n_epoch" not in params
        ):
            params.check_val_every_n_epoch = None
            changed.append(
                "trainer.params.check_val_every_n_epoch=None (the evaluation "
                "interval spans epochs, as in MMF's trainer)"
            )
    return changed


def follow_training_keys() -> None:
    """``LightningTrainer`` sets ``trainer.params`` from ``training`` before it builds."""
    from mmf.trainers.lightning_trainer import LightningTrainer
    from mmf.utils.configuration import get_default_config_path, load_yaml

    init = LightningTrainer.__init__

    @functools.wraps(init)
    def __init__(self: LightningTrainer, config: Any) -> None:
        for line in lightning_params_from_training(config, load_yaml(get_default_config_path())):
            logger.info("lightning trainer: %s", line)
        init(self, config)

    LightningTrainer.__init__ = __init__
