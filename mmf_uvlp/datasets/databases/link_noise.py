"""Phrase-region links made noisier on purpose: the link-quality ablation of R-N.

``share`` of the corpus's linked noun phrases point at another region of the same image,
drawn uniformly from its other regions. The draws are a property of the corpus, not of the
training run: each image's come from a generator seeded with ``seed`` and the image's id,
so every seed of every system that reads the same corpus with the same ``share`` trains on
the same corrupted links, in any split or order. A phrase of an image with one region keeps
its link (there is no other region) and is counted apart. Every linked phrase takes the
same two draws whatever ``share`` is, so the links a smaller share replaces are among those a
larger one replaces, each pointing at the same other region.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Dict, List

import numpy as np


@dataclass
class LinkNoise:
    """Replaces ``share`` (0 to 1) of the linked phrases' regions; counts what it did."""

    share: float
    seed: int = 0
    linked: int = 0
    replaced: int = 0
    single_region: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"link_noise: expected a share between 0 and 1, got {self.share}")

    def apply(
        self, image_id: str, sentences: List[Dict[str, Any]], num_regions: int
    ) -> List[Dict[str, Any]]:
        """``sentences`` with their phrases' links perturbed (copies; the input is kept)."""
        if self.share == 0.0:
            return sentences
        rng = np.random.default_rng([self.seed, zlib.crc32(image_id.encode("utf-8"))])
        out = []
        for sentence in sentences:
            phrases = []
            for phrase in sentence["noun_phrases"]:
                region = phrase.get("region")
                if not phrase.get("linked") or region is None:
                    phrases.append(phrase)
                    continue
                self.linked += 1
                draw, other = rng.random(), rng.integers(max(num_regions - 1, 1))
                if draw >= self.share:
                    phrases.append(phrase)
                elif num_regions < 2:
                    self.single_region += 1
                    phrases.append(phrase)
                else:
                    self.replaced += 1
                    phrases.append({**phrase, "region": int(other + (other >= region))})
            out.append({**sentence, "noun_phrases": phrases})
        return out

    def summary(self) -> str:
        """What was replaced, for the run's log."""
        rate = self.replaced / self.linked if self.linked else 0.0
        return (
            f"link_noise={self.share:g}: {self.replaced} of {self.linked} linked phrases "
            f"({rate:.1%}) point at another region of their image"
            + (
                f"; {self.single_region} kept (their image has one region)"
                if self.single_region
                else ""
            )
        )
