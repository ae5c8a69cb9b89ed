"""Attention-grounding probe ("What does BERT with vision look at"): entity and syntactic
grounding accuracy of every attention head, against the most-confident-region and
random-region baselines.

    uvlp-probe-grounding --world data/toy_world_demo \\
        --model Base=base --model μ-VLA=data/replication/toy_world_demo__demo/uvla/seed0/pretrain/uvla_final.pth \\
        --out results/analysis/probe
    uvlp-probe-grounding --entities flickr30k_entities --features flickr30k.lmdb \\
        --compare Base=base VisualBERT=save/visual_bert/current.ckpt --out probe

Writes ``probe.json`` (every head's accuracy and attention share per kind),
``probe.md`` (best heads per kind, paper Table 2), ``entity_grounding.png`` and
``syntactic_grounding.png`` (accuracy per head by layer, paper Figs. 3-4).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mmf_uvlp.analysis.cli import (
    add_data_arguments,
    add_model_arguments,
    load_data,
    load_examples,
    load_systems,
)
from mmf_uvlp.analysis.grounding import run_probe
from mmf_uvlp.analysis.probe_report import write_probe_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_arguments(parser)
    add_model_arguments(parser)
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar="NAME=SPEC",
        help="two systems side by side (same as two --model)",
    )
    parser.add_argument(
        "--relations", type=int, default=10, help="report the N most frequent dependency relations"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.model += args.compare or []

    start = time.perf_counter()
    data = load_data(args)
    examples, skipped = load_examples(data, args)
    systems = load_systems(args, data.store.feature_dim)
    report = {"data": data.description, "skipped": skipped, "systems": {}}
    for system in systems:
        probe = run_probe(system, examples, data.store, args.batch_size)
        report["systems"][system.name] = {"spec": system.spec, **probe.summary(args.relations)}
        best = report["systems"][system.name]["entity"]
        print(
            f"{system.name}: entity grounding best head {best['best_head']['layer']}-"
            f"{best['best_head']['head']} {best['best_head']['accuracy']:.1f}% "
            f"(rule {best['rule_baseline']:.1f}%, random {best['random_baseline']:.1f}%, "
            f"n={best['n']})",
            flush=True,
        )
    paths = write_probe_report(report, args.out)
    print(
        f"wrote {', '.join(str(p) for p in paths.values())} in {time.perf_counter() - start:.0f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
