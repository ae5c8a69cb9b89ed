"""MMF 1.0.0rc10's dataset loaders as the ``uvlp`` trainer uses them: the data order is a
function of (seed, epoch), the position in the epoch is counted and resumed, the
``multitasking`` mix of MMF main chooses the datasets of training, worker processes
persist (``training.persistent_workers``), and the training data does not drain at an
epoch end: each training dataset keeps one DataLoader iterator across epochs
(:class:`EpochBatches`, :class:`EpochStream`), so its workers prepare the next epoch's
first batches while the last ones of this epoch train; on a GPU, the next batch is copied
to the device on a side stream while the step computes
(:class:`~mmf_uvlp.trainers.side_stream.SideStreamCopy`)."""

from __future__ import annotations

import copy
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
from mmf.common.dataset_loader import DatasetLoader
from mmf.common.registry import registry
from mmf.datasets.multi_dataset_loader import MultiDatasetLoader

from mmf_uvlp.trainers.data_order import begin_epoch, next_batch, seeded_dataloader
from mmf_uvlp.trainers.multitasking import train_probabilities
from mmf_uvlp.trainers.side_stream import CopyAhead, SideStreamCopy
from mmf_uvlp.trainers.data_order import worker_arguments
from mmf_uvlp.trainers.data_order import EpochSampler


class EpochBatches(torch.utils.data.Sampler):
    """The batches of an :class:`EpochSampler`'s epochs, one epoch after the other without
    end, from ``start`` (epoch, samples of it left out) on: no batch spans two epochs, and
    each epoch's order is the sampler's for that epoch (the sampler itself, and the
    DataLoader generator it reseeds, are left as they are). ``len`` is one epoch's batches."""

    def __init__(self, sampler: EpochSampler, batch_size: int):
        self.sampler, self.batch_size = sampler, int(batch_size)
        self.start: Tuple[int, int] = (sampler.epoch, 0)

    def __len__(self) -> int:
        return self.batches_after(0)

    def batches_after(self, skip: int) -> int:
        """The batches of an epoch whose first ``skip`` samples are left out."""
        return -(-max(0, len(self.sampler) - skip) // self.batch_size)

    def __iter__(self) -> Iterator[List[Any]]:
        epoch, skip = self.start
        while True:
            order = self._order(epoch)
            for first in range(skip, len(order), self.batch_size):
                yield order[first : first + self.batch_size]
            epoch, skip = epoch + 1, 0

    def _order(self, epoch: int) -> List[Any]:
        later = copy.copy(self.sampler)
        later.generator = None
        later.set_epoch(epoch)
        return list(later)


def continuing_dataloader(
    loader: torch.utils.data.DataLoader, sampler: EpochSampler, training: Any
) -> torch.utils.data.DataLoader:
    """``loader`` (:func:`seeded_dataloader`'s) drawing :class:`EpochBatches` of ``sampler``:
    one of its iterators runs through every epoch."""
    continuing = torch.utils.data.DataLoader(
        dataset=loader.dataset,
        batch_sampler=EpochBatches(sampler, loader.batch_size),
        collate_fn=loader.collate_fn,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
        generator=loader.generator,
        **worker_arguments(training, loader.num_workers),
    )
    continuing.dataset_type = loader.dataset_type
    return continuing


class EpochStream:
    """One dataset's batches, epoch by epoch, from one iterator of a
    :func:`continuing_dataloader`: :meth:`epoch` continues that iterator when it stands at
    the start of the epoch asked for (the sampler's), and starts a new one otherwise (the
    first epoch, a resume, an epoch that another dataset ended first)."""

    def __init__(self, loader: torch.utils.data.DataLoader):
        self.loader, self.batches = loader, loader.batch_sampler
        self._iterator: Optional[Iterator[Any]] = None
        self._epoch, self._left = 0, 0

    def epoch(self, skip: Optional[int] = None) -> CopyAhead:
        """The batches of the sampler's epoch; with ``skip`` (a resume), a new iterator
        that leaves out the epoch's first ``skip`` samples."""
        wanted = self.batches.sampler.epoch
        if skip is not None or self._iterator is None or self._left or wanted != self._epoch + 1:
            self.batches.start = (wanted, skip or 0)
            self._iterator = iter(self.loader)
            self._left = self.batches.batches_after(skip or 0)
        else:
            self._left = len(self.batches)
        self._epoch = wanted
        return CopyAhead(self.next_batch)

    def next_batch(self) -> Any:
        """The epoch's next batch (StopIteration at its end)."""
        if self._left <= 0:
            raise StopIteration
        batch = next(self._iterator)
        self._left -= 1
        return batch


class SeededMultiDatasetLoader(MultiDatasetLoader):
    """MMF's MultiDatasetLoader whose DataLoaders draw their order from an
    :class:`~mmf_uvlp.trainers.data_order.EpochSampler`, and which counts the batches it
    prepared per dataset (``consumed``) and can resume at a counted position."""

    def __init__(self, dataset_type: str = "train"):
        super().__init__(dataset_type)
        self.consumed: List[int] = []
        self._resume: Optional[Dict[str, Any]] = None
        self._streams: List[EpochStream] = []  # training's: one per dataset
        self._copy: Optional[SideStreamCopy] = None  # training's, on a GPU

    def build_dataloaders(self) -> None:
        super().build_dataloaders()
        training = self.config.training
        for index, loader in enumerate(self.loaders):
            seeded, sampler = seeded_dataloader(loader, training)
            if self._dataset_type == "train":
                seeded = continuing_dataloader(seeded, sampler, training)
                self._streams.append(EpochStream(seeded))
            self._loaders[index], self._samplers[index] = seeded, sampler
        if self._streams:
            device = registry.get("current_device", None, no_warning=True)
            self._copy = SideStreamCopy(device or "cpu")  # None: no device chosen, the CPU
        self.current_loader = self.loaders[self.current_index]
        self.consumed = [0] * self.num_datasets

    def _infer_dataset_probabilities(self) -> None:
        super()._infer_dataset_probabilities()
        multitasking = self.config.get("multitasking")
        if (
            self._dataset_type != "train"
            or multitasking is None
            or (multitasking.get("enabled", True) and multitasking.type == "size_proportional")
        ):
            return  # rc10's own choice: training.dataset_size_proportional_sampling
        self._dataset_probabilities = train_probabilities(multitasking, list(self._given_datasets))
        self._proportional_sampling = False
        self.writer.write(
            "Using per-dataset sampling probabilities: "
            + ", ".join(
                f"{name}: {p:.3f}"
                for name, p in zip(self._given_datasets, self._dataset_probabilities)
            )
        )

    def resume_at(self, position: Dict[str, Any]) -> None:
        """Continue, at the next iteration, from ``position`` (a checkpoint's
        :func:`~mmf_uvlp.trainers.data_order.data_position`)."""
        self._resume = position

    def __iter__(self) -> Any:
        resume, self._resume = self._resume, None
        skips: Optional[List[int]] = None
        if resume is not None:
            skips = [
                consumed * (loader.batch_size or loader.batch_sampler.batch_size)
                for loader, consumed in zip(self.loaders, resume["consumed"])
            ]
            if not self._streams:
                for sampler, skip in zip(self.samplers, skips):
                    sampler.skip_next(skip)
            self.current_index = resume["current_index"]
            self.current_dataset = self.datasets[self.current_index]
            self.current_loader = self.loaders[self.current_index]
        if self._streams:
            iterator = self._continue(skips)
        else:
            begin_epoch(self)
            iterator = super().__iter__()
        self.consumed = list(resume["consumed"]) if resume else [0] * self.num_datasets
        if resume is not None and self.num_datasets > 1:
            self._finished_iterators = dict.fromkeys(resume["finished"], 1)
            self._used_once = dict.fromkeys(resume["used_once"], 1)
            self._chosen_iterator = self.iterators[self.current_index]
        return iterator

    def _continue(self, skips: Optional[List[int]]) -> Any:
        """MMF's ``__iter__`` after :func:`begin_epoch`, over the datasets'
        :class:`EpochStream` s instead of new DataLoader iterators; ``skips``: a resume's
        samples left out per dataset."""
        self._iterators = [
            stream.epoch(None if skips is None else skips[index])
            for index, stream in enumerate(self._streams)
        ]
        self._finished_iterators, self._used_once = {}, {}
        if self.num_datasets == 1:
            return self._iterators[0]
        self._chosen_iterator = self._iterators[self.current_index]
        return self

    def __next__(self) -> Any:
        # without proportional sampling an epoch ends when a dataset runs out once every
        # dataset was drawn; one with ratio 0 is never drawn, and the loader would spin
        for index, probability in enumerate(self._dataset_probabilities):
            if probability == 0:
                self._used_once[index] = 1
        return next_batch(self)

    def prepare_batch(self, batch: Any) -> Any:
        """MMF's (the batch to the device, the next dataset chosen); on a GPU, the next
        batch of the chosen dataset is taken and its copy begun on a side stream (the
        chosen dataset's iterator waits for it when it hands it out)."""
        self.consumed[self.current_index] += 1
        prepared = super().prepare_batch(batch)
        if self._copy is not None and self._copy.enabled:
            chosen = self._iterators[self.current_index]
            if isinstance(chosen, CopyAhead):
                chosen.ahead(self._copy)
        return prepared

    def seed_sampler(self, epoch: int) -> None:
        """Every sampler follows the epoch (MMF seeds distributed samplers only)."""
        for sampler in self.samplers:
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)


class SeededDatasetLoader(DatasetLoader):
    """MMF 1.0.0rc10's DatasetLoader over :class:`SeededMultiDatasetLoader` s."""

    def load_datasets(self) -> None:
        self.train_dataset = SeededMultiDatasetLoader("train")
        self.val_dataset = SeededMultiDatasetLoader("val")
        self.test_dataset = SeededMultiDatasetLoader("test")
        for dataset in (self.train_dataset, self.val_dataset, self.test_dataset):
            dataset.load(self.config)
        self.train_loader = self.train_dataset
        self.val_loader = self.val_dataset
        self.test_loader = self.test_dataset
        self.mapping = {
            "train": self.train_dataset,
            "val": self.val_dataset,
            "test": self.test_dataset,
        }
        self.test_reporter = None
        self.should_not_log = self.config.training.should_not_log
