"""``uvla_mlm``: masked language modelling on text, tag and phrase tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mmf.common.registry import registry
from mmf_uvlp.losses.reduction import Fields, require_field, weighted_sample_mean, zero_loss


@registry.register_loss("uvla_mlm")
class MaskedLanguageModelingLoss(nn.Module):
    """Cross-entropy of the masked tokens' vocabulary logits, per-sample weighted.

    Reads ``model_output["mlm_logits"]`` (M, V) and ``["mlm_index"]`` (M, 2) (sample,
    position) and the targets ``sample_list.lm_label_ids`` (B, L) at those positions.
    """

    def __init__(self, weight: float = 1.0):
        super().__init__()
        self.weight = weight

    def forward(self, sample_list: Fields, model_output: Fields) -> torch.Tensor:
        logits = model_output.get("mlm_logits")
        if logits is None:
            return zero_loss(model_output)
        labels = require_field(sample_list, "lm_label_ids", "uvla_mlm")  # (B, L)
        index = model_output["mlm_index"]  # (M, 2)
        targets = labels[index[:, 0], index[:, 1]]  # (M,)
        per_token = F.cross_entropy(logits.float(), targets, reduction="none")  # (M,)
        loss = weighted_sample_mean(per_token, index[:, 0], labels.size(0), model_output)
        return self.weight * loss
