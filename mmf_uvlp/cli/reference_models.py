"""The reference models (VisualBERT, ViLBERT, VL-BERT) on the demo world, beside ``make demo``.

For each system (``mmf_uvlp/reference_models.py``): pre-training with its config, fine-tuning
on VQA2, NLVR2, VE and RefCOCO+ from the pre-trained weights (``run_type=train_inference``,
the demo's budget: 400 pre-training and 120 fine-tuning updates, warm-up 10 %), and
RefCOCO+ val / testA / testB inference; then ``tools/report.py`` with Base and μ-VLA
(``make demo``'s runs, when present) and every system run here. Every step is the
``mmf_run`` command a user would type and is skipped when its output exists; an
interrupted training run continues from its last checkpoint (``checkpoint.resume=True``).
Runs: ``<data>/runs/<system>_pretrain`` and ``<data>/runs/<system>/<task>``; the wall and
CPU seconds of each step in ``<data>/runs/<system>/timings.json`` (CPU time, summed over
threads, does not depend on what else the machine runs).

    python tools/reference_models.py                             # the three reference models
    python tools/reference_models.py --systems vl_bert,aligned_vlp --no-report
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

from mmf_uvlp.replication.steps import schedule_options
from mmf_uvlp.report.results import LOG_FILE, parse_log
from mmf_uvlp.reference_models import REFERENCE_MODELS, SYSTEMS, HarnessModel
from mmf_uvlp.tasks import METRICS, TASKS
from mmf_uvlp.tasks import REFCOCO_PLUS_SPLIT_DATASETS as REFCOCO_SPLITS
from mmf_uvlp.utils.config_files import home

REPO = home()  # projects/ and configs/: the checkout, or the installed package
PYTHON = sys.executable
MMF_RUN = str(Path(sys.executable).with_name("mmf_run"))
DEMO_ROWS = {"Base": "base", "μ-VLA": "uvla"}  # make demo's runs, table row -> folder


def _children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Runner:
    """The steps of one system on one world; each step is skipped once its output exists."""

    def __init__(self, system: HarnessModel, data: Path, seed: int, pretrain_updates: int,
                 finetune_updates: int):
        self.system = system
        self.world = data / "toy_world_demo"
        self.runs = data / "runs"
        self.folder = self.runs / system.key
        self.pretrained = self.runs / f"{system.key}_pretrain" / system.final_weights
        self.seed = seed
        self.pretrain_updates = pretrain_updates
        self.finetune_updates = finetune_updates
        self.timings_file = self.folder / "timings.json"

    def _common(self, save: Path) -> List[str]:
        feature_dim = int(json.loads((self.world / "world.json").read_text())["feature_dim"])
        return [f"env.data_dir={self.world}", f"env.save_dir={save}",
                *self.system.feature_dim(feature_dim)]

    def _run(self, step: str, command: List[str]) -> None:
        title = f"{self.system.name}: {step}"
        print(f"\n=== {title}\n$ {' '.join(command)}", flush=True)
        start, cpu_start = time.perf_counter(), _children_cpu()
        subprocess.run(command, check=True, cwd=REPO)
        wall, cpu = time.perf_counter() - start, _children_cpu() - cpu_start
        timings = self.timings()
        timings[step] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
        self.folder.mkdir(parents=True, exist_ok=True)
        self.timings_file.write_text(json.dumps(timings, indent=1) + "\n")
        print(f"=== {title}: done in {wall:.0f}s (CPU {cpu:.0f}s)", flush=True)

    def timings(self) -> Dict[str, Dict[str, float]]:
        """Wall and CPU seconds of each finished step (also of earlier invocations)."""
        if not self.timings_file.exists():
            return {}
        return json.loads(self.timings_file.read_text())

    @staticmethod
    def _logged(folder: Path, keys: List[str]) -> bool:
        log = folder / LOG_FILE
        return log.exists() and all(key in parse_log(log, unfinished=True) for key in keys)

    def pretrain(self) -> None:
        if self.pretrained.exists():
            print(f"=== {self.system.name}: pre-training already done ({self.pretrained})")
            return
        self._run("pretrain", [MMF_RUN, f"config={self.system.pretrain_config}",
                               *self._common(self.pretrained.parent),
                               *schedule_options(self.pretrain_updates, 4, self.seed)])

    def finetune(self, task: str) -> None:
        save = self.folder / task
        if self._logged(save, [f"test/{task}/{METRICS[task]}"]):
            print(f"=== {self.system.name}: {task} already done ({save / LOG_FILE})")
            return
        self._run(task, [MMF_RUN, f"config={self.system.finetune(task)}", *self._common(save),
                         *self.system.start_from(self.pretrained),
                         *schedule_options(self.finetune_updates, 2, self.seed),
                         "run_type=train_inference"])

    def evaluate_refcoco_splits(self) -> None:
        save = self.folder / "refcoco_plus_splits"
        if self._logged(save, [f"test/{view}/refcoco_accuracy" for view in REFCOCO_SPLITS]):
            print(f"=== {self.system.name}: RefCOCO+ splits already done ({save / LOG_FILE})")
            return
        checkpoint = self.folder / "refcoco_plus" / "current.ckpt"
        self._run("refcoco_plus_splits", [
            MMF_RUN, f"config={self.system.finetune('refcoco_plus')}", *self._common(save),
            *self.system.evaluate_from(checkpoint), "run_type=inference",
            f"datasets={','.join(REFCOCO_SPLITS)}"])

    def all_steps(self) -> None:
        self.pretrain()
        for task in TASKS:
            self.finetune(task)
        self.evaluate_refcoco_splits()


def report(data: Path, systems: List[HarnessModel], out: Path) -> None:
    runs: List[str] = []
    for name, folder in DEMO_ROWS.items():
        if (data / "runs" / folder).exists():
            runs += ["--run", f"{name}={data / 'runs' / folder}"]
    for system in systems:
        runs += ["--run", f"{system.name}={data / 'runs' / system.key}"]
    command = [PYTHON, "-m", "mmf_uvlp.cli.report", *runs, "--out", str(out)]
    print(f"\n=== Table 1\n$ {' '.join(command)}", flush=True)
    subprocess.run(command, check=True, cwd=REPO)


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO / "data",
                        help="folder holding toy_world_demo and runs (default: data)")
    parser.add_argument("--systems", default=",".join(REFERENCE_MODELS),
                        help=f"comma-separated subset of {sorted(SYSTEMS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pretrain-updates", type=int, default=400)
    parser.add_argument("--finetune-updates", type=int, default=120)
    parser.add_argument("--report-dir", type=Path, default=None,
                        help="where Table 1 goes (default: <data>/report_reference_models)")
    parser.add_argument("--no-report", action="store_true", help="skip tools/report.py")
    args = parser.parse_args(argv)
    keys = [key.strip() for key in args.systems.split(",") if key.strip()]
    unknown = sorted(set(keys) - set(SYSTEMS))
    if unknown or not keys:
        parser.error(f"--systems: unknown {unknown}; expected names from {sorted(SYSTEMS)}")
    data = args.data.resolve()
    if not (data / "toy_world_demo" / "world.json").exists():
        parser.error(f"{data / 'toy_world_demo'} holds no toy world: run `make toy-world` first")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    systems = [SYSTEMS[key] for key in keys]
    for system in systems:
        runner = Runner(system, data, args.seed, args.pretrain_updates, args.finetune_updates)
        runner.all_steps()
        steps = runner.timings().values()
        wall, cpu = sum(s["wall_s"] for s in steps), sum(s["cpu_s"] for s in steps)
        print(f"=== {system.name}: its steps took {wall / 60:.1f} min wall, "
              f"{cpu / 60:.1f} min CPU", flush=True)
    if not args.no_report:
        report(data, systems, args.report_dir or data / "report_reference_models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
