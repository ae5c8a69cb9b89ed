#!/usr/bin/env python
"""The demo chain on the generated toy world (``make demo``).

Each step runs a real command (the same ones a user runs) and is skipped when its
output already exists, so an interrupted demo resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
MMF_RUN = str(Path(sys.executable).with_name("mmf_run"))


def _run(title: str, command: List[str]) -> None:
    print(f"\n=== {title}\n$ {' '.join(command)}", flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO)
    print(f"=== {title}: done in {time.perf_counter() - start:.0f}s", flush=True)


def toy_world(world: Path, seed: int) -> dict:
    manifest = world / "world.json"
    if not manifest.exists():
        _run(
            "toy world (demo preset)",
            [PYTHON, "tools/make_toy_world.py", "--preset", "demo", "--seed", str(seed), "--out", str(world)],
        )
    return json.loads(manifest.read_text())


def finetune_visual_bert(world: Path, manifest: dict, runs: Path, task: str, updates: int) -> None:
    save = runs / f"visual_bert_{task}"
    if (save / "visual_bert_final.pth").exists():
        print(f"=== visual_bert on {task}: already trained in {save}")
        return
    _run(
        f"MMF visual_bert (MiniLM init) on {task}",
        [
            MMF_RUN,
            f"config=projects/baselines/visual_bert/{task}.yaml",
            "model=visual_bert",
            f"dataset={task}",
            f"env.data_dir={world}",
            f"env.save_dir={save}",
            f"model_config.visual_bert.visual_embedding_dim={manifest['feature_dim']}",
            # the first 2 of MiniLM's 6 layers: minutes on a 2-core CPU
            "model_config.visual_bert.num_hidden_layers=2",
            "dataset_config.visual_entailment.max_features=16",
            "training.batch_size=32",
            f"training.max_updates={updates}",
            "training.log_interval=50",
            f"training.evaluation_interval={updates}",
            f"training.checkpoint_interval={updates}",
            "training.num_workers=0",
            "scheduler.params.num_warmup_steps=20",
            f"scheduler.params.num_training_steps={updates}",
            "run_type=train_inference",
        ],
    )


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO / "data", help="folder for the world and runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--updates", type=int, default=150, help="fine-tuning updates per task")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    world = args.data / "toy_world_demo"
    manifest = toy_world(world, args.seed)
    finetune_visual_bert(world, manifest, args.data / "runs", "visual_entailment", args.updates)
    print(f"\ndemo finished in {time.perf_counter() - start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
