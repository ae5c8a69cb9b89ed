"""The paper's Tables 1-6 (and the top-K ablation) with seeds and error bars (``make replicate``).

For every system of the chosen tables and every seed: pre-training with its config
(``mmf_run config=projects/...``; none for Base), fine-tuning on VQA2, NLVR2, VE and
RefCOCO+ with ``projects/uvla/finetune/<task>.yaml`` (the reference models VisualBERT, ViLBERT
and VL-BERT of Table 1: with their own fine-tuning configs, from their own pre-trained
weights), and RefCOCO+ val / testA / testB inference; the toy world and the corpora the
systems read are made first. Each step is the command a user would type and is skipped when
its output exists, so an interrupted study resumes (an interrupted training run continues
from its last checkpoint). Steps: ``mmf_uvlp/replication/steps.py``; tables: ``.../study.py``.
A recipe (``--recipe``: a file, or the name of one of ``configs/study/``) holds a study's
world, tables, systems, seeds, schedules and options; ``--recipe demo`` is ``make demo``.

    uvlp-replicate                                     # every table, demo world, 3 seeds
    uvlp-replicate --recipe demo --jobs 2              # make demo: Table 1's Base, μ-VLA and
                                                       # Aligned VLP on the demo world
    uvlp-replicate --recipe demo --steps world,corpus,pretrain    # a part of the chain
    uvlp-replicate --tables 1 --seeds 3 --jobs 2       # two runs at a time
    uvlp-replicate --recipe calibrated --tables 1 --jobs 2 \\
        --archive results/archive/calibrated      # finished runs kept in the repository
    uvlp-replicate --recipe calibrated --jobs 8 \\
        --executor slurm --partition learnfair --time 600 --cpus 8 --gpus 1  # steps as jobs
    uvlp-replicate --world tiny --seeds 2 --systems base,uvla,vl_bert \\
        --model-config configs/models/uvla/tiny_random.yaml \\
        --model-config configs/models/vl_bert/tiny_random.yaml --pretrain-updates 4

Writes ``<out>/table<k>.md`` + ``.png`` per table (printed too) and ``<out>/runs.json``.
One process at a time runs a seed's steps in a runs folder (``<runs>/seed<s>.lock``, see
``mmf_uvlp/training/run_lock.py``): processes that take other ``--only-seeds`` share it.
SIGTERM / SIGINT stop the running commands too; the exit status is then 128 + the signal.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mmf_uvlp.replication.archive import Archive
from mmf_uvlp.replication.children import Interrupted
from mmf_uvlp.replication.devices import GpuPlacement, visible_gpus
from mmf_uvlp.replication.outputs import spread_of_study, write_study
from mmf_uvlp.replication.recipe import Recipe, load_recipe
from mmf_uvlp.replication.executor import JobRun
from mmf_uvlp.replication.runner import (
    BadRecord,
    StaleRun,
    StepFailed,
    clock,
    execute,
    read_record,
    run_steps,
    share_cores,
    spent,
    stale_reason,
)
from mmf_uvlp.replication.steps import KINDS, Settings, Step, model_overrides, plan
from mmf_uvlp.replication.study import REPO, SYSTEMS, TABLES, select
from mmf_uvlp.tasks import TASKS
from mmf_uvlp.utils.config_files import in_checkout
from mmf_uvlp.replication.world import World
from mmf_uvlp.errors import LogFormatError, RunFolderBusy
from mmf_uvlp.training.run_lock import RunLock
from mmf_uvlp.utils.cluster import JobOptions, add_job_arguments


DEFAULT_PRETRAIN_UPDATES, DEFAULT_FINETUNE_UPDATES = 400, 120  # the demo recipe's schedule
DEFAULT_SEEDS = 3
WORK = REPO if in_checkout() else Path.cwd()  # where data/ and results/ go by default


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _seed_ids(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(sorted({int(t) for t in text.split(",") if t.strip()}))
    except ValueError:
        seeds = ()
    if not seeds or seeds[0] < 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated seeds >= 0, got {text!r}")
    return seeds


def _selected_seeds(count: int, only: tuple[int, ...] | None) -> tuple[int, ...]:
    """Seeds 0..count-1, or those of ``only`` (--only-seeds), which must lie among them."""
    if only and only[-1] >= count:
        raise ValueError(
            f"--only-seeds {','.join(map(str, only))}: expected seeds of "
            f"0..{count - 1} (--seeds {count})"
        )
    return only or tuple(range(count))


def _shown(path: Path) -> Path:
    """``path`` as a user names it: relative to the checkout or package when inside it (a
    recipe named by its name), else as given."""
    return path.relative_to(REPO) if path.is_absolute() and path.is_relative_to(REPO) else path


def _tasks(text: str) -> tuple[str, ...]:
    tasks = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise argparse.ArgumentTypeError(f"unknown tasks {unknown}; expected names from {TASKS}")
    return tasks


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(
            f"unknown steps {unknown}; expected names from {list(KINDS)}"
        )
    return kinds


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--world",
        help="tiny, demo, calibrated (toy world in --data, made when missing) or "
        "a data folder (default: the recipe's, else demo)",
    )
    parser.add_argument(
        "--data", type=Path, default=WORK / "data", help="folder of the toy worlds (default: data)"
    )
    parser.add_argument(
        "--runs",
        type=Path,
        help="folder of the runs (default: <data>/replication/<world folder>, "
        "+ __<recipe name> with --recipe)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=WORK / "results" / "replication",
        help="tables, figures and runs.json (default: results/replication)",
    )
    parser.add_argument(
        "--seeds",
        type=_positive,
        help="seeds 0..N-1 (training.seed of pre-training and fine-tuning; "
        f"default: the recipe's, else {DEFAULT_SEEDS})",
    )
    parser.add_argument(
        "--only-seeds",
        type=_seed_ids,
        help="comma-separated seeds of 0..N-1 to run and tabulate, the others "
        "left alone: processes or machines that share one --archive can "
        "each take some seeds (then --recorded prints every seed)",
    )
    parser.add_argument(
        "--tables",
        help=f"comma-separated subset of {list(TABLES)} (default: the recipe's, else all)",
    )
    parser.add_argument(
        "--systems",
        help=f"comma-separated subset of {list(SYSTEMS)} "
        "(default: the recipe's, else those of the tables)",
    )
    parser.add_argument(
        "--tasks",
        type=_tasks,
        default=TASKS,
        help=f"comma-separated subset of {list(TASKS)} (default: all)",
    )
    parser.add_argument(
        "--recipe",
        help="a study recipe: a file, or the name of one of configs/study/ "
        "(demo, calibrated): world, tables, systems, seeds, updates, "
        "mmf_run options of pre-training and fine-tuning; the options "
        "above and below win over it",
    )
    parser.add_argument(
        "--pretrain-updates", type=_positive, help="default: the recipe's, else 400"
    )
    parser.add_argument(
        "--finetune-updates", type=_positive, help="default: the recipe's, else 120"
    )
    parser.add_argument(
        "--finetune-evaluations",
        type=_positive,
        help="val evaluations per fine-tuning, evenly spaced; the best is "
        "tested (default: the recipe's, else 1: at the end)",
    )
    parser.add_argument(
        "--model-config",
        type=Path,
        action="append",
        default=[],
        help="a model yaml passed as overrides to the runs of the models "
        "whose model_config sections it holds, e.g. "
        "configs/models/uvla/tiny_random.yaml; repeatable (one per "
        "model: configs/models/<vl_bert|visual_bert|vilbert>/...)",
    )
    parser.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="keep every MMF checkpoint (default: delete those no later step reads)",
    )
    parser.add_argument(
        "--jobs",
        type=_positive,
        default=1,
        help="steps run side by side (default 1); each run then gets "
        "cpu_count/jobs threads (OMP_NUM_THREADS, unless set; with "
        "--executor slurm its --cpus) and, where GPUs are present, a GPU: "
        "run i goes on GPU i mod G (CUDA_VISIBLE_DEVICES); with jobs > 1 "
        "its output goes to "
        "<run folder>/step.out",
    )
    parser.add_argument(
        "--archive",
        type=Path,
        help="a folder (meant to be committed) that keeps each finished step's "
        "step.json and train.log, and restores those the runs folder "
        "lacks: a study resumed anywhere (docs/replication.md)",
    )
    parser.add_argument(
        "--recorded",
        action="store_true",
        help="run nothing but the toy world (the trivial rates are read from "
        "it): the tables show the runs that finished or were restored "
        "from --archive, and the steps left are listed, not run (make "
        "demo shows the calibrated study this way)",
    )
    parser.add_argument(
        "--steps",
        type=_kinds,
        help=f"comma-separated kinds of step to run, of {list(KINDS)} (default: "
        "all), e.g. world,corpus,pretrain: a part of the chain; the "
        "tables are then not written",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print the steps and whether each is done (after restoring the "
        "archive; the finished ones are archived), run nothing",
    )
    add_job_arguments(parser, default_executor=None)
    return parser.parse_args(argv)


def placed_runs(jobs: int) -> Callable[..., int]:
    """How each command runs: on a GPU of its own slot where GPUs are present (round robin
    over them, ``CUDA_VISIBLE_DEVICES``), with its share of the CPU threads."""
    gpus = visible_gpus()
    if not gpus:
        return execute
    placement = GpuPlacement(jobs, gpus)
    print(
        f"Placement: {placement.describe()}, {os.environ.get('OMP_NUM_THREADS', 'all')} CPU "
        "threads each",
        flush=True,
    )
    return placement.wrap(execute)


@dataclass(frozen=True)
class Study:
    """What one call studies: its tables and systems, the world, the recipe and the settings
    of its commands."""

    tables: list
    systems: list
    world: World
    recipe: Recipe
    settings: Settings
    every_seed: tuple[int, ...] = ()

    def steps(self) -> list[Step]:
        """Every step of the study, in the order they run."""
        return plan(self.systems, self.settings)


def configure(args: argparse.Namespace) -> Study:
    """The study ``args`` ask for: the command line, then the recipe, then the defaults.
    Raises ValueError / FileNotFoundError naming the option or file that is wrong."""
    recipe = load_recipe(args.recipe, TASKS) if args.recipe else Recipe()
    tables, systems = select(args.tables or recipe.tables, args.systems or recipe.systems)
    world = World.resolve(args.world or recipe.world or "demo", args.data)
    overrides = tuple(o for path in args.model_config for o in model_overrides(path))
    count = args.seeds or recipe.seeds or DEFAULT_SEEDS
    seeds = _selected_seeds(count, args.only_seeds)
    if args.steps and (args.recorded or args.plan):
        raise ValueError("--steps: not with --recorded or --plan, which run no training step")
    folder = world.path.name + (f"__{recipe.path.stem}" if recipe.path else "")
    runs = (args.runs or args.data / "replication" / folder).resolve()
    settings = Settings(
        world,
        runs,
        seeds,
        args.tasks,
        pretrain_updates=args.pretrain_updates
        or recipe.pretrain_updates
        or DEFAULT_PRETRAIN_UPDATES,
        finetune_updates=args.finetune_updates
        or recipe.finetune_updates
        or DEFAULT_FINETUNE_UPDATES,
        finetune_evaluations=args.finetune_evaluations or recipe.finetune_evaluations or 1,
        model_overrides=overrides,
        keep_checkpoints=args.keep_checkpoints,
        pretrain_options=recipe.pretrain_options,
        finetune_options=recipe.finetune_options,
        task_options=recipe.task_options,
        task_updates=() if args.finetune_updates else recipe.task_updates,
    )
    return Study(tables, systems, world, recipe, settings, tuple(range(count)))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        job_options = JobOptions.from_args(args) if args.executor else None
    except ValueError as e:
        print(f"replicate: error: {e}", file=sys.stderr)
        return 2
    if job_options is not None and job_options.executor == "slurm" and job_options.cpus:
        os.environ.setdefault("OMP_NUM_THREADS", str(job_options.cpus))
    share_cores(args.jobs)
    try:
        study = configure(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"replicate: error: {e}", file=sys.stderr)
        return 2
    settings = study.settings
    try:
        with contextlib.ExitStack() as locks:
            for seed in settings.seeds:  # processes taking other seeds may share the folder
                locks.enter_context(
                    RunLock(settings.runs, f"seed {seed} of the runs folder", f"seed{seed}.lock")
                )
            return _study(args, study, job_options)
    except (RunFolderBusy, BadRecord, LogFormatError) as e:
        print(f"replicate: error: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"replicate: {e}", file=sys.stderr)
        return 128 + e.signum


def _study(args: argparse.Namespace, study: Study, job_options: JobOptions | None) -> int:
    """Restore the archive, run the steps (or list them) and write the tables (each step on
    the local pool, or as a submitit job with ``job_options``)."""
    tables, systems, world, recipe, settings = (
        study.tables,
        study.systems,
        study.world,
        study.recipe,
        study.settings,
    )
    runs = settings.runs
    steps = study.steps()
    archive = Archive(args.archive.resolve(), settings) if args.archive else None
    if archive is not None:
        try:
            restored = [step for step in steps if archive.restore(step)]
        except ValueError as e:
            print(f"replicate: error: {e}", file=sys.stderr)
            return 2
        print(
            f"Archive {archive.root}: {len(restored)} finished steps restored into {runs}",
            flush=True,
        )
    if args.plan:
        done = [step.done() for step in steps]
        for index, (step, unneeded) in enumerate(zip(steps, spent(steps, done)), start=1):
            state = "to run"
            if done[index - 1] or unneeded:
                reason = stale_reason(step, read_record(step))
                if archive is not None and not reason:
                    archive.store(step)
                state = "done" if done[index - 1] else "finished, its output no longer needed"
                state = f"{state}, but stale ({reason})" if reason else state
            print(f"[{index}/{len(steps)}] {step.title}: {state}\n    {' '.join(step.command)}")
        return 0
    start = time.perf_counter()
    print(
        f"Study: tables {[t.key for t in tables]}, systems {[s.key for s in systems]}, "
        f"seeds {list(settings.seeds)}, {len(steps)} steps; runs in {runs}",
        flush=True,
    )
    log = lambda line: print(line, flush=True)  # noqa: E731
    execute = (
        placed_runs(args.jobs)
        if job_options is None
        else JobRun(job_options, runs / "jobs", REPO, log)
    )
    chosen = [step for step in steps if not args.steps or step.kind in args.steps]
    done_before = [step.done() for step in chosen]
    try:
        ran = run_steps(
            steps,
            run=execute,
            log=log,
            jobs=args.jobs,
            on_done=archive.store if archive is not None else None,
            kinds=("world",) if args.recorded else args.steps,
        )
    except (StepFailed, StaleRun) as e:
        print(f"replicate: error: {e}", file=sys.stderr)
        return 1
    if args.steps and set(args.steps) != set(KINDS):
        print(
            "\n".join(
                [
                    f"\nDone in {clock(time.perf_counter() - start)}: {ran} of the {len(chosen)} steps "
                    f"of {', '.join(args.steps)} ran, the others were already done:",
                    *(
                        f"    {step.title}: {step.folder} ({'already done' if before else 'ran'})"
                        for step, before in zip(chosen, done_before)
                    ),
                    "The tables need every step of the study (a call without --steps, or --recorded "
                    "for the finished runs).",
                ]
            ),
            flush=True,
        )
        return 0
    if args.recorded:
        left = [step.title for step in steps if not step.done() and read_record(step) is None]
        print(
            "\n".join(
                [
                    f"\n--recorded: {len(left)} of {len(steps)} steps have no finished "
                    "run and were not run",
                    *(f"    {title}" for title in left),
                ]
            ),
            flush=True,
        )
    models = ", ".join(map(str, args.model_config))
    header = (
        f"World `{world.path}`{f' ({world.kind} preset)' if world.kind else ''}; seeds "
        f"{', '.join(map(str, settings.seeds))}; pre-training {settings.pretrain_updates} "
        f"updates, fine-tuning {settings.finetune_updates} updates"
        f"{''.join(f' ({task} {n})' for task, n in settings.task_updates)}"
        f"{f'; model {models}' if models else ''}"
        f"{f'; recipe `{_shown(recipe.path)}`' if recipe.path else ''}."
    )
    if args.recorded:
        header += " From the recorded runs (`--recorded`): this call trained nothing."
    record = {
        "world": str(world.path),
        "preset": world.kind,
        "seeds": list(settings.seeds),
        "tasks": list(settings.tasks),
        "pretrain_updates": settings.pretrain_updates,
        "finetune_updates": settings.finetune_updates,
        "finetune_task_updates": dict(settings.task_updates),
        "runs": str(runs),
        "model_config": [str(path) for path in args.model_config],
        "recipe": str(_shown(recipe.path)) if recipe.path else None,
        "archive": str(archive.root) if archive is not None else None,
        "recorded": args.recorded,
        "tables": [t.key for t in tables],
        "systems": [s.key for s in systems],
    }
    spread = spread_of_study(
        settings, archive.root if archive is not None else runs, study.every_seed
    )
    written = write_study(tables, steps, settings, args.out, header, record, spread)
    for markdown in written:
        print("\n" + markdown.read_text(encoding="utf-8"), end="")
    print(
        f"\n{ran} of {len(steps)} steps ran in {clock(time.perf_counter() - start)}; "
        f"written: {', '.join(str(p) for p in written)} (+ .png), {args.out / 'runs.json'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
