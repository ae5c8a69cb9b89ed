"""Visual reliance of pre-trained checkpoints: MLM loss on a masked class word of each
held-out caption with its own image vs another image (``mmf_uvlp.analysis.visual_reliance``).

    uvlp-probe-visual-reliance --world data/toy_world_demo \\
        --model "Aligned VLP=data/replication/toy_world_demo__demo/aligned_vlp/seed0/pretrain/uvla_final.pth" --out reliance.json

A gain (other - own) of 0 nats means the model does not use the regions to predict the
object words of a caption; the paired standard error says how far from 0 a gain must be.
"""

from __future__ import annotations

import json
import sys

from mmf_uvlp.analysis.cli import load_pool, parse_pool_probe_args, load_tokenizer
from mmf_uvlp.analysis.systems import uvla_config
from mmf_uvlp.analysis.visual_reliance import (
    class_word_starts,
    load_pretrained,
    make_probes,
    measure,
)


def main(argv: list[str] | None = None) -> int:
    args, models = parse_pool_probe_args(
        __doc__.split("\n\n")[0],
        argv,
        max_length_help="caption word-pieces",
        seed_help="which class word is masked",
    )
    try:
        captions, names, store = load_pool(args)
        tokenizer = load_tokenizer(args)
        probes = make_probes(
            captions,
            tokenizer,
            class_word_starts(tokenizer, names),
            args.holdout_every,
            args.max_length,
            args.seed,
        )
        config = uvla_config(args.config, args.opt)
        results = {}
        for name, spec in models:
            model = load_pretrained(config, store.feature_dim, spec, trust=args.trust_checkpoint)
            reliance = measure(model, probes, store, tokenizer.mask_token_id)
            results[name] = {"checkpoint": spec, **reliance.to_json()}
            print(
                f"{name}: class-word MLM {reliance.own:.3f} nats with its own image, "
                f"{reliance.other:.3f} with another: gain {reliance.gain:+.3f} "
                f"± {reliance.stderr:.3f} (n={reliance.captions})",
                flush=True,
            )
    except (ValueError, FileNotFoundError) as error:
        print(f"probe_visual_reliance: error: {error}", file=sys.stderr)
        return 2
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"world": str(args.world), "models": results}, indent=1) + "\n",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
