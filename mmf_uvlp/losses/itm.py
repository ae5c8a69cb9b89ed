"""``uvla_itm``: image-text matching on the pooled output."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mmf.common.registry import registry
from mmf_uvlp.batch import ragged
from mmf_uvlp.losses.reduction import Fields, require_field, weighted_sample_mean, zero_loss


@registry.register_loss("uvla_itm")
class ImageTextMatchingLoss(nn.Module):
    """Cross-entropy of ``model_output["itm_logits"]`` (B, 2) to ``sample_list.itm_label``.

    Labels: 1 match, 0 random negative, -1 not applicable (skipped). As part of L_IS the
    loss of each sample is weighted by its curriculum weight like the others.
    """

    def __init__(self, weight: float = 1.0):
        super().__init__()
        self.weight = weight

    def forward(self, sample_list: Fields, model_output: Fields) -> torch.Tensor:
        logits = model_output.get("itm_logits")
        if logits is None:
            return zero_loss(model_output)
        labels = require_field(sample_list, "itm_label", "uvla_itm").view(-1)  # (B,)
        sample_index = ragged(sample_list, "itm_label_index")  # (M,), host-computed
        if sample_index is None:
            sample_index = (labels != -1).nonzero(as_tuple=True)[0]
        per_pair = F.cross_entropy(
            logits[sample_index].float(), labels[sample_index], reduction="none"
        )  # (M,)
        loss = weighted_sample_mean(per_pair, sample_index, labels.size(0), model_output)
        return self.weight * loss
