"""``uvla_region_tag_masking``: R-T samples, input [tags; regions] of one image.

Raw input: the common image keys (``features``, ``boxes``, ``image_width``,
``image_height``, see ``masking.py``) plus ``region_labels`` (N,) detector tag strings
and ``region_classes`` (N,) detector class ids (MRC targets).

Text part: ``[CLS] tag_1 ... tag_n [SEP]``, the word-pieces of each kept region's tag in
region order (``text_is_tag`` 1, ``text_boxes`` = the region's 5-d box); tags that do not
fit in ``max_seq_length`` are dropped whole. Masking, independently:
- each tag word-piece with probability ``mask_prob`` (80/10/10) -> MLM;
- each real region with probability ``mask_prob`` (features zeroed with ``zero_prob``)
  -> MRC target = its class id, MRFR target = its original features.
Padding, [CLS] and [SEP] are never selected. ``curriculum_weighted`` defaults to false.
"""

from __future__ import annotations

from typing import Optional

import torch

from mmf.common.registry import registry
from mmf_uvlp.processors.masking import (
    IGNORE,
    RawItem,
    Sample,
    UVLAMaskingProcessor,
    corrupt_regions,
    select_bernoulli,
)


@registry.register_processor("uvla_region_tag_masking")
class RegionTagMaskingProcessor(UVLAMaskingProcessor):
    """R-T: tag MLM + region masking (MRC, MRFR)."""

    default_curriculum_weighted = False

    def __call__(self, item: RawItem, generator: Optional[torch.Generator] = None) -> Sample:
        generator = self.generator(generator)
        regions = self.pack_regions(item)
        n = int(regions["num_regions"])
        labels, classes = item.get("region_labels"), item.get("region_classes")
        if labels is None or classes is None:
            raise ValueError("uvla_region_tag_masking: raw input needs 'region_labels' (N,) tag "
                             "strings and 'region_classes' (N,) detector class ids")
        classes = torch.as_tensor(classes, dtype=torch.long).view(-1)
        if len(labels) < n or classes.numel() < n:
            raise ValueError("uvla_region_tag_masking: 'region_labels' and 'region_classes' need "
                             "one entry per region of 'features'")

        # Text part: [CLS] tag word-pieces [SEP], each piece carrying its region's box.
        tags = [str(label) for label in labels[:n]]
        pieces = self.tokenizer(tags, add_special_tokens=False)["input_ids"]
        ids = [self.tokenizer.cls_token_id]
        owner = [-1]  # region of each text position, -1 = not a tag
        for region, tag in enumerate(pieces):
            if len(ids) + len(tag) + 1 > self.max_seq_length:
                break
            ids += tag
            owner += [region] * len(tag)
        ids.append(self.tokenizer.sep_token_id)
        owner.append(-1)
        length = len(ids)
        owner_t = torch.full((self.max_seq_length,), -1, dtype=torch.long)
        owner_t[:length] = torch.tensor(owner)
        is_tag = owner_t >= 0  # (L,)
        text_boxes = torch.zeros(self.max_seq_length, 5)
        text_boxes[is_tag] = regions["region_boxes"][owner_t[is_tag]]

        input_ids, lm_label_ids = self.corrupt(
            self.pad_text(ids), select_bernoulli(is_tag, self.mask_prob, generator), generator)

        # Visual part: MRM on real regions.
        masked = select_bernoulli(regions["region_mask"].bool(), self.mask_prob, generator)  # (R,)
        original = regions["region_features"]
        regions["region_features"] = corrupt_regions(original, masked, self.zero_prob, generator)
        class_targets = torch.full((self.max_regions,), IGNORE, dtype=torch.long)
        class_targets[masked] = classes[:n][masked[:n]]

        sample = self.assemble(
            input_ids, lm_label_ids, length, regions,
            text_boxes=text_boxes, text_is_tag=is_tag.long(),
            region_masked=masked.long(), region_class_targets=class_targets,
        )
        sample["region_features_target"] = original
        return sample
