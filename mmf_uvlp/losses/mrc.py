"""``uvla_mrc``: masked region classification into the detector's classes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mmf.common.registry import registry
from mmf_uvlp.losses.reduction import Fields, require_field, weighted_sample_mean, zero_loss


@registry.register_loss("uvla_mrc")
class MaskedRegionClassificationLoss(nn.Module):
    """Cross-entropy of masked regions to their detector class, per-sample weighted.

    Reads ``model_output["mrc_logits"]`` (M, C), ``["mrc_index"]`` (M, 2) (sample,
    region) and ``sample_list.region_class_targets`` (B, R).
    """

    def __init__(self, weight: float = 1.0):
        super().__init__()
        self.weight = weight

    def forward(self, sample_list: Fields, model_output: Fields) -> torch.Tensor:
        logits = model_output.get("mrc_logits")
        if logits is None:
            return zero_loss(model_output)
        classes = require_field(sample_list, "region_class_targets", "uvla_mrc")  # (B, R)
        index = model_output["mrc_index"]  # (M, 2)
        targets = classes[index[:, 0], index[:, 1]]  # (M,)
        per_region = F.cross_entropy(logits.float(), targets, reduction="none")  # (M,)
        loss = weighted_sample_mean(per_region, index[:, 0], classes.size(0), model_output)
        return self.weight * loss
