"""Box overlap for referring-expression grounding (boxes ``[x1, y1, x2, y2]`` in pixels)."""

from __future__ import annotations

import torch

# A proposal grounds an expression when its IoU with the gold box reaches this (RefCOCO+).
MATCH_IOU = 0.5


def iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise intersection over union of ``a`` (..., N, 4) and ``b`` (..., M, 4): (..., N, M).

    Leading dimensions broadcast. Degenerate boxes (zero area, e.g. padding) have IoU 0
    with everything.
    """
    if a.size(-1) != 4 or b.size(-1) != 4:
        raise ValueError(f"iou: boxes must be (..., 4) [x1, y1, x2, y2], got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    a, b = a.float().unsqueeze(-2), b.float().unsqueeze(-3)  # (..., N, 1, 4), (..., 1, M, 4)
    top_left = torch.maximum(a[..., :2], b[..., :2])  # (..., N, M, 2)
    bottom_right = torch.minimum(a[..., 2:], b[..., 2:])
    intersection = (bottom_right - top_left).clamp(min=0).prod(-1)  # (..., N, M)
    area_a = (a[..., 2:] - a[..., :2]).clamp(min=0).prod(-1)  # (..., N, 1)
    area_b = (b[..., 2:] - b[..., :2]).clamp(min=0).prod(-1)  # (..., 1, M)
    union = area_a + area_b - intersection
    return torch.where(union > 0, intersection / union.clamp(min=1e-12),
                       torch.zeros_like(intersection))
