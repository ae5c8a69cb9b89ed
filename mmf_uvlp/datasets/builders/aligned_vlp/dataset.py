"""Aligned VLP: each pre-training image with its own true caption (``captions_gt``).

Input [caption; regions] (``uvla_pair_masking``). With probability ``negative_prob``
(0.5) the caption is replaced by the caption of another image whose text differs from
the image's own (ITM label 0); both are masked alike by ``uvla_pair_masking``, and only the
true pairs (ITM label 1) carry MLM, MRC and MRFR targets.
"""

from __future__ import annotations

from typing import Any, Dict

import torch

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.datasets.builders.image_pool import ImagePoolDataset
from mmf_uvlp.datasets.builders.pretraining import config_probability

MAX_NEGATIVE_DRAWS = 100


class AlignedVLPDataset(ImagePoolDataset):
    """True pairs and ITM negatives over the image pool and its captions."""

    def __init__(self, config: Any, dataset_type: str, index: int, *args: Any, **kwargs: Any):
        super().__init__("aligned_vlp", config, dataset_type, index, *args, **kwargs)
        self.negative_prob = config_probability("aligned_vlp", self.config, "negative_prob", 0.5)
        if len(self.annotation_db) < 2 and self.negative_prob > 0:
            raise UserConfigError(
                f"aligned_vlp: the {dataset_type} split has {len(self.annotation_db)} image(s), "
                "ITM negatives need at least 2 (change dataset_config.aligned_vlp.holdout_every)"
            )

    def needs_captions(self) -> bool:
        return True

    def raw_input(self, idx: int) -> Dict[str, Any]:
        item = self.annotation_db[idx]
        raw = self.image_input(item)
        raw["sentence"], raw["itm_label"] = item["caption"], 1
        if float(torch.rand(())) < self.negative_prob:
            raw["sentence"], raw["itm_label"] = self.negative_caption(idx), 0
        return raw

    def negative_caption(self, idx: int) -> str:
        """The caption of a random other image, never equal to image ``idx``'s own."""
        own = self.annotation_db[idx]["caption"]
        for _ in range(MAX_NEGATIVE_DRAWS):
            other = int(torch.randint(len(self.annotation_db) - 1, ()))
            other += other >= idx  # any image but this one
            caption = self.annotation_db[other]["caption"]
            if caption != own:
                return caption
        raise ValueError(
            f"aligned_vlp: {MAX_NEGATIVE_DRAWS} random captions of other images all equal the "
            f"caption of image {self.annotation_db[idx]['image_id']!r}; the captions file "
            "holds too few distinct captions for ITM negatives"
        )
