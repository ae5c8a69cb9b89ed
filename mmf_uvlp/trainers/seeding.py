"""Seeding and the random-number state of a run.

What a seed promises (``training.seed``, 0 included; -1 draws a fresh one):

- the same seed, code, data, machine and thread count give the same batches, masks,
  dropout, weights and metrics;
- a run stopped at a checkpoint and resumed (``checkpoint.resume=True``) continues with the
  same batches and random draws as the uninterrupted run: the checkpoint holds the data
  position of the epoch in progress, the random-number states and the scheduler state.
  the random draws of a sample (masks, ITM negatives) follow from the seed, the epoch and
  its position in the epoch (:class:`~mmf_uvlp.trainers.data_order.SampleIndex`), so they
  are the same with any number of DataLoader workers and in a resumed epoch (docs/gpu.md);
- evaluation never changes the training stream: it runs on its own seeded generators.

Not promised: equality across hardware, thread counts or library versions.

The data order (:mod:`mmf_uvlp.trainers.data_order`) and the evaluation stream derive their
generators from the seed MMF registered for the run (:func:`run_seed`).
"""

from __future__ import annotations

import contextlib
import random
from typing import Any, Dict, Iterator, Mapping

import numpy as np
import torch


def derived_seed(*parts: int) -> int:
    """A 63-bit seed that depends on every part (e.g. run seed, epoch, dataset index)."""
    state = np.random.SeedSequence([int(part) & 0xFFFFFFFF for part in parts]).generate_state(2)
    return int((int(state[0]) << 31) ^ int(state[1])) & 0x7FFFFFFFFFFFFFFF


def run_seed() -> int:
    """The seed MMF registered for the run (0 before it did)."""
    from mmf.common.registry import registry

    seed = registry.get("seed", None, no_warning=True)
    return 0 if seed is None else int(seed)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (every device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> Dict[str, Any]:
    """The global generators' states, as tensors and numbers (``weights_only`` loadable)."""
    version, python_state, gauss = random.getstate()
    kind, keys, position, has_gauss, cached = np.random.get_state()
    state: Dict[str, Any] = {
        "python": {
            "version": version,
            "state": torch.tensor(python_state, dtype=torch.int64),
            "gauss": gauss,
        },
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned, also from a checkpoint loaded onto a GPU
    (MMF maps every tensor of a checkpoint to the training device; the generators take
    host tensors)."""
    python = state["python"]
    random.setstate(
        (python["version"], tuple(int(v) for v in python["state"].cpu().tolist()), python["gauss"])
    )
    numpy = state["numpy"]
    np.random.set_state(
        (
            numpy["kind"],
            numpy["keys"].cpu().numpy().astype(np.uint32),
            numpy["position"],
            numpy["has_gauss"],
            numpy["cached"],
        )
    )
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([cuda.cpu() for cuda in state["cuda"]])


@contextlib.contextmanager
def isolated_rng(seed: int) -> Iterator[None]:
    """Run the block on freshly seeded global generators, then restore the previous states."""
    saved = rng_state()
    seed_everything(seed)
    try:
        yield
    finally:
        set_rng_state(saved)


class RandomState:
    """The run's random streams, a component of the ``uvlp`` trainer: :meth:`seed` seeds every
    generator with ``training.seed`` (MMF's ``set_seed`` seeds only a true seed, so
    ``training.seed=0`` seeded nothing while the log said "Using seed 0"); :meth:`evaluation`
    runs a block on generators seeded from the run's seed, and the training stream continues
    afterwards as if it had not run; its state is the global generators' (the ``rng`` entry
    of a checkpoint's run state)."""

    def seed(self, training: Mapping[str, Any]) -> None:
        """Seed every generator with ``training.seed`` (0 included; None: nothing)."""
        seed = training.get("seed", None)
        if seed is not None:
            seed_everything(int(seed))

    @contextlib.contextmanager
    def evaluation(self) -> Iterator[None]:
        """The block draws from generators seeded from the run's seed, and leaves the
        training stream as it was."""
        with isolated_rng(derived_seed(run_seed(), 2)):
            yield

    def state_dict(self) -> Dict[str, Any]:
        """``{"rng": ...}``: the global generators' states (:func:`rng_state`)."""
        return {"rng": rng_state()}

    def load_state_dict(self, state: Mapping[str, Any], file: str = "") -> None:
        """Restore the generators from a :meth:`state_dict`."""
        set_rng_state(state["rng"])
