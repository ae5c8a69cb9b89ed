"""The sequence summary read by the ITM, VQA, VE and NLVR2 heads (``model_config.*.pooling``).

``cls``: BERT's pooler (dense + tanh) on the [CLS] output, as BERT, VisualBERT and the paper.
``mean``: the same pooler on the mean output of the unpadded text and region tokens, as
sentence-BERT models are trained. A model whose [CLS] was never trained as a summary (the
sentence-transformers MiniLM) has a [CLS] output that barely depends on the input:
``docs/replication.md`` ("Calibration") has the measurement.
"""

from __future__ import annotations

import torch
from torch import nn

from mmf_uvlp.errors import UserConfigError

POOLING_MODES = ("cls", "mean")


def check_pooling(mode: str, config_key: str) -> str:
    """``mode`` if it is a pooling mode, else an error naming the config key."""
    if mode not in POOLING_MODES:
        raise UserConfigError(
            f"model_config.{config_key}.pooling must be one of {POOLING_MODES}, got {mode!r}"
        )
    return mode


def pool(pooler: nn.Module, sequence: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """(B, H) from ``sequence`` (B, N, H) with ``mask`` (B, N), 1 = real token, through
    BERT's ``pooler`` (which reads position 0)."""
    if mode == "cls":
        return pooler(sequence)
    weights = mask.to(sequence.dtype).unsqueeze(-1)  # (B, N, 1)
    mean = (sequence * weights).sum(1) / weights.sum(1).clamp(min=1.0)  # (B, H)
    return pooler(mean.unsqueeze(1))
