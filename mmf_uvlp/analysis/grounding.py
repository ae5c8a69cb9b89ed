"""The attention-grounding probe: every attention head as a region classifier.

For a :class:`~mmf_uvlp.analysis.examples.Source` (some text positions and the gold
boxes of a target entity) a head predicts the region that receives the most attention
from those positions, averaged over them, among the image's real regions (padding
regions never compete). The prediction is correct when its IoU with a gold box of the
target is at least 0.5. When several regions tie for the most attention, the head gets
the fraction of them that are correct (its expected accuracy under random tie-breaking).

Per head the probe also measures the share of the sources' attention that goes to the
regions at all; a head is *active* when that share averages above 20% ("What does BERT
with vision look at", which draws active heads large and ranks only them).

Baselines, per source: the rule baseline picks the most confident detection (ties share
credit too); the random baseline is the expected accuracy of a uniformly random real
region; the upper bound is whether any real region matches a gold box.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import torch

from mmf_uvlp.analysis.batches import batches, text_to_regions
from mmf_uvlp.analysis.examples import ENTITY, Example
from mmf_uvlp.analysis.regions import RegionStore
from mmf_uvlp.analysis.systems import System
from mmf_uvlp.utils.boxes import MATCH_IOU, iou

ACTIVE_SHARE = 0.2
TIE_TOLERANCE = 1e-6  # relative: weights this close to the maximum tie with it


def region_hits(boxes: np.ndarray, gold: np.ndarray, threshold: float = MATCH_IOU) -> np.ndarray:
    """(R,) bool: regions ``boxes`` (R, 4) with IoU >= ``threshold`` with a ``gold`` (G, 4) box."""
    gold = np.asarray(gold, dtype=np.float32).reshape(-1, 4)
    if len(boxes) == 0 or len(gold) == 0:
        return np.zeros(len(boxes), dtype=bool)
    overlap = iou(torch.as_tensor(np.asarray(boxes, dtype=np.float32)), torch.as_tensor(gold))
    return (overlap >= threshold).any(dim=1).numpy()


def argmax_credit(scores: np.ndarray, hits: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Credit of choosing the highest-scoring valid region, per leading index.

    ``scores`` (..., R), ``hits`` / ``valid`` (R,) bool. Ties share the credit: the result
    is the fraction of the tied maxima that are hits (0 when no region is valid).
    """
    scores = np.asarray(scores, dtype=np.float64)
    if not valid.any():
        return np.zeros(scores.shape[:-1])
    masked = np.where(valid, scores, -np.inf)
    best = masked.max(axis=-1, keepdims=True)
    tied = valid & (masked >= best - TIE_TOLERANCE * np.abs(best))
    return (tied & hits).sum(axis=-1) / tied.sum(axis=-1)


def score_source(
    rows: np.ndarray, valid: np.ndarray, hits: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(credit, share), each (layers, heads), of one source.

    ``rows`` (layers, heads, S, R): attention from the source's S positions to the R
    region positions; ``valid`` (R,) real regions; ``hits`` (R,) regions matching a gold box.
    """
    rows = np.asarray(rows, dtype=np.float64)
    mean = rows.mean(axis=2)  # (layers, heads, R)
    share = (mean * valid).sum(axis=-1)
    return argmax_credit(mean, hits, valid), share


@dataclass
class Tally:
    """Running sums for one kind of source (entities, or one dependency relation)."""

    credit: np.ndarray
    share: np.ndarray
    n: int = 0
    rule: float = 0.0
    random: float = 0.0
    reachable: int = 0

    def add(
        self, credit: np.ndarray, share: np.ndarray, rule: float, random: float, reachable: bool
    ) -> None:
        self.credit += credit
        self.share += share
        self.n += 1
        self.rule += rule
        self.random += random
        self.reachable += int(reachable)

    def summary(self) -> dict:
        """Accuracies in percent; ``best_head`` among active heads (1-based layer-head)."""
        n = max(self.n, 1)
        accuracy = 100.0 * self.credit / n
        share = self.share / n
        active = share > ACTIVE_SHARE
        pool = np.where(active, accuracy, -np.inf) if active.any() else accuracy
        layer, head = np.unravel_index(int(np.argmax(pool)), pool.shape)
        return {
            "n": self.n,
            "accuracy": np.round(accuracy, 4).tolist(),
            "attention_to_regions": np.round(share, 4).tolist(),
            "rule_baseline": round(100.0 * self.rule / n, 4),
            "random_baseline": round(100.0 * self.random / n, 4),
            "upper_bound": round(100.0 * self.reachable / n, 4),
            "best_head": {
                "layer": int(layer) + 1,
                "head": int(head) + 1,
                "accuracy": round(float(accuracy[layer, head]), 4),
                "attention_to_regions": round(float(share[layer, head]), 4),
                "active": bool(active[layer, head]),
            },
            "active_heads": int(active.sum()),
        }


@dataclass
class GroundingProbe:
    """Accumulates entity and per-relation syntactic grounding over many sources."""

    layers: int
    heads: int
    tallies: dict[str, Tally] = field(default_factory=dict)

    def tally(self, kind: str) -> Tally:
        if kind not in self.tallies:
            shape = (self.layers, self.heads)
            self.tallies[kind] = Tally(np.zeros(shape), np.zeros(shape))
        return self.tallies[kind]

    def add(
        self,
        kind: str,
        rows: np.ndarray,
        boxes: np.ndarray,
        valid: np.ndarray,
        confidences: np.ndarray,
        gold: np.ndarray,
    ) -> None:
        """Score one source: ``rows`` (layers, heads, S, R) over regions ``boxes`` (R, 4)."""
        hits = region_hits(boxes, gold) & valid
        credit, share = score_source(rows, valid, hits)
        rule = float(argmax_credit(confidences, hits, valid))
        random = float(hits.sum() / valid.sum()) if valid.any() else 0.0
        self.tally(kind).add(credit, share, rule, random, bool(hits.any()))

    def summary(self, relations: int = 10) -> dict:
        """``entity`` and the ``relations`` most frequent relations (ties by name)."""
        kinds = sorted(
            (k for k in self.tallies if k != ENTITY), key=lambda k: (-self.tallies[k].n, k)
        )[:relations]
        return {
            "layers": self.layers,
            "heads": self.heads,
            "entity": self.tally(ENTITY).summary(),
            "syntactic": {k: self.tallies[k].summary() for k in kinds},
        }


def run_probe(
    system: System, examples: Iterable[Example], store: RegionStore, batch_size: int = 16
) -> GroundingProbe:
    """Score every source of ``examples`` for every head of ``system``."""
    probe = GroundingProbe(system.layers, system.heads)
    for group, regions, batch in batches(examples, store, batch_size):
        maps = text_to_regions(system(batch, attentions=True), batch)
        for i, (example, image) in enumerate(zip(group, regions)):
            valid = np.arange(maps.shape[-1]) < len(image)
            boxes = np.zeros((maps.shape[-1], 4), dtype=np.float32)
            boxes[: len(image)] = image.boxes
            confidences = np.zeros(maps.shape[-1], dtype=np.float32)
            confidences[: len(image)] = image.confidences
            for source in example.entities + example.syntactic:
                rows = maps[i][:, :, list(source.tokens)]
                probe.add(source.kind, rows, boxes, valid, confidences, np.array(source.gold))
    return probe
