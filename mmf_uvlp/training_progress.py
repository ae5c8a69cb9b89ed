"""Training progress in epochs, derived from MMF's update counter.

MMF counts updates, not epochs (its multi-dataset loader has no common epoch), so the
μ-VLA curriculum derives the epoch as

    epoch = num_updates * training.batch_size * training.update_frequency / total samples

where ``num_updates`` is what MMF's trainer registers after every update (and restores
from a checkpoint on resume), ``training.batch_size`` is MMF's *global* batch size
(each rank of a distributed run sees 1/world of it), ``update_frequency`` the batches
per update of MMF main's gradient accumulation (absent in rc10: 1) and the total is the sum of the
train-split sizes that the pre-training datasets register here. Under MMF's
multi-dataset loader every dataset is iterated fully once per epoch (sampled in
proportion to its size), so this is the number of passes over all of them.

Datasets call :func:`register_train_samples` once when their train split is built::

    from mmf_uvlp.training_progress import register_train_samples
    register_train_samples(self.dataset_name, len(self.annotation_db))

The sizes live in MMF's registry under ``uvla_train_samples.<dataset_name>``.
"""

from __future__ import annotations

from typing import Dict, Optional

from mmf.common.registry import registry

TRAIN_SAMPLES_KEY = "uvla_train_samples"


def register_train_samples(dataset_name: str, num_samples: int) -> None:
    """Record the number of training samples of one pre-training dataset."""
    if not dataset_name or "." in dataset_name:
        raise ValueError(
            f"register_train_samples: dataset_name must be a non-empty name without '.' "
            f"(it becomes a registry key), got {dataset_name!r}"
        )
    if int(num_samples) <= 0:
        raise ValueError(
            f"register_train_samples: num_samples of {dataset_name!r} must be positive, "
            f"got {num_samples}"
        )
    registry.register(f"{TRAIN_SAMPLES_KEY}.{dataset_name}", int(num_samples))


def registered_train_samples() -> Dict[str, int]:
    """The train-split sizes registered so far, by dataset name."""
    return dict(registry.get(TRAIN_SAMPLES_KEY, {}, no_warning=True))


def clear_train_samples() -> None:
    """Forget every registered size (tests, or a process that builds a second run)."""
    registry.register(TRAIN_SAMPLES_KEY, {})


def current_epoch(batch_size: Optional[int] = None) -> float:
    """Epochs completed so far (fractional), from ``num_updates`` and the registered sizes.

    ``batch_size`` (samples per update) defaults to ``training.batch_size *
    training.update_frequency`` of the config in MMF's registry. Raises ``RuntimeError``
    when no dataset registered its size.
    """
    sizes = registered_train_samples()
    if not sizes:
        raise RuntimeError(
            "the epoch cannot be derived: no training-set size is registered. Each pre-training "
            "dataset must call mmf_uvlp.training_progress.register_train_samples(name, n) "
            f"(registry key '{TRAIN_SAMPLES_KEY}.<dataset_name>')"
        )
    if batch_size is None:
        config = registry.get("config", None, no_warning=True)
        training = config.get("training", {}) if config is not None else {}
        if training.get("batch_size", None) is None:
            raise RuntimeError(
                "the epoch cannot be derived: no training.batch_size in the registered MMF config"
            )
        batch_size = int(training.batch_size) * int(training.get("update_frequency", 1) or 1)
    num_updates = registry.get("num_updates", 0, no_warning=True)
    return num_updates * int(batch_size) / sum(sizes.values())
