#!/usr/bin/env python
"""The study packed on one device (benchmark, not a test): K ``mmf_run`` s side by side, one
of them a fine-tuning, for each K of ``--packs``; start-up and steady-state rates reported
apart, and the device time of a study projected from them.

Each run of a pack is the command ``uvlp-replicate --jobs K`` would start (``OMP_NUM_THREADS``
= CPUs / K): pre-trainings of ``--pretrain-config`` with seeds 1.. and one fine-tuning of
``--finetune-config``, each for ``--updates`` updates logged every ``--log-interval``. From
each run's log:

- start-up: from its launch to its first logged update (the time of MMF's first progress
  line, to the second, less that interval's own time);
- steady rate: updates per second over its logged intervals after the first.

The projection of a study of ``--study`` (pre-training runs x updates, fine-tuning runs x
updates; default the calibrated study: 63 pre-trainings of 5,000 updates and 264
fine-tunings of 1,500) at K runs side by side: every run pays its start-up, then its updates at
the steady rate of its kind in that pack, K at a time:
(Σ start-ups + P·U_p / r_p + F·U_f / r_f) / K.

    python tools/bench/packed_study.py --world data/toy_world_demo --packs 4 8 16 \\
        --out /tmp/packed.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
from step_window import INTERVAL, mmf_time_ms  # noqa: E402

STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) \|.*progress: \d+/\d+, train/", re.M)


def run_log_figures(text: str, launched: float, log_interval: int) -> Dict[str, float]:
    """Start-up seconds and steady updates/s of one run from its ``train.log``."""
    intervals = [mmf_time_ms(match[1]) for match in INTERVAL.findall(text)]
    stamps = STAMP.findall(text)
    if len(intervals) < 2 or not stamps:
        raise ValueError(
            f"{len(intervals)} logged intervals: raise --updates or lower --log-interval"
        )
    first = datetime.strptime(stamps[0], "%Y-%m-%dT%H:%M:%S").timestamp()
    return {
        "startup_s": max(0.0, first - launched - intervals[0] / 1e3),
        "updates_per_s": 1e3 * log_interval * (len(intervals) - 1) / sum(intervals[1:]),
    }


def run_pack(size: int, args: argparse.Namespace) -> List[Dict[str, Any]]:
    """``size`` runs side by side (the first a fine-tuning); each run's figures."""
    threads = max(1, (os.cpu_count() or 1) // size)
    folder = args.out_dir / f"pack_{size}"
    folder.mkdir(parents=True, exist_ok=True)
    common = [
        f"env.data_dir={args.world}",
        f"training.max_updates={args.updates}",
        f"training.log_interval={args.log_interval}",
        f"training.evaluation_interval={args.updates}",
        f"training.checkpoint_interval={args.updates}",
        "training.tensorboard=False",
        *args.option,
    ]
    runs = []
    for index in range(size):
        kind = "finetune" if index == 0 else "pretrain"
        config = args.finetune_config if kind == "finetune" else args.pretrain_config
        options = [
            f"config={config}",
            *common,
            f"training.seed={index + 1}",
            f"env.save_dir={folder / f'run_{index}'}",
            *(args.finetune_option if kind == "finetune" else args.pretrain_option),
        ]
        log = open(folder / f"run_{index}.log", "w")
        launched = time.time()
        process = subprocess.Popen(
            [str(Path(sys.executable).with_name("mmf_run")), *options],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=dict(os.environ, OMP_NUM_THREADS=str(threads)),
        )
        runs.append(
            {
                "kind": kind,
                "log": log,
                "launched": launched,
                "process": process,
                "path": folder / f"run_{index}.log",
                "train_log": folder / f"run_{index}" / "train.log",
            }
        )
    figures = []
    for run in runs:
        status = run["process"].wait()
        run["log"].close()
        text = run["path"].read_text()
        if status != 0:
            raise RuntimeError(f"{run['path']}: mmf_run exit {status}\n{text[-2000:]}")
        full = run["train_log"].read_text()  # MMF's full progress lines (the console's are short)
        figures.append(
            {"kind": run["kind"], **run_log_figures(full, run["launched"], args.log_interval)}
        )
    return figures


def projection_s(
    figures: Sequence[Dict[str, Any]], size: int, study: Sequence[int]
) -> Dict[str, float]:
    """The study's device time at ``size`` runs side by side, from one pack's figures."""
    pretrain_runs, pretrain_updates, finetune_runs, finetune_updates = study
    rate = {
        kind: statistics.fmean(f["updates_per_s"] for f in figures if f["kind"] == kind)
        for kind in ("pretrain", "finetune")
    }
    startup = statistics.fmean(f["startup_s"] for f in figures)
    seconds = (
        (pretrain_runs + finetune_runs) * startup
        + pretrain_runs * pretrain_updates / rate["pretrain"]
        + finetune_runs * finetune_updates / rate["finetune"]
    ) / size
    return {
        "seconds": seconds,
        "startup_share": (pretrain_runs + finetune_runs) * startup / size / seconds,
    }


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--world",
        required=True,
        type=Path,
        help="a toy world with its corpus and its fine-tuning data",
    )
    parser.add_argument("--packs", nargs="+", type=int, default=[4, 8, 16])
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--log-interval", type=int, default=20)
    parser.add_argument("--pretrain-config", default="projects/uvla/pretrain.yaml")
    parser.add_argument("--finetune-config", default="projects/uvla/finetune/vqa2.yaml")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an mmf_run option of every run (the size, the precision)",
    )
    parser.add_argument("--pretrain-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--finetune-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--study",
        type=int,
        nargs=4,
        default=[63, 5000, 264, 1500],
        metavar=("P", "UP", "F", "UF"),
        help="the projected study: P pre-trainings of UP updates, F "
        "fine-tunings of UF (default: the calibrated study)",
    )
    parser.add_argument("--out-dir", type=Path, required=True, help="the runs' folders and logs")
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    parser.add_argument("--json", type=Path, help="and every figure as JSON here")
    args = parser.parse_args(argv)
    if args.updates < 2 * args.log_interval or min(args.packs) < 2:
        parser.error(
            "--updates must cover two --log-interval s; a pack has 2 runs or more "
            "(one fine-tuning, one pre-training at least)"
        )
    args.world = args.world.resolve()
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    lines = [
        "| runs side by side | start-up s (mean) | pre-training updates/s per run | "
        "fine-tuning updates/s | updates/s summed | projected study device hours | "
        "start-up share |",
        "|---|---|---|---|---|---|---|",
    ]
    packs = []
    for size in args.packs:
        figures = run_pack(size, args)
        projected = projection_s(figures, size, args.study)
        pretrain = [f["updates_per_s"] for f in figures if f["kind"] == "pretrain"]
        finetune = [f["updates_per_s"] for f in figures if f["kind"] == "finetune"]
        packs.append({"runs": size, "figures": figures, "projection": projected})
        lines.append(
            f"| {size} | {statistics.fmean(f['startup_s'] for f in figures):.1f} | "
            f"{statistics.fmean(pretrain):.2f} | {statistics.fmean(finetune):.2f} | "
            f"{sum(pretrain) + sum(finetune):.2f} | {projected['seconds'] / 3600:.2f} | "
            f"{100 * projected['startup_share']:.0f}% |"
        )
        print(lines[-1], flush=True)
        text = write_results(args, lines, packs)  # after each pack: a later stop keeps it
    print(text)
    return 0


def write_results(args: argparse.Namespace, lines: List[str], packs: List[Dict[str, Any]]) -> str:
    """The table of the packs measured so far, written to ``--out`` (and their figures to
    ``--json``)."""
    p, up, f, uf = args.study
    header = (
        f"The study projected: {p} pre-trainings x {up:,} updates and {f} "
        f"fine-tunings x {uf:,} updates; {args.updates} updates a run."
    )
    text = "\n".join([header, "", *lines]) + "\n"
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(
            json.dumps({"command": sys.argv, "study": args.study, "packs": packs}, indent=1) + "\n"
        )
    return text


if __name__ == "__main__":
    sys.exit(main())
