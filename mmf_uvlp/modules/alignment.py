"""Image-text matching (ITM) on the alignment heads MMF's VisualBERT and ViLBERT already have.

rc10's pre-training heads compute an alignment score from the pooled output (BERT's
next-sentence head ``cls.seq_relationship`` in VisualBERT, ``cls.bi_seq_relationship``
in ViLBERT) and drop it. :class:`LastOutput` keeps that score from the heads' last
forward call (a forward hook, so the model's code and weights stay MMF's),
:func:`matching_loss` scores it against MMF's ``is_correct`` labels, and
:class:`RecoveredMatchingLoss` adds that loss to an MMF model's output.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn


class LastOutput:
    """Element ``index`` of the output of ``module``'s last forward call."""

    def __init__(self, module: nn.Module, index: int):
        self.index = index
        self.value: Optional[torch.Tensor] = None
        module.register_forward_hook(self._keep)

    def _keep(self, module: nn.Module, inputs: Any, outputs: Any) -> None:
        self.value = outputs[self.index]

    def pop(self) -> torch.Tensor:
        """The kept output (once); an error if the module did not run since."""
        if self.value is None:
            raise RuntimeError("the alignment head did not run in this forward pass")
        value, self.value = self.value, None
        return value


def matching_loss(
    logits: torch.Tensor, is_correct: Optional[torch.Tensor]
) -> Optional[torch.Tensor]:
    """Cross-entropy of alignment logits (B, 2) against ``is_correct`` (B,): 1 = the caption
    is the image's, 0 = another image's, -1 = no label. BERT's next-sentence convention:
    class 0 = match. None when no sample has a label (MMF's val/test masked samples)."""
    if is_correct is None:
        return None
    labels = is_correct.to(logits.device).long().view(-1)
    labelled = labels >= 0
    if not bool(labelled.any()):
        return None
    return F.cross_entropy(logits[labelled].float(), 1 - labels[labelled])


class RecoveredMatchingLoss:
    """The weighted ITM loss of an MMF pre-training head that computes and drops it.

    ``head`` is the model's pre-training head and ``index`` the position of the alignment
    logits in its output; :meth:`add_to` puts the loss of the last forward pass into MMF's
    ``losses`` as ``<dataset>/<split>/itm_loss``.
    """

    def __init__(self, head: nn.Module, index: int, weight: float):
        self.logits = LastOutput(head, index)
        self.weight = weight

    @classmethod
    def of(cls, config: Any, model: nn.Module, index: int) -> Optional["RecoveredMatchingLoss"]:
        """The loss for an MMF model config (None unless pre-training with
        ``itm_loss_weight`` > 0); ``model.cls`` is the pre-training head."""
        weight = float(config.get("itm_loss_weight", 0.0))
        if config.training_head_type != "pretraining" or weight <= 0:
            return None
        return cls(model.cls, index, weight)

    def add_to(self, output: Dict[str, Any], sample_list: Any) -> None:
        """Adds the weighted loss to ``output["losses"]`` (nothing for unlabelled batches)."""
        loss = matching_loss(self.logits.pop(), sample_list.get("is_correct"))
        if loss is not None:
            key = f"{sample_list.dataset_name}/{sample_list.dataset_type}/itm_loss"
            output["losses"][key] = self.weight * loss
