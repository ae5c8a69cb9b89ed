"""Mixed precision as MMF main spells it: ``training.fp16`` (autocast + GradScaler), plus bf16.

Keys (``training.*``):

- ``fp16: True`` switches mixed precision on, as on MMF main: the model's forward pass
  (its losses included) runs under ``torch.autocast`` and the backward pass under a
  ``torch.amp.GradScaler``, whose state is saved in each checkpoint as ``fp16_scaler`` (MMF
  main's entry) and restored on resume unless ``checkpoint.reset.fp16_scaler`` (or
  ``reset.all``) is set.
- ``amp_dtype: float16`` (default) or ``bfloat16``: the type autocast computes in, named
  after the ``dtype`` argument of ``torch.autocast``. bfloat16 keeps float32's exponent
  range, so its gradients cannot underflow and the GradScaler is off (PyTorch's AMP
  recipe); it needs a GPU with bfloat16 (compute capability >= 8.0) or a CPU.

Where precision matters, the plugin's losses compute in float32 whatever autocast chose:
softmax / log-softmax over the vocabulary (``uvla_mlm``, ``uvla_pmrtc``, and every
cross-entropy), the MRFR regression and its target features, and the curriculum weights.

When a run sets neither key, the ``uvlp`` trainer on MMF 1.0.0rc10 computes in bfloat16 on
a GPU that has it natively (compute capability >= 8.0: :func:`bf16_by_default`) and in
float32 anywhere else, a CPU included; ``training.fp16=False`` keeps float32 on such a GPU.
bfloat16 runs the matmuls on the tensor cores at about twice float32's (TF32's) rate and
needs no loss scaling, where float16 would. The trainer writes what it chose into the run's
config (``training.fp16``, ``training.amp_dtype``), so its checkpoints and log name it.

On MMF main, ``training.fp16`` is MMF's own code (float16 on CUDA only, off by default); on
MMF 1.0.0rc10, which has no mixed precision, the ``uvlp`` trainer adds it
(:mod:`mmf_uvlp.trainers.rc10_trainer`), on CPU too (bfloat16 there; float16 runs, slowly).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any, ContextManager, Dict, Mapping, Optional

import torch

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.utils.mmf_version import mmf_main_installed

logger = logging.getLogger(__name__)

AMP_DTYPES: Dict[str, torch.dtype] = {"float16": torch.float16, "bfloat16": torch.bfloat16}
SCALER_KEY = "fp16_scaler"  # MMF main's checkpoint entry for the GradScaler state


@dataclass(frozen=True)
class Precision:
    """The precision a trainer computes in on one device type."""

    enabled: bool
    dtype: torch.dtype
    device_type: str

    @classmethod
    def from_config(cls, training: Mapping[str, Any], device: Any) -> "Precision":
        """Read ``training.fp16`` and ``training.amp_dtype``; refuse what cannot work; with
        neither set, bfloat16 where :func:`bf16_by_default`, else float32."""
        if training.get("fp16", None) is None and training.get("amp_dtype", None) is None:
            default = bf16_by_default(device)
            return cls(
                default, torch.bfloat16 if default else torch.float16, torch.device(device).type
            )
        enabled = training.get("fp16", False)
        if not isinstance(enabled, bool):
            raise UserConfigError(f"training.fp16={enabled!r}: expected True or False")
        name = training.get("amp_dtype", "float16") or "float16"
        if name not in AMP_DTYPES:
            raise UserConfigError(
                f"training.amp_dtype={name!r}: expected one of "
                f"{sorted(AMP_DTYPES)} (the dtype of torch.autocast)"
            )
        if name != "float16" and not enabled:
            raise UserConfigError(
                f"training.amp_dtype={name} takes effect only with "
                "training.fp16=True (MMF's mixed-precision switch); set both"
            )
        device_type = torch.device(device).type
        if (
            enabled
            and name == "bfloat16"
            and device_type == "cuda"
            and not torch.cuda.is_bf16_supported()
        ):
            raise UserConfigError(
                "training.amp_dtype=bfloat16: this GPU has no bfloat16 "
                "(compute capability < 8.0); use training.amp_dtype=float16"
            )
        if enabled and name == "float16" and device_type == "cpu":
            logger.warning(
                "training.fp16=True with float16 on a CPU runs, slowly; "
                "training.amp_dtype=bfloat16 is the CPU's fast type"
            )
        return cls(enabled, AMP_DTYPES[name], device_type)

    @property
    def name(self) -> str:
        """``fp32``, ``fp16`` or ``bf16``: what the trainer computes in."""
        if not self.enabled:
            return "fp32"
        return "fp16" if self.dtype == torch.float16 else "bf16"

    def autocast(self) -> ContextManager:
        """The autocast region of a forward pass (a no-op in float32)."""
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """MMF main's GradScaler: on for float16 only (bfloat16 needs no loss scaling)."""
        return torch.amp.GradScaler(self.device_type, enabled=self.name == "fp16")


FLOAT32 = Precision(False, torch.float16, "cpu")


def bf16_by_default(device: Any = None) -> bool:
    """Whether a run that sets no precision computes in bfloat16: on a CUDA ``device`` (the
    first GPU when None) with native bfloat16 (compute capability >= 8.0, not emulated),
    under MMF 1.0.0rc10's ``uvlp`` trainer (MMF main's trainer autocasts to float16 only)."""
    if device is not None and torch.device(device).type != "cuda":
        return False
    if not torch.cuda.is_available():
        return False
    try:
        native = torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # a torch without emulation
        native = torch.cuda.is_bf16_supported()
    return bool(native) and not mmf_main_installed()


def default_precision() -> str:
    """``bf16`` or ``fp32``: what a run that sets no precision computes in here."""
    return "bf16" if bf16_by_default() else "fp32"


def record_in_config(precision: Precision, training: Any) -> None:
    """Write ``precision`` into the run's ``training`` config (``fp16``, ``amp_dtype``), so
    that its checkpoints and log say what it computed in."""
    from omegaconf import open_dict

    with open_dict(training):
        training.fp16 = precision.enabled
        if precision.enabled:
            training.amp_dtype = "bfloat16" if precision.dtype == torch.bfloat16 else "float16"


def _saved_precision(config: Any) -> Optional[str]:
    """``fp32`` / ``fp16`` / ``bf16`` of a checkpoint's saved config (None: unknown)."""
    training = (config or {}).get("training") if isinstance(config, Mapping) else None
    if not isinstance(training, Mapping) or "fp16" not in training:
        return None
    if not training["fp16"]:
        return "fp32"
    return "bf16" if training.get("amp_dtype") == "bfloat16" else "fp16"


class MixedPrecision:
    """The trainer's precision, a component of the ``uvlp`` trainer on MMF 1.0.0rc10: the
    autocast region of its forward passes (:attr:`precision`) and the GradScaler of its
    backward passes (:attr:`scaler`, on for float16 only); its state is the GradScaler's,
    saved as ``fp16_scaler`` (MMF main's entry)."""

    def __init__(self, precision: Precision, writer: Any = None):
        self.precision = precision
        self.scaler = precision.grad_scaler()
        self._writer = writer  # MMF's writer, where the resume's messages go

    @classmethod
    def from_config(cls, training: Any, device: Any, writer: Any = None) -> "MixedPrecision":
        """:meth:`Precision.from_config`, written into the run's config
        (:func:`record_in_config`) and logged when mixed."""
        precision = Precision.from_config(training, device)
        record_in_config(precision, training)
        mixed = cls(precision, writer)
        if precision.enabled and writer is not None:
            writer.write(
                f"Mixed precision: autocast to {precision.dtype} on {precision.device_type}, "
                f"GradScaler {'on' if mixed.scaler.is_enabled() else 'off'}"
            )
        return mixed

    def autocast(self) -> ContextManager:
        """The autocast region of a forward pass (a no-op in float32)."""
        return self.precision.autocast()

    def state_dict(self) -> Dict[str, Any]:
        """The GradScaler's state (empty when it is off)."""
        return self.scaler.state_dict()

    def load_state_dict(
        self, state: Optional[Mapping[str, Any]], saved_config: Any = None, file: str = ""
    ) -> None:
        """Load the GradScaler state ``state`` of the checkpoint ``file`` (whose config is
        ``saved_config``); say when the run changes precision across the resume (then it is
        not the uninterrupted run)."""
        saved, now = _saved_precision(saved_config), self.precision.name
        if saved is not None and saved != now:
            message = (
                f"{file} was trained in {saved}, this run continues in {now}: the resumed "
                "run is not the uninterrupted one"
            )
            warnings.warn(message)
            self._write(message, "warning")
        if not self.scaler.is_enabled():
            return
        if state:
            self.scaler.load_state_dict(state)
        else:
            self._write(f"{file} holds no GradScaler state: the loss scale starts afresh")

    def _write(self, message: str, level: str = "info") -> None:
        if self._writer is not None:
            self._writer.write(message, level)
