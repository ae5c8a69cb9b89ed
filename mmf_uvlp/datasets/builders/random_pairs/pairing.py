"""Which images keep their own caption, and which sentence each other image gets.

The paper's motivation study (μ-VLA Tables 5-6, Fig. 1) pre-trains on image-text pairs
with a controlled share of originally aligned pairs, the rest randomly paired. Both
choices are fixed for a run and follow from a seed alone:

- :func:`choose_true_pairs`: exactly ``round(ratio * N)`` of the N images, the first ones
  of a permutation drawn with the seed;
- :func:`draw_partners`: for every other image, one sentence drawn uniformly (with
  replacement) from the text corpora, redrawn while it equals the image's own caption.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch

MAX_PARTNER_DRAWS = 100


def choose_true_pairs(num_images: int, ratio: float, seed: int) -> torch.Tensor:
    """Bool (N,): the images that keep their own caption, ``round(ratio * N)`` of them."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"true_pair_ratio must be in [0, 1], got {ratio}")
    order = torch.randperm(num_images, generator=torch.Generator().manual_seed(seed))
    chosen = torch.zeros(num_images, dtype=torch.bool)
    chosen[order[: round(ratio * num_images)]] = True
    return chosen


def draw_partners(
    own_captions: Sequence[Optional[str]],
    sentences: Sequence[str],
    true_pairs: torch.Tensor,
    seed: int,
) -> List[int]:
    """The index into ``sentences`` of each image's partner (-1 for a true pair).

    ``own_captions[i]``: image i's caption (None: unknown, nothing to avoid).
    """
    generator = torch.Generator().manual_seed(seed)
    partners = []
    for image, own in enumerate(own_captions):
        if bool(true_pairs[image]):
            partners.append(-1)
            continue
        for _ in range(MAX_PARTNER_DRAWS):
            sentence = int(torch.randint(len(sentences), (), generator=generator))
            if sentences[sentence] != own:
                break
        else:
            raise ValueError(
                f"random pairs: {MAX_PARTNER_DRAWS} random sentences all equal the "
                f"own caption of image number {image}; the text corpora hold too "
                "few other sentences"
            )
        partners.append(sentence)
    return partners
