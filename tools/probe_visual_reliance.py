#!/usr/bin/env python
"""Visual reliance of pre-trained checkpoints: MLM loss on a masked class word of each
held-out caption with its own image vs another image (``mmf_uvlp.analysis.visual_reliance``).

    python tools/probe_visual_reliance.py --world data/toy_world_demo \\
        --model "Aligned VLP=data/runs/aligned_vlp_pretrain/uvla_final.pth" --out reliance.json

A gain (other - own) of 0 nats means the model does not use the regions to predict the
object words of a caption; the paired standard error says how far from 0 a gain must be.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from mmf_uvlp.analysis.cli import DEFAULT_CONFIG, load_tokenizer
from mmf_uvlp.analysis.regions import RegionStore, read_class_names
from mmf_uvlp.analysis.systems import parse_model_args, uvla_config
from mmf_uvlp.analysis.visual_reliance import (
    class_word_starts, load_pretrained, make_probes, measure, pool_paths,
)
from mmf_uvlp.data_formats.text import read_captions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=Path, required=True,
                        help="a toy world (text/captions_gt.tsv, features/cc.lmdb, vocabulary.json)")
    parser.add_argument("--model", action="append", default=[], metavar="NAME=CHECKPOINT",
                        help="a uvla pre-training uvla_final.pth or MMF .ckpt; repeatable")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                        help="yaml whose model_config.uvla builds the models")
    parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                        help="override, e.g. model_config.uvla.bert_layers=2; repeatable")
    parser.add_argument("--tokenizer", default=os.environ.get("UVLP_BERT"),
                        help="local BERT folder (default $UVLP_BERT)")
    parser.add_argument("--holdout-every", type=int, default=50,
                        help="the pre-training hold-out rule (dataset_config.*.holdout_every)")
    parser.add_argument("--max-regions", type=int, default=24)
    parser.add_argument("--max-length", type=int, default=24, help="caption word-pieces")
    parser.add_argument("--seed", type=int, default=0, help="which class word is masked")
    parser.add_argument("--out", type=Path, help="write the results as json")
    args = parser.parse_args(argv)
    models = parse_model_args(args.model)
    if not models:
        parser.error("give at least one --model NAME=CHECKPOINT")
    try:
        captions_path, features = pool_paths(args.world)
        names = read_class_names(args.world / "vocabulary.json")
        store = RegionStore(features, names, args.max_regions)
        tokenizer = load_tokenizer(args)
        probes = make_probes(list(read_captions(captions_path)), tokenizer,
                             class_word_starts(tokenizer, names), args.holdout_every,
                             args.max_length, args.seed)
        config = uvla_config(args.config, args.opt)
        results = {}
        for name, spec in models:
            model = load_pretrained(config, store.feature_dim, spec)
            reliance = measure(model, probes, store, tokenizer.mask_token_id)
            results[name] = {"checkpoint": spec, **reliance.to_json()}
            print(f"{name}: class-word MLM {reliance.own:.3f} nats with its own image, "
                  f"{reliance.other:.3f} with another: gain {reliance.gain:+.3f} "
                  f"± {reliance.stderr:.3f} (n={reliance.captions})", flush=True)
    except (ValueError, FileNotFoundError) as error:
        print(f"probe_visual_reliance: error: {error}", file=sys.stderr)
        return 2
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"world": str(args.world), "models": results}, indent=1)
                            + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
