"""The study as a list of steps, each the command a user would type (``tools/demo.py``'s shape).

Order: the toy world, the corpora the systems read, then seed by seed (so that every
table is complete for seed 0 first) and system by system: pre-training (none for Base),
fine-tuning on each task (``projects/uvla/finetune/<task>.yaml``, ``run_type=
train_inference``) and RefCOCO+ val / testA / testB inference from the fine-tuned
``refcoco_plus/current.ckpt``. Seed s is ``training.seed=s`` in pre-training and
fine-tuning. Runs live in ``<runs>/<system>/seed<s>/<pretrain | task | refcoco_plus_splits>``.

A step is done when the output proving it finished exists: ``world.json``, the corpus's
``annotations/index.json``, the pre-trained ``uvla_final.pth``, the test metric of a
fine-tuning run in its ``train.log`` (MMF logs it after the final checkpoint), or the three
RefCOCO+ split metrics. Training steps pass ``checkpoint.resume=True``, so an interrupted
run continues from its last checkpoint as the same run.

Unless checkpoints are kept, a finished step deletes the MMF checkpoints no later step reads
(``prune``): a pre-training run keeps only ``uvla_final.pth`` (what fine-tuning loads), a
fine-tuning run only its logs, the RefCOCO+ run its ``current.ckpt`` until the split
inference has read it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

import yaml

from mmf_uvlp.replication.study import REPO, TASKS, System, config_datasets
from mmf_uvlp.replication.world import World
from mmf_uvlp.report.results import LOG_FILE, parse_log

MMF_RUN = str(Path(sys.executable).with_name("mmf_run"))
METRICS = {"vqa2": "vqa_accuracy", "nlvr2": "accuracy", "visual_entailment": "accuracy",
           "refcoco_plus": "refcoco_accuracy"}
SPLIT_VIEWS = ("refcoco_plus_val", "refcoco_plus_testA", "refcoco_plus_testB")
SPLITS_RUN = "refcoco_plus_splits"
RECORD = "step.json"
KINDS = ("world", "corpus", "pretrain", "finetune", "evaluate")


@dataclass(frozen=True)
class Settings:
    """Everything besides the systems that determines the study's commands."""

    world: World
    runs: Path
    seeds: tuple[int, ...] = (0, 1, 2)
    tasks: tuple[str, ...] = TASKS
    pretrain_updates: int = 400
    finetune_updates: int = 120
    model_overrides: tuple[str, ...] = ()
    keep_checkpoints: bool = False


@dataclass(frozen=True)
class Step:
    """One command. ``kind``: one of :data:`KINDS`; ``folder``: where its output goes;
    done when ``proof_file`` exists and ``train.log`` in ``folder`` has every
    ``proof_keys``; ``record``: the json written when it finishes (command, wall time);
    ``needs``: a file it reads that an earlier step wrote; ``prune``: what to delete once
    it is done. ``system`` / ``seed`` / ``task`` name a training or inference run."""

    kind: str
    title: str
    command: tuple[str, ...]
    folder: Path
    record: Path
    proof_file: Path | None = None
    proof_keys: tuple[str, ...] = ()
    needs: Path | None = None
    prune: tuple[Path, ...] = field(default_factory=tuple)
    system: str | None = None
    seed: int | None = None
    task: str | None = None

    def done(self) -> bool:
        if self.proof_file is not None and not self.proof_file.exists():
            return False
        if not self.proof_keys:
            return True
        log = self.folder / LOG_FILE
        return log.exists() and all(key in parse_log(log) for key in self.proof_keys)

    @property
    def proof(self) -> str:
        """What shows it finished, for messages."""
        if self.proof_keys:
            return f"{self.folder / LOG_FILE}: {', '.join(self.proof_keys)}"
        return str(self.proof_file)


def model_overrides(path: str | Path) -> tuple[str, ...]:
    """A model yaml (e.g. ``configs/models/uvla/tiny_random.yaml``) as ``mmf_run``
    command-line overrides, so that every run of the study uses it."""
    path = Path(path) if Path(path).is_absolute() else REPO / path
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict) or not isinstance(data.get("model_config"), dict):
        raise ValueError(f"{path}: expected a yaml with a model_config mapping")
    if "includes" in data:
        raise ValueError(f"{path}: includes are not supported in --model-config")
    return tuple(_flatten("model_config", data["model_config"], path))


def _flatten(prefix: str, value: object, path: Path) -> Iterable[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(f"{prefix}.{key}", item, path)
    elif value is None or isinstance(value, (bool, int, float, str)):
        yield f"{prefix}={value}"  # MMF reads None / True / False as Python literals
    else:
        raise ValueError(f"{path}: {prefix}: only scalar values can be passed on the command "
                         f"line, got {type(value).__name__}")


def _schedule(updates: int, checkpoints: int, seed: int) -> list[str]:
    return [f"training.max_updates={updates}", f"training.seed={seed}",
            f"training.evaluation_interval={updates}",
            f"training.checkpoint_interval={max(updates // checkpoints, 1)}",
            f"scheduler.params.num_warmup_steps={updates // 10}", "checkpoint.resume=True"]


def _data(settings: Settings) -> list[str]:
    options = [f"env.data_dir={settings.world.path}"]
    if settings.world.feature_dim is not None:
        options.append(f"model_config.uvla.feature_dim={settings.world.feature_dim}")
    return options


def _heavy(folder: Path, *names: str) -> tuple[Path, ...]:
    return tuple(folder / name for name in names)


def setup_steps(systems: Sequence[System], settings: Settings) -> list[Step]:
    """The toy world (when it is a preset) and the corpora the systems read."""
    world, steps = settings.world, []
    setup = settings.runs / "setup"
    if world.preset:
        steps.append(Step("world", f"toy world ({world.preset} preset)",
                          tuple(world.generate_command()), world.path,
                          setup / "world.json", proof_file=world.path / "world.json"))
    for corpus in dict.fromkeys(s.corpus for s in systems if s.corpus):
        folder = world.path / corpus
        steps.append(Step("corpus", f"weakly aligned corpus {corpus}",
                          tuple(world.corpus_command(corpus)), folder, setup / f"{corpus}.json",
                          proof_file=folder / "annotations" / "index.json"))
    return steps


def system_steps(system: System, seed: int, settings: Settings) -> list[Step]:
    """Pre-training (unless Base), fine-tuning on each task and the RefCOCO+ splits."""
    unit = settings.runs / system.key / f"seed{seed}"
    where = f"{system.name}, seed {seed}"
    steps, pretrained = [], "None"
    if system.config:
        folder = unit / "pretrain"
        holdout = []
        if settings.world.holdout_every is not None:
            holdout = [f"dataset_config.{name}.holdout_every={settings.world.holdout_every}"
                       for name in config_datasets(system.config)]
        command = (MMF_RUN, f"config={system.config}", *_data(settings),
                   f"env.save_dir={folder}", *_schedule(settings.pretrain_updates, 4, seed),
                   *holdout, *settings.model_overrides)
        steps.append(Step("pretrain", f"pre-train {where}", command, folder, folder / RECORD,
                          proof_file=folder / "uvla_final.pth",
                          prune=_heavy(folder, "models", "best.ckpt", "current.ckpt"),
                          system=system.key, seed=seed, task="pretrain"))
        pretrained = str(folder / "uvla_final.pth")
    evaluate_splits = "refcoco_plus" in settings.tasks
    for task in settings.tasks:
        folder = unit / task
        command = (MMF_RUN, f"config=projects/uvla/finetune/{task}.yaml", *_data(settings),
                   f"env.save_dir={folder}",
                   f"model_config.uvla.pretrained_checkpoint={pretrained}",
                   *_schedule(settings.finetune_updates, 2, seed), "run_type=train_inference",
                   *settings.model_overrides)
        heavy = ["models", "best.ckpt", "uvla_final.pth"]
        if not (task == "refcoco_plus" and evaluate_splits):
            heavy.append("current.ckpt")
        steps.append(Step("finetune", f"fine-tune {where} on {task}", command, folder,
                          folder / RECORD, proof_keys=(f"test/{task}/{METRICS[task]}",),
                          prune=_heavy(folder, *heavy), system=system.key, seed=seed, task=task))
    if evaluate_splits:
        folder = unit / SPLITS_RUN
        checkpoint = unit / "refcoco_plus" / "current.ckpt"
        command = (MMF_RUN, "config=projects/uvla/finetune/refcoco_plus.yaml", *_data(settings),
                   f"env.save_dir={folder}", "model_config.uvla.pretrained_checkpoint=None",
                   "run_type=inference", f"checkpoint.resume_file={checkpoint}",
                   f"datasets={','.join(SPLIT_VIEWS)}", *settings.model_overrides)
        keys = tuple(f"test/{view}/refcoco_accuracy" for view in SPLIT_VIEWS)
        steps.append(Step("evaluate", f"RefCOCO+ val/testA/testB of {where}", command, folder,
                          folder / RECORD, proof_keys=keys, needs=checkpoint,
                          prune=(checkpoint,), system=system.key, seed=seed, task=SPLITS_RUN))
    if settings.keep_checkpoints:
        steps = [replace(step, prune=()) for step in steps]
    return steps


def plan(systems: Sequence[System], settings: Settings) -> list[Step]:
    """Every step of the study, in the order they run."""
    steps = setup_steps(systems, settings)
    for seed in settings.seeds:
        for system in systems:
            steps += system_steps(system, seed, settings)
    return steps
