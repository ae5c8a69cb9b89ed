"""The study as a list of steps, each the command a user would type.

Order: the toy world, the corpora the systems read, then seed by seed (so that every
table is complete for seed 0 first) and system by system: pre-training (none for Base),
fine-tuning on each task (``run_type=train_inference``) and RefCOCO+ val / testA / testB
inference from the fine-tuned ``refcoco_plus/current.ckpt`` (``best.ckpt`` when fine-tuning
evaluates more than once: the checkpoint with the best val score, which MMF tests). The
system's ``model`` gives the fine-tuning configs (``projects/uvla/finetune/<task>.yaml``, a
reference model's own), the options that start fine-tuning from the pre-trained weights and those
of the split inference. Seed s is ``training.seed=s`` in pre-training and fine-tuning. Runs live in
``<runs>/<system>/seed<s>/<pretrain | task | refcoco_plus_splits>``.

A step is done when the output proving it finished exists (and, for a training or
inference run, the ``step.json`` the runner writes when it finished): ``world.json``, the
corpus's ``annotations/index.json``, the pre-trained weights (``<model>_final.pth``:
``uvla_final.pth``, ``visual_bert_uvlp_final.pth``, ...), the test metric of a fine-tuning run in its
``train.log`` (MMF logs it after the final checkpoint), or the three RefCOCO+ split
metrics. Training steps pass ``checkpoint.resume=True``, so an interrupted run continues
from its last checkpoint as the same run.

Unless checkpoints are kept, a finished step deletes the MMF checkpoints no later step reads
(``prune``): a pre-training run keeps only its final weights (what fine-tuning loads), a
fine-tuning run only its logs, the RefCOCO+ run the checkpoint the split inference reads
until it has read it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import yaml

from mmf_uvlp.replication.study import (
    REPO,
    SYSTEMS,
    System,
    config_datasets,
    config_model,
)
from mmf_uvlp.replication.world import World
from mmf_uvlp.report.results import LOG_FILE, parse_log
from mmf_uvlp.reference_models import HarnessModel
from mmf_uvlp.tasks import METRICS, REFCOCO_PLUS_SPLIT_DATASETS, SPLITS_RUN, TASKS

MMF_RUN = str(Path(sys.executable).with_name("mmf_run"))
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
    finetune_evaluations: int = 1
    model_overrides: tuple[str, ...] = ()
    keep_checkpoints: bool = False
    pretrain_options: tuple[str, ...] = ()
    finetune_options: tuple[str, ...] = ()
    task_options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    task_updates: tuple[tuple[str, int], ...] = ()

    def updates_of(self, task: str) -> int:
        """Fine-tuning updates of ``task``: its own (the recipe's), else every task's."""
        return dict(self.task_updates).get(task, self.finetune_updates)

    def options_of(self, task: str) -> tuple[str, ...]:
        """The recipe's fine-tuning options of ``task``: every task's, then its own."""
        own = [option for name, options in self.task_options if name == task for option in options]
        return (*self.finetune_options, *own)


@dataclass(frozen=True)
class Step:
    """One command. ``kind``: one of :data:`KINDS`; ``folder``: where its output goes;
    done when ``proof_file`` exists and ``train.log`` in ``folder`` has every
    ``proof_keys``; ``record``: the json written when it finishes (command, wall time);
    ``needs``: a file it reads that an earlier step wrote; ``prune``: what to delete once
    it is done; ``resumes_from``: the checkpoint an interrupted run continues from;
    ``outdated``: says why a finished output no longer is what the step would make (None
    when it is); ``world``: the settings of the world that its output depends on (see
    ``World.settings_for``). ``system`` / ``seed`` / ``task`` name a training or inference
    run."""

    kind: str
    title: str
    command: tuple[str, ...]
    folder: Path
    record: Path
    proof_file: Path | None = None
    proof_keys: tuple[str, ...] = ()
    needs: Path | None = None
    prune: tuple[Path, ...] = field(default_factory=tuple)
    resumes_from: Path | None = None
    system: str | None = None
    seed: int | None = None
    task: str | None = None
    outdated: Callable[[], str | None] | None = None
    world: Mapping[str, object] | None = field(default=None, compare=False)

    def has_output(self) -> bool:
        """Whether the output proving it finished exists (``proof_file``, ``proof_keys``)."""
        if self.proof_file is not None and not self.proof_file.exists():
            return False
        if not self.proof_keys:
            return True
        log = self.folder / LOG_FILE  # a value being written or cut off is not there yet
        return log.exists() and all(
            key in parse_log(log, unfinished=True) for key in self.proof_keys
        )

    def done(self) -> bool:
        """Finished: its output exists and, for a training or inference run (``system``),
        its ``record`` too, which the runner writes once the command ended with its output:
        a run without its record (the runner stopped in between) is not done, since the
        command and world it was made with are not known."""
        if self.system is not None and not self.record.exists():
            return False
        return self.has_output()

    @property
    def proof(self) -> str:
        """What shows it finished, for messages."""
        if self.proof_keys:
            return f"{self.folder / LOG_FILE}: {', '.join(self.proof_keys)}"
        return str(self.proof_file)


def model_overrides(path: str | Path) -> tuple[str, ...]:
    """A model yaml (e.g. ``configs/models/uvla/tiny_random.yaml``) as ``mmf_run``
    command-line overrides; each run of the study gets those of its model's section
    (``model_config.uvla`` for uvla systems, ``model_config.vl_bert`` for VL-BERT, ...)."""
    path = Path(path) if Path(path).is_absolute() else REPO / path
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict) or not isinstance(data.get("model_config"), dict):
        raise ValueError(f"{path}: expected a yaml with a model_config mapping")
    if "includes" in data:
        raise ValueError(f"{path}: includes are not supported in --model-config")
    sections = sorted({system.model.model_section for system in SYSTEMS.values()})
    unknown = [name for name in data["model_config"] if name not in sections]
    if unknown:
        raise ValueError(
            f"{path}: model_config sections {unknown} belong to no model of the "
            f"study; expected sections from {sections}"
        )
    return tuple(_flatten("model_config", data["model_config"], path))


def _flatten(prefix: str, value: object, path: Path) -> Iterable[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(f"{prefix}.{key}", item, path)
    elif value is None or isinstance(value, (bool, int, float, str)):
        yield f"{prefix}={value}"  # MMF reads None / True / False as Python literals
    elif isinstance(value, list) and all(isinstance(v, (bool, int, float)) for v in value):
        yield f"{prefix}={value}"  # e.g. [0, 1], read as a list literal
    else:
        raise ValueError(
            f"{path}: {prefix}: only scalar values and lists of numbers can be "
            f"passed on the command line, got {type(value).__name__}"
        )


def schedule_options(updates: int, checkpoints: int, seed: int, evaluations: int = 1) -> list[str]:
    """``mmf_run`` options of a seeded, resumable run of ``updates`` updates (10 % warm-up),
    evaluated ``evaluations`` times (the last at its end) and checkpointed ``checkpoints``
    times."""
    return [
        f"training.max_updates={updates}",
        f"training.seed={seed}",
        f"training.evaluation_interval={max(updates // evaluations, 1)}",
        f"training.checkpoint_interval={max(updates // checkpoints, 1)}",
        f"scheduler.params.num_warmup_steps={updates // 10}",
        "checkpoint.resume=True",
    ]


def _data(settings: Settings, model: HarnessModel) -> list[str]:
    options = [f"env.data_dir={settings.world.path}"]
    if settings.world.feature_dim is not None:
        options += model.feature_dim(settings.world.feature_dim)
    return options


def _for_model(options: Iterable[str], model: HarnessModel) -> tuple[str, ...]:
    """``options`` less those of another model's ``model_config`` section."""
    own = f"model_config.{model.model_section}."
    return tuple(
        option
        for option in options
        if not option.startswith("model_config.") or option.startswith(own)
    )


def _heavy(folder: Path, *names: str) -> tuple[Path, ...]:
    return tuple(folder / name for name in names)


def setup_steps(systems: Sequence[System], settings: Settings) -> list[Step]:
    """The toy world (when it is a preset) and the corpora the systems read."""
    world, steps = settings.world, []
    setup = settings.runs / "setup"
    if world.preset:
        steps.append(
            Step(
                "world",
                f"toy world ({world.preset} preset)",
                tuple(world.generate_command()),
                world.path,
                setup / "world.json",
                proof_file=world.path / "world.json",
                outdated=world.drift,
            )
        )
    for corpus in dict.fromkeys(s.corpus for s in systems if s.corpus):
        folder = world.path / corpus
        steps.append(
            Step(
                "corpus",
                f"weakly aligned corpus {corpus}",
                tuple(world.corpus_command(corpus)),
                folder,
                setup / f"{corpus}.json",
                proof_file=folder / "annotations" / "index.json",
                world=world.settings_for("pretrain"),
            )
        )
    return steps


def system_steps(system: System, seed: int, settings: Settings) -> list[Step]:
    """Pre-training (unless Base), fine-tuning on each task and the RefCOCO+ splits, with
    the system's model (its fine-tuning configs and weight-loading options)."""
    model = system.model
    unit = settings.runs / system.key / f"seed{seed}"
    where = f"{system.name}, seed {seed}"
    data, overrides = _data(settings, model), _for_model(settings.model_overrides, model)
    steps, pretrained = [], None
    if system.config:
        folder = unit / "pretrain"
        holdout = []
        if settings.world.holdout_every is not None:
            holdout = [
                f"dataset_config.{name}.holdout_every={settings.world.holdout_every}"
                for name in config_datasets(system.config)
            ]
        command = (
            MMF_RUN,
            f"config={system.config}",
            *data,
            f"env.save_dir={folder}",
            *schedule_options(settings.pretrain_updates * system.updates, 4, seed),
            *holdout,
            *_for_model(settings.pretrain_options, model),
            *overrides,
        )
        pretrained = folder / model.final_weights
        steps.append(
            Step(
                "pretrain",
                f"pre-train {where}",
                command,
                folder,
                folder / RECORD,
                proof_file=pretrained,
                prune=_heavy(folder, "models", "best.ckpt", "current.ckpt"),
                resumes_from=folder / "current.ckpt",
                system=system.key,
                seed=seed,
                task="pretrain",
                world=settings.world.settings_for("pretrain"),
            )
        )
    evaluate_splits = "refcoco_plus" in settings.tasks
    # The checkpoint MMF tested: the best on val (restored from best.ckpt). Evaluated once,
    # at the end, that is also current.ckpt, which the splits read then (as they always did).
    tested = "best.ckpt" if settings.finetune_evaluations > 1 else "current.ckpt"
    for task in settings.tasks:
        folder = unit / task
        config = model.finetune(task)
        command = (
            MMF_RUN,
            f"config={config}",
            *data,
            f"env.save_dir={folder}",
            *model.start_from(pretrained),
            *schedule_options(settings.updates_of(task), 2, seed, settings.finetune_evaluations),
            *_for_model(settings.options_of(task), model),
            "run_type=train_inference",
            *overrides,
        )
        heavy = ["models", "best.ckpt", "current.ckpt", f"{config_model(config)}_final.pth"]
        if task == "refcoco_plus" and evaluate_splits:
            heavy.remove(tested)
        steps.append(
            Step(
                "finetune",
                f"fine-tune {where} on {task}",
                command,
                folder,
                folder / RECORD,
                proof_keys=(f"test/{task}/{METRICS[task]}",),
                prune=_heavy(folder, *heavy),
                resumes_from=folder / "current.ckpt",
                system=system.key,
                seed=seed,
                task=task,
                world=settings.world.settings_for(task),
            )
        )
    if evaluate_splits:
        folder = unit / SPLITS_RUN
        checkpoint = unit / "refcoco_plus" / tested
        command = (
            MMF_RUN,
            f"config={model.finetune('refcoco_plus')}",
            *data,
            f"env.save_dir={folder}",
            *model.evaluate_from(checkpoint),
            *_for_model(settings.options_of("refcoco_plus"), model),
            "run_type=inference",
            f"datasets={','.join(REFCOCO_PLUS_SPLIT_DATASETS)}",
            *overrides,
        )
        keys = tuple(f"test/{view}/refcoco_accuracy" for view in REFCOCO_PLUS_SPLIT_DATASETS)
        steps.append(
            Step(
                "evaluate",
                f"RefCOCO+ val/testA/testB of {where}",
                command,
                folder,
                folder / RECORD,
                proof_keys=keys,
                needs=checkpoint,
                prune=(checkpoint,),
                system=system.key,
                seed=seed,
                task=SPLITS_RUN,
                world=settings.world.settings_for("refcoco_plus"),
            )
        )
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
