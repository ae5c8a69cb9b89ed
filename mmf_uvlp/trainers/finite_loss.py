"""A non-finite training loss stops the run, naming the update, the dataset and the samples.

One NaN or infinite value in one sample's features, or a value so large that the model
overflows (1e30), makes the batch's loss non-finite; the optimizer then writes NaN into every
weight it updates and the run goes on to its end with exit status 0, a model that predicts
nothing, and results that look like any others. :func:`check_finite_loss` runs on every
training batch, before the backward pass, and raises :class:`NonFiniteLoss`, e.g.::

    non-finite loss at update 3 on dataset uvla_region_tag (train/uvla_region_tag/uvla_mrfr:
    nan): image_id cc_000012 has non-finite values in region_features; batch of 16: image_id
    cc_000004, cc_000012, ...; training stopped before this update changed any weight

It costs one host-device synchronisation per update (and, in a distributed run, one
all-reduce of a flag, so that every rank stops at the same update).
:class:`DeferredFiniteCheck` makes the same check without one: it computes the flag on the
device (:func:`finite_flag`), lets a fused AdamW skip a non-finite update on the device
(its ``found_inf``), and reads the flag on the host one update later, when the device has
long computed it.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch

from mmf_uvlp.errors import RunStopped
from mmf_uvlp.utils.host_sync import deferred_read

# Batch fields that identify samples, in the order they are preferred.
SAMPLE_ID_FIELDS = (
    "id",
    "image_id",
    "feature_key",
    "question_id",
    "identifier",
    "image_name",
    "feature_path",
)
_SHOWN_IDS = 8


class NonFiniteLoss(RunStopped):
    """A training batch whose loss is NaN or infinite."""


def check_finite_loss(
    losses: Mapping[str, Any],
    batch: Mapping[str, Any],
    dataset: str,
    update: int,
    model: Optional[torch.nn.Module] = None,
) -> None:
    """Raise :class:`NonFiniteLoss` when a loss of this batch (``update``: the update it
    would make, from 1) is not finite; ``batch`` is the input batch, ``model`` is checked
    for weights that were already non-finite."""
    finite = finite_flag(losses)
    if finite is None:
        return
    everywhere = _on_every_rank(finite)
    if everywhere:
        return
    where = f"non-finite loss at update {update}"
    if bool(finite):
        raise NonFiniteLoss(
            f"{where} on another process of this distributed run (that process "
            "names the dataset and samples); training stopped"
        )
    raise NonFiniteLoss(
        f"{where} on dataset {dataset} ({_bad_losses(losses)}): "
        + "; ".join(_causes(batch, model))
        + "; training stopped before this update changed any weight"
    )


def finite_flag(losses: Mapping[str, Any]) -> Optional[torch.Tensor]:
    """Whether every loss is finite, a bool tensor on the losses' device (no host sync);
    None when there is no tensor loss."""
    values = [value.detach() for value in losses.values() if torch.is_tensor(value)]
    if not values:
        return None
    return torch.isfinite(torch.stack([value.float().sum() for value in values]).sum())


def skips_on_device(optimizer: Any) -> bool:
    """Whether ``optimizer`` skips a step on a device flag (``found_inf``): PyTorch's fused
    Adam / AdamW."""
    groups = getattr(optimizer, "param_groups", None) or []
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False)) and all(
        group.get("fused") for group in groups
    )


class DeferredFiniteCheck:
    """The non-finite loss check of :func:`check_finite_loss` without a host sync per update.

    :meth:`submit` takes an update's losses before its backward pass: it computes the flag
    on the device and, when ``optimizer`` skips on a device flag (:func:`skips_on_device`),
    sets its ``found_inf`` so that a non-finite update changes no weight; then it checks
    the update submitted before (:meth:`flush`), whose flag the device has computed by
    now. :meth:`flush` (also at the end of training and before a checkpoint is written)
    raises :class:`NonFiniteLoss` naming that update, its dataset and samples.
    Single-process only: a distributed run uses :func:`check_finite_loss`.
    """

    def __init__(self) -> None:
        self._pending: Optional[Tuple[Any, ...]] = None

    def submit(
        self,
        losses: Mapping[str, Any],
        batch: Mapping[str, Any],
        dataset: str,
        update: int,
        optimizer: Any = None,
        model: Optional[torch.nn.Module] = None,
    ) -> None:
        """Queue the check of ``update`` (see the class docstring) and make the one before
        (:meth:`flush` with ``model``)."""
        self.flush(model)
        finite = finite_flag(losses)
        if finite is None:
            return
        skipped = optimizer is not None and skips_on_device(optimizer)
        if skipped:
            optimizer.found_inf = (~finite).float()
        ready = None
        if finite.is_cuda:  # to the host without waiting; flush waits for this copy only
            host = torch.empty((), dtype=torch.bool, pin_memory=True)
            host.copy_(finite, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
            finite = host
        self._pending = (finite, ready, dict(losses), batch, dataset, update, skipped)

    def flush(self, model: Optional[torch.nn.Module] = None) -> None:
        """Check the update submitted last, if any: raise :class:`NonFiniteLoss` if its loss
        was not finite. ``model``'s weights are named when they were non-finite before that
        update (known only when the optimizer skipped it: an applied update made them so)."""
        if self._pending is None:
            return
        finite, ready, losses, batch, dataset, update, skipped = self._pending
        self._pending = None
        with deferred_read():  # computed an update before: nothing to wait for by now
            if ready is not None:
                ready.synchronize()
            if bool(finite):
                return
        outcome = (
            "the optimizer skipped it, no weight changed"
            if skipped
            else "its update was applied (the optimizer cannot skip on a device flag)"
        )
        raise NonFiniteLoss(
            f"non-finite loss at update {update} on dataset {dataset} "
            f"({_bad_losses(losses)}): "
            + "; ".join(_causes(batch, model if skipped else None))
            + f"; {outcome}; training stopped"
        )


def _on_every_rank(finite: torch.Tensor) -> bool:
    """``finite`` on this process and, in a distributed run, on every other one."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return bool(finite)
    flag = finite.to(torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag)


def _bad_losses(losses: Mapping[str, Any]) -> str:
    bad = []
    for name, value in losses.items():
        if torch.is_tensor(value) and not bool(torch.isfinite(value.detach()).all()):
            bad.append(f"{name}: {value.detach().float().sum().item()}")
    return ", ".join(bad)


def _causes(batch: Mapping[str, Any], model: Optional[torch.nn.Module]) -> List[str]:
    id_field, ids = sample_ids(batch)
    label = (lambda index: f"{id_field} {ids[index]}") if ids else (lambda index: f"sample {index}")
    tensors = list(_input_tensors(batch, len(ids) if ids else None))
    fields_of: Dict[int, List[str]] = {}
    for field, tensor in tensors:
        rows = ~torch.isfinite(tensor.reshape(tensor.shape[0], -1)).all(dim=1)
        for index in rows.nonzero().flatten().tolist():
            fields_of.setdefault(index, []).append(field)
    causes = [
        f"{label(index)} has non-finite values in {', '.join(fields)}"
        for index, fields in sorted(fields_of.items())
    ]
    if not causes and tensors:
        field, tensor = max(tensors, key=lambda item: float(item[1].abs().max()))
        largest, index = tensor.abs().reshape(tensor.shape[0], -1).max(dim=1).values.max(dim=0)
        causes.append(
            f"the inputs are finite; the largest, {float(largest):.3g} in {field} of "
            f"{label(int(index))}, may overflow the model"
        )
    if model is not None:
        broken = [
            name
            for name, weight in model.named_parameters()
            if not bool(torch.isfinite(weight.detach()).all())
        ]
        if broken:
            causes.append(
                f"the model's weights were non-finite before this update ({len(broken)} "
                f"tensors, e.g. {broken[0]}): it was loaded or trained that way"
            )
    if ids:
        shown = ", ".join(ids[:_SHOWN_IDS]) + (
            f", ... ({len(ids) - _SHOWN_IDS} more)" if len(ids) > _SHOWN_IDS else ""
        )
        causes.append(f"batch of {len(ids)}: {id_field} {shown}")
    return causes


def sample_ids(batch: Mapping[str, Any]) -> Tuple[str, List[str]]:
    """The first field of ``batch`` that identifies its samples, and their ids as text
    (``("", [])`` when the batch has none of :data:`SAMPLE_ID_FIELDS`)."""
    for field in SAMPLE_ID_FIELDS:
        value = batch.get(field) if hasattr(batch, "get") else None
        if value is None:
            continue
        if torch.is_tensor(value):
            value = value.flatten().tolist() if value.dim() else [value.item()]
        if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            return field, [_text(item) for item in value]
    return "", []


def _text(item: Any) -> str:
    return item.decode(errors="replace") if isinstance(item, bytes) else str(item)


def _input_tensors(
    batch: Mapping[str, Any], size: Optional[int]
) -> Iterator[Tuple[str, torch.Tensor]]:
    """The floating-point tensors of ``batch`` (and of its dict fields) with one row per sample."""
    for field, value in batch.items():
        nested = value.items() if isinstance(value, Mapping) else [("", value)]
        for key, tensor in nested:
            if not (
                torch.is_tensor(tensor)
                and tensor.is_floating_point()
                and tensor.numel() > 0
                and tensor.dim() > 0
            ):
                continue
            if size is not None and tensor.shape[0] != size:
                continue
            yield (f"{field}.{key}" if key else str(field)), tensor.detach()


class NonFiniteLossStop:
    """The non-finite loss stop, a component of the ``uvlp`` trainer: a NaN or infinite
    training loss stops the run, naming the update, the dataset and the samples;
    ``training.exit_on_nan_losses=False`` (MMF main's switch) turns it off.

    A single process checks without waiting for the device (:class:`DeferredFiniteCheck`):
    the flag of an update is read when the next update is checked, and before every
    checkpoint (:meth:`state_dict`), evaluation and the end of training (:meth:`flush`), so
    no checkpoint holds weights a non-finite loss updated. A distributed run checks every
    update on every rank (:func:`check_finite_loss`), so that all ranks stop together.
    Nothing of it is saved: its state, once flushed, is empty."""

    def __init__(self) -> None:
        self._deferred = DeferredFiniteCheck()
        self._model: Optional[torch.nn.Module] = None

    def check(
        self,
        model: torch.nn.Module,
        training: Mapping[str, Any],
        report: Any,
        batch: Any,
        update: int,
        optimizer: Any = None,
    ) -> None:
        """Check the losses of ``report`` (``update``: the update they would make, from 1) of
        a training forward pass of ``model`` on ``batch``."""
        if not (model.training and training.get("exit_on_nan_losses", True)):
            return
        losses = report.get("losses") or {}
        dataset = report.get("dataset_name", "?")
        if _distributed():
            check_finite_loss(losses, batch, dataset, update, model)
            return
        self._model = model
        self._deferred.submit(losses, batch, dataset, update, optimizer, model)

    def flush(self) -> None:
        """Raise :class:`NonFiniteLoss` if the update checked last had a non-finite loss."""
        self._deferred.flush(self._model)

    def state_dict(self) -> Dict[str, Any]:
        """Nothing, once the update checked last is known to be finite (:meth:`flush`)."""
        self.flush()
        return {}

    def load_state_dict(self, state: Mapping[str, Any], file: str = "") -> None:
        """Nothing to restore: a checkpoint holds no pending check."""


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
