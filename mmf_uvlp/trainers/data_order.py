"""The data order of training is a function of (seed, epoch), and a checkpoint records the
position in the epoch so that a resumed run continues with the next batch.

MMF's DataLoaders shuffle (and seed their workers) from torch's global generator, which
dropout and masking also consume, and its MultiDatasetLoader keeps no position: the
``uvlp`` trainer's loaders (:mod:`mmf_uvlp.trainers.rc10_loaders`, and
:mod:`mmf_uvlp.trainers.mmf_main_loaders` on MMF main) draw their order from
:func:`seeded_dataloader`'s sampler and count their position (:func:`data_position`).
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import torch

from mmf_uvlp.trainers.seeding import derived_seed, run_seed


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


def worker_arguments(training: Mapping[str, Any], num_workers: int) -> Dict[str, Any]:
    """The DataLoader arguments of ``training``'s workers beyond MMF 1.0.0rc10's own."""
    if int(num_workers or 0) > 0:
        return {"persistent_workers": bool(training.get("persistent_workers", True))}
    return {}


def seeded_dataloader(
    loader: torch.utils.data.DataLoader, training: Mapping[str, Any]
) -> Tuple[torch.utils.data.DataLoader, EpochSampler]:
    """MMF's ``loader`` (built by ``mmf.utils.build.build_dataloader_and_sampler``) with an
    :class:`EpochSampler` seeded by (seed, epoch): the same dataset, batch size, collator,
    workers and pinning; shuffled where MMF's shuffles, split between distributed processes
    as MMF's ``DistributedSampler`` splits them."""
    sampler: Optional[Any] = loader.sampler
    if isinstance(sampler, torch.utils.data.DistributedSampler):
        shuffle, replicas, rank = bool(sampler.shuffle), sampler.num_replicas, sampler.rank
    else:
        shuffle, replicas, rank = isinstance(sampler, torch.utils.data.RandomSampler), 1, 0
    generator = torch.Generator()
    seeded = EpochSampler(len(loader.dataset), run_seed(), shuffle, replicas, rank, generator)
    rebuilt = torch.utils.data.DataLoader(
        dataset=loader.dataset,
        batch_size=loader.batch_size,
        collate_fn=loader.collate_fn,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
        sampler=seeded,
        generator=generator,
        **worker_arguments(training, loader.num_workers),
    )
    rebuilt.dataset_type = loader.dataset_type
    return rebuilt, seeded


def begin_epoch(loader: Any) -> None:
    """A new epoch's bookkeeping of MMF 1.0.0rc10's ``MultiDatasetLoader`` ``loader``, before
    its ``__iter__``: no iterators, no dataset finished or drawn yet (rc10's own ``__iter__``
    keeps the last epoch's: a multi-dataset run never leaves epoch 2)."""
    loader._iterators = []
    loader._finished_iterators = {}
    loader._used_once = {}


def next_batch(loader: Any) -> Any:
    """The next batch of MMF 1.0.0rc10's ``MultiDatasetLoader`` ``loader``: past every
    exhausted dataset until all are (rc10's own ``__next__`` moves on once, possibly to
    another exhausted dataset, and ends the epoch early); without proportional sampling the
    epoch ends when a dataset runs out once every dataset was drawn."""
    while True:
        try:
            batch = next(loader._chosen_iterator)
            break
        except StopIteration:
            if not loader._proportional_sampling and len(loader._used_once) == loader.num_datasets:
                raise
            loader._finished_iterators[loader.current_index] = 1
            if len(loader._finished_iterators) == loader.num_datasets:
                raise
            loader.change_dataloader()
    loader._used_once[loader.current_index] = 1
    return batch


def data_position(loader: Any) -> Dict[str, Any]:
    """Where the train MultiDatasetLoader stands in its epoch (batches consumed per dataset);
    a loader that keeps its own bookkeeping (MMF main's:
    :class:`~mmf_uvlp.trainers.mmf_main_loaders.SeededMultiDataLoader`) says it."""
    if hasattr(loader, "position"):
        return loader.position()
    return {
        "consumed": list(getattr(loader, "consumed", [0] * loader.num_datasets)),
        "sizes": [len(dataset) for dataset in loader.datasets],
        "current_index": int(loader.current_index),
        "finished": sorted(int(i) for i in loader._finished_iterators),
        "used_once": sorted(int(i) for i in loader._used_once),
    }


class DataOrder:
    """The trainer's data order, a component of the ``uvlp`` trainer: where its train loader
    stands in the epoch in progress (:func:`data_position`), and the epoch; its state is the
    ``data`` and ``epoch`` entries of a checkpoint's run state. A resume continues the epoch
    at the counted position, or, when the training data have other sizes than the
    checkpoint's, restarts the data order with a new epoch (with a warning)."""

    def __init__(self, trainer: Any):
        self.trainer = trainer  # MMF's: its ``train_loader`` and ``current_epoch``

    def state_dict(self) -> Dict[str, Any]:
        return {
            "data": data_position(self.trainer.train_loader),
            "epoch": int(self.trainer.current_epoch),
        }

    def load_state_dict(self, state: Mapping[str, Any], file: str = "the checkpoint") -> None:
        loader, data = self.trainer.train_loader, state["data"]
        if data["sizes"] == [len(dataset) for dataset in loader.datasets]:
            loader.resume_at(data)
            self.trainer.current_epoch = state["epoch"] - 1  # train() re-enters the epoch
        else:
            warnings.warn(
                f"{file}: its training data ({data['sizes']} samples per dataset) differ from "
                f"this run's; the data order restarts with a new epoch"
            )
