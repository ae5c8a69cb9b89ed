"""Text-to-region attention maps: each word's attention over the image's regions, one row
per system (μ-VLA Fig. 5: Base vs a pre-trained checkpoint side by side).

    uvlp-attention-maps --world data/toy_world_demo \\
        --model Base=base --model μ-VLA=data/replication/toy_world_demo__demo/uvla/seed0/pretrain/uvla_final.pth \\
        --layer best --probe results/analysis/probe/probe.json --out results/analysis/attention

Examples: ``--examples IMAGE_ID#LINE ...`` (a caption's line in Sentences/<id>.txt), or
the first ``--num-examples`` captions of the split with at least two grounded phrases.
Regions are drawn as boxes on the image canvas (or over ``--images DIR/<id>.jpg``),
shaded by the word's attention relative to its most attended region (outlined in
black); the gold boxes of the word's entity are outlined in dashed green. Writes
``attention_<id>_<line>.png`` and ``attention_maps.json`` (the weights).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from mmf_uvlp.analysis.attention_maps import select_heads, shown_words, word_gold, word_weights
from mmf_uvlp.analysis.batches import batches, text_to_regions
from mmf_uvlp.analysis.cli import (
    add_data_arguments,
    add_model_arguments,
    load_data,
    load_systems,
    load_tokenizer,
)
from mmf_uvlp.analysis.examples import ExampleBuilder
from mmf_uvlp.analysis.figures import attention_map_figure


def _choose(data, args) -> list:
    from mmf_uvlp.corpus.noun_phrases import load_spacy

    builder = ExampleBuilder(load_tokenizer(args), load_spacy(), args.max_length)
    if args.examples:
        wanted = {}
        for key in args.examples:
            image_id, sep, line = key.partition("#")
            if not sep or not line.isdigit():
                raise SystemExit(f"--examples {key!r}: expected IMAGE_ID#LINE")
            wanted.setdefault(image_id, set()).add(int(line))
        chosen = [
            e
            for image_id in wanted
            for e in builder(data.entities.image(image_id))
            if e.line in wanted[image_id]
        ]
        missing = set(args.examples) - {e.key for e in chosen}
        if missing:
            raise SystemExit(f"--examples: no such captions {sorted(missing)}")
        return chosen
    chosen = []
    for image_id in data.image_ids:
        chosen += [e for e in builder(data.entities.image(image_id)) if len(e.entities) >= 2]
        if len(chosen) >= args.num_examples:
            return chosen[: args.num_examples]
    return chosen


def _image(folder: Path | None, image_id: str) -> np.ndarray | None:
    if folder is None:
        return None
    path = folder / f"{image_id}.jpg"
    if not path.is_file():
        raise SystemExit(f"--images: {path} not found")
    import matplotlib.image

    return matplotlib.image.imread(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_arguments(parser)
    add_model_arguments(parser)
    parser.add_argument("--examples", nargs="+", metavar="IMAGE_ID#LINE")
    parser.add_argument("--num-examples", type=int, default=3)
    parser.add_argument("--layer", default="last", help="last, layer:N or best (needs --probe)")
    parser.add_argument("--probe", type=Path, help="probe.json of uvlp-probe-grounding")
    parser.add_argument("--images", type=Path, help="folder of <image_id>.jpg to draw on")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    data = load_data(args)
    examples = _choose(data, args)
    if not examples:
        raise SystemExit("no caption with two grounded phrases in the chosen images")
    probe = json.loads(args.probe.read_text(encoding="utf-8")) if args.probe else None
    systems = load_systems(args, data.store.feature_dim)
    records = [
        {"key": e.key, "words": [e.words[w] for w in shown_words(e)], "systems": {}}
        for e in examples
    ]
    for system in systems:
        selection = select_heads(args.layer, system.layers, system.heads, probe, system.name)
        index = 0
        for group, regions, batch in batches(examples, data.store, args.batch_size):
            maps = text_to_regions(system(batch), batch)
            for i, (example, image) in enumerate(zip(group, regions)):
                weights = word_weights(maps[i], example, selection, len(image))
                records[index]["systems"][system.name] = {
                    "spec": system.spec,
                    "heads": selection.label,
                    "weights": np.round(weights[shown_words(example)], 6).tolist(),
                }
                index += 1
    args.out.mkdir(parents=True, exist_ok=True)
    written = []
    for example, record in zip(examples, records):
        image = data.store[example.image_id]
        words = shown_words(example)
        gold = word_gold(example)
        record.update(regions=image.boxes.round(2).tolist(), gold=[gold[w] for w in words])
        heads = "; ".join(f"{name}: {r['heads']}" for name, r in record["systems"].items())
        written.append(
            attention_map_figure(
                record["words"],
                {name: np.array(r["weights"]) for name, r in record["systems"].items()},
                image.boxes,
                image.width,
                image.height,
                record["gold"],
                args.out / f"attention_{example.image_id}_{example.line}.png",
                f"{' '.join(example.words)}\n{heads}",
                _image(args.images, example.image_id),
            )
        )
    with open(args.out / "attention_maps.json", "w", encoding="utf-8") as f:
        json.dump({"layer": args.layer, "examples": records}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(written)} attention maps and attention_maps.json to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
