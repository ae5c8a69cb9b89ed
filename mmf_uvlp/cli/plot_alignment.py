"""Representation plot (U-VisualBERT Fig. 2): t-SNE of contextual word, tag and region
representations for a sample of classes, coloured by class, one panel per system; and
the mean reciprocal rank of each region's class word among all class words by cosine.

    uvlp-plot-alignment --world data/toy_world_demo \\
        --model Base=base --model μ-VLA=data/replication/toy_world_demo__demo/uvla/seed0/pretrain/uvla_final.pth \\
        --out results/analysis/alignment

Writes ``alignment.png`` and ``alignment.json`` (MRR, chance MRR, classes, counts and the
2-d points of each system).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from mmf_uvlp.analysis.alignment import (
    find_instances,
    region_word_mrr,
    represent,
    sample_instances,
    tsne,
)
from mmf_uvlp.analysis.cli import (
    add_data_arguments,
    add_model_arguments,
    load_data,
    load_examples,
    load_systems,
    load_tokenizer,
)
from mmf_uvlp.analysis.figures import tsne_figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_arguments(parser)
    add_model_arguments(parser)
    parser.add_argument("--classes", type=int, default=10, help="the N most frequent classes")
    parser.add_argument("--per-class", type=int, default=30, help="at most N instances a class")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    data = load_data(args)
    examples, _ = load_examples(data, args)
    instances = sample_instances(
        find_instances(examples, data.store), args.classes, args.per_class, args.seed
    )
    classes = sorted({i.cls for i in instances})
    if len(classes) < 2:
        raise SystemExit(
            f"found {len(classes)} class(es) with a matched region; the plot "
            "needs at least 2 (use more images, --split all)"
        )
    tokenizer = load_tokenizer(args)
    panels, report = (
        {},
        {"data": data.description, "classes": classes, "instances": len(instances), "systems": {}},
    )
    for system in load_systems(args, data.store.feature_dim):
        reps = represent(system, instances, data.store, tokenizer, args.max_length, args.batch_size)
        mrr, chance = region_word_mrr(reps)
        points = tsne(reps.vectors, args.seed)
        panels[f"{system.name} (region->word MRR {mrr:.2f})"] = (
            points,
            reps.classes,
            reps.modalities,
        )
        report["systems"][system.name] = {
            "spec": system.spec,
            "mrr": round(mrr, 4),
            "chance_mrr": round(chance, 4),
            "points": {m: int(reps.modalities.count(m)) for m in sorted(set(reps.modalities))},
            "tsne": [
                [c, m, round(float(x), 3), round(float(y), 3)]
                for c, m, (x, y) in zip(reps.classes, reps.modalities, np.asarray(points))
            ],
        }
        print(
            f"{system.name}: region->class word MRR {mrr:.3f} (chance {chance:.3f}, "
            f"{len(classes)} classes, {len(instances)} instances)",
            flush=True,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    tsne_figure(
        panels,
        args.out / "alignment.png",
        "Contextual representations (t-SNE): o word, s region, ^ tag",
    )
    with open(args.out / "alignment.json", "w", encoding="utf-8") as f:
        json.dump(report, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {args.out / 'alignment.png'} and {args.out / 'alignment.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
