"""Which heads a uvla run trains, with their losses and label count.

``model_config.<model>.heads`` set: the config's ``heads``, ``losses``, ``num_labels`` /
``num_labels_from``. ``heads: null`` (the uvla defaults): those of the task whose
``tasks.<task>.datasets`` lists the run's datasets, chosen when the model is built from the
``datasets`` of the run's config, so that MMF's own benchmark configs
(``projects/visual_bert/configs/<task>/defaults.yaml``) run with ``model=uvla``: VQA2 gets
the answer classifier and its BCE, NLVR2 the pair classifier, pre-training datasets the
pre-training heads. A ``losses`` or ``num_labels`` / ``num_labels_from`` set in the config
wins over the task's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from mmf.common.registry import registry
from mmf_uvlp.errors import UserConfigError


@dataclass
class HeadSpec:
    """The heads of a run, their MMF loss configs and the task heads' label count."""

    heads: List[str]
    losses: List[Any]
    num_labels: Optional[int]
    num_labels_from: Optional[str]
    source: str  # the config key it came from, for messages


def run_datasets() -> List[str]:
    """The ``datasets`` of the run's config in MMF's registry (``a,b`` or a list)."""
    config = registry.get("config", None, no_warning=True)
    names = config.get("datasets", None) if config is not None else None
    if isinstance(names, str):
        return [name.strip() for name in names.split(",") if name.strip()]
    return [str(name) for name in names or []]


def _labels_of(node: Any) -> tuple:
    return node.get("num_labels", None), node.get("num_labels_from", None)


def head_spec(config: Any, config_key: str, datasets: Optional[List[str]] = None) -> HeadSpec:
    """The :class:`HeadSpec` of ``config`` (``model_config.<config_key>``) for ``datasets``
    (default: the run's, :func:`run_datasets`)."""
    prefix = f"model_config.{config_key}"
    losses = config.get("losses", None)
    labels = _labels_of(config)
    if config.get("heads", None) is not None:
        if losses is None:
            raise UserConfigError(
                f"{prefix}.heads is set, so {prefix}.losses must be too (or leave both null "
                f"for the heads of the run's task, {prefix}.tasks)"
            )
        return HeadSpec(list(config.heads), list(losses), *labels, source=prefix)

    datasets = run_datasets() if datasets is None else datasets
    tasks = config.get("tasks", None) or {}
    if not datasets:
        raise UserConfigError(
            f"{prefix}.heads is null and the run names no datasets: set "
            f"{prefix}.heads and {prefix}.losses"
        )
    chosen = {}
    for dataset in datasets:
        matches = [name for name, task in tasks.items() if dataset in (task.get("datasets") or [])]
        if not matches:
            raise UserConfigError(
                f"{prefix}.heads is null and dataset {dataset!r} is in no "
                f"{prefix}.tasks.<task>.datasets ({', '.join(tasks) or 'none defined'}): set "
                f"{prefix}.heads and {prefix}.losses, or add {dataset!r} to a task's datasets"
            )
        chosen[dataset] = matches[0]
    if len(set(chosen.values())) > 1:
        raise UserConfigError(
            f"{prefix}.heads is null and the run's datasets belong to different tasks "
            f"({', '.join(f'{d}: {t}' for d, t in chosen.items())}): run them separately or "
            f"set {prefix}.heads and {prefix}.losses"
        )
    name = next(iter(chosen.values()))
    task = tasks[name]
    if task.get("heads", None) is None or task.get("losses", None) is None:
        raise UserConfigError(f"{prefix}.tasks.{name} needs heads and losses")
    if labels == (None, None):
        labels = _labels_of(task)
    return HeadSpec(
        list(task.heads),
        list(losses if losses is not None else task.losses),
        *labels,
        source=f"{prefix}.tasks.{name}",
    )
