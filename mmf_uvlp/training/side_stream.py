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

from typing import Any, Dict, Iterator, Mapping, Optional

import torch


class SideStreamCopy:
    """Copies of batches (MMF ``SampleList`` s: their tensors and nested ``SampleList`` s,
    as MMF's own ``to`` moves them) to ``device`` on a side stream."""

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
        and every copied tensor, nested ones included, is kept from reuse until that stream
        is done with it (``record_stream``: the side stream allocated it, and the caching
        allocator would otherwise hand its memory to the next copy while the step reads it)."""
        event = self._copied.pop(id(batch), None)
        if event is None:
            return batch
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        for tensor in tensors(batch):
            if tensor.device.type == self.device.type:
                tensor.record_stream(current)
        return batch


def tensors(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor of ``batch``: its own fields' and those of its nested mappings (the
    ``{"values": tensor}`` fields of :mod:`mmf_uvlp.datasets.collate`, nested ``SampleList`` s
    that MMF's ``to`` moves with the batch) and lists."""
    if torch.is_tensor(batch):
        yield batch
    elif isinstance(batch, Mapping):
        for value in batch.values():
            yield from tensors(value)
    elif isinstance(batch, (list, tuple)):
        for value in batch:
            yield from tensors(value)
