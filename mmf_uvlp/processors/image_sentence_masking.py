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

from typing import Dict, List, Optional, Sequence

import torch

from mmf.common.registry import registry
from mmf_uvlp.processors.masking import (
    IGNORE,
    RawItem,
    Sample,
    UVLAMaskingProcessor,
    restore_targets,
)


@registry.register_processor("uvla_image_sentence_masking")
class ImageSentenceMaskingProcessor(UVLAMaskingProcessor):
    """I-S: sentence MLM + the ITM label."""

    default_curriculum_weighted = True

    def encode(self, items: Sequence[RawItem]) -> List[Dict[str, list]]:
        return self.encode_sentences(
            items, "uvla_image_sentence_masking: raw input needs 'sentence' (str)",
            return_special_tokens_mask=True)

    def sample(self, item: RawItem, encoding: Dict[str, list],
               generator: Optional[torch.Generator], padded: bool) -> Sample:
        regions = self.pack_regions(item, padded)
        label = item.get("itm_label")
        if label is None or int(label) not in (0, 1):
            raise ValueError(
                f"uvla_image_sentence_masking: raw input needs 'itm_label' 0 or 1, got {label!r}"
            )
        input_ids, lm_label_ids, length = self.mask_sentence(encoding, self.mask_prob, generator)
        clean_input_ids = restore_targets(input_ids, lm_label_ids)
        if int(label) == 0:
            lm_label_ids = torch.full_like(lm_label_ids, IGNORE)
        return self.assemble(input_ids, lm_label_ids, length, regions, itm_label=int(label),
                             clean_input_ids=clean_input_ids)
