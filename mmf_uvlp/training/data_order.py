"""The data order of training is a function of (seed, epoch), and a checkpoint records the
position in the epoch so that a resumed run continues with the next batch.

MMF's DataLoaders shuffle (and seed their workers) from torch's global generator, which
dropout and masking also consume, and its MultiDatasetLoader keeps no position.
"""

from __future__ import annotations

from typing import Any, Dict

from mmf_uvlp.training.seeding import run_seed


def install() -> None:
    """MMF 1.0.0rc10's DataLoaders draw their order from an :class:`EpochSampler` seeded by
    (seed, epoch); its MultiDatasetLoader counts, and resumes at, its position."""
    import torch

    import mmf.utils.build as build
    from mmf.datasets.multi_dataset_loader import MultiDatasetLoader
    from mmf_uvlp.utils.reproducibility import EpochSampler

    add_extra_args = build._add_extra_args_for_dataloader

    def _add_extra_args_for_dataloader(dataset_instance: Any, other_args: Any = None) -> Any:
        other_args = add_extra_args(dataset_instance, other_args)
        sampler = other_args.get("sampler")
        shuffle = other_args.pop("shuffle", None)
        if shuffle is None:
            shuffle = bool(getattr(sampler, "shuffle", True))
        replicas = getattr(sampler, "num_replicas", 1)
        rank = getattr(sampler, "rank", 0)
        generator = torch.Generator()
        other_args["sampler"] = EpochSampler(
            len(dataset_instance), run_seed(), shuffle, replicas, rank, generator
        )
        other_args["generator"] = generator
        return other_args

    build._add_extra_args_for_dataloader = _add_extra_args_for_dataloader

    def seed_sampler(self: MultiDatasetLoader, epoch: int) -> None:
        for sampler in self.samplers:
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)

    iter_ = MultiDatasetLoader.__iter__
    prepare_batch = MultiDatasetLoader.prepare_batch

    def __iter__(self: MultiDatasetLoader) -> Any:
        resume = self.__dict__.pop("_uvlp_resume", None)
        if resume is not None:
            for sampler, loader, consumed in zip(self.samplers, self.loaders, resume["consumed"]):
                sampler.skip_next(consumed * loader.batch_size)
            self.current_index = resume["current_index"]
            self.current_dataset = self.datasets[self.current_index]
            self.current_loader = self.loaders[self.current_index]
        iterator = iter_(self)
        self._uvlp_consumed = list(resume["consumed"]) if resume else [0] * self.num_datasets
        if resume is not None and self.num_datasets > 1:
            self._finished_iterators = dict.fromkeys(resume["finished"], 1)
            self._used_once = dict.fromkeys(resume["used_once"], 1)
            self._chosen_iterator = self.iterators[self.current_index]
        return iterator

    def _prepare_batch(self: MultiDatasetLoader, batch: Any) -> Any:
        consumed = self.__dict__.setdefault("_uvlp_consumed", [0] * self.num_datasets)
        consumed[self.current_index] += 1
        return prepare_batch(self, batch)

    MultiDatasetLoader.seed_sampler = seed_sampler
    MultiDatasetLoader.__iter__ = __iter__
    MultiDatasetLoader.prepare_batch = _prepare_batch


def data_position(loader: Any) -> Dict[str, Any]:
    """Where the train MultiDatasetLoader stands in its epoch (batches consumed per dataset)."""
    return {
        "consumed": list(getattr(loader, "_uvlp_consumed", [0] * loader.num_datasets)),
        "sizes": [len(dataset) for dataset in loader.datasets],
        "current_index": int(loader.current_index),
        "finished": sorted(int(i) for i in loader._finished_iterators),
        "used_once": sorted(int(i) for i in loader._used_once),
    }
