"""``uvla_text_masking``: a text-only sample (U-VisualBERT's text batches), standard MLM.

Raw input: ``sentence`` (str). Each word-piece (not [CLS], [SEP] or padding) is selected
with ``mask_prob`` and corrupted 80/10/10.

Output (L = ``max_seq_length``): ``input_ids``, ``input_mask``, ``segment_ids``,
``lm_label_ids`` (L,) long; ``itm_label`` () = -1, ``targets`` () = -1,
``curriculum_weighted`` () false. No region field: the ``uvla`` model encodes such a batch's
text alone when ``model_config.uvla.text_only_batches`` is true. The region params
(``max_regions`` ...) and ``padded`` are accepted and unused.
"""

from __future__ import annotations

from typing import Dict, Sequence

import torch

from mmf.common.registry import registry
from mmf_uvlp.processors.masking import IGNORE, Batch, RawItem, UVLAMaskingProcessor


@registry.register_processor("uvla_text_masking")
class TextMaskingProcessor(UVLAMaskingProcessor):
    """Text-only MLM."""

    default_curriculum_weighted = False

    DRAWS = (("select", "L"), ("kind", "L"), ("pick", "L"))

    def mask(
        self,
        items: Sequence[RawItem],
        encodings: Sequence[Dict[str, list]],
        draws: Dict[str, torch.Tensor],
        padded: bool,
    ) -> Batch:
        input_ids, lm_label_ids, input_mask = self.mask_sentences(encodings, self.mask_prob, draws)
        label = torch.full((len(items),), IGNORE, dtype=torch.long)
        return {
            "input_ids": input_ids,
            "input_mask": input_mask,
            "segment_ids": torch.zeros_like(input_ids),
            "lm_label_ids": lm_label_ids,
            "itm_label": label,
            "curriculum_weighted": torch.full((len(items),), self.curriculum_weighted),
            "targets": label.clone(),
        }
