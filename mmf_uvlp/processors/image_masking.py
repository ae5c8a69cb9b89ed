"""``uvla_image_masking``: image-only samples with no text, input [CLS] [SEP]; regions.

The round-robin image batches of the μ-VLA paper's Table 5: masked region modelling on an
image alone. Each real region is masked with ``mask_prob`` (features zeroed with
``zero_prob``) -> MRC target = its detector class id, MRFR target = its original features.
The text part is ``[CLS] [SEP]`` and has nothing to mask, so such a batch has no MLM target.
Raw input: the common image keys (``features``, ``boxes``, ``image_width``,
``image_height``, see ``masking.py``) plus ``region_classes``; detector tags are not read
(U-VisualBERT's image batches read them: ``uvla_image_tag_masking``).
"""

from __future__ import annotations

from typing import List, Sequence

from mmf.common.registry import registry
from mmf_uvlp.processors.masking import RawItem
from mmf_uvlp.processors.region_tag_masking import RegionTagMaskingProcessor


@registry.register_processor("uvla_image_masking")
class ImageMaskingProcessor(RegionTagMaskingProcessor):
    """[CLS] [SEP]; regions: MRC + MRFR, no text."""

    def encode(self, items: Sequence[RawItem]) -> List[List[List[int]]]:
        """No tag word-pieces: the text part of every item is [CLS] [SEP]."""
        return [[] for _ in items]
