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

from typing import Any, Dict, List, Sequence, Tuple

import torch

from mmf.common.registry import registry
from mmf_uvlp.processors.masking import Batch, RawItem, UVLAMaskingProcessor, padded_rows


def tag_word_pieces(
    tokenizer: Any, labels: Sequence[str], max_length: int
) -> Tuple[List[int], List[int]]:
    """R-T's text part, ``[CLS] tag word-pieces [SEP]``, and the region of each position
    (-1 for [CLS] / [SEP]); a tag that does not fit in ``max_length`` ends the list."""
    pieces = tokenizer(list(labels), add_special_tokens=False)["input_ids"] if labels else []
    return tag_text(tokenizer, pieces, max_length)


def tag_text(
    tokenizer: Any, pieces: Sequence[List[int]], max_length: int
) -> Tuple[List[int], List[int]]:
    """:func:`tag_word_pieces` from the word-pieces of each tag (``pieces``)."""
    ids, owners = [tokenizer.cls_token_id], [-1]
    for region, tag in enumerate(pieces):
        if len(ids) + len(tag) + 1 > max_length:
            break
        ids += tag
        owners += [region] * len(tag)
    return ids + [tokenizer.sep_token_id], owners + [-1]


TAG_CACHE_SIZE = 1 << 16  # distinct tags whose word-pieces a processor keeps


def _rows(item: RawItem) -> int:
    """The number of regions (feature rows) of a raw item; 0 when it has no features (the
    processor then names the missing key)."""
    features = item.get("features")
    return 0 if features is None else len(features)


@registry.register_processor("uvla_region_tag_masking")
class RegionTagMaskingProcessor(UVLAMaskingProcessor):
    """R-T: tag MLM + region masking (MRC, MRFR)."""

    default_curriculum_weighted = False
    DRAWS = (("tags", "L"), ("regions", "R"), ("kind", "L"), ("pick", "L"), ("zero", "R"))

    def __init__(self, config: Any, *args: Any, **kwargs: Any):
        super().__init__(config, *args, **kwargs)
        self._tag_pieces: Dict[str, List[int]] = {}

    def select(
        self,
        is_tag: torch.Tensor,
        owner: torch.Tensor,
        region_mask: torch.Tensor,
        draws: Dict[str, torch.Tensor],
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """(tag positions (B, L), regions (B, R)) to mask: each independently with
        ``mask_prob`` (the ``tags`` and ``regions`` draws).

        ``is_tag`` (B, L) bool, ``owner`` (B, L) the region of each tag position (-1
        elsewhere), ``region_mask`` (B, R) 1 = real region.
        """
        tags = is_tag & (draws["tags"] < self.mask_prob)
        regions = region_mask.bool() & (draws["regions"] < self.mask_prob)
        return tags, regions

    def encode(self, items: Sequence[RawItem]) -> List[List[List[int]]]:
        """The word-pieces of each kept region's tag, per item (at most one tokenizer call)."""
        labels = []
        for item in items:
            regions = min(self.max_regions, _rows(item))
            tags = item.get("region_labels")
            if tags is None or len(tags) < regions:
                raise ValueError(
                    f"processor {type(self).__name__}: raw input needs "
                    "'region_labels', one detector tag string per region of "
                    f"'features' ({regions})"
                )
            labels.append([str(tag) for tag in tags[:regions]])
        self.tokenize_tags([tag for tags in labels for tag in tags])
        return [[self._tag_pieces[tag] for tag in tags] for tags in labels]

    def tokenize_tags(self, tags: Sequence[str]) -> None:
        """Keep the word-pieces of every tag of ``tags``, the ones not seen before tokenized
        in one call (a detector's tags come from its fixed class list, so most batches need
        no call at all)."""
        distinct = list(dict.fromkeys(tags))
        missing = [tag for tag in distinct if tag not in self._tag_pieces]
        if not missing:
            return
        if len(self._tag_pieces) + len(missing) > TAG_CACHE_SIZE:
            self._tag_pieces.clear()
            missing = distinct
        pieces = self.tokenizer(missing, add_special_tokens=False)["input_ids"]
        self._tag_pieces.update(zip(missing, pieces))

    def mask(
        self,
        items: Sequence[RawItem],
        encodings: Sequence[List[List[int]]],
        draws: Dict[str, torch.Tensor],
        padded: bool,
    ) -> Batch:
        regions = self.pack_regions(items, padded)
        classes = self.region_classes(items, regions["num_regions"])

        # Text part: [CLS] tag word-pieces [SEP], each piece carrying its region's box.
        texts = [tag_text(self.tokenizer, pieces, self.max_seq_length) for pieces in encodings]
        input_ids, input_mask = self.text_batch([ids for ids, _ in texts])
        owner = padded_rows([owners for _, owners in texts], self.max_seq_length, -1)
        is_tag = owner >= 0  # (B, L)
        index = owner.clamp(min=0).unsqueeze(-1).expand(-1, -1, 5)
        text_boxes = regions["region_boxes"].gather(1, index) * is_tag.unsqueeze(-1)

        tag_selected, region_selected = self.select(is_tag, owner, regions["region_mask"], draws)
        input_ids, lm_label_ids = self.corrupt(input_ids, tag_selected, draws)
        targets = self.mask_regions(regions, classes, region_selected, draws["zero"])
        return self.assemble(
            input_ids,
            lm_label_ids,
            input_mask,
            regions,
            text_boxes=text_boxes,
            text_is_tag=is_tag.long(),
            **targets,
        )
