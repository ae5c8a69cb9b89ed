"""The data order of training is a function of (seed, epoch), and a checkpoint records the
position in the epoch so that a resumed run continues with the next batch.

MMF's DataLoaders shuffle (and seed their workers) from torch's global generator, which
dropout and masking also consume, and its MultiDatasetLoader keeps no position: the
``uvlp`` trainer's loaders (:mod:`mmf_uvlp.trainers.rc10_loaders`, and
:mod:`mmf_uvlp.trainers.mmf_main_loaders` on MMF main) draw their order from
:func:`seeded_dataloader`'s sampler and count their position (:func:`data_position`).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import torch

from mmf_uvlp.training.reproducibility import EpochSampler
from mmf_uvlp.training.seeding import run_seed
from mmf_uvlp.training.workers import worker_arguments


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
