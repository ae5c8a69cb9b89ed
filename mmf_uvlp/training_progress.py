"""Training progress in epochs, derived from MMF's update counter.

MMF counts updates, not epochs (its multi-dataset loader has no common epoch), so the
μ-VLA curriculum derives the epoch as

    epoch = num_updates * training.batch_size * training.update_frequency / total samples

where ``num_updates`` is the count of MMF's trainer (restored from a checkpoint on resume;
:func:`updates_done` says where each MMF version keeps it), ``training.batch_size`` is MMF's
*global* batch size (each rank of a distributed run sees 1/world of it), ``update_frequency``
the batches per update of MMF main's gradient accumulation (absent in rc10: 1) and the total
is the sum of the train-split sizes that the pre-training datasets register here. Under MMF's
multi-dataset loader every dataset is iterated fully once per epoch (sampled in
proportion to its size), so this is the number of passes over all of them.

Datasets call :func:`register_train_samples` once when their train split is built::

    from mmf_uvlp.training_progress import register_train_samples
    register_train_samples(self.dataset_name, len(self.annotation_db))

The sizes live in MMF's registry under ``uvla_train_samples.<dataset_name>``.

The update count: rc10's trainer registers ``num_updates`` in MMF's registry after every
update. MMF main keeps it on the trainer only (its registry has it only after a checkpoint
was restored), and hands the trainer to the callbacks named in ``training.callbacks``: the
uvla model's defaults name :class:`TrainingProgressCallback` (``uvla_training_progress``).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from mmf.common.registry import registry

try:  # MMF main: trainer callbacks, built from training.callbacks
    from mmf.trainers.callbacks.base import Callback as _TrainerCallback
except ImportError:  # rc10: no callbacks (its trainer registers num_updates itself)
    _TrainerCallback = object

TRAIN_SAMPLES_KEY = "uvla_train_samples"
TRAINER_KEY = "uvla_trainer"
CALLBACK_NAME = "uvla_training_progress"


class TrainingProgressCallback(_TrainerCallback):  # type: ignore[misc,valid-type]
    """MMF main: makes the trainer, and so its update counter, visible to :func:`updates_done`."""

    def __init__(self, config: Any, trainer: Any, **params: Any):
        # what MMF main's Callback.__init__ sets (rc10 has no such base class)
        self.config, self.trainer, self.training_config = config, trainer, config.training
        registry.register(TRAINER_KEY, trainer)

    def teardown(self, **kwargs: Any) -> None:
        """End of the run: forget its trainer (a later run in this process brings its own)."""
        if registry.get(TRAINER_KEY, None, no_warning=True) is self.trainer:
            registry.unregister(TRAINER_KEY)


def trainer_has_callbacks() -> bool:
    """Whether this MMF builds trainer callbacks (MMF main) or not (rc10)."""
    return hasattr(registry, "register_callback")


if trainer_has_callbacks():
    registry.register_callback(CALLBACK_NAME)(TrainingProgressCallback)


def updates_done() -> int:
    """Updates MMF's trainer has made so far (restored ones included).

    MMF main: the trainer's own counter, reached through :class:`TrainingProgressCallback`;
    rc10: ``num_updates`` in MMF's registry (0 before the first update).
    """
    trainer = registry.get(TRAINER_KEY, None, no_warning=True)
    if trainer is not None:
        return int(trainer.num_updates)
    if trainer_has_callbacks():
        raise RuntimeError(
            "the epoch cannot be derived: MMF's trainer keeps its update count to itself; "
            f"training.callbacks must include {{type: {CALLBACK_NAME}, params: {{}}}} (the "
            "uvla model's defaults name it; a training.callbacks list of your own replaces "
            "that one, so add it there)"
        )
    return int(registry.get("num_updates", 0, no_warning=True))


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
    """Epochs completed so far (fractional), from :func:`updates_done` and the registered sizes.

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
    return updates_done() * int(batch_size) / sum(sizes.values())
