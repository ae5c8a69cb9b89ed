"""Finding the host syncs of a training step, on any machine.

A call that needs a tensor's value on the host (``.item()``, ``.tolist()``, ``bool()``,
``nonzero``, a boolean-mask index ...) makes the Python process wait until the device has
computed it, and so does a tensor made from host data on the device (``torch.tensor(list,
device=...)``, a blocking copy): the device's queue drains and it idles while Python
prepares the next kernels. :func:`no_host_sync` raises :class:`HostSyncError` at the first such call on a
tensor inside its block, naming the call and the line that made it. Every tensor of a step
lives on the model's device once MMF has moved the batch there, so on a CPU (where nothing
waits) the block finds the calls that would wait on a GPU; on a CUDA device it also sets
``torch.cuda.set_sync_debug_mode("error")``, which catches the syncs made inside PyTorch's
own kernels. :func:`deferred_read` marks the one read a sync-free step makes: a value the
device computed an update before (:class:`~mmf_uvlp.trainers.finite_loss.DeferredFiniteCheck`'s
flag), which waits for nothing by then.
"""

from __future__ import annotations

import contextlib
import traceback
from typing import Any, Iterator, Optional

import torch
from torch.overrides import TorchFunctionMode

# Tensor methods and torch functions whose result needs the device's values on the host.
SYNCING = frozenset(
    {
        "item",
        "tolist",
        "__bool__",
        "__int__",
        "__float__",
        "__index__",
        "nonzero",
        "argwhere",
        "numpy",
        "masked_select",
        "unique",
        "unique_consecutive",
        "cpu",
    }
)
INDEXING = frozenset({"__getitem__", "__setitem__"})
# Tensors made from host data (a list, a number, an array) on a device: on a GPU the copy
# to it is a blocking one, which CUDA's sync check (set_sync_debug_mode) refuses.
FROM_HOST_DATA = frozenset({"tensor", "as_tensor"})


class HostSyncError(RuntimeError):
    """A call inside :func:`no_host_sync` that waits for the device."""


_deferred_reads = [0]  # how many deferred_read blocks are open


def _has_bool_index(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(torch.is_tensor(item) and item.dtype == torch.bool for item in items)


def _caller() -> str:
    """The innermost frame outside torch and this module: where the call was made."""
    for frame in reversed(traceback.extract_stack()):
        path = frame.filename.replace("\\", "/")
        if "/torch/" not in path and not path.endswith("/host_sync.py"):
            return f"{frame.filename}:{frame.lineno} ({frame.line})"
    return "an unknown line"


class _HostSyncCheck(TorchFunctionMode):
    def __torch_function__(
        self, func: Any, types: Any, args: Any = (), kwargs: Optional[dict] = None
    ) -> Any:
        name = getattr(func, "__name__", "")
        if _deferred_reads[0]:
            return func(*args, **(kwargs or {}))
        if name in SYNCING or (name in INDEXING and len(args) > 1 and _has_bool_index(args[1])):
            what = f"a boolean-mask {name}" if name in INDEXING else f"{name}()"
            raise HostSyncError(f"{what} on a tensor waits for the device, at {_caller()}")
        if (
            name in FROM_HOST_DATA
            and (kwargs or {}).get("device") is not None
            and args
            and not torch.is_tensor(args[0])
        ):
            raise HostSyncError(
                f"torch.{name}() of host data on device "
                f"{kwargs['device']} copies and waits for the device, at "
                f"{_caller()}"
            )
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def deferred_read() -> Iterator[None]:
    """Inside :func:`no_host_sync`, the read of a value the device computed an update or more
    before: on a GPU it is on the host already (copied without waiting, behind an event of
    its own), on a CPU computed."""
    _deferred_reads[0] += 1
    try:
        yield
    finally:
        _deferred_reads[0] -= 1


@contextlib.contextmanager
def no_host_sync(device: Optional[torch.device] = None) -> Iterator[None]:
    """Raise :class:`HostSyncError` at any host sync inside the block (see the module
    docstring); on a CUDA ``device`` CUDA's own sync check is on too."""
    cuda = device is not None and torch.device(device).type == "cuda"
    previous = torch.cuda.get_sync_debug_mode() if cuda else None
    if cuda:
        torch.cuda.set_sync_debug_mode("error")
    try:
        with _HostSyncCheck():
            yield
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(previous)
