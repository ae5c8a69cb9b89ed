"""The 5-d box geometry of the μ-VLA visual and tag embeddings."""

from __future__ import annotations

from typing import Union

import torch

Size = Union[float, torch.Tensor]


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
    x1 = (boxes[..., 0] / width).clamp(0, 1)
    y1 = (boxes[..., 1] / height).clamp(0, 1)
    x2 = (boxes[..., 2] / width).clamp(0, 1)
    y2 = (boxes[..., 3] / height).clamp(0, 1)
    area = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    return torch.stack([x1, y1, x2, y2, area], dim=-1)
