"""The MRC shortcut: does a pre-trained model classify a masked region by reading its own tag?

In R-T (the paper's reading) a masked region's detector tag stays in
the input with the region's box embedding, so masked-region classification (MRC) can be
solved by finding the tag that shares the masked region's box instead of from the region's
context. For each held-out image of the pre-training pool, the R-T input is built as
``uvla_region_tag_masking`` builds it (``[CLS] tag word-pieces [SEP]``, each piece with
its region's box; tags that do not fit are dropped whole) and one region whose tag is in
the input (drawn with a seed) has its features zeroed. The MRC loss on its detector class
is measured twice: with its tag visible, and with its tag's word-pieces replaced by
``[MASK]`` (the box kept: U-VisualBERT's joint masking). The paired difference ``hidden -
visible`` (nats) is what reading the tag is worth to MRC; 0 means the model does not read
it. Accuracy is reported for both.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from mmf_uvlp.analysis.regions import ImageRegions, RegionStore
from mmf_uvlp.analysis.systems import make_batch


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
class Shortcut:
    """MRC loss (nats) and accuracy on the masked regions, tag visible / hidden."""

    images: int
    visible: float
    hidden: float
    gain: float  # mean of (hidden - visible) over images
    stderr: float  # paired standard error of gain
    visible_accuracy: float
    hidden_accuracy: float

    def to_json(self) -> dict[str, Any]:
        return {"images": self.images, "tag_visible_nats": self.visible,
                "tag_hidden_nats": self.hidden, "gain_nats": self.gain,
                "gain_stderr": self.stderr, "tag_visible_accuracy": self.visible_accuracy,
                "tag_hidden_accuracy": self.hidden_accuracy}


def tag_input(tokenizer: Any, labels: Sequence[str],
              max_length: int) -> tuple[list[int], list[int]]:
    """``[CLS] tags [SEP]`` word-piece ids and the region of each position (-1 for the
    special tokens); a tag that does not fit in ``max_length`` ends the list."""
    ids, owners = [tokenizer.cls_token_id], [-1]
    pieces = tokenizer(list(labels), add_special_tokens=False)["input_ids"] if labels else []
    for region, tag in enumerate(pieces):
        if len(ids) + len(tag) + 1 > max_length:
            break
        ids += tag
        owners += [region] * len(tag)
    return ids + [tokenizer.sep_token_id], owners + [-1]


def make_tag_probes(image_ids: Sequence[str], store: RegionStore, tokenizer: Any,
                    class_ids: Mapping[str, int], max_length: int, seed: int) -> list[TagProbe]:
    """One probe per image with a tag in its input; the masked region drawn with ``seed``
    among those whose tag fits."""
    rng = random.Random(seed)
    probes = []
    for image_id in image_ids:
        image = store[image_id]
        ids, owners = tag_input(tokenizer, image.labels, max_length)
        tagged = sorted({owner for owner in owners if owner >= 0})
        if not tagged:
            continue
        region = rng.choice(tagged)
        label = image.labels[region]
        if label not in class_ids:
            raise ValueError(f"{store.path}: image {image_id!r} region {region} has the label "
                             f"{label!r}, which is not a class name")
        probes.append(TagProbe(image_id, tuple(ids), tuple(owners), region, class_ids[label]))
    return probes


def _masked(image: ImageRegions, region: int) -> ImageRegions:
    features = image.features.copy()
    features[region] = 0.0
    return dataclasses.replace(image, features=features)


def _losses(model: torch.nn.Module, probes: Sequence[TagProbe], store: Any, mask_id: int,
            hide_tag: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-probe MRC loss (nats) and correctness, the masked region's tag visible or not."""
    token_ids = []
    for probe in probes:
        ids = [mask_id if hide_tag and owner == probe.region else token
               for token, owner in zip(probe.input_ids, probe.owners)]
        token_ids.append(ids)
    regions = [_masked(store[p.image_id], p.region) for p in probes]
    batch = make_batch(token_ids, regions, [p.owners for p in probes]).fields()
    rows = torch.arange(len(probes))
    with torch.no_grad():
        hidden = model.encode(batch).regions[rows, torch.tensor([p.region for p in probes])]
        logits = model.heads["mrc"].classifier(hidden)  # (B, classes)
    targets = torch.tensor([p.target for p in probes])
    loss = F.cross_entropy(logits, targets, reduction="none")
    return loss, (logits.argmax(-1) == targets).float()


def measure_shortcut(model: torch.nn.Module, probes: Sequence[TagProbe], store: Any,
                     mask_id: int, batch_size: int = 64) -> Shortcut:
    """Mean MRC loss and accuracy with the tag visible and hidden, and the paired gain."""
    if not probes:
        raise ValueError("no image has a tag in its input: nothing to probe")
    model.eval()
    parts: dict[bool, list[tuple[torch.Tensor, torch.Tensor]]] = {False: [], True: []}
    for start in range(0, len(probes), batch_size):
        chunk = probes[start:start + batch_size]
        for hide in (False, True):
            parts[hide].append(_losses(model, chunk, store, mask_id, hide))
    visible = torch.cat([loss for loss, _ in parts[False]])
    hidden = torch.cat([loss for loss, _ in parts[True]])
    gain = hidden - visible
    n = gain.numel()
    stderr = float(gain.std(unbiased=True)) / math.sqrt(n) if n > 1 else float("nan")
    accuracy = {hide: float(torch.cat([right for _, right in parts[hide]]).mean())
                for hide in (False, True)}
    return Shortcut(n, float(visible.mean()), float(hidden.mean()), float(gain.mean()), stderr,
                    accuracy[False], accuracy[True])


def class_prior_entropy(probes: Sequence[TagProbe]) -> float:
    """Entropy (nats) of the probed regions' classes: the loss of the best blind guess."""
    counts = np.bincount([p.target for p in probes]).astype(float)
    freq = counts[counts > 0] / counts.sum()
    return float(-(freq * np.log(freq)).sum())
