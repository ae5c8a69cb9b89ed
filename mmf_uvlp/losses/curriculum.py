"""The multi-granular curriculum (μ-VLA paper, Sec. 3.4) as per-sample loss weights.

    L = L_RT + L_RN + L_IS               for epoch < m
    L = L_RT + w_ITM * (L_RN + L_IS)     for epoch >= m

``w_ITM`` is the ITM head's match probability (softmax of its logits, class 1) of *each*
sample's clean pair (the model passes the logits of a no-grad pass over the unmasked
pair), detached (no gradient flows through the weight). It applies only to samples
flagged ``curriculum_weighted`` (R-N and I-S); every other sample keeps weight 1. The
reference code reduced the batch first and so only scaled the batch mean; here every
loss module multiplies its per-sample losses by these weights (see ``reduction.py``).

The epoch comes from :func:`mmf_uvlp.trainers.progress.current_epoch`.

The training log says when the weighting switches on and, every ``training.log_interval``
updates while it is on, the w_ITM statistics of the weighted samples since the last such
line (:meth:`CurriculumWeighting.log_lines`); the statistics stay on the device between
lines, so that a step waits for no value.
"""

from __future__ import annotations

from typing import Callable, List, Optional

import torch

from mmf_uvlp.trainers.progress import current_epoch


class CurriculumWeighting:
    """Per-sample weights of the curriculum, switching on at epoch ``start_epoch`` (m)."""

    def __init__(self, start_epoch: float = 1.0, epoch_fn: Callable[[], float] = current_epoch):
        if start_epoch < 0:
            raise ValueError(f"curriculum.start_epoch must be >= 0, got {start_epoch}")
        self.start_epoch = float(start_epoch)
        self.epoch_fn = epoch_fn
        self._announced = False
        self._seen: Optional[torch.Tensor] = None  # (4,): count, sum, min, max of w_ITM
        self._reported = -1  # the update of the last statistics line

    def active(self) -> bool:
        """Whether ``w_ITM`` weighting applies now (epoch >= m)."""
        return self.epoch_fn() >= self.start_epoch

    def weights(
        self, itm_logits: torch.Tensor, weighted: torch.Tensor, active: Optional[bool] = None
    ) -> torch.Tensor:
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

    def log_lines(
        self,
        weights: torch.Tensor,
        weighted: torch.Tensor,
        active: bool,
        update: int,
        epoch: float,
        every: int,
    ) -> List[str]:
        """The log's lines after a training step of update ``update`` (1-based) at ``epoch``:
        the switch, once, and every ``every`` updates the w_ITM statistics (count, mean, min,
        max) of the weighted samples of the steps since the last such line."""
        lines: List[str] = []
        if not active:
            return lines
        if not self._announced:
            self._announced = True
            lines.append(
                f"curriculum: on from update {update} (epoch {epoch:.3f} >= m = "
                f"{self.start_epoch:g}): the losses of the weighted samples (R-N, "
                "I-S) are multiplied by w_ITM"
            )
        # Masked statistics, not a boolean index: the step waits for nothing on the device;
        # the values reach the host only when a line is written.
        mask = weighted.to(torch.bool)
        values = weights.detach().float()
        inf = torch.full_like(values, float("inf"))
        step = torch.stack(
            [
                mask.sum().float(),
                (values * mask).sum(),
                torch.where(mask, values, inf).min(),
                torch.where(mask, values, -inf).max(),
            ]
        )
        seen = self._seen
        self._seen = (
            step
            if seen is None
            else torch.stack(
                [
                    seen[0] + step[0],
                    seen[1] + step[1],
                    torch.minimum(seen[2], step[2]),
                    torch.maximum(seen[3], step[3]),
                ]
            )
        )
        if every > 0 and update % every == 0 and update != self._reported:
            self._reported = update
            count, total, low, high = self._seen.tolist()
            if count == 0:
                lines.append(
                    f"curriculum: w_ITM at update {update}: no weighted samples "
                    f"in the last {every} updates"
                )
            else:
                lines.append(
                    f"curriculum: w_ITM at update {update} over {int(count)} weighted "
                    f"samples of the last {every} updates: mean {total / count:.4f}, "
                    f"min {low:.4f}, max {high:.4f}"
                )
            self._seen = None
        return lines
