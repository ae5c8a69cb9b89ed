"""Examples in model batches, each caption with its image's regions."""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import torch

from mmf_uvlp.analysis.examples import Example
from mmf_uvlp.analysis.regions import ImageRegions, RegionStore
from mmf_uvlp.analysis.systems import Batch, Outputs, make_batch


def batches(
    examples: Iterable[Example], store: RegionStore, batch_size: int
) -> Iterator[tuple[list[Example], list[ImageRegions], Batch]]:
    """Consecutive groups of ``batch_size`` examples with their regions and padded inputs."""
    cache: dict[str, ImageRegions] = {}
    group: list[Example] = []

    def flush():
        regions = [cache[e.image_id] for e in group]
        return list(group), regions, make_batch([e.input_ids for e in group], regions)

    for example in examples:
        if example.image_id not in cache:
            cache[example.image_id] = store[example.image_id]
        group.append(example)
        if len(group) == batch_size:
            yield flush()
            group.clear()
            if len(cache) > 4 * batch_size:  # only between groups: a group keeps its images
                cache.clear()
    if group:
        yield flush()


def text_to_regions(outputs: Outputs, batch: Batch) -> np.ndarray:
    """(B, layers, heads, L, R): attention from each text position to each region position."""
    if outputs.attentions is None:
        raise ValueError("the system returned no attention maps")
    length = batch.text_length
    maps = torch.stack(outputs.attentions, dim=1)  # (B, layers, heads, T, T)
    return maps[:, :, :, :length, length:].float().numpy()
