"""Generate the toy world (images, detections, features, text, downstream sets).

Examples:
    uvlp-make-toy-world --preset tiny --seed 0 --out data/toy_tiny
    uvlp-make-toy-world --preset demo --out data/toy_demo
    uvlp-make-toy-world --preset bench --out data/toy_bench --num-images 20000
    uvlp-make-toy-world --preset demo --out data/toy_demo_k24 --foreground-classes 24
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable
from dataclasses import replace
from pathlib import Path

from mmf_uvlp.errors import UnsafeOutputPath
from mmf_uvlp.toy_world import PRESETS, generate_world
from mmf_uvlp.toy_world.downstream import NLVR2_STATEMENTS
from mmf_uvlp.toy_world.generate import check_output
from mmf_uvlp.toy_world.text import CAPTION_STYLES
from mmf_uvlp.toy_world.vocabulary import MIN_FOREGROUND_CLASSES


def _int_at_least(minimum: int, name: str) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum`` (``name`` words the error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a {name} integer, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1, "positive")
_non_negative_int = _int_at_least(0, "non-negative")
# downstream split sizes (--vqa2-questions, ...): WorldConfig field -> its splits, in order
SPLIT_SIZES = {
    "vqa2_questions": ("TRAIN", "VAL", "TEST"),
    "nlvr2_pairs": ("TRAIN", "DEV", "TEST1"),
    "ve_hypotheses": ("TRAIN", "DEV", "TEST"),
    "refcoco_images": ("TRAIN", "VAL", "TESTA", "TESTB"),
}


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Generate a toy world in the real VinVL/MMF/refer on-disk formats.",
    )
    p.add_argument(
        "--preset",
        required=True,
        choices=sorted(PRESETS),
        help="sizes: tiny (tests), demo (demo chain), calibrated (calibration study), "
        "bench (throughput)",
    )
    p.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (default 0)")
    p.add_argument("--out", required=True, type=Path, help="output directory (new or empty)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the world in OUT (only the files its world_files.txt lists)",
    )
    p.add_argument("--feature-dim", type=_positive_int, help="region feature size D")
    p.add_argument("--num-images", type=_positive_int, help="pre-training pool size")
    p.add_argument(
        "--extra-captions",
        type=_non_negative_int,
        help="captions of images outside the pool, added to the caption corpus",
    )
    p.add_argument(
        "--narrative-sentences", type=_non_negative_int, help="sentences in the narrative corpus"
    )
    p.add_argument("--max-regions", type=_positive_int, help="regions kept per image")
    p.add_argument(
        "--foreground-classes",
        type=_non_negative_int,
        help="draw from this many foreground classes only (0: all of them; "
        f"at least {MIN_FOREGROUND_CLASSES} otherwise)",
    )
    p.add_argument(
        "--caption-style",
        choices=sorted(CAPTION_STYLES),
        help="pre-training captions: web (every preset), objects (1-3 of the "
        "image's classes, 'a dog and a hat': the text does not predict them) "
        "or attributes (1-3 of its objects, 'a small red cup and a dog')",
    )
    p.add_argument(
        "--nlvr2-statements",
        choices=sorted(NLVR2_STATEMENTS),
        help="NLVR2 statement kinds: mixed (every preset: counts, totals, colours, "
        "one image only, relations) or presence (which images show an object)",
    )
    p.add_argument(
        "--nlvr2-classes",
        type=_non_negative_int,
        help="NLVR2 statements name only this many foreground classes (0: every "
        "active one; the scenes still show every class)",
    )
    p.add_argument(
        "--nlvr2-classes-percent",
        type=_non_negative_int,
        help="hold only this percent of the NLVR2 pairs (drawn per pair) to the "
        "--nlvr2-classes classes; the others name any active class "
        "(default 100: every pair)",
    )
    p.add_argument(
        "--downstream-scale",
        type=_positive_float,
        help="multiply every downstream split size by this factor",
    )
    for name, splits in SPLIT_SIZES.items():
        p.add_argument(
            f"--{name.replace('_', '-')}",
            nargs=len(splits),
            type=_non_negative_int,
            metavar=splits,
            help=f"{name.replace('_', ' ')} per split (before --downstream-scale)",
        )
    p.add_argument("--no-downstream", action="store_true", help="skip the downstream sets")
    p.add_argument(
        "--no-features",
        action="store_true",
        help="write detections and text only (no features.tsv, LMDB or npy)",
    )
    npy = p.add_mutually_exclusive_group()
    npy.add_argument(
        "--npy",
        dest="npy",
        action="store_true",
        default=None,
        help="also write MMF npy feature folders",
    )
    npy.add_argument(
        "--no-npy", dest="npy", action="store_false", help="do not write MMF npy feature folders"
    )
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return p


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = replace(PRESETS[args.preset], seed=args.seed)
    overrides = {
        "feature_dim": args.feature_dim,
        "num_images": args.num_images,
        "extra_captions": args.extra_captions,
        "narrative_sentences": args.narrative_sentences,
        "max_regions": args.max_regions,
        "npy": args.npy,
        "foreground_classes": args.foreground_classes,
        "caption_style": args.caption_style,
        "nlvr2_statements": args.nlvr2_statements,
        "nlvr2_classes": args.nlvr2_classes,
        "nlvr2_classes_percent": args.nlvr2_classes_percent,
    }
    for name in SPLIT_SIZES:
        sizes = getattr(args, name)
        overrides[name] = None if sizes is None else tuple(sizes)
    try:
        config = replace(config, **{k: v for k, v in overrides.items() if v is not None})
    except ValueError as e:
        parser.error(str(e))
    if args.no_downstream:
        config = replace(config, downstream=False)
    if args.no_features:
        config = replace(config, features=False, npy=False)
    if args.downstream_scale is not None:
        config = config.scaled_downstream(args.downstream_scale)
    try:
        check_output(args.out, args.overwrite)
    except FileExistsError as e:
        parser.error(f"argument --out: {e}")
    except UnsafeOutputPath as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")

    start = time.perf_counter()
    try:
        manifest = generate_world(
            config, args.out, progress=not args.no_progress, overwrite=args.overwrite
        )
    except UnsafeOutputPath as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    seconds = time.perf_counter() - start

    counts = manifest["counts"]
    print(
        f"toy world '{config.preset}' (seed {config.seed}) written to {args.out} "
        f"in {seconds:.1f} s, {_size(args.out) / 2**20:.1f} MiB"
    )
    print(
        f"  feature_dim: {manifest['feature_dim']}, classes: {manifest['num_classes']} "
        f"({len(manifest['active_classes'])} active)"
    )
    for pool, c in counts["pools"].items():
        print(f"  pool {pool}: {c['images']} images, {c['regions']} regions")
    print(
        f"  text: {counts['captions_gt']} captions, caption corpus "
        f"{counts['caption_corpus']} lines, narrative corpus {counts['narrative_corpus']} lines"
    )
    for task in ("vqa2", "nlvr2", "visual_entailment"):
        if task in counts:
            print(f"  {task}: " + ", ".join(f"{s} {n}" for s, n in counts[task].items()))
    if "refcoco+" in counts:
        refs = counts["refcoco+"]["refs"]
        print("  refcoco+ refs: " + ", ".join(f"{s} {n}" for s, n in refs.items()))
    print(f"  manifest: {args.out / 'world.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
