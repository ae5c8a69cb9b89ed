"""``uvla_image_tag_masking``: U-VisualBERT's image-only samples, input [tags; regions].

The input is R-T's (``region_tag_masking.py``: the detector tags as word-pieces carrying
their region's box, then the regions), and so are the losses (tag MLM, MRC, MRFR); the
masking is joint: each real region is masked with ``mask_prob``, each tag word-piece with
``mask_prob``, and every word-piece of a masked region's tag is masked too, so a masked
region's class cannot be read off its own tag.
"""

from __future__ import annotations

from typing import Dict, Tuple

import torch

from mmf.common.registry import registry
from mmf_uvlp.processors.region_tag_masking import RegionTagMaskingProcessor


@registry.register_processor("uvla_image_tag_masking")
class ImageTagMaskingProcessor(RegionTagMaskingProcessor):
    """[tags; regions] with a masked region's tag masked too."""

    def select(
        self,
        is_tag: torch.Tensor,
        owner: torch.Tensor,
        region_mask: torch.Tensor,
        draws: Dict[str, torch.Tensor],
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        tags, regions = super().select(is_tag, owner, region_mask, draws)  # (B, L), (B, R)
        return tags | (is_tag & regions.gather(1, owner.clamp(min=0))), regions
