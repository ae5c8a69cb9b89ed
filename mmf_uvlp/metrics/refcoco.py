"""``refcoco_accuracy``: referring-expression grounding accuracy (RefCOCO+).

The top-scored real proposal of an expression is correct iff its IoU with the gold box is
>= 0.5; an expression with no such proposal (or no proposal at all) is always a miss.

The paper's Meta-Ave (mean of VQA, NLVR2, VE and RefCOCO+) spans runs of different tasks,
so it is not an in-run metric: :mod:`mmf_uvlp.report` computes it from the runs' results.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from mmf.common.registry import registry
from mmf.modules.metrics import BaseMetric

from mmf_uvlp.utils.boxes import MATCH_IOU, iou


@registry.register_metric("refcoco_accuracy")
class RefCOCOAccuracy(BaseMetric):
    """Reads ``scores`` (B, R) from the model and ``proposal_boxes`` (B, R, 4),
    ``gold_box`` (B, 4), ``region_mask`` (B, R) from the batch."""

    def __init__(self) -> None:
        super().__init__("refcoco_accuracy")
        # MMF concatenates these tensor fields over the batches of an evaluation.
        self.required_params = ["scores", "proposal_boxes", "gold_box", "region_mask"]

    def calculate(
        self,
        sample_list: Mapping[str, Any],
        model_output: Mapping[str, Any],
        *args: Any,
        **kwargs: Any,
    ) -> torch.Tensor:
        scores = model_output["scores"]
        boxes = sample_list["proposal_boxes"]
        gold = sample_list["gold_box"]
        mask = sample_list["region_mask"].bool()
        if (
            scores.dim() != 2
            or boxes.shape != (*scores.shape, 4)
            or mask.shape != scores.shape
            or gold.shape != (scores.size(0), 4)
        ):
            raise ValueError(
                "refcoco_accuracy: expected scores (B, R), proposal_boxes (B, R, 4), "
                f"region_mask (B, R), gold_box (B, 4); got {tuple(scores.shape)}, "
                f"{tuple(boxes.shape)}, {tuple(mask.shape)}, {tuple(gold.shape)}"
            )
        best = scores.float().masked_fill(~mask, float("-inf")).argmax(dim=1)  # (B,)
        chosen = boxes[torch.arange(boxes.size(0), device=boxes.device), best]  # (B, 4)
        overlap = iou(chosen.unsqueeze(1), gold.unsqueeze(1)).view(-1)  # (B,)
        correct = (overlap >= MATCH_IOU) & mask.any(dim=1)
        return correct.float().mean()
