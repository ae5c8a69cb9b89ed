"""The next training batch copied to the GPU on a side stream while the step computes.

MMF moves a batch to the device when the step asks for it (``prepare_batch``), on the
stream that computes: the copy waits behind the step before it and the step waits for the
copy. :class:`SideStreamCopy` begins the copy of the next batch (pinned by the DataLoader,
``non_blocking``) on a CUDA stream of its own as soon as the next batch is known, and the
computing stream waits for that copy's event only when it takes the batch; no host sync.
On any other device it does nothing (:attr:`SideStreamCopy.enabled` is False): a CPU
computes on the batch where the DataLoader left it.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

import torch


class SideStreamCopy:
    """Copies of batches (MMF ``SampleList`` s: their top-level tensors, as MMF's own
    ``to`` moves them) to ``device`` on a side stream."""

    def __init__(self, device: Any):
        self.device = torch.device(device)
        self.stream: Optional[Any] = None
        if self.device.type == "cuda" and torch.cuda.is_available():
            self.stream = torch.cuda.Stream(self.device)
        self._copied: Dict[int, Any] = {}  # id of a copied batch: the event of its copy

    @property
    def enabled(self) -> bool:
        return self.stream is not None

    def start(self, batch: Any) -> Any:
        """``batch`` on the device, its copy begun on the side stream (not waited for)."""
        if not self.enabled:
            return batch
        with torch.cuda.stream(self.stream):
            moved = batch.to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        self._copied[id(moved)] = event
        return moved

    def ready(self, batch: Any) -> Any:
        """``batch`` for the computing stream: it waits (on the device) for the batch's copy,
        and the copied tensors are kept from reuse until that stream is done with them."""
        event = self._copied.pop(id(batch), None)
        if event is None:
            return batch
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        for tensor in _tensors(batch):
            if tensor.device.type == "cuda":
                tensor.record_stream(current)
        return batch


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    values = batch.values() if hasattr(batch, "values") else ()
    return (value for value in values if torch.is_tensor(value))
