"""The MRC shortcut: does a pre-trained model classify a masked region by reading its own tag?

In R-T (the paper's reading) a masked region's detector tag stays in the input with the
region's box embedding, so masked-region classification (MRC) can be solved by finding the
tag that shares the masked region's box instead of from the region's context. For each
held-out image of the pre-training pool, the R-T input is built by the processor's own
``tag_word_pieces`` (``[CLS] tag word-pieces [SEP]``, each piece with its region's box;
tags that do not fit are dropped whole) and one region whose tag is in the input is drawn
with a seed. Two readings across the box are measured, each as a paired difference of
losses (nats) with the other token's content hidden minus visible:

- ``mrc``: the region's features zeroed, MRC loss on its detector class with its tag
  visible vs its tag's word-pieces replaced by ``[MASK]`` (the box kept: U-VisualBERT's
  joint masking). 0 means MRC does not read the tag: the shortcut is not taken.
- ``tag_mlm`` (the other direction): the tag's word-pieces masked, MLM loss on its first
  word-piece with the region's features visible vs zeroed.

Accuracy (top-1) is reported for both.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from mmf_uvlp.analysis.regions import ImageRegions, RegionStore
from mmf_uvlp.analysis.systems import make_batch
from mmf_uvlp.analysis.visual_reliance import paired_stderr
from mmf_uvlp.processors.region_tag_masking import tag_word_pieces


@dataclass(frozen=True)
class TagProbe:
    """One held-out image: its R-T word-piece ids, the region of each position (-1 for
    [CLS] / [SEP]), the masked region and its detector class id."""

    image_id: str
    input_ids: tuple[int, ...]
    owners: tuple[int, ...]
    region: int
    target: int


@dataclass(frozen=True)
class Reading:
    """A loss (nats) and top-1 accuracy with the other token's content visible / hidden."""

    images: int
    visible: float
    hidden: float
    gain: float  # mean of (hidden - visible) over images
    stderr: float  # paired standard error of gain
    visible_accuracy: float
    hidden_accuracy: float

    def to_json(self) -> dict[str, Any]:
        return {
            "images": self.images,
            "visible_nats": self.visible,
            "hidden_nats": self.hidden,
            "gain_nats": self.gain,
            "gain_stderr": self.stderr,
            "visible_accuracy": self.visible_accuracy,
            "hidden_accuracy": self.hidden_accuracy,
        }


DIRECTIONS = ("mrc", "tag_mlm")


def make_tag_probes(
    image_ids: Sequence[str],
    store: RegionStore,
    tokenizer: Any,
    class_ids: Mapping[str, int],
    max_length: int,
    seed: int,
) -> list[TagProbe]:
    """One probe per image with a tag in its input; the masked region drawn with ``seed``
    among those whose tag fits."""
    rng = random.Random(seed)
    probes = []
    for image_id in image_ids:
        image = store[image_id]
        ids, owners = tag_word_pieces(tokenizer, image.labels, max_length)
        tagged = sorted({owner for owner in owners if owner >= 0})
        if not tagged:
            continue
        region = rng.choice(tagged)
        label = image.labels[region]
        if label not in class_ids:
            raise ValueError(
                f"{store.path}: image {image_id!r} region {region} has the label "
                f"{label!r}, which is not a class name"
            )
        probes.append(TagProbe(image_id, tuple(ids), tuple(owners), region, class_ids[label]))
    return probes


def _zeroed(image: ImageRegions, region: int) -> ImageRegions:
    features = image.features.copy()
    features[region] = 0.0
    return dataclasses.replace(image, features=features)


def _losses(
    model: torch.nn.Module,
    probes: Sequence[TagProbe],
    store: Any,
    mask_id: int,
    direction: str,
    hide: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-probe loss (nats) and correctness of one direction (:data:`DIRECTIONS`), the
    other side's content visible or ``hide``-den."""
    mask_tag = direction == "tag_mlm" or hide
    zero_region = direction == "mrc" or hide
    token_ids, regions = [], []
    for probe in probes:
        token_ids.append(
            [
                mask_id if mask_tag and owner == probe.region else token
                for token, owner in zip(probe.input_ids, probe.owners)
            ]
        )
        image = store[probe.image_id]
        regions.append(_zeroed(image, probe.region) if zero_region else image)
    batch = make_batch(token_ids, regions, [p.owners for p in probes]).fields()
    rows = torch.arange(len(probes))
    with torch.no_grad():
        encoded = model.encode(batch)
        if direction == "mrc":
            hidden = encoded.regions[rows, torch.tensor([p.region for p in probes])]
            logits = model.heads["mrc"].classifier(hidden)  # (B, classes)
            targets = torch.tensor([p.target for p in probes])
        else:
            first = [p.owners.index(p.region) for p in probes]
            logits = model.heads["mlm"].vocab_head(encoded.text[rows, torch.tensor(first)])
            targets = torch.tensor([p.input_ids[i] for p, i in zip(probes, first)])
    loss = F.cross_entropy(logits, targets, reduction="none")
    return loss, (logits.argmax(-1) == targets).float()


def measure_reading(
    model: torch.nn.Module,
    probes: Sequence[TagProbe],
    store: Any,
    mask_id: int,
    direction: str = "mrc",
    batch_size: int = 64,
) -> Reading:
    """Mean loss and accuracy of ``direction`` with the other side visible and hidden, and
    the paired gain."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if not probes:
        raise ValueError("no image has a tag in its input: nothing to probe")
    model.eval()
    parts: dict[bool, list[tuple[torch.Tensor, torch.Tensor]]] = {False: [], True: []}
    for start in range(0, len(probes), batch_size):
        chunk = probes[start : start + batch_size]
        for hide in (False, True):
            parts[hide].append(_losses(model, chunk, store, mask_id, direction, hide))
    visible = torch.cat([loss for loss, _ in parts[False]])
    hidden = torch.cat([loss for loss, _ in parts[True]])
    gain = hidden - visible
    accuracy = {
        hide: float(torch.cat([right for _, right in parts[hide]]).mean()) for hide in (False, True)
    }
    return Reading(
        gain.numel(),
        float(visible.mean()),
        float(hidden.mean()),
        float(gain.mean()),
        paired_stderr(gain),
        accuracy[False],
        accuracy[True],
    )


def class_prior_entropy(probes: Sequence[TagProbe]) -> float:
    """Entropy (nats) of the probed regions' classes: the loss of the best blind guess."""
    counts = np.bincount([p.target for p in probes]).astype(float)
    freq = counts[counts > 0] / counts.sum()
    return float(-(freq * np.log(freq)).sum())
