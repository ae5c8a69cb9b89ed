"""Placing the runs of a study on the GPUs present (``replicate --jobs N``).

``jobs`` runs side by side take ``jobs`` slots; slot ``i`` is GPU ``i mod G`` of the G GPUs
visible, handed to its run as ``CUDA_VISIBLE_DEVICES`` (so MMF's ``cuda`` device is that
GPU), so that N runs spread over the GPUs round robin, several sharing one GPU when N > G.
Each run also gets its share of the CPU threads (``runner.share_cores``). Without a GPU the
runs are left as they are.
"""

from __future__ import annotations

import os
import queue
from typing import Callable, List, Optional, Sequence


def visible_gpus(device_count: Optional[int] = None) -> List[str]:
    """The GPUs the runs may use, named as ``CUDA_VISIBLE_DEVICES`` names them: the ones it
    lists already when set (a scheduler's choice), else ``0 .. n-1``. ``device_count``: what
    ``torch.cuda.device_count()`` says (asked when None)."""
    if device_count is None:
        import torch

        device_count = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        names = [name.strip() for name in listed.split(",") if name.strip()]
        return names[:device_count]
    return [str(index) for index in range(device_count)]


class GpuPlacement:
    """``jobs`` slots over ``gpus``; a run holds a free slot (and its GPU) while it runs."""

    def __init__(self, jobs: int, gpus: Sequence[str]):
        if jobs < 1 or not gpus:
            raise ValueError(
                f"GPU placement needs jobs >= 1 and a GPU, got {jobs} and {list(gpus)}"
            )
        self.gpus = list(gpus)
        self.slots = [self.gpus[slot % len(self.gpus)] for slot in range(jobs)]
        self._free: "queue.Queue[int]" = queue.Queue()
        for slot in range(jobs):
            self._free.put(slot)

    def describe(self) -> str:
        """One line: how many runs go on which GPU."""
        shares = ", ".join(f"GPU {gpu}: {self.slots.count(gpu)}" for gpu in self.gpus)
        return f"{len(self.slots)} runs side by side on {len(self.gpus)} GPU(s) ({shares})"

    def wrap(self, run: Callable[..., int]) -> Callable[..., int]:
        """``run(command, *args, env=...)`` with the environment of a free slot's GPU."""

        def placed(command: Sequence[str], *args: object) -> int:
            slot = self._free.get()
            try:
                env = dict(os.environ, CUDA_VISIBLE_DEVICES=self.slots[slot])
                return run(command, *args, env=env)
            finally:
                self._free.put(slot)

        return placed
