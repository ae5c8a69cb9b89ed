"""Distributed training on a CPU-only torch: what the compat fix ``cpu_distributed_gloo``
and the hook ``cpu_distributed_spawn`` (:mod:`.entry_point`) use.

MMF 1.0.0rc10's distributed path is CUDA-only (NCCL, ``.cuda()`` tensors, a world size
checked against the GPU count). With those fixes ``distributed.world_size=N`` trains N
processes in sync over gloo where torch has no CUDA.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Iterator


@contextlib.contextmanager
def cuda_calls_to(device: Any) -> Iterator[None]:
    """Inside the block, ``Tensor.cuda()`` moves tensors to ``device`` instead."""
    import torch

    original = torch.Tensor.cuda
    torch.Tensor.cuda = lambda tensor, *args, **kwargs: tensor.to(device)
    try:
        yield
    finally:
        torch.Tensor.cuda = original


class DistributedWithoutNCCL(types.ModuleType):
    """``torch.distributed`` as seen by mmf.utils.distributed on a CPU-only torch.

    rc10 treats "NCCL unavailable" as "not distributed"; with gloo, a process
    group exists without NCCL, so availability means ``dist.is_available()``.
    """

    def __getattr__(self, item: str) -> Any:
        import torch.distributed

        if item == "is_nccl_available":
            return torch.distributed.is_available
        return getattr(torch.distributed, item)


def cpu_only() -> bool:
    import torch

    return not torch.cuda.is_available()
