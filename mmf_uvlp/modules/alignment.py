"""Image-text matching (ITM) on the alignment heads MMF's VisualBERT and ViLBERT already have.

rc10's pre-training heads compute an alignment score from the pooled output (BERT's
next-sentence head ``cls.seq_relationship`` in VisualBERT, ``cls.bi_seq_relationship``
in ViLBERT) and drop it. :class:`LastOutput` keeps that score from the heads' last
forward call (a forward hook, so the model's code and weights stay MMF's), and
:func:`matching_loss` scores it against MMF's ``is_correct`` labels.
"""

from __future__ import annotations

from typing import Any, Optional

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


def matching_loss(logits: torch.Tensor, is_correct: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
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
