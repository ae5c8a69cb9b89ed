"""The next training batch copied to the GPU on a side stream while the step computes.

MMF moves a batch to the device when the step asks for it (``prepare_batch``), on the
stream that computes: the copy waits behind the step before it and the step waits for the
copy. :class:`SideStreamCopy` begins the copy of the next batch (pinned by the DataLoader,
``non_blocking``) on a CUDA stream of its own as soon as the next batch is known
(:meth:`SideStreamCopy.start`), and the computing stream waits for that copy's event only
when the batch is handed to the step (:meth:`SideStreamCopy.ready`); no host sync.

The event travels with the copied batch (:class:`CopiedBatch`), held by whoever hands the
batch out: MMF rebuilds the batch it is handed (``SampleList(batch)`` in its
``DatasetLoader.prepare_batch``), so nothing downstream of the iterator can find the copy
by the batch object. A copy never handed out (a run that ends with one ahead) is dropped
with its event. On any other device nothing is copied ahead (:attr:`SideStreamCopy.enabled`
is False): a CPU computes on the batch where the DataLoader left it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, NamedTuple, Optional, Tuple

import torch


class CopiedBatch(NamedTuple):
    """A batch whose copy to the device was begun on the side stream, and that copy's
    event."""

    batch: Any
    event: Any


class SideStreamCopy:
    """Copies of batches (MMF ``SampleList`` s: their tensors and nested ``SampleList`` s,
    as MMF's own ``to`` moves them) to ``device`` on a side stream."""

    def __init__(self, device: Any):
        self.device = torch.device(device)
        self.stream: Optional[Any] = None
        if self.device.type == "cuda" and torch.cuda.is_available():
            self.stream = torch.cuda.Stream(self.device)

    @property
    def enabled(self) -> bool:
        return self.stream is not None

    def start(self, batch: Any) -> CopiedBatch:
        """``batch`` on the device, its copy begun on the side stream (not waited for)."""
        with torch.cuda.stream(self.stream):
            moved = batch.to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        return CopiedBatch(moved, event)

    def ready(self, copied: CopiedBatch) -> Any:
        """The copied batch for the computing stream: it waits (on the device) for the
        batch's copy, and every copied tensor, nested ones included, is kept from reuse
        until that stream is done with it (``record_stream``: the side stream allocated it,
        and the caching allocator would otherwise hand its memory to the next copy while
        the step reads it)."""
        current = torch.cuda.current_stream(self.device)
        current.wait_event(copied.event)
        for tensor in tensors(copied.batch):
            if tensor.device.type == self.device.type:
                tensor.record_stream(current)
        return copied.batch


class CopyAhead:
    """The batches ``take`` hands out one at a time (StopIteration at the end), of which
    :meth:`ahead` takes the next one early and begins its copy; :meth:`__next__` hands that
    one out with the computing stream waiting for its copy (:meth:`SideStreamCopy.ready`).
    The loaders call :meth:`ahead` once MMF has chosen the dataset of the next batch."""

    def __init__(self, take: Callable[[], Any]):
        self._take = take
        self._ahead: Optional[Tuple[SideStreamCopy, CopiedBatch]] = None

    def __iter__(self) -> "CopyAhead":
        return self

    def __next__(self) -> Any:
        if self._ahead is not None:
            (copy, copied), self._ahead = self._ahead, None
            return copy.ready(copied)
        return self._take()

    def ahead(self, copy: SideStreamCopy) -> None:
        """Take the next batch now and begin its copy (nothing at the end)."""
        if self._ahead is None:
            try:
                self._ahead = (copy, copy.start(self._take()))
            except StopIteration:
                pass


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
