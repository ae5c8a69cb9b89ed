"""``uvla_pair_masking``: one (image, sentence) pair, input [sentence; regions], joint MLM + MRM.

The processor of the baselines pre-trained on pairs: Aligned VLP (each image with its own
caption, plus ITM negatives) and random / partly true pairs (the paper's Tables 5-6).

Raw input: the common image keys (see ``masking.py``) plus ``region_classes`` (N,)
detector class ids, ``sentence`` (str) and optionally ``itm_label`` (1: a true pair, 0: an
ITM negative, the caption of another image; absent: not an ITM sample, label -1).

A pair that is not an ITM negative is masked jointly: standard MLM on the sentence (each
word-piece with ``mask_prob``, 80/10/10) and MRM on the regions (each real region with
``mask_prob``, features zeroed with ``zero_prob``; MRC target = its detector class, MRFR
target = its original features). An ITM negative is corrupted the same way but carries no
MLM / MRC / MRFR target, so its only loss is ITM (masked modelling is conditioned on matched
pairs, as in LXMERT). Leaving negatives uncorrupted would let ITM read the answer off the
input: a pair with [MASK] tokens or zeroed regions would always be a true pair.
``curriculum_weighted`` defaults to false.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch

from mmf.common.registry import registry
from mmf_uvlp.processors.masking import (
    IGNORE,
    RawItem,
    Sample,
    UVLAMaskingProcessor,
    select_bernoulli,
)


@registry.register_processor("uvla_pair_masking")
class PairMaskingProcessor(UVLAMaskingProcessor):
    """Sentence MLM + region MRM (MRC, MRFR) on one pair, and its ITM label when given."""

    default_curriculum_weighted = False

    def encode(self, items: Sequence[RawItem]) -> List[Dict[str, list]]:
        return self.encode_sentences(items, "uvla_pair_masking: raw input needs 'sentence' (str)",
                                     return_special_tokens_mask=True)

    def sample(self, item: RawItem, encoding: Dict[str, list],
               generator: Optional[torch.Generator], padded: bool) -> Sample:
        regions = self.pack_regions(item, padded)
        label = item.get("itm_label", IGNORE)
        if label is None or int(label) not in (IGNORE, 0, 1):
            raise ValueError(
                f"uvla_pair_masking: 'itm_label' must be 1, 0 or absent, got {label!r}")
        classes = self.region_classes(item, int(regions["num_regions"]))
        input_ids, lm_label_ids, length = self.mask_sentence(encoding, self.mask_prob, generator)
        selected = select_bernoulli(regions["region_mask"].bool(), self.mask_prob,
                                    generator)  # (R,)
        region_targets = self.mask_regions(regions, classes, selected, generator)
        if int(label) == 0:  # corrupted like a true pair, but nothing to reconstruct
            lm_label_ids = torch.full_like(lm_label_ids, IGNORE)
            region_targets["region_class_targets"].fill_(IGNORE)
            region_targets["region_masked"] = torch.zeros_like(region_targets["region_masked"])
        return self.assemble(input_ids, lm_label_ids, length, regions, itm_label=int(label),
                             **region_targets)
