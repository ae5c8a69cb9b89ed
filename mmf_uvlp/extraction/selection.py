"""The bottom-up-attention box selection's settings (its ``generate_tsv.py`` defaults).

Per-class NMS (``nms_iou``) over the proposals (``boxes="proposals"``, as the recipe) or each
class's regressed boxes gives every proposal its best surviving class score; those scoring at
least ``conf_thresh`` are kept, at least ``min_boxes`` and at most ``max_boxes`` of them by
score. An attribute head's top ``max_attributes`` attributes scoring at least
``attr_thresh`` are written.
"""

from __future__ import annotations

from dataclasses import dataclass

HELP = {
    "proposals": "RPN proposals per image (MODEL.RPN.POST_NMS_TOPK_TEST)",
    "nms_iou": "IoU of the per-class NMS",
    "conf_thresh": "keep the boxes whose best class score is at least this",
    "min_boxes": "at least this many boxes an image",
    "max_boxes": "at most this many boxes an image",
    "boxes": "proposals (the recipe's boxes) or regressed (for the box's class)",
    "attr_thresh": "write attributes scoring at least this",
    "max_attributes": "at most this many attributes a box",
}


@dataclass(frozen=True)
class Selection:
    """The bottom-up-attention box selection (defaults: that recipe's)."""

    proposals: int = 300  # RPN proposals per image (MODEL.RPN.POST_NMS_TOPK_TEST)
    nms_iou: float = 0.3
    conf_thresh: float = 0.2
    min_boxes: int = 10
    max_boxes: int = 100
    boxes: str = "proposals"  # or "regressed": each kept box regressed for its class
    attr_thresh: float = 0.1
    max_attributes: int = 1

    def validate(self) -> "Selection":
        if not 1 <= self.min_boxes <= self.max_boxes:
            raise ValueError(f"--min-boxes {self.min_boxes} / --max-boxes {self.max_boxes}: "
                             "expected 1 <= min <= max")
        if self.max_boxes > self.proposals:
            raise ValueError(f"--max-boxes {self.max_boxes}: more than --proposals "
                             f"{self.proposals}")
        if self.boxes not in ("proposals", "regressed"):
            raise ValueError(f"--boxes: expected proposals or regressed, got {self.boxes!r}")
        if not 0 < self.nms_iou <= 1:
            raise ValueError(f"--nms-iou: expected 0 < IoU <= 1, got {self.nms_iou}")
        return self


