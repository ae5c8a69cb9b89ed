"""transformers 2.x as MMF 1.0.0rc10 imports it, on transformers 4.x: its flat module paths,
``BertLayerNorm`` and ``transformers.optimization.AdamW``."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Optional

FLAT_MODULES = {
    "modeling_bert": "transformers.models.bert.modeling_bert",
    "configuration_bert": "transformers.models.bert.configuration_bert",
    "tokenization_bert": "transformers.models.bert.tokenization_bert",
    "modeling_roberta": "transformers.models.roberta.modeling_roberta",
    "modeling_auto": "transformers.models.auto.modeling_auto",
    "configuration_auto": "transformers.models.auto.configuration_auto",
    "tokenization_auto": "transformers.models.auto.tokenization_auto",
}


def alias_module_paths() -> None:
    """The flat modules, ``BertLayerNorm`` and ``AdamW`` where rc10 imports them."""
    import torch
    import transformers
    import transformers.optimization

    for flat, real in FLAT_MODULES.items():
        module = importlib.import_module(real)
        sys.modules[f"transformers.{flat}"] = module
        setattr(transformers, flat, module)
    modeling_bert = sys.modules["transformers.modeling_bert"]
    if not hasattr(modeling_bert, "BertLayerNorm"):
        modeling_bert.BertLayerNorm = torch.nn.LayerNorm

    class AdamW(torch.optim.AdamW):
        """transformers 2.x AdamW: eps 1e-6, no weight decay unless asked; fused on a GPU
        (``fused``: None = :func:`mmf_uvlp.trainers.throughput.fused_adamw_default`)."""

        def __init__(
            self,
            params: Any,
            lr: float = 1e-3,
            betas: tuple = (0.9, 0.999),
            eps: float = 1e-6,
            weight_decay: float = 0.0,
            correct_bias: bool = True,
            fused: Optional[bool] = None,
        ):
            from mmf_uvlp.trainers.throughput import fused_adamw_default

            if not correct_bias:
                raise ValueError(
                    "optimizer adam_w: correct_bias=False is not supported by "
                    "torch.optim.AdamW; remove it from optimizer.params"
                )
            params = list(params)
            if fused is None:
                fused = fused_adamw_default(params)
            super().__init__(
                params,
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                fused=bool(fused) or None,
            )

    if not hasattr(transformers.optimization, "AdamW"):
        transformers.optimization.AdamW = AdamW
