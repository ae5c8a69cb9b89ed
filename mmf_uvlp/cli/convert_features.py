"""Convert VinVL detector output into the region-feature files MMF's builders read.

    convert_features.py --predictions raw/predictions.tsv --hw raw/hw.tsv \\
        --labelmap VG-SGG-dicts-vgoi6-clipped.json --out features/cc.lmdb
    convert_features.py --predictions predictions.tsv --features features.tsv \\
        --labelmap labelmap.json --out features/coco            # a .npy folder

``--out`` ending in ``.lmdb``: an MMF LMDB; any other name: a folder of ``<id>.npy`` and
``<id>_info.npy``. The same command resumes an interrupted conversion. Every image is read
back through MMF's own FeaturesDatabase at the end. Layouts, resumption and errors:
``mmf_uvlp/data_formats/convert.py``; a walkthrough: docs/own-data.md.
"""

from __future__ import annotations

import argparse
import logging
import sys

from mmf_uvlp.data_formats.convert import Sources, convert_features
from mmf_uvlp.errors import FormatError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[2:]),
    )
    parser.add_argument(
        "--predictions",
        required=True,
        help="predictions.tsv: a detector's raw output (with --hw) or VinVL's "
        "released file (with --features)",
    )
    parser.add_argument(
        "--hw", help='hw.tsv of the raw output: <image key>\\t[{"height": H, "width": W}]'
    )
    parser.add_argument("--features", help="VinVL's released features.tsv (same row order)")
    parser.add_argument(
        "--labelmap",
        help="the detector's label map: json (label_to_idx / idx_to_label, "
        "e.g. VG-SGG-dicts-vgoi6-clipped.json) or tsv (a class a line); "
        "not needed when every class is a name: the ids then follow the "
        "names' sorted order, written to OUT/labelmap.tsv (give it as "
        "--labelmap for the other files, so that their ids agree)",
    )
    parser.add_argument(
        "--out", required=True, help="NAME.lmdb for an MMF LMDB, any other name for a .npy folder"
    )
    parser.add_argument(
        "--feature-dim",
        type=int,
        default=None,
        help="D, the appearance size (default: the first rows' majority)",
    )
    parser.add_argument(
        "--box-tolerance",
        type=float,
        default=1.0,
        help="pixels a box may lie outside its image (default 1)",
    )
    parser.add_argument(
        "--on-error",
        choices=["raise", "skip"],
        default="raise",
        help="a bad row stops the conversion (default) or is skipped, counted",
    )
    parser.add_argument(
        "--commit-every",
        type=int,
        default=256,
        help="images between commits of the resumable state (default 256)",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="delete the files an earlier conversion wrote into --out (those "
        "its .convert/keys.tsv lists; other files stay) and start over",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip reading every image back through MMF's FeaturesDatabase",
    )
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if bool(args.hw) == bool(args.features):
        parser.error(
            "give --hw (a detector's raw output) or --features (VinVL's released features.tsv)"
        )
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    sources = Sources(
        predictions=args.predictions,
        labelmap=args.labelmap,
        features=args.features,
        hw=args.hw,
        feature_dim=args.feature_dim,
        box_tolerance=args.box_tolerance,
    )
    try:
        summary = convert_features(
            sources,
            args.out,
            on_error=args.on_error,
            commit_every=args.commit_every,
            restart=args.restart,
            progress=not args.no_progress,
            verify=not args.no_verify,
        )
    except (FormatError, ValueError, OSError) as e:
        print(f"convert_features: error: {e}", file=sys.stderr)
        return 2
    skipped = summary.skipped.get("counts", {})
    print(
        f"{summary.out} ({summary.layout}): {summary.images} images, {summary.regions} "
        f"regions, D = {summary.feature_dim}, at most {summary.max_boxes} regions an image; "
        f"{summary.rows} rows read, {sum(skipped.values())} skipped {skipped if skipped else ''}".rstrip()
    )
    if summary.verified:
        print(
            f"read back through MMF's FeaturesDatabase: {summary.verified} of "
            f"{summary.images} images identical"
        )
    elif summary.resumed:
        print("already converted from these inputs: nothing to do")
    print(
        f"config: model_config.uvla.feature_dim={summary.feature_dim} "
        f"model_config.uvla.num_region_classes={summary.num_columns}, "
        f"max_features >= {summary.max_boxes}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
