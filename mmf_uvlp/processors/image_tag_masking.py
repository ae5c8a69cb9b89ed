"""``uvla_image_tag_masking``: U-VisualBERT's image-only samples, input [tags; regions].

The input is R-T's (``region_tag_masking.py``: the detector tags as word-pieces carrying
their region's box, then the regions), and so are the losses (tag MLM, MRC, MRFR); the
masking is joint: each real region is masked with ``mask_prob``, each tag word-piece with
``mask_prob``, and every word-piece of a masked region's tag is masked too, so a masked
region's class cannot be read off its own tag.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from mmf.common.registry import registry
from mmf_uvlp.processors.masking import select_bernoulli
from mmf_uvlp.processors.region_tag_masking import RegionTagMaskingProcessor


@registry.register_processor("uvla_image_tag_masking")
class ImageTagMaskingProcessor(RegionTagMaskingProcessor):
    """[tags; regions] with a masked region's tag masked too."""

    def select(self, is_tag: torch.Tensor, owner: torch.Tensor, region_mask: torch.Tensor,
               generator: Optional[torch.Generator]) -> Tuple[torch.Tensor, torch.Tensor]:
        regions = select_bernoulli(region_mask.bool(), self.mask_prob, generator)  # (R,)
        tags = select_bernoulli(is_tag, self.mask_prob, generator)  # (L,)
        tags |= is_tag & regions[owner.clamp(min=0)]
        return tags, regions
