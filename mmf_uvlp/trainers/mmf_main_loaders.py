"""MMF main's data module as the ``uvlp`` trainer uses it: the data order is a function of
(seed, epoch), and the position in the epoch is counted and resumed, as on rc10
(:mod:`.rc10_loaders`), through the same sampler (:func:`~mmf_uvlp.trainers.data_order.seeded_dataloader`);
on a GPU, the next training batch is copied to the device on a side stream while the step
computes (:class:`~mmf_uvlp.trainers.side_stream.SideStreamCopy`), as on rc10."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Mapping, Optional

import numpy as np
from mmf.datasets.multi_datamodule import MultiDataModule
from mmf.datasets.multi_dataset_loader import MultiDataLoader
from torch.utils.data import DataLoader

from mmf_uvlp.trainers.data_order import seeded_dataloader
from mmf_uvlp.trainers.side_stream import CopyAhead, SideStreamCopy


@contextlib.contextmanager
def _numpy_state_kept() -> Iterator[None]:
    """numpy's global generator afterwards as it was before."""
    state = np.random.get_state()
    try:
        yield
    finally:
        np.random.set_state(state)


class SeededMultiDataLoader(MultiDataLoader):
    """MMF main's MultiDataLoader whose DataLoaders draw their order from an
    :class:`~mmf_uvlp.trainers.data_order.EpochSampler`, counting the batches it prepared
    per dataset (``consumed``), able to resume at a counted position."""

    def __init__(
        self,
        loaders: Mapping[str, DataLoader],
        iteration_strategy: Any,
        training: Mapping[str, Any],
        copy: Optional[SideStreamCopy] = None,
    ):
        seeded = {name: seeded_dataloader(loader, training)[0] for name, loader in loaders.items()}
        super().__init__(seeded, iteration_strategy)
        self.consumed: List[int] = [0] * self.num_datasets
        self._resume: Optional[Dict[str, Any]] = None
        self._copy = copy  # training's, on a GPU

    @property
    def datasets(self) -> List[Any]:
        """The datasets, in the order of ``dataset_list``."""
        return self.get_datasets()

    def position(self) -> Dict[str, Any]:
        """Where the loader stands in its epoch (:func:`~mmf_uvlp.trainers.data_order.data_position`)."""
        return {
            "consumed": list(self.consumed),
            "sizes": [len(dataset) for dataset in self.datasets],
            "current_index": int(self.current_index),
            "finished": sorted(self.dataset_list.index(name) for name in self._finished_iterators),
        }

    def resume_at(self, position: Dict[str, Any]) -> None:
        """Continue, at the next iteration, from ``position`` (a checkpoint's :meth:`position`)."""
        self._resume = position

    def __iter__(self) -> "SeededMultiDataLoader":
        resume, self._resume = self._resume, None
        if resume is None:
            self.consumed = [0] * self.num_datasets
            super().__iter__()
            self._copying_ahead()
            return self
        for sampler, loader, consumed in zip(
            self.samplers.values(), self.loaders.values(), resume["consumed"]
        ):
            sampler.skip_next(consumed * loader.batch_size)
        with _numpy_state_kept():  # the resumed run had drawn its next dataset already
            super().__iter__()
        self.current_index = int(resume["current_index"])
        self._finished_iterators = {self.dataset_list[index]: 1 for index in resume["finished"]}
        self.consumed = list(resume["consumed"])
        self._copying_ahead()
        return self

    def _copying_ahead(self) -> None:
        """On a GPU, each dataset's iterator can copy its next batch ahead (:class:`CopyAhead`)."""
        if self._copy is not None and self._copy.enabled:
            self.iterators = {
                name: CopyAhead(iterator.__next__) for name, iterator in self.iterators.items()
            }

    def prepare_batch(self, batch: Any) -> Any:
        """MMF main's (the batch to the device, the next dataset chosen); on a GPU, the next
        batch of the chosen dataset is taken and its copy begun on a side stream (its
        iterator waits for it when it hands it out)."""
        self.consumed[self.current_index] += 1
        prepared = super().prepare_batch(batch)
        if self._copy is not None and self._copy.enabled:
            chosen = self.iterators.get(self.current_dataset_name)
            if isinstance(chosen, CopyAhead):
                chosen.ahead(self._copy)
        return prepared

    def seed_sampler(self, epoch: int) -> None:
        """Every sampler follows the epoch (MMF main seeds distributed samplers only)."""
        for sampler in self.samplers.values():
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)


class SeededMultiDataModule(MultiDataModule):
    """MMF main's MultiDataModule over :class:`SeededMultiDataLoader` s."""

    def _build_multi_dataloader(self, dataset_type: str = "train") -> SeededMultiDataLoader:
        loader = super()._build_multi_dataloader(dataset_type)
        copy = None
        if dataset_type == "train":
            from mmf.utils.general import get_current_device  # MMF main's

            copy = SideStreamCopy(get_current_device())  # the trainer's, chosen before
        return SeededMultiDataLoader(
            loader.loaders, loader.iteration_strategy, self.config.training, copy
        )
