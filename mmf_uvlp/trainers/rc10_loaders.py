"""MMF 1.0.0rc10's dataset loaders as the ``uvlp`` trainer uses them: the data order is a
function of (seed, epoch), the position in the epoch is counted and resumed, the
``multitasking`` mix of MMF main chooses the datasets of training, and worker processes
persist (``training.persistent_workers``)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from mmf.common.dataset_loader import DatasetLoader
from mmf.datasets.multi_dataset_loader import MultiDatasetLoader

from mmf_uvlp.training.data_order import seeded_dataloader
from mmf_uvlp.training.multitasking import train_probabilities


class SeededMultiDatasetLoader(MultiDatasetLoader):
    """MMF's MultiDatasetLoader whose DataLoaders draw their order from an
    :class:`~mmf_uvlp.utils.reproducibility.EpochSampler`, and which counts the batches it
    prepared per dataset (``consumed``) and can resume at a counted position."""

    def __init__(self, dataset_type: str = "train"):
        super().__init__(dataset_type)
        self.consumed: List[int] = []
        self._resume: Optional[Dict[str, Any]] = None

    def build_dataloaders(self) -> None:
        super().build_dataloaders()
        for index, loader in enumerate(self.loaders):
            self._loaders[index], self._samplers[index] = seeded_dataloader(
                loader, self.config.training)
        self.current_loader = self.loaders[self.current_index]
        self.consumed = [0] * self.num_datasets

    def _infer_dataset_probabilities(self) -> None:
        super()._infer_dataset_probabilities()
        multitasking = self.config.get("multitasking")
        if (self._dataset_type != "train" or multitasking is None
                or (multitasking.get("enabled", True)
                    and multitasking.type == "size_proportional")):
            return  # rc10's own choice: training.dataset_size_proportional_sampling
        self._dataset_probabilities = train_probabilities(multitasking,
                                                          list(self._given_datasets))
        self._proportional_sampling = False
        self.writer.write(
            "Using per-dataset sampling probabilities: " + ", ".join(
                f"{name}: {p:.3f}" for name, p in zip(self._given_datasets,
                                                      self._dataset_probabilities)))

    def resume_at(self, position: Dict[str, Any]) -> None:
        """Continue, at the next iteration, from ``position`` (a checkpoint's
        :func:`~mmf_uvlp.training.data_order.data_position`)."""
        self._resume = position

    def __iter__(self) -> Any:
        resume, self._resume = self._resume, None
        if resume is not None:
            for sampler, loader, consumed in zip(self.samplers, self.loaders, resume["consumed"]):
                sampler.skip_next(consumed * loader.batch_size)
            self.current_index = resume["current_index"]
            self.current_dataset = self.datasets[self.current_index]
            self.current_loader = self.loaders[self.current_index]
        iterator = super().__iter__()
        self.consumed = list(resume["consumed"]) if resume else [0] * self.num_datasets
        if resume is not None and self.num_datasets > 1:
            self._finished_iterators = dict.fromkeys(resume["finished"], 1)
            self._used_once = dict.fromkeys(resume["used_once"], 1)
            self._chosen_iterator = self.iterators[self.current_index]
        return iterator

    def __next__(self) -> Any:
        # without proportional sampling an epoch ends when a dataset runs out once every
        # dataset was drawn; one with ratio 0 is never drawn, and the loader would spin
        for index, probability in enumerate(self._dataset_probabilities):
            if probability == 0:
                self._used_once[index] = 1
        return super().__next__()

    def prepare_batch(self, batch: Any) -> Any:
        self.consumed[self.current_index] += 1
        return super().prepare_batch(batch)

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
        self.mapping = {"train": self.train_dataset, "val": self.val_dataset,
                        "test": self.test_dataset}
        self.test_reporter = None
        self.should_not_log = self.config.training.should_not_log
