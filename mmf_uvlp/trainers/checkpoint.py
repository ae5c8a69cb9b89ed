"""Checkpoints of the ``uvlp`` trainer: written atomically, loaded as plain data, checked
against the run, and carrying the exact run state that a resume restores.

- Files: :func:`atomic_torch_save` writes to a temporary file beside the target and renames
  it, so a crash never leaves a partial checkpoint; a failed write (``ENOSPC``: the disk is
  full) is a :class:`CheckpointWriteError` naming the error code and the file.
  :func:`load_checkpoint` reads with the plugin's one checkpoint loader
  (:func:`mmf_uvlp.utils.safe_loading.load_checkpoint`, ``torch.load(weights_only=True)``):
  tensors, numpy arrays (a numpy RNG state), numbers, strings and containers, plus the
  classes a caller allows explicitly. A checkpoint is a file users hand each other, and
  unpickling anything else can run code: such a file is refused (:class:`RefusedCheckpoint`,
  naming the objects and, where one exists, the opt-in ``checkpoint.trust_resume_file=True``
  for a trusted legacy resume file); one that cannot be read at all is a
  :class:`DamagedCheckpoint`.
- Fit: a checkpoint that a run resumes from (``checkpoint.resume``, ``checkpoint.resume_file``)
  is checked against the run before MMF loads it (:func:`check_checkpoint_fits`). MMF loads a
  checkpoint's weights with ``strict=False``: a VQA2 checkpoint given to a RefCOCO+ run would
  load without a word, its answer head unused and the run's region scorer left at its random
  initialisation. A checkpoint whose model, task or weights differ from the run's stops the
  run in one line naming what differs::

      mmf_run: error: checkpoint save/uvla_vqa2/current.ckpt does not fit this run: it was
      trained on vqa2, this run is on refcoco_plus; it lacks 4 tensors of this model
      (heads.region_scorer) and holds 5 that this model has not (heads.pooled_classifier); ...

  ``checkpoint.accept_mismatch=True`` loads it anyway (what differs is then logged as a
  warning). MMF's own partial loading (``checkpoint.resume_pretrained`` with a
  ``pretrained_state_mapping``) and the fine-tuning start of the plugin's models
  (``model_config.<model>.pretrained_checkpoint``, which copies the encoder and drops the
  pre-training heads on purpose, saying so in the log) are not checked here.
- Run state: a checkpoint carries ``uvlp_run_state``: the random-number states, the data
  position (:mod:`mmf_uvlp.trainers.data_order`), the epoch and the lr scheduler's state, which
  a resume restores; a damaged or missing ``current.ckpt`` falls back to the newest complete
  ``models/model_N.ckpt``.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import torch

from mmf_uvlp.errors import (
    CheckpointWriteError,
    DamagedCheckpoint,
    FormatError,
    RefusedCheckpoint,
    UnsafeFileError,
    UserConfigError,
)
from mmf_uvlp.utils import safe_loading
from mmf_uvlp.utils.atomic import atomic_open

RUN_STATE_KEY = "uvlp_run_state"
ACCEPT_KEY = "checkpoint.accept_mismatch"
logger = logging.getLogger(__name__)


# ------------------------------------------------------------------ files
class WriteErrors:
    """A file object for ``torch.save`` that keeps the first OSError of its writes: torch's
    zip writer turns it into its own RuntimeError ("unexpected pos ..."), naming no cause."""

    def __init__(self, handle: Any):
        self.handle = handle
        self.error: Optional[OSError] = None

    def write(self, data: Any) -> int:
        try:
            return self.handle.write(data)
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self) -> None:
        self.handle.flush()


def atomic_torch_save(obj: Any, path: str) -> None:
    """``torch.save`` to a temporary file beside ``path``, then rename: never a partial file.

    The file is written through Python's file object, so a failed write surfaces as the
    operating system's error (torch's own writer reports only "iostream error" or
    "unexpected pos"), wherever it is raised.
    """
    try:
        # the temporary file is removed before the error is built: the free space it tells
        # is what a retry would have
        with atomic_open(path, "wb", temporary=f"{path}.tmp-{os.getpid()}", fsync=True) as handle:
            writes = WriteErrors(handle)
            try:
                torch.save(obj, writes)
            except RuntimeError as error:
                if writes.error is None:
                    raise
                raise writes.error from error
    except OSError as error:
        raise CheckpointWriteError(str(path), error) from error


def load_checkpoint(
    path: str,
    map_location: Any = "cpu",
    allowed: Sequence[Callable] = (),
    trust: bool = False,
    trust_hint: str = "",
) -> Dict[str, Any]:
    """A checkpoint of a run (:func:`mmf_uvlp.utils.safe_loading.load_checkpoint`), whose
    refusal or damage stops the run.

    Raises FileNotFoundError, :class:`RefusedCheckpoint` or :class:`DamagedCheckpoint`.
    """
    try:
        return safe_loading.load_checkpoint(
            path, trust=trust, trust_hint=trust_hint, map_location=map_location, allowed=allowed
        )
    except UnsafeFileError as refused:
        raise RefusedCheckpoint(str(path), refused.refused.split(", "), trust_hint) from refused
    except FormatError as damaged:
        raise DamagedCheckpoint(str(path), str(damaged.got)) from damaged


def omegaconf_containers() -> List[Any]:
    """What omegaconf's DictConfig and ListConfig need to be loaded as data (MMF main keeps
    config values such as the optimizer's ``betas`` in its checkpoints as ListConfig)."""
    import collections
    import typing

    from omegaconf import DictConfig, ListConfig, nodes
    from omegaconf.base import ContainerMetadata, Metadata

    return [
        DictConfig,
        ListConfig,
        ContainerMetadata,
        Metadata,
        nodes.AnyNode,
        nodes.StringNode,
        nodes.IntegerNode,
        nodes.FloatNode,
        nodes.BooleanNode,
        (typing.Any, "typing.Any"),
        collections.defaultdict,
        dict,
        list,
        int,
        float,
        str,
        bool,
    ]


# ------------------------------------------------------------------ fit
def _groups(keys: Sequence[str]) -> List[str]:
    """The modules ``keys`` belong to: ``heads.<name>`` for heads, else the first part."""
    groups = []
    for key in keys:
        parts = key.split(".")
        group = ".".join(parts[:2]) if parts[0] == "heads" and len(parts) > 2 else parts[0]
        if group not in groups:
            groups.append(group)
    return groups


def _without_module_prefix(keys: Sequence[str]) -> List[str]:
    return [key[len("module.") :] if key.startswith("module.") else key for key in keys]


def _datasets(config: Any) -> List[str]:
    value = config.get("datasets", "") if hasattr(config, "get") else ""
    return [name.strip() for name in str(value or "").split(",") if name.strip()]


def differences(
    checkpoint: Mapping[str, Any], own_state: Mapping[str, Any], run_config: Any
) -> List[str]:
    """What differs between ``checkpoint`` (an MMF ``.ckpt`` dict or a state dict) and the
    run: its model's name, its datasets, and the names and shapes of its weights."""
    found: List[str] = []
    saved = checkpoint.get("config") if isinstance(checkpoint.get("config"), Mapping) else None
    if saved is not None:
        if saved.get("model") and saved.get("model") != run_config.get("model"):
            found.append(f"it is a {saved['model']} model, this run's is {run_config.get('model')}")
        theirs, ours = _datasets(saved), _datasets(run_config)
        if theirs and ours and not set(ours) <= set(theirs) and not _same_task(theirs, ours):
            found.append(f"it was trained on {','.join(theirs)}, this run is on {','.join(ours)}")
    weights = checkpoint.get("model", checkpoint)
    if not isinstance(weights, Mapping):
        return found
    mine = dict(zip(_without_module_prefix(list(own_state)), own_state.values()))
    theirs_state = dict(zip(_without_module_prefix(list(weights)), weights.values()))
    missing = [key for key in mine if key not in theirs_state]
    unexpected = [key for key in theirs_state if key not in mine]
    if missing:
        found.append(
            f"it lacks {len(missing)} tensors of this model ({', '.join(_groups(missing))})"
        )
    if unexpected:
        found.append(
            f"it holds {len(unexpected)} that this model has not ({', '.join(_groups(unexpected))})"
        )
    shapes = [
        key
        for key in mine
        if key in theirs_state
        and tuple(getattr(theirs_state[key], "shape", ())) != tuple(mine[key].shape)
    ]
    if shapes:
        key = shapes[0]
        found.append(
            f"{len(shapes)} tensors differ in shape (e.g. {key}: "
            f"{tuple(theirs_state[key].shape)} there, {tuple(mine[key].shape)} here)"
        )
    return found


def _same_task(theirs: Sequence[str], ours: Sequence[str]) -> bool:
    """Splits of one task (``refcoco_plus`` and ``refcoco_plus_val``) count as the same."""
    return all(any(a.startswith(b) or b.startswith(a) for b in theirs) for a in ours)


def check_checkpoint_fits(
    checkpoint: Mapping[str, Any],
    model: Any,
    run_config: Any,
    file: str,
    writer: Optional[Any] = None,
) -> None:
    """Raise a one-line :class:`~mmf_uvlp.errors.UserConfigError` when
    ``checkpoint`` (read from ``file``) does not fit ``model`` of the run; with
    ``checkpoint.accept_mismatch=True``, log what differs instead."""
    model = getattr(model, "module", model)
    found = differences(checkpoint, model.state_dict(), run_config)
    if not found:
        return
    what = f"checkpoint {file} does not fit this run: {'; '.join(found)}"
    if bool(run_config.checkpoint.get("accept_mismatch", False)):
        message = f"{what}; loading it anyway ({ACCEPT_KEY}=True)"
        logger.warning(message)
        if writer is not None and hasattr(writer, "write"):
            writer.write(message, "warning")
        return
    raise UserConfigError(
        f"{what}; resume from a checkpoint of this task and model, or load "
        f"it anyway with {ACCEPT_KEY}=True"
    )


TRUST_RESUME_FILE = "checkpoint.trust_resume_file"


def load_run_checkpoint(
    checkpoint: Any, file: str, local_path: str, map_location: Any, allowed: Sequence[Any] = ()
) -> Dict[str, Any]:
    """A checkpoint that MMF's ``checkpoint`` (its Checkpoint) loads (``local_path``: where
    ``file`` lies), as plain data and numpy arrays; the run's ``checkpoint.resume_file``
    loads whatever it holds when ``checkpoint.trust_resume_file`` is true, and a refusal of
    it names that opt-in."""
    config = getattr(checkpoint, "config", None)  # None: a Checkpoint built without a run
    checkpoint_config = config.get("checkpoint", {}) if config is not None else {}
    resume_file = checkpoint_config.get("resume_file", None)
    is_resume_file = resume_file is not None and os.path.abspath(
        str(resume_file)
    ) == os.path.abspath(str(file))
    trusted = is_resume_file and bool(checkpoint_config.get("trust_resume_file", False))
    hint = f"set {TRUST_RESUME_FILE}=True (it may then run code)" if is_resume_file else ""
    return load_checkpoint(
        str(local_path), map_location=map_location, allowed=allowed, trust=trusted, trust_hint=hint
    )


# ------------------------------------------------------------------ run state
class LrScheduleResume:
    """The lr scheduler's state in a checkpoint's run state (``lr_scheduler``), a component of
    the ``uvlp`` trainer: MMF 1.0.0rc10 neither saves nor restores it. A resume holds the
    loaded state until the run's scheduler is built (:meth:`restore`)."""

    def __init__(self, trainer: Any):
        self.trainer = trainer  # MMF's: its ``lr_scheduler`` and ``optimizer``
        self._loaded: Optional[Dict[str, Any]] = None

    def state_dict(self) -> Dict[str, Any]:
        scheduler = getattr(self.trainer, "lr_scheduler", None)
        return {"lr_scheduler": None if scheduler is None else scheduler.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any], file: str = "") -> None:
        self._loaded = state["lr_scheduler"]

    def restore(self) -> None:
        """The loaded scheduler state into the trainer's scheduler, and the lr of its next
        update into the optimizer."""
        state, self._loaded = self._loaded, None
        scheduler = getattr(self.trainer, "lr_scheduler", None)
        if state is None or scheduler is None:
            return
        scheduler.load_state_dict(state)
        # Building the scheduler set the lr of step 0; the next update uses the lr of
        # the restored step under this run's schedule (a longer max_updates extends it).
        lambdas = getattr(scheduler, "lr_lambdas", None)
        if lambdas is None:
            rates = scheduler.get_last_lr()
        else:
            rates = [
                base * fn(scheduler.last_epoch) for base, fn in zip(scheduler.base_lrs, lambdas)
            ]
        for group, rate in zip(self.trainer.optimizer.param_groups, rates):
            group["lr"] = rate


class RunState:
    """What a checkpoint carries beyond MMF's to resume the same run (``uvlp_run_state``): the
    union of the states of the trainer's ``components`` (each a mapping of its own entries:
    ``rng``, ``data`` and ``epoch``, ``lr_scheduler``), collected in their order; a resume
    hands each component the whole run state."""

    def __init__(self, *components: Any):
        self.components = components

    def state_dict(self) -> Dict[str, Any]:
        state: Dict[str, Any] = {}
        for component in self.components:
            state.update(component.state_dict())
        return state

    def load_state_dict(self, state: Mapping[str, Any], file: str) -> None:
        """Put every component back where the checkpoint ``file`` of ``state`` was written."""
        for component in self.components:
            component.load_state_dict(state, file)


def newest_complete(checkpoint: Any) -> Optional[str]:
    """Loads the newest models/model_N.ckpt of ``checkpoint`` (MMF's Checkpoint) that can be
    read; its path, or None."""

    def update_of(path: str) -> int:
        return int(re.search(r"model_(\d+)\.ckpt$", path).group(1))

    candidates = glob.glob(os.path.join(checkpoint.models_foldername, "model_*.ckpt"))
    for candidate in sorted(candidates, key=update_of, reverse=True):
        try:
            checkpoint._load(candidate)
        except DamagedCheckpoint:
            continue
        return candidate
    return None


def _fall_back(checkpoint: Any, message: str) -> None:
    warnings.warn(message)
    checkpoint.trainer.writer.write(message, "warning")


def load_or_fall_back(checkpoint: Any, load_state_dict: Callable[[Any], Any]) -> Any:
    """MMF's ``load_state_dict`` of ``checkpoint``; a resume whose current.ckpt is missing
    or damaged loads the newest complete checkpoint instead (with a warning)."""
    config = checkpoint.config.checkpoint
    current = os.path.join(checkpoint.ckpt_foldername, checkpoint.ckpt_prefix + "current.ckpt")
    if config.resume and not config.resume_best and not os.path.exists(current):
        # e.g. the disk filled up while the first current.ckpt was written
        fallback = newest_complete(checkpoint)
        if fallback is not None:
            _fall_back(
                checkpoint,
                f"{current} is missing; resuming from {fallback}, the newest complete checkpoint",
            )
            return None
    try:
        return load_state_dict(checkpoint)
    except DamagedCheckpoint as damaged:
        if not config.resume or os.path.abspath(damaged.path) != os.path.abspath(current):
            raise
        fallback = newest_complete(checkpoint)
        if fallback is None:
            raise DamagedCheckpoint(
                damaged.path, f"and no complete checkpoint in {checkpoint.models_foldername}"
            ) from damaged
        _fall_back(
            checkpoint, f"{damaged}; resuming from {fallback}, the newest complete checkpoint"
        )
    return None
