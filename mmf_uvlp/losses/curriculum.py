"""The multi-granular curriculum (μ-VLA paper, Sec. 3.4) as per-sample loss weights.

    L = L_RT + L_RN + L_IS               for epoch < m
    L = L_RT + w_ITM * (L_RN + L_IS)     for epoch >= m

``w_ITM`` is the ITM head's match probability (softmax of its logits, class 1) of *each*
sample's clean pair (the model passes the logits of a no-grad pass over the unmasked
pair), detached (no gradient flows through the weight). It applies only to samples
flagged ``curriculum_weighted`` (R-N and I-S); every other sample keeps weight 1. The
reference code reduced the batch first and so only scaled the batch mean; here every
loss module multiplies its per-sample losses by these weights (see ``reduction.py``).

The epoch comes from :func:`mmf_uvlp.training.progress.current_epoch`.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from mmf_uvlp.training.progress import current_epoch


class CurriculumWeighting:
    """Per-sample weights of the curriculum, switching on at epoch ``start_epoch`` (m)."""

    def __init__(self, start_epoch: float = 1.0, epoch_fn: Callable[[], float] = current_epoch):
        if start_epoch < 0:
            raise ValueError(f"curriculum.start_epoch must be >= 0, got {start_epoch}")
        self.start_epoch = float(start_epoch)
        self.epoch_fn = epoch_fn

    def active(self) -> bool:
        """Whether ``w_ITM`` weighting applies now (epoch >= m)."""
        return self.epoch_fn() >= self.start_epoch

    def weights(self, itm_logits: torch.Tensor, weighted: torch.Tensor,
                active: Optional[bool] = None) -> torch.Tensor:
        """Weights (B,) float32: ITM match probability where ``weighted`` and active, else 1.

        itm_logits: (B, 2), class 1 = match; weighted: (B,) bool; ``active``: the step's
        :meth:`active` when the caller asked already (one decision per step), else asked here.
        The softmax runs in float32 also when autocast gave the logits in float16 / bfloat16.
        """
        ones = torch.ones(itm_logits.size(0), dtype=torch.float32, device=itm_logits.device)
        if not (self.active() if active is None else active):
            return ones
        match_prob = torch.softmax(itm_logits.detach().float(), dim=-1)[:, 1]  # (B,)
        return torch.where(weighted.to(torch.bool), match_prob, ones)
