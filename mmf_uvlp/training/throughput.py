"""Settings that make a training step faster without changing what it computes.

- :func:`fused_adamw_default`: AdamW runs PyTorch's fused kernel (one launch for every
  parameter, and a step it can skip on a device flag, see
  :class:`mmf_uvlp.utils.finite_loss.DeferredFiniteCheck`) when every parameter is on a
  CUDA device; on a CPU it keeps PyTorch's default, so CPU results stay as they were.
- :func:`compile_in_place` (``training.compile: True``, opt-in): ``torch.compile`` of the
  model's encoder, for launch-bound small models; a clear fallback to eager.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, List

import torch

logger = logging.getLogger(__name__)


def parameter_tensors(params: Iterable[Any]) -> List[torch.Tensor]:
    """The tensors of an optimizer's ``params`` (tensors or parameter groups)."""
    tensors: List[torch.Tensor] = []
    for item in params:
        if isinstance(item, dict):
            tensors += list(item["params"])
        else:
            tensors.append(item)
    return tensors


def fused_adamw_default(params: Iterable[Any]) -> bool:
    """Whether AdamW should be fused: every parameter a floating-point CUDA tensor."""
    tensors = parameter_tensors(params)
    return bool(tensors) and all(t.is_cuda and t.is_floating_point() for t in tensors)


def compile_requested() -> bool:
    """``training.compile`` of the run's config (off when unset or no config is registered)."""
    from mmf.common.registry import registry

    config = registry.get("config", None, no_warning=True)
    training = (config.get("training") if config is not None else None) or {}
    return bool(training.get("compile", False))


def compile_in_place(module: torch.nn.Module, what: str) -> bool:
    """``torch.compile`` ``module`` in place (its weights and their names unchanged), with
    dynamic shapes (a batch is padded to its longest, so sizes vary). Where PyTorch cannot
    compile here the module stays eager, with a warning; a graph that fails to compile at
    its first call runs eagerly too (``torch._dynamo.config.suppress_errors``). Returns
    whether it was compiled."""
    import torch._dynamo as dynamo

    if not dynamo.is_dynamo_supported():
        logger.warning("training.compile: torch.compile is not supported here (torch %s); "
                       "%s runs eagerly", torch.__version__, what)
        return False
    dynamo.config.suppress_errors = True
    module.compile(dynamic=True)
    logger.info("training.compile: %s compiled with torch.compile (dynamic shapes; eager where "
                "a graph fails to compile)", what)
    return True
