#!/usr/bin/env python
"""The whole μ-VLA chain on the generated demo world (``make demo``).

toy world -> weakly aligned corpus -> μ-VLA pre-training -> fine-tuning of Base (BERT
init) and μ-VLA on VQA2, NLVR2, VE and RefCOCO+ -> the paper's Table 1.

Every step runs the command a user would run (``tools/make_toy_world.py``,
``tools/build_corpus.py``, ``mmf_run``, ``tools/report.py``) and is skipped when its
output exists, so an interrupted demo resumes where it stopped; an interrupted training run
continues from its last checkpoint as the same run (``checkpoint.resume=True``; runs are
seeded with ``--seed``, so two demos print the same table). ``--steps`` runs a
subset (the Makefile's ``corpus``, ``pretrain``, ``finetune`` and ``report`` targets).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
MMF_RUN = str(Path(sys.executable).with_name("mmf_run"))
STEPS = ("toy-world", "corpus", "pretrain", "finetune", "report")
TASKS = ("vqa2", "nlvr2", "visual_entailment", "refcoco_plus")
SYSTEMS = {"Base": "base", "μ-VLA": "uvla"}  # table row -> run folder
REFCOCO_SPLITS = "refcoco_plus_val,refcoco_plus_testA,refcoco_plus_testB"


class Demo:
    """Paths and settings of one demo; each step is a method."""

    def __init__(self, data: Path, seed: int, pretrain_updates: int, finetune_updates: int):
        data = data.resolve()
        self.world = data / "toy_world_demo"
        self.corpus = self.world / "corpus"
        self.runs = data / "runs"
        self.report_dir = data / "report"
        self.seed = seed
        self.pretrain_updates = pretrain_updates
        self.finetune_updates = finetune_updates
        self.pretrained = self.runs / "uvla_pretrain" / "uvla_final.pth"

    def run(self, title: str, command: List[str]) -> None:
        print(f"\n=== {title}\n$ {' '.join(command)}", flush=True)
        start = time.perf_counter()
        subprocess.run(command, check=True, cwd=REPO)
        print(f"=== {title}: done in {time.perf_counter() - start:.0f}s", flush=True)

    def skip(self, title: str, output: Path) -> bool:
        if output.exists():
            print(f"=== {title}: already done ({output})", flush=True)
            return True
        return False

    def feature_dim(self) -> int:
        return int(json.loads((self.world / "world.json").read_text())["feature_dim"])

    def toy_world(self) -> None:
        if not self.skip("toy world", self.world / "world.json"):
            self.run("toy world (demo preset)", [
                PYTHON, "tools/make_toy_world.py", "--preset", "demo", "--seed", str(self.seed),
                "--out", str(self.world), "--overwrite",
            ])

    def build_corpus(self) -> None:
        if self.skip("weakly aligned corpus", self.corpus / "annotations" / "index.json"):
            return
        text = self.world / "text"
        self.run("weakly aligned corpus (tag queries -> retrieval -> noun phrases -> links)", [
            PYTHON, "tools/build_corpus.py", "run",
            "--predictions", str(self.world / "detections/cc/predictions.tsv"),
            "--corpus", str(text / "caption_corpus.txt"), str(text / "narrative_corpus.txt"),
            "--captions-gt", str(text / "captions_gt.tsv"), "--exclude-own-caption",
            "--objects-gt", str(self.world / "images_gt/cc.jsonl"),
            "--out", str(self.corpus),
        ])

    def pretrain(self) -> None:
        if self.skip("μ-VLA pre-training", self.pretrained):
            return
        updates = self.pretrain_updates
        self.run("μ-VLA pre-training (R-T, R-N, I-S, ITM-weighted curriculum)", [
            MMF_RUN, "config=projects/uvla/pretrain.yaml",
            f"env.data_dir={self.world}", f"env.save_dir={self.pretrained.parent}",
            f"model_config.uvla.feature_dim={self.feature_dim()}",
            f"training.max_updates={updates}", f"training.seed={self.seed}",
            f"training.evaluation_interval={updates}",
            f"training.checkpoint_interval={max(updates // 4, 1)}",
            f"scheduler.params.num_warmup_steps={updates // 10}", "checkpoint.resume=True",
        ])

    def finetune(self) -> None:
        for system, folder in SYSTEMS.items():
            pretrained = str(self.pretrained) if folder == "uvla" else "None"
            for task in TASKS:
                save = self.runs / folder / task
                if self.skip(f"{system} on {task}", save / "uvla_final.pth"):
                    continue
                updates = self.finetune_updates
                self.run(f"fine-tune {system} on {task}", [
                    MMF_RUN, f"config=projects/uvla/finetune/{task}.yaml",
                    f"env.data_dir={self.world}", f"env.save_dir={save}",
                    f"model_config.uvla.feature_dim={self.feature_dim()}",
                    f"model_config.uvla.pretrained_checkpoint={pretrained}",
                    f"training.max_updates={updates}", f"training.seed={self.seed}",
                    f"training.evaluation_interval={updates}",
                    f"training.checkpoint_interval={max(updates // 2, 1)}",
                    f"scheduler.params.num_warmup_steps={updates // 10}", "checkpoint.resume=True",
                    "run_type=train_inference",
                ])
            self.evaluate_refcoco_splits(system, folder)

    def evaluate_refcoco_splits(self, system: str, folder: str) -> None:
        save = self.runs / folder / "refcoco_plus_splits"
        if self.skip(f"{system} RefCOCO+ val/testA/testB", save / "train.log"):
            return
        self.run(f"{system}: RefCOCO+ val, testA and testB", [
            MMF_RUN, "config=projects/uvla/finetune/refcoco_plus.yaml",
            f"env.data_dir={self.world}", f"env.save_dir={save}",
            f"model_config.uvla.feature_dim={self.feature_dim()}",
            "model_config.uvla.pretrained_checkpoint=None", "run_type=inference",
            f"checkpoint.resume_file={self.runs / folder / 'refcoco_plus' / 'current.ckpt'}",
            f"datasets={REFCOCO_SPLITS}",
        ])

    def report(self) -> None:
        runs: List[str] = []
        for system, folder in SYSTEMS.items():
            runs += ["--run", f"{system}={self.runs / folder}"]
        self.run("Table 1 (paper layout)", [PYTHON, "tools/report.py", *runs, "--out", str(self.report_dir)])


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO / "data", help="folder for the world and runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {STEPS}")
    parser.add_argument("--pretrain-updates", type=int, default=400)
    parser.add_argument("--finetune-updates", type=int, default=120)
    args = parser.parse_args(argv)
    steps = [step.strip() for step in args.steps.split(",") if step.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        parser.error(f"--steps: unknown {unknown}; expected names from {STEPS}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    demo = Demo(args.data, args.seed, args.pretrain_updates, args.finetune_updates)
    actions: Dict[str, object] = {
        "toy-world": demo.toy_world, "corpus": demo.build_corpus, "pretrain": demo.pretrain,
        "finetune": demo.finetune, "report": demo.report,
    }
    start = time.perf_counter()
    for step in STEPS:
        if step in steps:
            actions[step]()
    print(f"\n{', '.join(steps)}: finished in {time.perf_counter() - start:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
