"""Extract boxes, region features, classes and attributes from images with detectron2.

    uvlp-extract-features --images photos/ --recipe bottom-up-attention \\
        --weights faster_rcnn_from_caffe_attr.pkl --classes objects_vocab.txt \\
        --attributes attributes_vocab.txt --out raw/photos
    uvlp-extract-features --images photos.tsv --arch R101-C4 --weights model_final.pkl \\
        --out raw/photos --mmf-out features/photos.lmdb --shards 8 --executor slurm ...

``--images``: a folder, a list file (one path a line) or a tsv of ``<key>\\t<base64 image>``.
``--out`` receives VinVL's raw layout (predictions.tsv, hw.tsv, labelmap.json) that
``uvlp-convert-features`` and the corpus builder read, with problems.tsv and report.json;
``--mmf-out`` converts it into MMF's LMDB (``NAME.lmdb``) or .npy folder through
``uvlp-convert-features``'s code. The same command resumes an interrupted run. ``--shards N``
runs N submitit jobs and merges them. ``--recipe`` selects a public checkpoint's whole
recipe (``mmf_uvlp/extraction/recipes.py``); every tensor of ``--weights`` is loaded, or the
run stops before the first image (``mmf_uvlp/extraction/checkpoints.py``). Architectures,
features and the box selection: ``mmf_uvlp/extraction/detector.py``; output layout and
resumption: ``mmf_uvlp/extraction/run.py``; a walkthrough: docs/own-data.md.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from dataclasses import fields
from typing import Dict, Optional, Tuple

from mmf_uvlp.utils.cluster import add_job_arguments

MISSING = (
    "detectron2 is not installed in this environment: `make setup EXTRACT=1` makes "
    ".venv-extract, which has it (docs/install.md)"
)


def parser() -> argparse.ArgumentParser:
    from mmf_uvlp.extraction.selection import HELP, METHODS, Selection

    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[2:]),
    )
    p.add_argument("--images", required=True, help="a folder, a list file or a base64 tsv")
    p.add_argument("--out", required=True, help="the folder of the raw detector output")
    from mmf_uvlp.extraction.recipes import RECIPES

    p.add_argument(
        "--recipe",
        choices=list(RECIPES),
        help="a public checkpoint's whole recipe (architecture, names, box "
        "selection), each setting overridable by its flag: "
        + "; ".join(f"{r.name}: {r.checkpoint}" for r in RECIPES.values()),
    )
    p.add_argument(
        "--arch",
        help="a registered architecture (R50-C4, R101-C4, R50-FPN, "
        "R101-FPN, X101-FPN, VG-R101-C4-attr, VG-R101-C4, ...; "
        "default: the recipe's, else VG-R101-C4-attr) or a "
        "detectron2 yaml file (read as plain data)",
    )
    p.add_argument(
        "--trust-arch",
        action="store_true",
        help="read the --arch yaml the way detectron2 does, which can run code "
        "named in it (only for a file you trust)",
    )
    p.add_argument(
        "--weights",
        help="the detector's weights: a .pkl (read as data: arrays, "
        "numbers, strings, containers) or a .pth "
        "(torch.load weights_only)",
    )
    p.add_argument(
        "--layout", help="the names of --weights' tensors (default: the recipe's, else detectron2)"
    )
    p.add_argument(
        "--allow-partial-weights",
        action="store_true",
        help="run although the weights do not fill the detector or hold tensors "
        "it has no place for (the rest stays random; recorded in report.json)",
    )
    p.add_argument(
        "--random-weights",
        type=int,
        metavar="SEED",
        help="randomly initialised weights from SEED instead (tests, benchmarks; "
        "recorded in report.json)",
    )
    p.add_argument(
        "--classes", help="class names, one a line (default: COCO's 80 for the COCO configs)"
    )
    p.add_argument("--attributes", help="attribute names, one a line (attribute heads)")
    p.add_argument(
        "--feature-layer",
        choices=["fc6", "fc7"],
        help="an FPN box head's layer the region features come from (default: the "
        "recipe's, else fc7)",
    )
    p.add_argument(
        "--feature-dim",
        type=int,
        default=2048,
        help="the D the model reads (model_config.uvla.feature_dim; default 2048): "
        "a detector whose features are another size is refused",
    )
    sel = p.add_argument_group("box selection (default: the recipe's, else bottom-up attention's)")
    choices = {"method": METHODS, "boxes": ("proposals", "regressed")}
    for f in fields(Selection):
        sel.add_argument(
            f"--{f.name.replace('_', '-')}",
            type=type(f.default),
            choices=choices.get(f.name),
            help=f"{HELP[f.name]} (default {f.default})",
        )
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda")
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "fp16", "bf16"],
        default="auto",
        help="the backbone and res5 (or the FPN box head) under autocast on CUDA; "
        "the RPN, boxes, scores, NMS and attributes stay fp32. auto "
        "(default): fp16 on CUDA, fp32 on a CPU",
    )
    p.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--min-side", type=int, default=32, help="smaller images are skipped")
    p.add_argument(
        "--max-pixels",
        type=int,
        default=50_000_000,
        help="larger images are skipped (checked before decoding)",
    )
    p.add_argument(
        "--mmf-out",
        help="also MMF's features: NAME.lmdb or a folder, converted by "
        "uvlp-convert-features; with --recipe vinvl or mmf-vmb, "
        "a folder receives the files of that MMF script "
        "(extract_features_vinvl.py, extract_features_vmb.py)",
    )
    p.add_argument(
        "--restart",
        action="store_true",
        help="discard an earlier extraction in --out and start over",
    )
    p.add_argument(
        "--opts", nargs="*", default=[], help="detectron2 config overrides, KEY VALUE ..."
    )
    p.add_argument("--shards", type=int, help="run as N submitit jobs and merge them")
    p.add_argument("--no-progress", action="store_true")
    add_job_arguments(p)
    return p


def settings_of(args: argparse.Namespace) -> Dict[str, object]:
    return {k: v for k, v in vars(args).items()}


def resolve(s: argparse.Namespace):
    """The recipe's defaults under the flags given: (arch, layout, selection, opts, state),
    ``state`` the weights' tensors when the architecture was chosen from them."""
    from mmf_uvlp.extraction.checkpoints import read_weights
    from mmf_uvlp.extraction.recipes import get_recipe
    from mmf_uvlp.extraction.selection import Selection

    recipe = get_recipe(s.recipe) if s.recipe else None
    values = dict(recipe.selection) if recipe else {}
    values.update(
        {f.name: getattr(s, f.name) for f in fields(Selection) if getattr(s, f.name) is not None}
    )
    state = None
    arch = s.arch
    if arch is None and recipe is not None:
        if s.weights:
            state = read_weights(s.weights)
        arch = recipe.arch(state.keys() if state is not None else None)
    layout = s.layout or (recipe.layout if recipe else "detectron2")
    opts = list(recipe.opts if recipe else ()) + list(s.opts)
    return arch or "VG-R101-C4-attr", layout, Selection(**values), opts, state


def run_shard(settings: Dict[str, object], out: str, shard: Optional[Tuple[int, int]]):
    """Build the detector of ``settings`` and extract into ``out`` (one shard, or all)."""
    import torch

    from mmf_uvlp.extraction.detector import Detector, build_config, read_names
    from mmf_uvlp.extraction.mmf_scripts import ScriptOutput
    from mmf_uvlp.extraction.recipes import get_recipe
    from mmf_uvlp.extraction.run import RunOptions, extract

    s = argparse.Namespace(**settings)
    if s.threads:
        torch.set_num_threads(s.threads)
    arch, layout, selection, opts, state = resolve(s)
    recipe = get_recipe(s.recipe) if s.recipe else None
    device = s.device if s.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    cfg = build_config(arch, selection, opts, s.trust_arch)
    detector = Detector(
        cfg,
        s.weights,
        selection,
        device,
        s.random_weights,
        s.precision,
        layout,
        s.allow_partial_weights,
        state,
        s.feature_layer or (recipe.feature_layer if recipe else "fc7"),
    )
    del state
    if detector.feature_dim != s.feature_dim:
        raise ValueError(
            f"--arch {arch}: its region feature is {detector.feature_kind}, but "
            f"--feature-dim (model_config.uvla.feature_dim) is {s.feature_dim}; pass "
            f"--feature-dim {detector.feature_dim} and set model_config.uvla.feature_dim="
            f"{detector.feature_dim} for the model, or use a C4 architecture (2048-d)"
        )
    classes = read_names(s.classes, "class") if s.classes else detector.default_class_names()
    if classes is None:
        raise ValueError(
            f"--classes: the detector has {detector.num_classes} classes and no "
            "built-in names; give a file of them, one a line"
        )
    attributes = read_names(s.attributes, "attribute") if s.attributes else []
    if detector.num_attributes and not attributes:
        raise ValueError(
            f"--attributes: the detector has {detector.num_attributes} "
            "attributes; give a file of their names, one a line"
        )
    options = RunOptions(
        batch_size=s.batch_size,
        min_side=s.min_side,
        max_pixels=s.max_pixels,
        progress=not s.no_progress and shard is None,
        restart=s.restart,
    )
    script = mmf_script(s)
    sink = ScriptOutput(s.mmf_out, script).write if script else None
    return extract(
        s.images,
        out,
        detector,
        classes,
        attributes,
        options,
        shard,
        s.weights,
        s.random_weights,
        sink,
    )


def mmf_script(s: argparse.Namespace) -> Optional[str]:
    """The MMF script whose files ``--mmf-out`` receives (its recipe's, to a folder), or
    None: ``--mmf-out`` is converted by uvlp-convert-features."""
    from mmf_uvlp.extraction.recipes import get_recipe

    if not s.mmf_out or not s.recipe or s.mmf_out.rstrip("/").endswith(".lmdb"):
        return None
    return get_recipe(s.recipe).mmf_script


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    try:
        import detectron2  # noqa: F401
    except ImportError:
        print(f"extract_features: error: {MISSING}", file=sys.stderr)
        return 2
    if (args.weights is None) == (args.random_weights is None):
        print(
            "extract_features: error: give --weights PATH (or --random-weights SEED for tests)",
            file=sys.stderr,
        )
        return 2
    if args.random_weights is not None:
        logging.getLogger(__name__).warning(
            "--random-weights %d: a randomly initialised detector; its regions mean nothing "
            "(recorded in report.json)",
            args.random_weights,
        )
    try:
        if args.shards:
            from mmf_uvlp.extraction.launch import ExtractionLauncher
            from mmf_uvlp.utils.cluster import JobOptions

            make_run = functools.partial(run_shard, settings_of(args))
            report = ExtractionLauncher(
                make_run,
                args.out,
                args.shards,
                JobOptions.from_args(args),
                progress=not args.no_progress,
            ).run()
            print(
                f"{args.out}: {report['images_written']} images, {report['regions']} "
                f"regions, D = {report['feature_dim']} ({args.shards} shards merged)"
            )
            skipped, converted = report["skipped"], report["converted"]
        else:
            summary = run_shard(settings_of(args), args.out, None)
            done = summary.listed - summary.resumed_at
            rate = done / summary.seconds if summary.seconds else 0.0
            cpu = summary.cpu_seconds / done if done else 0.0
            print(
                f"{args.out}: {summary.written} of {summary.listed} images, "
                f"{summary.regions} regions, D = {summary.feature_dim}; {rate:.2f} images/s, "
                f"{cpu:.2f} CPU s an image"
                + (f" (resumed at image {summary.resumed_at})" if summary.resumed_at else "")
            )
            skipped, converted = summary.skipped, summary.converted
        print(
            f"skipped {sum(skipped.values())} {skipped if skipped else ''}; converted "
            f"{sum(converted.values())} {converted if converted else ''} (named in "
            f"{args.out}/problems.tsv)"
        )
        notice = weights_notice(args.out)
        if notice:
            print(f"WARNING: {args.out}: {notice}")
        if args.mmf_out and mmf_script(args):
            _write_detector_json(args)
            print(
                f"{args.mmf_out}: the files of MMF's extract_features_{mmf_script(args)}.py, "
                "an image each (<key>.npy, <key>_info.npy)"
            )
            if notice:
                print(f"WARNING: {args.mmf_out}: {notice}")
        elif args.mmf_out:
            status = _convert(args)
            if status == 0 and notice:
                print(f"WARNING: {args.mmf_out}: read back, but {notice}")
            return status
    except (ValueError, RuntimeError, OSError) as e:
        print(f"extract_features: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        line = _weights_error(e, args.weights)
        if line is None:
            raise
        print(f"extract_features: error: {line}", file=sys.stderr)
        return 2
    return 0


def _weights_error(error: BaseException, weights: Optional[str]) -> Optional[str]:
    """One line for an error raised while ``weights`` was read, beyond the reader's own
    checks (a file that is no checkpoint can make ``torch.load`` raise an IndexError);
    None for an error raised elsewhere."""
    import traceback

    from mmf_uvlp.extraction.checkpoints import read_weights

    if not weights or not any(
        frame.f_code is read_weights.__code__ for frame, _ in traceback.walk_tb(error.__traceback__)
    ):
        return None
    text = str(error).strip().splitlines()
    return f"--weights {weights}: cannot be read as a checkpoint ({type(error).__name__}" + (
        f": {text[0]})" if text else ")"
    )


def weights_notice(out: str) -> Optional[str]:
    """What to say of an output whose detector's weights were not loaded whole, else None."""
    import json
    import os

    with open(os.path.join(out, "report.json"), encoding="utf-8") as handle:
        weights = json.load(handle)["weights"]
    if weights["status"] == "random":
        return (
            f"its regions come from a RANDOMLY INITIALISED detector (--random-weights "
            f"{weights['random_seed']}): for tests only (report.json: weights)"
        )
    if weights["status"] == "partial":
        return (
            f"its detector was loaded PARTIALLY from {weights['weights']} "
            f"(--allow-partial-weights: {weights['missing']['count']} tensors missing, "
            f"{weights['unexpected']['count']} unexpected, {weights['mismatched']['count']} "
            "mis-shaped, report.json: weights)"
        )
    return None


def _convert(args: argparse.Namespace) -> int:
    """``--out`` into MMF's features through the converter (``uvlp-convert-features``), with
    ``detector.json`` beside them (the detector's weights: whole, partial or random)."""
    import os

    from mmf_uvlp.cli.convert_features import main as convert

    status = convert(
        [
            "--predictions",
            os.path.join(args.out, "predictions.tsv"),
            "--hw",
            os.path.join(args.out, "hw.tsv"),
            "--labelmap",
            os.path.join(args.out, "labelmap.json"),
            "--out",
            args.mmf_out,
        ]
        + (["--no-progress"] if args.no_progress else [])
    )
    if status == 0:
        _write_detector_json(args)
    return status


def _write_detector_json(args: argparse.Namespace) -> None:
    """The detector beside its features: how its weights were loaded."""
    import json
    import os

    from mmf_uvlp.utils.atomic import atomic_write_json

    with open(os.path.join(args.out, "report.json"), encoding="utf-8") as handle:
        weights = json.load(handle)["weights"]
    atomic_write_json(
        os.path.join(args.mmf_out, "detector.json"),
        {"raw_output": os.path.abspath(args.out), "weights": weights},
    )


if __name__ == "__main__":
    sys.exit(main())
