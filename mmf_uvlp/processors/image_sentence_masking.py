"""``uvla_image_sentence_masking``: I-S samples, input [sentence; regions].

Raw input: the common image keys (see ``masking.py``) plus ``sentence`` (str) and
``itm_label`` (1: a retrieved pair, 0: a random negative; the dataset draws negatives,
this processor only carries the label).

Standard MLM: each word-piece of the sentence (not [CLS], [SEP] or padding) is selected
with probability ``mask_prob`` and corrupted 80/10/10. Regions are not masked. The MLM
targets are kept for retrieved pairs only (the paper's I-S MLM is defined on them); a random
negative is corrupted the same way, so that [MASK] tokens do not tell ITM the label, but has
no MLM target.
``curriculum_weighted`` defaults to true (the sample's losses get w_ITM after epoch m).
"""

from __future__ import annotations

from typing import Dict, Sequence

import torch

from mmf.common.registry import registry
from mmf_uvlp.processors.masking import (
    IGNORE,
    Batch,
    RawItem,
    UVLAMaskingProcessor,
    restore_targets,
)


@registry.register_processor("uvla_image_sentence_masking")
class ImageSentenceMaskingProcessor(UVLAMaskingProcessor):
    """I-S: sentence MLM + the ITM label."""

    default_curriculum_weighted = True

    DRAWS = (("select", "L"), ("kind", "L"), ("pick", "L"))

    def mask(
        self,
        items: Sequence[RawItem],
        encodings: Sequence[Dict[str, list]],
        draws: Dict[str, torch.Tensor],
        padded: bool,
    ) -> Batch:
        regions = self.pack_regions(items, padded)
        labels = [item.get("itm_label") for item in items]
        for label in labels:
            if label is None or int(label) not in (0, 1):
                raise ValueError(
                    "uvla_image_sentence_masking: raw input needs 'itm_label' 0 "
                    f"or 1, got {label!r}"
                )
        input_ids, lm_label_ids, input_mask = self.mask_sentences(encodings, self.mask_prob, draws)
        clean_input_ids = restore_targets(input_ids, lm_label_ids)
        itm_label = torch.tensor([int(label) for label in labels])
        lm_label_ids = lm_label_ids.masked_fill((itm_label == 0)[:, None], IGNORE)
        return self.assemble(
            input_ids,
            lm_label_ids,
            input_mask,
            regions,
            itm_label=itm_label,
            clean_input_ids=clean_input_ids,
        )
