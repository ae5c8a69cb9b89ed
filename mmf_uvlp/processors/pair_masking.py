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

from typing import Dict, Sequence

import torch

from mmf.common.registry import registry
from mmf_uvlp.processors.masking import IGNORE, Batch, RawItem, UVLAMaskingProcessor


@registry.register_processor("uvla_pair_masking")
class PairMaskingProcessor(UVLAMaskingProcessor):
    """Sentence MLM + region MRM (MRC, MRFR) on one pair, and its ITM label when given."""

    default_curriculum_weighted = False

    DRAWS = (("select", "L"), ("kind", "L"), ("pick", "L"), ("regions", "R"), ("zero", "R"))

    def mask(
        self,
        items: Sequence[RawItem],
        encodings: Sequence[Dict[str, list]],
        draws: Dict[str, torch.Tensor],
        padded: bool,
    ) -> Batch:
        regions = self.pack_regions(items, padded)
        labels = [item.get("itm_label", IGNORE) for item in items]
        for label in labels:
            if label is None or int(label) not in (IGNORE, 0, 1):
                raise ValueError(
                    f"uvla_pair_masking: 'itm_label' must be 1, 0 or absent, got {label!r}"
                )
        classes = self.region_classes(items, regions["num_regions"])
        input_ids, lm_label_ids, input_mask = self.mask_sentences(encodings, self.mask_prob, draws)
        selected = regions["region_mask"].bool() & (draws["regions"] < self.mask_prob)
        targets = self.mask_regions(regions, classes, selected, draws["zero"])
        itm_label = torch.tensor([int(label) for label in labels])
        negative = (itm_label == 0)[:, None]  # corrupted like a true pair, nothing to rebuild
        lm_label_ids = lm_label_ids.masked_fill(negative, IGNORE)
        targets["region_class_targets"] = targets["region_class_targets"].masked_fill(
            negative, IGNORE
        )
        targets["region_masked"] = targets["region_masked"].masked_fill(negative, 0)
        return self.assemble(
            input_ids, lm_label_ids, input_mask, regions, itm_label=itm_label, **targets
        )
