"""A run's seed seeds everything, ``training.seed=0`` included, and evaluation does not
consume the training run's random stream."""

from __future__ import annotations

import functools
from typing import Any, Optional


def install_seed_zero_seeds() -> None:
    """MMF's ``set_seed`` seeds every generator, for seed 0 too."""
    import mmf.utils.env as env
    from mmf_uvlp.utils.reproducibility import seed_everything

    set_seed = env.set_seed

    @functools.wraps(set_seed)
    def set_seed_including_zero(seed: Optional[int]) -> Optional[int]:
        if seed is None:
            return None
        seed = set_seed(seed)  # -1 draws a fresh seed, as in rc10
        seed_everything(int(seed))
        return seed

    env.set_seed = set_seed_including_zero


def run_seed() -> int:
    """The seed MMF registered for the run (0 before it did)."""
    from mmf.common.registry import registry

    seed = registry.get("seed", None, no_warning=True)
    return 0 if seed is None else int(seed)


def install_evaluation_keeps_training_stream() -> None:
    """MMF 1.0.0rc10's evaluation runs on generators of its own, seeded from the run's seed."""
    from mmf.trainers.base_trainer import BaseTrainer
    from mmf_uvlp.utils.reproducibility import derived_seed, isolated_rng

    evaluate = BaseTrainer.evaluate

    @functools.wraps(evaluate)
    def _evaluate(self: BaseTrainer, *args: Any, **kwargs: Any) -> Any:
        with isolated_rng(derived_seed(run_seed(), 2)):
            return evaluate(self, *args, **kwargs)

    BaseTrainer.evaluate = _evaluate
