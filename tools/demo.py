#!/usr/bin/env python
"""The whole μ-VLA chain on the generated demo world (``make demo``).

toy world -> weakly aligned corpus -> pre-training of μ-VLA and of its upper bound Aligned
VLP (true captions) -> fine-tuning of Base (BERT init), μ-VLA and Aligned VLP on VQA2,
NLVR2, VE and RefCOCO+ -> the paper's Table 1 with those three rows: the smoke run, a
budget (``configs/study/demo.yaml``: 400 pre-training and 120 fine-tuning updates, the
calibrated study's fine-tuning settings) that proves the chain, not the paper's gaps. The
last step prints the measured result: Table 1's five paper rows (those three, U-VisualBERT
and random pairs) on the calibrated world, from the recorded runs of its study
(``results/archive/calibrated``: each run's command and ``train.log``);
``tools/replicate.py --recorded`` regenerates that world for the trivial rates and trains
nothing (``make replicate RECIPE=calibrated`` runs the study itself, hours
on a CPU).

Every step runs the command a user would run (``tools/make_toy_world.py``,
``tools/build_corpus.py``, ``mmf_run``, ``tools/report.py``) and is skipped when its
output exists, so an interrupted demo resumes where it stopped; an interrupted training run
continues from its last checkpoint as the same run (``checkpoint.resume=True``; runs are
seeded with ``--seed``, so two demos print the same table). The steps are those of
``make replicate`` (``mmf_uvlp/replication/runner.py``): ``--jobs 2`` runs two trainings side
by side, each with half the cores. ``--steps`` runs a subset (the Makefile's ``corpus``,
``pretrain``, ``finetune`` and ``report`` targets).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mmf_uvlp.replication.children import Interrupted
from mmf_uvlp.replication.recipe import Recipe, load_recipe
from mmf_uvlp.replication.runner import (BadRecord, StaleRun, StepFailed, clock, run_steps,
                                         share_cores)
from mmf_uvlp.replication.steps import RECORD, Step, schedule_options
from mmf_uvlp.replication.study import SYSTEMS as STUDY_SYSTEMS, System
from mmf_uvlp.replication.world import World
from mmf_uvlp.report.mmf_log import LogFormatError
from mmf_uvlp.tasks import REFCOCO_PLUS_SPLIT_DATASETS, TASKS

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
MMF_RUN = str(Path(sys.executable).with_name("mmf_run"))
STEPS = ("toy-world", "corpus", "pretrain", "finetune", "report", "calibrated")
KINDS = {"toy-world": ("world",), "corpus": ("corpus",), "pretrain": ("pretrain",),
         "finetune": ("finetune", "evaluate")}  # --steps name -> the runner's step kinds
SYSTEMS = tuple(STUDY_SYSTEMS[key] for key in ("base", "uvla", "aligned_vlp"))  # the rows
# the rows printed from the calibrated study's archive: the paper's Table 1
CALIBRATED_SYSTEMS = ("base", "u_visualbert", "random_pairs", "uvla", "aligned_vlp")
REFCOCO_SPLITS = ",".join(REFCOCO_PLUS_SPLIT_DATASETS)
DEMO_RECIPE = REPO / "configs/study/demo.yaml"  # the demo's updates and fine-tuning options
CALIBRATED_RECIPE = "configs/study/calibrated.yaml"
CALIBRATED_ARCHIVE = "results/archive/calibrated"


class Demo:
    """Paths and settings of one demo; :meth:`steps` is its chain. ``recipe`` gives the
    fine-tuning options (every task's, then the task's own)."""

    def __init__(self, data: Path, seed: int, pretrain_updates: int, finetune_updates: int,
                 recipe: Recipe | None = None, preset: str = "demo"):
        data = data.resolve()
        self.data = data
        self.world = World(data / f"toy_world_{preset}", preset)
        self.runs = data / "runs"
        self.report_dir = data / "report"
        self.seed = seed
        self.pretrain_updates = pretrain_updates
        self.finetune_updates = finetune_updates
        self.recipe = recipe if recipe is not None else load_recipe(DEMO_RECIPE, TASKS)

    def pretrained(self, key: str) -> Path:
        """Where system ``key``'s pre-training writes its weights (``make analyze`` reads
        every ``runs/<key>_pretrain/uvla_final.pth``)."""
        return self.runs / f"{key}_pretrain" / "uvla_final.pth"

    def finetune_options(self, task: str, section: str = "uvla") -> List[str]:
        """The recipe's ``mmf_run`` options of a fine-tuning on ``task`` (every task's, then
        the task's own), less those of another model's ``model_config`` section."""
        own = [o for name, options in self.recipe.task_options if name == task for o in options]
        return [o for o in (*self.recipe.finetune_options, *own)
                if not o.startswith("model_config.") or o.startswith(f"model_config.{section}.")]

    def _data(self) -> List[str]:
        return [f"env.data_dir={self.world.path}",
                f"model_config.uvla.feature_dim={self.world.feature_dim}"]

    def setup_steps(self) -> List[Step]:
        world = self.world.path
        preset = self.world.preset
        setup = self.runs / ("setup" if preset == "demo" else f"setup_{preset}")
        corpus = world / "corpus"
        return [
            Step("world", f"toy world ({preset} preset)",
                 tuple(self.world.generate_command(self.seed)), world, setup / "world.json",
                 proof_file=world / "world.json",
                 outdated=partial(self.world.drift, self.seed)),
            Step("corpus", "weakly aligned corpus (tag queries -> retrieval -> noun phrases "
                 "-> links)", tuple(self.world.corpus_command("corpus")), corpus,
                 setup / "corpus.json", proof_file=corpus / "annotations" / "index.json"),
        ]

    def system_steps(self, system: System) -> List[Step]:
        """Pre-training (unless Base), the four fine-tunings and the RefCOCO+ splits."""
        steps, weights = [], None
        if system.config:
            weights = self.pretrained(system.key)
            folder = weights.parent
            steps.append(Step("pretrain", f"{system.name} pre-training", (
                MMF_RUN, f"config={system.config}", *self._data(), f"env.save_dir={folder}",
                *schedule_options(self.pretrain_updates, 4, self.seed)), folder,
                folder / RECORD, proof_file=weights, system=system.key, seed=self.seed,
                task="pretrain"))
        for task in TASKS:
            folder = self.runs / system.key / task
            steps.append(Step("finetune", f"fine-tune {system.name} on {task}", (
                MMF_RUN, f"config=projects/uvla/finetune/{task}.yaml", *self._data(),
                f"env.save_dir={folder}", *system.model.start_from(weights),
                *schedule_options(self.finetune_updates, 2, self.seed),
                *self.finetune_options(task, system.model.model_section),
                "run_type=train_inference"),
                folder, folder / RECORD, proof_file=folder / "uvla_final.pth",
                system=system.key, seed=self.seed, task=task))
        folder = self.runs / system.key / "refcoco_plus_splits"
        checkpoint = self.runs / system.key / "refcoco_plus" / "current.ckpt"
        steps.append(Step("evaluate", f"{system.name}: RefCOCO+ val, testA and testB", (
            MMF_RUN, "config=projects/uvla/finetune/refcoco_plus.yaml", *self._data(),
            f"env.save_dir={folder}", *system.model.evaluate_from(checkpoint),
            "run_type=inference", f"datasets={REFCOCO_SPLITS}"), folder, folder / RECORD,
            proof_file=folder / "train.log", needs=checkpoint, system=system.key,
            seed=self.seed, task="refcoco_plus_splits"))
        return steps

    def steps(self, names: List[str]) -> List[Step]:
        """The chain's steps of the ``--steps`` names, in order."""
        kinds = {kind for name in names for kind in KINDS.get(name, ())}
        chain = self.setup_steps() + [s for system in SYSTEMS for s in self.system_steps(system)]
        return [step for step in chain if step.kind in kinds]

    def report(self) -> None:
        runs: List[str] = []
        for system in SYSTEMS:
            runs += ["--run", f"{system.name}={self.runs / system.key}"]
        _show(f"Table 1 on the demo world: the smoke run ({self.pretrain_updates} pre-training "
              f"and {self.finetune_updates} fine-tuning updates, seed {self.seed}; it shows "
              "that the chain runs, not the paper's gaps)",
              [PYTHON, "tools/report.py", *runs, "--trivial", str(self.world.path),
               "--out", str(self.report_dir)])

    def calibrated_command(self) -> List[str]:
        """Table 1's five paper rows on the calibrated world from its study's recorded runs."""
        return [PYTHON, "tools/replicate.py", "--recipe", CALIBRATED_RECIPE, "--tables", "1",
                "--systems", ",".join(CALIBRATED_SYSTEMS), "--seeds", "3",
                "--data", str(self.data), "--archive", CALIBRATED_ARCHIVE, "--recorded",
                "--out", str(self.report_dir / "calibrated")]

    def calibrated(self) -> None:
        _show("Table 1 on the calibrated world: the measured result, 3 seeds, from the "
              "recorded runs of its study (nothing is trained here; make replicate "
              "RECIPE=calibrated runs them)", self.calibrated_command())


def _show(title: str, command: List[str]) -> None:
    """Print ``title`` and ``command``, then run it from the repository root."""
    print(f"\n=== {title}\n$ {' '.join(command)}", flush=True)
    subprocess.run(command, check=True, cwd=REPO)


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO / "data", help="folder for the world and runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {STEPS}")
    recipe = load_recipe(DEMO_RECIPE, TASKS)
    parser.add_argument("--pretrain-updates", type=int, default=recipe.pretrain_updates,
                        help=f"default {recipe.pretrain_updates} ({DEMO_RECIPE.relative_to(REPO)})")
    parser.add_argument("--finetune-updates", type=int, default=recipe.finetune_updates,
                        help=f"default {recipe.finetune_updates} ({DEMO_RECIPE.relative_to(REPO)})")
    parser.add_argument("--preset", choices=("demo", "tiny"), default="demo",
                        help="the toy world (default demo; tiny: seconds, for the toy-world "
                             "and corpus steps of a smoke run)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="trainings side by side (default 1), each with cpu_count/jobs "
                             "threads (OMP_NUM_THREADS, unless set); their output goes to "
                             "<run folder>/step.out")
    args = parser.parse_args(argv)
    steps = [step.strip() for step in args.steps.split(",") if step.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        parser.error(f"--steps: unknown {unknown}; expected names from {STEPS}")
    if args.jobs < 1:
        parser.error(f"--jobs: expected an integer >= 1, got {args.jobs}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    share_cores(args.jobs)
    demo = Demo(args.data, args.seed, args.pretrain_updates, args.finetune_updates, recipe,
                args.preset)
    start = time.perf_counter()
    try:
        run_steps(demo.steps(steps), log=lambda line: print(line, flush=True), jobs=args.jobs)
    except (StepFailed, StaleRun, BadRecord, LogFormatError) as e:
        print(f"demo: error: {e}", file=sys.stderr)
        return 1
    except Interrupted as e:
        print(f"demo: {e}", file=sys.stderr)
        return 128 + e.signum
    if "report" in steps:
        demo.report()
    if "calibrated" in steps:
        demo.calibrated()
    print(f"\n{', '.join(steps)}: finished in {clock(time.perf_counter() - start)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
