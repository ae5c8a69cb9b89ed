"""Reproducible runs: seeding, seeded data order, random-number state.

What a seed promises (``training.seed``, 0 included; -1 draws a fresh one):

- the same seed, code, data, machine and thread count give the same batches, masks,
  dropout, weights and metrics;
- a run stopped at a checkpoint and resumed (``checkpoint.resume=True``) continues with the
  same batches and random draws as the uninterrupted run: the checkpoint holds the data
  position of the epoch in progress, the random-number states and the scheduler state.
  the random draws of a sample (masks, ITM negatives) follow from the seed, the epoch and
  its position in the epoch (:class:`SampleIndex`), so they are the same with any number
  of DataLoader workers and in a resumed epoch (docs/gpu.md);
- evaluation never changes the training stream: it runs on its own seeded generators.

Not promised: equality across hardware, thread counts or library versions.

This module is version-independent; ``mmf_uvlp/compat`` wires it into MMF's trainer.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any, Dict, Iterator, List, Optional

import numpy as np
import torch


def derived_seed(*parts: int) -> int:
    """A 63-bit seed that depends on every part (e.g. run seed, epoch, dataset index)."""
    state = np.random.SeedSequence([int(part) & 0xFFFFFFFF for part in parts]).generate_state(2)
    return int((int(state[0]) << 31) ^ int(state[1])) & 0x7FFFFFFFFFFFFFFF


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (every device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class SampleIndex(int):
    """A dataset index that carries ``seed``, the seed of its sample's random draws in this
    epoch (from the run's seed, the epoch and the position in the epoch's order): a
    dataset that reads it draws the same masks in any worker process, and after a resume.
    It is an ``int`` everywhere else."""

    seed: int

    def __new__(cls, index: int, seed: int) -> "SampleIndex":
        value = super().__new__(cls, index)
        value.seed = int(seed)
        return value

    def __reduce__(self) -> Any:
        return SampleIndex, (int(self), self.seed)


class EpochSampler(torch.utils.data.Sampler):
    """Indices of one dataset in an order fixed by (seed, epoch); can resume mid-epoch.
    Each index is a :class:`SampleIndex` with its sample's seed.

        ``num_replicas``/``rank`` split the order between distributed processes as
        ``torch.utils.data.DistributedSampler`` does (padded to a multiple of the replicas).
        ``generator``, when given, is the DataLoader's generator: it is reseeded with the
        epoch too, so the worker seeds PyTorch derives from it follow the run's seed.
    """

    def __init__(
        self,
        size: int,
        seed: int,
        shuffle: bool = True,
        num_replicas: int = 1,
        rank: int = 0,
        generator: Optional[torch.Generator] = None,
    ):
        self.size, self.seed, self.shuffle = int(size), int(seed), bool(shuffle)
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.generator = generator
        self.epoch = 0
        self._skip = 0
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch``, from its start, from the next iteration on.

        A skip still pending is dropped: it belonged to the epoch of the resumed run,
        whose dataset may never have been iterated again (it had finished its epoch).
        """
        self.epoch = int(epoch)
        self._skip = 0
        if self.generator is not None:
            self.generator.manual_seed(derived_seed(self.seed, self.epoch, 1))

    def skip_next(self, samples: int) -> None:
        """Leave out the first ``samples`` indices of the next iteration of this epoch (a
        resumed epoch)."""
        self._skip = int(samples)

    def _indices(self) -> List[int]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(derived_seed(self.seed, self.epoch, 0))
            order = torch.randperm(self.size, generator=generator).tolist()
        else:
            order = list(range(self.size))
        if self.num_replicas > 1:
            per_rank = -(-self.size // self.num_replicas)
            order += order[: per_rank * self.num_replicas - len(order)]
            order = order[self.rank :: self.num_replicas]
        return order

    def __iter__(self) -> Iterator[int]:
        skip, self._skip = self._skip, 0
        order = self._indices()
        return iter(
            [
                SampleIndex(index, derived_seed(self.seed, self.epoch, position, 2))
                for position, index in enumerate(order)
                if position >= skip
            ]
        )

    def __len__(self) -> int:
        return -(-self.size // self.num_replicas)


# ------------------------------------------------------------------ random states
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
