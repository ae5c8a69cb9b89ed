"""A detector's weights file read without running code, renamed, and loaded whole or refused.

A public checkpoint comes in one of two formats, both read as data only
(:mod:`mmf_uvlp.utils.safe_loading`):

- ``.pkl`` (detectron2's model zoo, py-bottom-up-attention): a pickle of ``{"model": {name:
  numpy array}, "__author__": ...}`` (or a Caffe2 ``{"blobs": ...}``, or a bare ``{name:
  array}``), through the restricted unpickler: dicts, lists, strings, numbers and numpy
  arrays, nothing else;
- anything else (``.pth``): ``torch.load(weights_only=True)`` of ``{"model": state dict}``
  or a bare state dict.

A *layout* (:data:`LAYOUTS`, :func:`register_layout`) turns the file's names into the
detector's: ``detectron2`` keeps them. :func:`load_weights` then puts every tensor of the file
into the detector, or raises :class:`PartialWeightsError` naming the file, the counts and the
first missing, unexpected and mis-shaped keys, unless the caller allows a partial load.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Mapping, Optional

import numpy as np
import torch

from mmf_uvlp.utils.safe_loading import load_checkpoint, restricted_load

logger = logging.getLogger(__name__)

StateDict = Dict[str, torch.Tensor]
LAYOUTS: Dict[str, Callable[[StateDict], StateDict]] = {}


def register_layout(name: str) -> Callable:
    """Register ``fn(file's state dict) -> detectron2's state dict`` as layout ``name``."""

    def wrap(fn: Callable[[StateDict], StateDict]) -> Callable[[StateDict], StateDict]:
        if name in LAYOUTS:
            raise ValueError(f"layout {name!r} is registered twice")
        LAYOUTS[name] = fn
        return fn

    return wrap


@register_layout("detectron2")
def detectron2_layout(state: StateDict) -> StateDict:
    """detectron2's own names (its model zoo, py-bottom-up-attention): kept as they are."""
    return dict(state)


class PartialWeightsError(ValueError):
    """A weights file that does not fill the detector, or holds tensors it has no place for."""


def _tensors(model: Mapping, path: str) -> StateDict:
    """``{name: tensor}`` of a file's model dict; anything but an array or tensor refused."""
    out: StateDict = {}
    for name, value in model.items():
        if isinstance(value, np.ndarray):
            out[str(name)] = torch.from_numpy(np.ascontiguousarray(value))
        elif isinstance(value, torch.Tensor):
            out[str(name)] = value
        else:
            raise ValueError(
                f"{path}: key {name!r} holds a {type(value).__name__}; expected "
                "a tensor or numpy array for every key of the model"
            )
    return out


def read_weights(path: str) -> StateDict:
    """The tensors of a weights file, read as data only (module docstring)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--weights {path}: no such file")
    if path.endswith(".pkl"):
        with open(path, "rb") as handle:
            data = restricted_load(handle, path, arrays=True, encoding="latin1")
    else:
        data = load_checkpoint(path)
    if not isinstance(data, dict):
        raise ValueError(
            f"{path}: holds a {type(data).__name__}; expected a dict of "
            "tensors or {'model': dict of tensors}"
        )
    if "model" in data and isinstance(data["model"], dict):
        data = data["model"]
    elif "blobs" in data and isinstance(data["blobs"], dict):
        data = data["blobs"]
    return _tensors(data, path)


def _shape(tensor: torch.Tensor) -> str:
    return "x".join(map(str, tensor.shape)) or "scalar"


@dataclass
class LoadReport:
    """How a weights file went into the detector (written to report.json and metadata)."""

    weights: Optional[str]
    layout: Optional[str]
    tensors_in_file: int = 0
    tensors_in_detector: int = 0
    loaded: int = 0
    missing: List[str] = field(default_factory=list)
    unexpected: List[str] = field(default_factory=list)
    mismatched: List[str] = field(default_factory=list)
    random_seed: Optional[int] = None

    @property
    def whole(self) -> bool:
        return (
            self.weights is not None
            and not self.missing
            and not self.unexpected
            and not self.mismatched
        )

    @property
    def status(self) -> str:
        """``whole``, ``partial`` (``--allow-partial-weights``) or ``random``."""
        if self.weights is None:
            return "random"
        return "whole" if self.whole else "partial"

    def as_dict(self, first: int = 5) -> Dict[str, object]:
        """The report's fields, with each key list's count and its ``first`` keys."""
        out: Dict[str, object] = {"status": self.status}
        for name, value in asdict(self).items():
            if isinstance(value, list):
                out[name] = {"count": len(value), "first": value[:first]}
            else:
                out[name] = value
        return out


def compare(
    detector: StateDict,
    weights: StateDict,
    path: str,
    layout: str,
    computed: Optional[StateDict] = None,
) -> LoadReport:
    """Which of the file's tensors (already renamed) fit the detector's, by name and shape.

    ``computed``: buffers the detector computes from its config rather than loads (the RPN's
    ``cell_anchors``, which older detectron2 saved): a file's copy must hold the same
    values, or the config is not the checkpoint's."""
    computed = computed or {}
    mismatched = [
        f"{k} (file {_shape(v)}, detector {_shape(detector[k])})"
        for k, v in weights.items()
        if k in detector and v.shape != detector[k].shape
    ]
    mismatched += [
        f"{k} (the file's values are not the detector's, computed from its config)"
        for k, v in weights.items()
        if k in computed
        and not (
            v.shape == computed[k].shape
            and torch.allclose(v.float(), computed[k].float(), atol=1e-4)
        )
    ]
    known = set(detector) | set(computed)
    return LoadReport(
        weights=path,
        layout=layout,
        tensors_in_file=len(weights),
        tensors_in_detector=len(detector),
        loaded=len(weights) - len(mismatched) - sum(1 for k in weights if k not in known),
        missing=[k for k in detector if k not in weights],
        unexpected=[k for k in weights if k not in known],
        mismatched=mismatched,
    )


def refusal(report: LoadReport) -> str:
    """The one line that refuses a partial load."""
    firsts = []
    for what, keys in (
        ("missing", report.missing),
        ("unexpected", report.unexpected),
        ("mis-shaped", report.mismatched),
    ):
        if keys:
            firsts.append(f"{len(keys)} {what} (first: {keys[0]})")
    return (
        f"{report.weights}: {report.loaded} of the file's {report.tensors_in_file} "
        f"tensors fit the detector, which has {report.tensors_in_detector} to fill (layout "
        f"{report.layout}): {'; '.join(firsts)}. Check --recipe/--arch against the "
        "checkpoint, or pass --allow-partial-weights to run with the rest random"
    )


def load_weights(
    model: torch.nn.Module,
    path: str,
    layout: str = "detectron2",
    allow_partial: bool = False,
    state: Optional[StateDict] = None,
) -> LoadReport:
    """Load ``path`` (``state``: its tensors, already read) into ``model`` through
    ``layout``: every tensor, or a :class:`PartialWeightsError` (unless ``allow_partial``:
    what fits is loaded)."""
    if layout not in LAYOUTS:
        raise ValueError(f"--layout {layout!r}: expected one of {', '.join(sorted(LAYOUTS))}")
    weights = LAYOUTS[layout](read_weights(path) if state is None else state)
    detector = model.state_dict()
    computed = {k: v for k, v in model.named_buffers() if k not in detector}
    report = compare(detector, weights, path, layout, computed)
    if not report.whole:
        if not allow_partial:
            raise PartialWeightsError(refusal(report))
        logger.warning("%s (loading anyway: --allow-partial-weights)", refusal(report))
    fitting = {k: v for k, v in weights.items() if k in detector and v.shape == detector[k].shape}
    model.load_state_dict(fitting, strict=report.whole)
    logger.info(
        "%s: %d of the file's %d tensors loaded or checked (layout %s)",
        path,
        report.loaded,
        report.tensors_in_file,
        layout,
    )
    return report
