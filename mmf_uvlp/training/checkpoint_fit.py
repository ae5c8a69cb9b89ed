"""A checkpoint that a run resumes from (``checkpoint.resume``, ``checkpoint.resume_file``) is
checked against the run before MMF loads it.

MMF loads a checkpoint's weights with ``strict=False``: a VQA2 checkpoint given to a RefCOCO+
run loads without a word, its answer head unused and the run's region scorer left at its
random initialisation. With the plugin, a checkpoint whose model, task or weights differ
from the run's stops the run in one line naming what differs::

    mmf_run: error: checkpoint save/uvla_vqa2/current.ckpt does not fit this run: it was
    trained on vqa2, this run is on refcoco_plus; it lacks 4 tensors of this model
    (heads.region_scorer) and holds 5 that this model has not (heads.pooled_classifier); ...

``checkpoint.accept_mismatch=True`` loads it anyway (what differs is then logged as a
warning). MMF's own partial loading (``checkpoint.resume_pretrained`` with a
``pretrained_state_mapping``) and the fine-tuning start of the plugin's models
(``model_config.<model>.pretrained_checkpoint``, which copies the encoder and drops the
pre-training heads on purpose, saying so in the log) are not checked here.
"""

from __future__ import annotations

import logging
from typing import Any, List, Mapping, Optional, Sequence

ACCEPT_KEY = "checkpoint.accept_mismatch"
logger = logging.getLogger(__name__)


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
    from mmf_uvlp.errors import UserConfigError

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
