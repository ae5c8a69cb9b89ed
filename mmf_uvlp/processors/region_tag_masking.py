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
Subclasses change which tags and regions are selected by overriding ``select``
(U-VisualBERT's joint masking: ``uvla_image_tag_masking``).
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch

from mmf.common.registry import registry
from mmf_uvlp.processors.masking import RawItem, Sample, UVLAMaskingProcessor, select_bernoulli


def tag_word_pieces(tokenizer: Any, labels: Sequence[str],
                    max_length: int) -> Tuple[List[int], List[int]]:
    """R-T's text part, ``[CLS] tag word-pieces [SEP]``, and the region of each position
    (-1 for [CLS] / [SEP]); a tag that does not fit in ``max_length`` ends the list."""
    pieces = tokenizer(list(labels), add_special_tokens=False)["input_ids"] if labels else []
    return tag_text(tokenizer, pieces, max_length)


def tag_text(tokenizer: Any, pieces: Sequence[List[int]],
             max_length: int) -> Tuple[List[int], List[int]]:
    """:func:`tag_word_pieces` from the word-pieces of each tag (``pieces``)."""
    ids, owners = [tokenizer.cls_token_id], [-1]
    for region, tag in enumerate(pieces):
        if len(ids) + len(tag) + 1 > max_length:
            break
        ids += tag
        owners += [region] * len(tag)
    return ids + [tokenizer.sep_token_id], owners + [-1]


def _rows(item: RawItem) -> int:
    """The number of regions (feature rows) of a raw item; 0 when it has no features (the
    processor then names the missing key)."""
    features = item.get("features")
    return 0 if features is None else len(features)


@registry.register_processor("uvla_region_tag_masking")
class RegionTagMaskingProcessor(UVLAMaskingProcessor):
    """R-T: tag MLM + region masking (MRC, MRFR)."""

    default_curriculum_weighted = False

    def select(self, is_tag: torch.Tensor, owner: torch.Tensor, region_mask: torch.Tensor,
               generator: Optional[torch.Generator]) -> Tuple[torch.Tensor, torch.Tensor]:
        """(tag positions (L,), regions (R,)) to mask: each independently with ``mask_prob``.

        ``is_tag`` (L,) bool, ``owner`` (L,) the region of each tag position (-1 elsewhere),
        ``region_mask`` (R,) 1 = real region.
        """
        tags = select_bernoulli(is_tag, self.mask_prob, generator)
        regions = select_bernoulli(region_mask.bool(), self.mask_prob, generator)
        return tags, regions

    def encode(self, items: Sequence[RawItem]) -> List[List[List[int]]]:
        """The word-pieces of each kept region's tag, per item (one tokenizer call)."""
        labels = []
        for item in items:
            regions = min(self.max_regions, _rows(item))
            tags = item.get("region_labels")
            if tags is None or len(tags) < regions:
                raise ValueError(f"processor {type(self).__name__}: raw input needs "
                                 "'region_labels', one detector tag string per region of "
                                 f"'features' ({regions})")
            labels.append([str(tag) for tag in tags[:regions]])
        flat = [tag for tags in labels for tag in tags]
        pieces = self.tokenizer(flat, add_special_tokens=False)["input_ids"] if flat else []
        out, start = [], 0
        for tags in labels:
            out.append(pieces[start:start + len(tags)])
            start += len(tags)
        return out

    def sample(self, item: RawItem, encoding: List[List[int]],
               generator: Optional[torch.Generator], padded: bool) -> Sample:
        regions = self.pack_regions(item, padded)
        n = int(regions["num_regions"])
        classes = self.region_classes(item, n)

        # Text part: [CLS] tag word-pieces [SEP], each piece carrying its region's box.
        ids, owner = tag_text(self.tokenizer, encoding, self.max_seq_length)
        length = len(ids)
        owner_t = torch.full((self.max_seq_length,), -1, dtype=torch.long)
        owner_t[:length] = torch.tensor(owner)
        is_tag = owner_t >= 0  # (L,)
        text_boxes = torch.zeros(self.max_seq_length, 5)
        text_boxes[is_tag] = regions["region_boxes"][owner_t[is_tag]]

        tag_selected, region_selected = self.select(is_tag, owner_t, regions["region_mask"],
                                                    generator)
        input_ids, lm_label_ids = self.corrupt(self.pad_text(ids), tag_selected, generator)
        region_targets = self.mask_regions(regions, classes, region_selected, generator)
        return self.assemble(input_ids, lm_label_ids, length, regions,
                             text_boxes=text_boxes, text_is_tag=is_tag.long(), **region_targets)
