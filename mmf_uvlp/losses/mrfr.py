"""``uvla_mrfr``: masked region feature regression to the ORIGINAL features."""

from __future__ import annotations

import torch
from torch import nn

from mmf.common.registry import registry
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.losses.reduction import Fields, require_field, weighted_sample_mean, zero_loss

FEATURE_REDUCTIONS = ("mean", "sum")


@registry.register_loss("uvla_mrfr")
class MaskedRegionFeatureRegressionLoss(nn.Module):
    """Squared L2 error between predicted and original features of masked regions.

    The target is ``sample_list.region_features_target`` (B, R, D), the features
    *before* masking (the reference code regressed to the zeroed input: a bug).
    ``feature_reduction``: ``mean`` over the D dimensions (UNITER's scale, the default)
    or ``sum`` (the paper's ``||h - r||^2`` literally).
    Reads ``model_output["mrfr_features"]`` (M, D) and ``["mrfr_index"]`` (M, 2).
    """

    def __init__(self, weight: float = 1.0, feature_reduction: str = "mean"):
        super().__init__()
        if feature_reduction not in FEATURE_REDUCTIONS:
            raise UserConfigError(
                f"uvla_mrfr: params.feature_reduction must be one of {FEATURE_REDUCTIONS}, "
                f"got {feature_reduction!r}"
            )
        self.weight = weight
        self.feature_reduction = feature_reduction

    def forward(self, sample_list: Fields, model_output: Fields) -> torch.Tensor:
        predicted = model_output.get("mrfr_features")
        if predicted is None:
            return zero_loss(model_output)
        original = require_field(sample_list, "region_features_target", "uvla_mrfr")  # (B, R, D)
        index = model_output["mrfr_index"]  # (M, 2)
        target = original[index[:, 0], index[:, 1]].float()  # (M, D), never rounded to fp16/bf16
        squared = (predicted.float() - target) ** 2  # (M, D), float32 under autocast too
        if self.feature_reduction == "mean":
            per_region = squared.mean(-1)  # (M,)
        else:
            per_region = squared.sum(-1)  # (M,)
        loss = weighted_sample_mean(per_region, index[:, 0], original.size(0), model_output)
        return self.weight * loss
