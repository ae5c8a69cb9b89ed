"""A study recipe: the world, schedules and ``mmf_run`` options a study runs with.

A recipe (``configs/study/<name>.yaml``, ``uvlp-replicate --recipe <name or file>``) fixes
what the command line would otherwise repeat for every run::

    world: calibrated                 # toy-world preset or data folder
    tables: [1]                       # the study's tables, systems and seed count (default:
    systems: [base, uvla]             # every table, every system of them, 3 seeds)
    seeds: 1
    pretrain:
      updates: 5000
      options: [optimizer.params.lr=3e-4]
    finetune:
      updates: 1500
      evaluations: 5                  # val every 300 updates, test the best (default 1: the end)
      options: [optimizer.params.lr=3e-4]
      tasks:                          # options of one task's fine-tuning only
        vqa2: ["model_config.uvla.losses=[{'type':'softmax_kldiv'}]"]
        nlvr2:                        # or a mapping: the task's own updates, and options
          updates: 3000
          options: [model_config.uvla.pooling=mean]

Every key is optional; the command line's options win over the recipe's. ``finetune.evaluations`` (default 1: at the end) evaluates each
fine-tuning on val that many times, evenly spaced; MMF then tests the checkpoint with the best
val score (the task config's ``training.early_stop.criteria``), which it restores from
``best.ckpt``. Options are ``mmf_run`` overrides (Python literals: ``None``,
``True``); one that starts with ``model_config.<section>.`` reaches only the runs of the
model with that section (``uvla``, ``visual_bert``, ...), as ``--model-config`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mmf_uvlp.utils.config_files import configs_dir

_KEYS = {
    "": ("world", "tables", "systems", "seeds", "pretrain", "finetune"),
    "pretrain": ("updates", "options"),
    "finetune": ("updates", "evaluations", "options", "tasks"),
    "finetune.tasks.<task>": ("updates", "options"),
}


@dataclass(frozen=True)
class Recipe:
    """The parsed recipe; None / empty where it says nothing."""

    path: Path | None = None
    world: str | None = None
    tables: str | None = None
    systems: str | None = None
    seeds: int | None = None
    pretrain_updates: int | None = None
    finetune_updates: int | None = None
    finetune_evaluations: int | None = None
    pretrain_options: tuple[str, ...] = ()
    finetune_options: tuple[str, ...] = ()
    task_options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    task_updates: tuple[tuple[str, int], ...] = ()


def _mapping(value: Any, section: str, path: Path) -> dict:
    """``section`` ("" = the file's top level) as a dict holding only its keys."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(
            f"{path}: {section or 'the file'}: expected a mapping, got {type(value).__name__}"
        )
    unknown = [key for key in value if key not in _KEYS[section]]
    if unknown:
        raise ValueError(
            f"{path}: {section or 'top level'}: unknown keys {unknown}; expected "
            f"keys from {list(_KEYS[section])}"
        )
    return value


def _options(value: Any, where: str, path: Path) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and "=" in v for v in value):
        raise ValueError(
            f"{path}: {where}: expected a list of mmf_run options KEY=VALUE, got {value!r}"
        )
    return tuple(value)


def _positive(value: Any, where: str, path: Path) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{path}: {where}: expected an integer >= 1, got {value!r}")
    return value


def _names(value: Any, where: str, path: Path) -> str | None:
    """A list of table or system names as the command line spells them (comma-separated)."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value)
    ):
        raise ValueError(f"{path}: {where}: expected a list of names, got {value!r}")
    return ",".join(str(v) for v in value)


def find_recipe(spec: str | Path) -> Path:
    """The recipe file ``spec`` names: a path, or the name of one of the plugin's recipes
    (``demo``: ``configs/study/demo.yaml``, in the checkout or the installed package)."""
    path = Path(spec)
    if path.exists() or path.suffix or len(path.parts) > 1:
        return path
    return Path(configs_dir()) / "study" / f"{spec}.yaml"


def load_recipe(path: str | Path, tasks: tuple[str, ...]) -> Recipe:
    """Read and check ``path`` (a file, or a recipe's name: :func:`find_recipe`); ``tasks``:
    the task names ``finetune.tasks`` may use."""
    path = find_recipe(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise FileNotFoundError(f"--recipe: cannot read {path}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid yaml: {e}") from e
    top = _mapping(data, "", path)
    pretrain = _mapping(top.get("pretrain"), "pretrain", path)
    finetune = _mapping(top.get("finetune"), "finetune", path)
    per_task = finetune.get("tasks") or {}
    if not isinstance(per_task, dict):
        raise ValueError(f"{path}: finetune.tasks: expected a mapping task -> options")
    unknown = [task for task in per_task if task not in tasks]
    if unknown:
        raise ValueError(
            f"{path}: finetune.tasks: unknown tasks {unknown}; expected names from {list(tasks)}"
        )
    world = top.get("world")
    if world is not None and not isinstance(world, str):
        raise ValueError(f"{path}: world: expected a preset name or folder, got {world!r}")
    task_options, task_updates = [], []
    for task, value in per_task.items():
        where = f"finetune.tasks.{task}"
        if isinstance(value, dict):
            value = _mapping(value, "finetune.tasks.<task>", path)
            updates = _positive(value.get("updates"), f"{where}.updates", path)
            if updates is not None:
                task_updates.append((task, updates))
            value = value.get("options")
            where += ".options"
        task_options.append((task, _options(value, where, path)))
    return Recipe(
        path=path,
        world=world,
        tables=_names(top.get("tables"), "tables", path),
        systems=_names(top.get("systems"), "systems", path),
        seeds=_positive(top.get("seeds"), "seeds", path),
        pretrain_updates=_positive(pretrain.get("updates"), "pretrain.updates", path),
        finetune_updates=_positive(finetune.get("updates"), "finetune.updates", path),
        finetune_evaluations=_positive(finetune.get("evaluations"), "finetune.evaluations", path),
        pretrain_options=_options(pretrain.get("options"), "pretrain.options", path),
        finetune_options=_options(finetune.get("options"), "finetune.options", path),
        task_options=tuple(task_options),
        task_updates=tuple(task_updates),
    )
