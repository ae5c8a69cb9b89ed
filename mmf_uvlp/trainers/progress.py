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

    from mmf_uvlp.trainers.progress import register_train_samples
    register_train_samples(self.dataset_name, len(self.annotation_db))

The sizes live in MMF's registry under ``uvla_train_samples.<dataset_name>``.

The update count: rc10's trainer registers ``num_updates`` in MMF's registry after every
update. MMF main's own trainer (``training.trainer=mmf``) keeps it on the trainer only (its
registry has it only after a checkpoint was restored), and hands the trainer to the
callbacks named in ``training.callbacks``: the uvla model's defaults name
:class:`TrainingProgressCallback` (``uvla_training_progress``). MMF main's Lightning trainer
(``training.trainer=lightning``) builds no ``training.callbacks``; there the model is a
LightningModule attached to PyTorch Lightning's trainer, whose ``global_step`` is the count
(and ``accumulate_grad_batches`` the batches per update): pass the model as ``module``.
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


def lightning_trainer(module: Any) -> Optional[Any]:
    """The PyTorch Lightning trainer that ``module`` (a model) is attached to, or None.

    MMF main's models are LightningModules; only the ``lightning`` trainer attaches them
    (rc10's models are plain ``nn.Module``).
    """
    try:
        trainer = module.trainer
    except (AttributeError, RuntimeError):  # no LightningModule / not attached
        return None
    return trainer if hasattr(trainer, "global_step") else None


def updates_done(module: Optional[Any] = None) -> int:
    """Updates MMF's trainer has made so far (restored ones included).

    ``module`` under MMF main's Lightning trainer: Lightning's ``global_step``; MMF main's own
    trainer: its counter, reached through :class:`TrainingProgressCallback`; rc10:
    ``num_updates`` in MMF's registry (0 before the first update).
    """
    lightning = lightning_trainer(module)
    if lightning is not None:
        return int(lightning.global_step)
    trainer = registry.get(TRAINER_KEY, None, no_warning=True)
    if trainer is not None:
        return int(trainer.num_updates)
    if trainer_has_callbacks():
        raise RuntimeError(
            "the epoch cannot be derived: MMF's trainer keeps its update count to itself; "
            f"training.callbacks must include {{type: {CALLBACK_NAME}, params: {{}}}} (the "
            "uvla model's defaults name it; a training.callbacks list of your own replaces "
            "that one, so add it there; training.trainer=lightning needs no callback)"
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


def current_epoch(batch_size: Optional[int] = None, module: Optional[Any] = None) -> float:
    """Epochs completed so far (fractional), from :func:`updates_done` and the registered sizes.

    ``batch_size`` (samples per update) defaults to ``training.batch_size`` of the config in
    MMF's registry times the batches per update (``training.update_frequency``, or Lightning's
    ``accumulate_grad_batches`` when ``module`` runs under it). Raises ``RuntimeError`` when
    no dataset registered its size.
    """
    sizes = registered_train_samples()
    if not sizes:
        raise RuntimeError(
            "the epoch cannot be derived: no training-set size is registered. Each pre-training "
            "dataset must call mmf_uvlp.trainers.progress.register_train_samples(name, n) "
            f"(registry key '{TRAIN_SAMPLES_KEY}.<dataset_name>')"
        )
    if batch_size is None:
        config = registry.get("config", None, no_warning=True)
        training = config.get("training", {}) if config is not None else {}
        if training.get("batch_size", None) is None:
            raise RuntimeError(
                "the epoch cannot be derived: no training.batch_size in the registered MMF config"
            )
        lightning = lightning_trainer(module)
        per_update = (
            lightning.accumulate_grad_batches
            if lightning is not None
            else training.get("update_frequency", 1)
        )
        batch_size = int(training.batch_size) * int(per_update or 1)
    return updates_done(module) * int(batch_size) / sum(sizes.values())
