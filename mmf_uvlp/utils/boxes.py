"""Box geometry (boxes ``[x1, y1, x2, y2]`` in pixels): overlap for referring-expression
grounding, and the 5-d box of the μ-VLA visual and tag embeddings."""

from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np
import torch

# A proposal grounds an expression when its IoU with the gold box reaches this (RefCOCO+).
MATCH_IOU = 0.5

Size = Union[float, torch.Tensor]


def iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise intersection over union of ``a`` (..., N, 4) and ``b`` (..., M, 4): (..., N, M).

    Leading dimensions broadcast. Degenerate boxes (zero area, e.g. padding) have IoU 0
    with everything.
    """
    if a.size(-1) != 4 or b.size(-1) != 4:
        raise ValueError(
            f"iou: boxes must be (..., 4) [x1, y1, x2, y2], got "
            f"{tuple(a.shape)} and {tuple(b.shape)}"
        )
    a, b = a.float().unsqueeze(-2), b.float().unsqueeze(-3)  # (..., N, 1, 4), (..., 1, M, 4)
    top_left = torch.maximum(a[..., :2], b[..., :2])  # (..., N, M, 2)
    bottom_right = torch.minimum(a[..., 2:], b[..., 2:])
    intersection = (bottom_right - top_left).clamp(min=0).prod(-1)  # (..., N, M)
    area_a = (a[..., 2:] - a[..., :2]).clamp(min=0).prod(-1)  # (..., N, 1)
    area_b = (b[..., 2:] - b[..., :2]).clamp(min=0).prod(-1)  # (..., 1, M)
    union = area_a + area_b - intersection
    return torch.where(
        union > 0, intersection / union.clamp(min=1e-12), torch.zeros_like(intersection)
    )


def normalized_boxes(boxes: torch.Tensor, width: Size, height: Size) -> torch.Tensor:
    """``[x1/W, y1/H, x2/W, y2/H, area/(W*H)]`` (..., 5) from pixel boxes (..., 4).

    Coordinates are clamped to the image (detectors round boxes a pixel outside it).
    ``width`` / ``height``: numbers, or tensors broadcastable to ``boxes[..., 0]``.
    """
    if boxes.size(-1) != 4:
        raise ValueError(
            f"boxes must be (..., 4) [x1, y1, x2, y2] pixels, got {tuple(boxes.shape)}"
        )
    boxes = boxes.float()
    width = torch.as_tensor(width, dtype=torch.float32, device=boxes.device)
    height = torch.as_tensor(height, dtype=torch.float32, device=boxes.device)
    if bool((width <= 0).any()) or bool((height <= 0).any()):
        raise ValueError(
            f"image width and height must be positive, got {width.tolist()}, {height.tolist()}"
        )
    return _normalized(boxes, width, height)


def batch_normalized_boxes(
    bboxes: Sequence[Any], widths: Sequence[Size], heights: Sequence[Size], regions: int
) -> torch.Tensor:
    """The 5-d boxes of a batch (B, ``regions``, 5) on the host, computed in one pass.

    ``bboxes[i]``: image i's pixel boxes (n_i, 4) (an array, a list or a host tensor, as MMF's
    feature readers collate them); rows past ``regions`` are left out and missing rows are
    zero. ``widths`` / ``heights``: the images' sizes (B,). Host data only: the batch's boxes
    go to the device in one copy, and nothing waits for the device.
    """
    sizes = np.stack([_host(widths), _host(heights)], axis=1)  # (B, 2)
    if sizes.shape[0] != len(bboxes):
        raise ValueError(f"{len(bboxes)} images' boxes but {sizes.shape[0]} image sizes")
    if (sizes <= 0).any():
        raise ValueError(
            f"image width and height must be positive, got "
            f"{sizes[:, 0].tolist()}, {sizes[:, 1].tolist()}"
        )
    pixels = np.zeros((len(bboxes), regions, 4), dtype=np.float32)
    for index, image in enumerate(bboxes):
        image = _host(image).reshape(-1, 4)[:regions]
        pixels[index, : len(image)] = image
    sizes_t = torch.from_numpy(sizes)
    return _normalized(torch.from_numpy(pixels), sizes_t[:, :1], sizes_t[:, 1:])


def _host(values: Any) -> np.ndarray:
    """``values`` as a float32 array (a device tensor is copied to the host)."""
    if torch.is_tensor(values):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.float32)


def _normalized(boxes: torch.Tensor, width: torch.Tensor, height: torch.Tensor) -> torch.Tensor:
    """:func:`normalized_boxes` of float boxes, sizes known positive."""
    x1 = (boxes[..., 0] / width).clamp(0, 1)
    y1 = (boxes[..., 1] / height).clamp(0, 1)
    x2 = (boxes[..., 2] / width).clamp(0, 1)
    y2 = (boxes[..., 3] / height).clamp(0, 1)
    area = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    return torch.stack([x1, y1, x2, y2, area], dim=-1)
