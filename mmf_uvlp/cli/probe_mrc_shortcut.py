"""The MRC shortcut of pre-trained checkpoints: MRC loss on a masked region with its own tag
visible vs hidden, and tag MLM with its region visible vs zeroed
(``mmf_uvlp.analysis.mrc_shortcut``).

    uvlp-probe-mrc-shortcut --world data/toy_world_calibrated \\
        --model "μ-VLA=data/replication/toy_world_demo__demo/uvla/seed0/pretrain/uvla_final.pth" --out shortcut.json

A gain (hidden - visible) of 0 nats means MRC does not read the masked region's tag (or the
masked tag its region); the class prior's entropy is MRC's loss of the best guess that
reads nothing.
"""

from __future__ import annotations

import json
import sys

from mmf_uvlp.analysis.cli import load_pool, parse_pool_probe_args, load_tokenizer
from mmf_uvlp.analysis.mrc_shortcut import (
    DIRECTIONS,
    class_prior_entropy,
    make_tag_probes,
    measure_reading,
)
from mmf_uvlp.analysis.systems import uvla_config
from mmf_uvlp.analysis.visual_reliance import held_out_captions, load_pretrained


def main(argv: list[str] | None = None) -> int:
    args, models = parse_pool_probe_args(
        __doc__.split("\n\n")[0],
        argv,
        seed_help="which region is masked",
        max_length_help="R-T word-pieces (the R-T processor's max_seq_length)",
    )
    try:
        captions, names, store = load_pool(args)
        if len(set(names)) != len(names):
            raise ValueError(
                f"{args.world / 'vocabulary.json'}: class names repeat; the probe "
                "maps a region's label back to its class id"
            )
        tokenizer = load_tokenizer(args)
        images = [image_id for image_id, _ in held_out_captions(captions, args.holdout_every)]
        probes = make_tag_probes(
            images,
            store,
            tokenizer,
            {name: k for k, name in enumerate(names)},
            args.max_length,
            args.seed,
        )
        prior = class_prior_entropy(probes)
        config = uvla_config(args.config, args.opt)
        results = {}
        for name, spec in models:
            model = load_pretrained(
                config, store.feature_dim, spec, ("mrc", "mlm"), args.trust_checkpoint
            )
            readings = {
                direction: measure_reading(model, probes, store, tokenizer.mask_token_id, direction)
                for direction in DIRECTIONS
            }
            results[name] = {
                "checkpoint": spec,
                **{d: reading.to_json() for d, reading in readings.items()},
            }
            mrc, tag = readings["mrc"], readings["tag_mlm"]
            print(
                f"{name}: MRC {mrc.visible:.3f} nats (accuracy {mrc.visible_accuracy:.3f}) "
                f"with the region's tag visible, {mrc.hidden:.3f} ({mrc.hidden_accuracy:.3f}) "
                f"with it hidden: gain {mrc.gain:+.3f} ± {mrc.stderr:.3f} (class prior "
                f"{prior:.3f} nats); tag MLM {tag.visible:.3f} ({tag.visible_accuracy:.3f}) "
                f"with its region's features, {tag.hidden:.3f} ({tag.hidden_accuracy:.3f}) "
                f"without: gain {tag.gain:+.3f} ± {tag.stderr:.3f} (n={mrc.images})",
                flush=True,
            )
    except (ValueError, FileNotFoundError) as error:
        print(f"probe_mrc_shortcut: error: {error}", file=sys.stderr)
        return 2
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {"world": str(args.world), "class_prior_nats": prior, "models": results}, indent=1
            )
            + "\n",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
