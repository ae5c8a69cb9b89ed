"""``uvla_pmrtc``: phrase-guided masked region-to-token classification (p-MRTC).

A masked region linked to a noun phrase is classified into the BERT vocabulary with the
(tied) MLM head. Its target is the set of the phrase's word-pieces ``T`` (duplicates
counted): the soft target ``q = uniform over T``, i.e. the loss of region ``r`` is

    l_r = -(1/|T|) * sum_{t in T} log softmax(z_r)[t]

— a multi-label target under one softmax, so every word-piece of the phrase is an
equally correct answer and the head is not pushed to pick one of them.
"""

from __future__ import annotations

import torch
from torch import nn

from mmf.common.registry import registry
from mmf_uvlp.losses.reduction import Fields, require_field, weighted_sample_mean, zero_loss


@registry.register_loss("uvla_pmrtc")
class PhraseRegionTokenLoss(nn.Module):
    """Soft-target cross-entropy of masked regions over their phrase's word-pieces.

    Reads ``model_output["pmrtc_logits"]`` (M, V), ``["pmrtc_index"]`` (M, 2) and
    ``sample_list.region_phrase_targets`` (B, R, P) (word-piece ids, -1 padding).
    """

    def __init__(self, weight: float = 1.0):
        super().__init__()
        self.weight = weight

    def forward(self, sample_list: Fields, model_output: Fields) -> torch.Tensor:
        logits = model_output.get("pmrtc_logits")
        if logits is None:
            return zero_loss(model_output)
        phrases = require_field(sample_list, "region_phrase_targets", "uvla_pmrtc")  # (B, R, P)
        index = model_output["pmrtc_index"]  # (M, 2)
        tokens = phrases[index[:, 0], index[:, 1]]  # (M, P)
        valid = tokens >= 0  # (M, P)
        log_probs = torch.log_softmax(logits.float(), dim=-1)  # (M, V)
        picked = log_probs.gather(1, tokens.clamp(min=0))  # (M, P)
        per_region = -(picked * valid).sum(-1) / valid.sum(-1).clamp(min=1)  # (M,)
        loss = weighted_sample_mean(per_region, index[:, 0], phrases.size(0), model_output)
        return self.weight * loss
