"""What the ``uvlp`` trainer does on every MMF version: every seed seeds (0 included), a
non-finite training loss stops the run naming its samples, and evaluation leaves the
training run's random stream as it was."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

from mmf_uvlp.training.seeding import run_seed
from mmf_uvlp.utils.finite_loss import check_finite_loss
from mmf_uvlp.utils.reproducibility import derived_seed, isolated_rng, seed_everything


def seed_run(config: Any) -> None:
    """Seed every generator with ``training.seed`` (MMF's ``set_seed`` seeds only a true
    seed, so ``training.seed=0`` seeded nothing while the log said "Using seed 0")."""
    seed = config.training.get("seed", None)
    if seed is not None:
        seed_everything(int(seed))


def stop_on_non_finite_loss(trainer: Any, training: Mapping[str, Any], report: Any,
                            batch: Any) -> None:
    """A NaN or infinite training loss stops the run before its update, naming the update,
    the dataset and the samples (:mod:`mmf_uvlp.utils.finite_loss`);
    ``training.exit_on_nan_losses=False`` (MMF main's switch) turns the check off."""
    if trainer.model.training and training.get("exit_on_nan_losses", True):
        check_finite_loss(report.get("losses") or {}, batch, report.get("dataset_name", "?"),
                          trainer.num_updates + 1, trainer.model)


@contextlib.contextmanager
def evaluation_stream() -> Iterator[None]:
    """Evaluation draws from generators seeded from the run's seed, and the training stream
    continues afterwards as if no evaluation had run."""
    with isolated_rng(derived_seed(run_seed(), 2)):
        yield
