"""Which of a detector's proposals become an image's regions: the settings and the rules.

Four rules (``Selection.method``), each the public code of the recipes that use it:

- ``per-class`` (bottom-up attention's ``generate_tsv.py``): per-class NMS (``nms_iou``)
  over the proposals (``boxes="proposals"``, as that recipe) or each class's regressed boxes
  gives every proposal its best surviving class score; those scoring at least
  ``conf_thresh`` are kept, at least ``min_boxes`` and at most ``max_boxes`` of them, by
  score (:func:`select_per_class`);
- ``max-class`` (LXMERT's detectron2 script in py-bottom-up-attention,
  ``detectron2_mscoco_proposal_maxnms.py``, and MMF's frcnn port): each proposal's best
  class and that class's regressed box, clipped to the image; one class-agnostic NMS at
  ``nms_iou``, raised by 0.1 (up to 0.9) until at least ``min_boxes`` survive; the first
  ``max_boxes`` by score (:func:`select_max_class`);
- ``vinvl`` (scene_graph_benchmark's ``NMS_FILTER 1``): per-class NMS over each class's
  regressed boxes; each proposal's label is its best class surviving NMS; by that score,
  those scoring at least ``conf_thresh``, at least ``min_boxes`` and at most ``max_boxes``
  (:func:`mmf_uvlp.extraction.vinvl.select_boxes`);
- ``mmf-vmb`` (MMF's ``extract_features_vmb.py``): per-class NMS over the proposals; each
  proposal's best surviving score above ``conf_thresh`` (else 0); the ``max_boxes`` best,
  whatever their score, labelled with their best class
  (:func:`mmf_uvlp.extraction.vmb.select_boxes`).

An attribute head's top ``max_attributes`` attributes scoring at least ``attr_thresh`` are
written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np
import torch

METHODS = ("per-class", "max-class", "vinvl", "mmf-vmb")
HELP = {
    "method": "per-class (bottom-up attention's generate_tsv.py), max-class (LXMERT's "
    "detectron2 script, MMF's frcnn port), vinvl (scene_graph_benchmark) or "
    "mmf-vmb (MMF's extract_features_vmb.py)",
    "proposals": "RPN proposals per image (MODEL.RPN.POST_NMS_TOPK_TEST)",
    "nms_iou": "IoU of the NMS (max-class: the first, raised by 0.1 until min-boxes survive)",
    "conf_thresh": "keep the boxes whose best class score is at least this (per-class)",
    "min_boxes": "at least this many boxes an image",
    "max_boxes": "at most this many boxes an image",
    "boxes": "proposals (the recipe's boxes) or regressed (for the box's class; per-class)",
    "attr_thresh": "write attributes scoring at least this",
    "max_attributes": "at most this many attributes a box",
}


@dataclass(frozen=True)
class Selection:
    """The box selection (defaults: the bottom-up-attention recipe's)."""

    method: str = "per-class"
    proposals: int = 300  # RPN proposals per image (MODEL.RPN.POST_NMS_TOPK_TEST)
    nms_iou: float = 0.3
    conf_thresh: float = 0.2
    min_boxes: int = 10
    max_boxes: int = 100
    boxes: str = "proposals"  # or "regressed": each kept box regressed for its class
    attr_thresh: float = 0.1
    max_attributes: int = 1

    def validate(self) -> "Selection":
        if self.method not in METHODS:
            raise ValueError(f"--method: expected one of {', '.join(METHODS)}, got {self.method!r}")
        if not 1 <= self.min_boxes <= self.max_boxes:
            raise ValueError(
                f"--min-boxes {self.min_boxes} / --max-boxes {self.max_boxes}: "
                "expected 1 <= min <= max"
            )
        if self.max_boxes > self.proposals:
            raise ValueError(
                f"--max-boxes {self.max_boxes}: more than --proposals {self.proposals}"
            )
        if self.boxes not in ("proposals", "regressed"):
            raise ValueError(f"--boxes: expected proposals or regressed, got {self.boxes!r}")
        if not 0 < self.nms_iou <= 1:
            raise ValueError(f"--nms-iou: expected 0 < IoU <= 1, got {self.nms_iou}")
        return self


def select_per_class(scores: torch.Tensor, boxes: torch.Tensor, sel: Selection) -> torch.Tensor:
    """Indices of the kept proposals, best first when cut to ``min_boxes``/``max_boxes``.

    ``scores``: (N, C) foreground class scores; ``boxes``: (N, C, 4) each class's box."""
    from torchvision.ops import batched_nms

    n, c = scores.shape
    flat = scores.reshape(-1)
    classes = torch.arange(c).repeat(n)
    keep = batched_nms(boxes.reshape(-1, 4).float(), flat, classes, sel.nms_iou)
    max_conf = np.zeros(n, dtype=np.float32)
    np.maximum.at(max_conf, (keep // c).numpy(), flat[keep].numpy())
    max_conf = torch.from_numpy(max_conf)
    order = torch.argsort(max_conf, descending=True, stable=True)
    chosen = torch.nonzero(max_conf >= sel.conf_thresh).flatten()
    if len(chosen) < sel.min_boxes:
        return order[: sel.min_boxes]
    if len(chosen) > sel.max_boxes:
        return order[: sel.max_boxes]
    return chosen


def select_max_class(
    scores: torch.Tensor, boxes: torch.Tensor, size: Tuple[int, int], sel: Selection
) -> torch.Tensor:
    """Indices of the kept proposals, best first (module docstring's ``max-class``).

    ``scores``: (N, C) foreground class scores; ``boxes``: (N, C, 4) each class's regressed
    box; ``size``: (height, width) the boxes are clipped to."""
    from torchvision.ops import nms

    best, labels = scores.max(dim=1)
    picked = boxes[torch.arange(len(boxes)), labels].clone()
    picked[:, 0::2] = picked[:, 0::2].clamp(0, size[1])
    picked[:, 1::2] = picked[:, 1::2].clamp(0, size[0])
    keep = torch.zeros(0, dtype=torch.long)
    for step in range(max(0, round((0.9 - sel.nms_iou) / 0.1)) + 1):
        keep = nms(picked.float(), best, sel.nms_iou + 0.1 * step)[: sel.max_boxes]
        if len(keep) >= sel.min_boxes:
            break
    return keep
