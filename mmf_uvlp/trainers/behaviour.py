"""What the ``uvlp`` trainer does on every MMF version: every seed seeds (0 included), a
non-finite training loss stops the run naming its samples, evaluation leaves the
training run's random stream as it was, and ``training.compile`` compiles the model."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.trainers.finite_loss import DeferredFiniteCheck, check_finite_loss
from mmf_uvlp.trainers.seeding import derived_seed, isolated_rng, run_seed, seed_everything
from mmf_uvlp.trainers.throughput import compile_mode


def seed_run(config: Any) -> None:
    """Seed every generator with ``training.seed`` (MMF's ``set_seed`` seeds only a true
    seed, so ``training.seed=0`` seeded nothing while the log said "Using seed 0")."""
    seed = config.training.get("seed", None)
    if seed is not None:
        seed_everything(int(seed))


def compile_model(trainer: Any) -> None:
    """``training.compile`` (True or a ``torch.compile`` mode): the trainer's model compiles
    itself (its ``compile_for_training``); a model without that method is refused, naming
    the key, rather than left eager without a word."""
    mode = compile_mode(trainer.config.training)
    if mode is None:
        return
    compile_for_training = getattr(trainer.model, "compile_for_training", None)
    if compile_for_training is None:
        raise UserConfigError(
            f"training.compile={trainer.config.training.compile!r}: model "
            f"{trainer.config.model} cannot compile itself (no compile_for_training; uvla "
            "and the models built on it can); set training.compile=False"
        )
    compile_for_training(mode)


def stop_on_non_finite_loss(
    trainer: Any, training: Mapping[str, Any], report: Any, batch: Any
) -> None:
    """A NaN or infinite training loss stops the run, naming the update, the dataset and
    the samples (:mod:`mmf_uvlp.trainers.finite_loss`); ``training.exit_on_nan_losses=False``
    (MMF main's switch) turns the check off.

    A single process checks without waiting for the device (:class:`DeferredFiniteCheck`):
    the flag of an update is read when the next update is checked, and before every
    checkpoint, evaluation and the end of training (:func:`flush_non_finite_check`), so no
    checkpoint holds weights a non-finite loss updated. A distributed run checks every
    update on every rank (:func:`check_finite_loss`), so that all ranks stop together."""
    if not (trainer.model.training and training.get("exit_on_nan_losses", True)):
        return
    losses = report.get("losses") or {}
    dataset, update = report.get("dataset_name", "?"), trainer.num_updates + 1
    if _distributed():
        check_finite_loss(losses, batch, dataset, update, trainer.model)
        return
    check = trainer.__dict__.setdefault("finite_check", DeferredFiniteCheck())
    check.submit(losses, batch, dataset, update, getattr(trainer, "optimizer", None), trainer.model)


def flush_non_finite_check(trainer: Any) -> None:
    """Raise the non-finite loss of the update checked last, if its loss was not finite
    (see :func:`stop_on_non_finite_loss`)."""
    check = trainer.__dict__.get("finite_check")
    if check is not None:
        check.flush(trainer.model)


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


@contextlib.contextmanager
def evaluation_stream() -> Iterator[None]:
    """Evaluation draws from generators seeded from the run's seed, and the training stream
    continues afterwards as if no evaluation had run."""
    with isolated_rng(derived_seed(run_seed(), 2)):
        yield
