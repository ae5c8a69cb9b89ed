"""MMF's frcnn port on random bottom-up-attention weights: the numbers the extractor must match.

    python tools/reference/frcnn_port.py --mmf-source ~/mmf --out port.npz
    python tools/reference/frcnn_port.py --mmf-source ~/mmf --check \\
        tests/fixtures/frcnn_port/bottom_up_attr_lxmert36.npz

Runs MMF's own implementation of the bottom-up-attention detector
(``tools/scripts/features/frcnn/modeling_frcnn.py`` of an MMF source tree, imported from there;
an installed ``mmf`` serves its helpers, and torchvision's compiled ops must load) on the weights
``faster_rcnn_from_caffe_attr.pkl`` would hold, made of random tensors from the public file's
manifest (tests/fixtures/detector_checkpoints, seed ``--seed``), and on a photograph that
scikit-image ships (tests/helpers/checkpoints.py: ``comparison_photo``). The port's config is
its public one (``unc-nlp/frcnn-vg-finetuned``'s: the bottom-up R101-C4 with attributes),
with 36 boxes (LXMERT's), 40 proposals and the photo's own size for a small CPU cost.

``--out`` writes its boxes, classes, class scores, attributes, attribute scores and every
16th dimension of each region's feature with each feature's sum and norm (``.npz``), which
tests/extraction/test_extract_port.py compares with ``uvlp-extract-features --recipe
lxmert-36`` on the same weights and photo. ``--check FIXTURE`` runs the port again and
compares with a written fixture (tools/check_mmf_main.sh does, against MMF main).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Dict, Optional

import numpy as np

REPO = Path(__file__).resolve().parents[2]
FEATURE_STRIDE = 16  # every 16th feature dimension is kept in the fixture
BOXES = 36
PROPOSALS = 40


def _helpers():
    spec = importlib.util.spec_from_file_location(
        "uvlp_test_checkpoints", REPO / "tests" / "helpers" / "checkpoints.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def port_config(min_size: int) -> Dict[str, object]:
    """The frcnn port's config for the bottom-up R101-C4 detector with attributes."""
    return {
        "model": {
            "device": "cpu",
            "max_pool": True,
            "pixel_mean": [102.9801, 115.9465, 122.7717],
            "pixel_std": [1.0, 1.0, 1.0],
        },
        "backbone": {"freeze_at": 2},
        "resnets": {
            "depth": 101,
            "norm": "BN",
            "num_groups": 1,
            "width_per_group": 64,
            "stem_out_channels": 64,
            "res2_out_channels": 256,
            "stride_in_1x1": True,
            "res5_dilation": 1,
            "out_features": ["res4"],
        },
        "anchor_generator": {
            "sizes": [[64, 128, 256, 512]],
            "aspect_ratios": [[0.5, 1.0, 2.0]],
            "offset": 0.0,
        },
        "proposal_generator": {"hidden_channels": 512, "min_size": 0},
        "rpn": {
            "in_features": ["res4"],
            "nms_thresh": 0.7,
            "pre_nms_topk_test": 6000,
            "post_nms_topk_test": PROPOSALS,
            "pre_nms_topk_train": 12000,
            "post_nms_topk_train": 2000,
            "bbox_reg_weights": [1.0, 1.0, 1.0, 1.0],
            "batch_size_per_image": 256,
            "positive_fraction": 0.5,
            "smooth_l1_beta": 0.0,
            "loss_weight": 1.0,
            "boundary_thresh": -1,
            "iou_labels": [0, -1, 1],
            "iou_thresholds": [0.3, 0.7],
        },
        "roi_heads": {
            "in_features": ["res4"],
            "num_classes": 1600,
            "score_thresh_test": 0.2,
            "nms_thresh_test": [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
            "positive_fraction": 0.25,
            "proposal_append_gt": True,
        },
        "ROI_HEADS": {"IOU_THRESHOLDS": [0.5], "IOU_LABELS": [0, 1]},
        "roi_box_head": {
            "attr": True,
            "num_attrs": 400,
            "pooler_resolution": 14,
            "pooler_sampling_ratio": 0,
            "res5halve": False,
            "bbox_reg_weights": [10.0, 10.0, 5.0, 5.0],
            "cls_agnostic_bbox_reg": False,
            "smooth_l1_beta": 0.0,
        },
        "input": {"min_size_test": min_size, "max_size_test": 1000, "format": "BGR"},
        "size_divisibility": 0,
        "PAD_VALUE": 0.0,
        "max_detections": BOXES,
        "min_detections": BOXES,
    }


def _import_port(mmf_source: str):
    """MMF's ``GeneralizedRCNN`` and ``Config`` from the source tree's ``tools/`` alone (the
    installed ``mmf`` package serves the helpers they import)."""
    tools = os.path.join(os.path.abspath(mmf_source), "tools")
    if not os.path.isfile(os.path.join(tools, "scripts", "features", "frcnn", "modeling_frcnn.py")):
        raise SystemExit(
            f"--mmf-source {mmf_source}: no tools/scripts/features/frcnn/"
            "modeling_frcnn.py there (expected an MMF source tree)"
        )
    for name in [m for m in sys.modules if m == "tools" or m.startswith("tools.")]:
        del sys.modules[name]
    package = types.ModuleType("tools")  # the port imports itself as tools.scripts...
    package.__path__ = [tools]
    sys.modules["tools"] = package
    from tools.scripts.features.frcnn.frcnn_utils import Config
    from tools.scripts.features.frcnn.modeling_frcnn import GeneralizedRCNN

    return GeneralizedRCNN, Config


def run_port(
    mmf_source: str, seed: int, photo_source: Optional[str] = None
) -> Dict[str, np.ndarray]:
    """The port's output on the random weights and the photo (cut from ``photo_source``,
    scikit-image's chelsea.png).

    The photo is at the port's test size, so that its ``processing_image.Preprocess`` would
    resize nothing; what it then does (RGB to BGR, minus the pixel mean) is done here, as
    its own module needs a newer ``mmf`` package than the port's code."""
    import torch
    from PIL import Image

    GeneralizedRCNN, Config = _import_port(mmf_source)
    helpers = _helpers()
    cfg = Config(port_config(helpers.COMPARISON_SIZE))
    model = GeneralizedRCNN(cfg)
    tensors = helpers.random_tensors(
        helpers.manifest(helpers.BOTTOM_UP_ATTR), seed, helpers.ANCHORS[helpers.BOTTOM_UP_ATTR]
    )
    missing, unexpected = model.load_state_dict(
        {k: torch.from_numpy(v) for k, v in tensors.items()}, strict=False
    )
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise SystemExit(
            f"the port does not take the public layout: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}"
        )
    model.eval()
    with tempfile.TemporaryDirectory() as folder:
        photo = helpers.comparison_photo(Path(folder), Path(photo_source) if photo_source else None)
        rgb = np.asarray(Image.open(photo).convert("RGB"))
    if min(rgb.shape[:2]) != helpers.COMPARISON_SIZE:
        raise SystemExit(f"the photo is {rgb.shape[:2]}, not at the test size")
    image = torch.as_tensor(rgb.astype("float32")).permute(2, 0, 1).flip(0)  # BGR
    image = image - torch.tensor(cfg.model.pixel_mean).view(3, 1, 1)
    sizes = torch.tensor([image.shape[-2:]])
    with torch.no_grad():
        out = model(
            image[None],
            sizes,
            scales_yx=torch.ones(1, 2),
            padding="max_detections",
            max_detections=BOXES,
            return_tensors="pt",
        )
    features = out["roi_features"][0].numpy().astype(np.float64)
    return {
        "boxes": out["boxes"][0].numpy().astype(np.float32),
        "classes": out["obj_ids"][0].numpy().astype(np.int64),
        "scores": out["obj_probs"][0].numpy().astype(np.float32),
        "attributes": out["attr_ids"][0].numpy().astype(np.int64),
        "attr_scores": out["attr_probs"][0].numpy().astype(np.float32),
        "feature_columns": features[:, ::FEATURE_STRIDE].astype(np.float32),
        "feature_sums": features.sum(axis=1),
        "feature_norms": np.linalg.norm(features, axis=1),
        "image_size": np.array(rgb.shape[:2], dtype=np.int64),
    }


TOLERANCE = {
    "boxes": 1e-2,
    "scores": 1e-5,
    "attr_scores": 1e-5,
    "feature_columns": 1e-4,
    "feature_sums": 1e-2,
    "feature_norms": 1e-3,
}


def compare(got: Dict[str, np.ndarray], want: Dict[str, np.ndarray]) -> Dict[str, object]:
    """Each array's largest absolute difference (ids: how many differ)."""
    out: Dict[str, object] = {}
    for key, value in want.items():
        if key not in got or np.shape(got[key]) != np.shape(value):
            out[key] = f"shape {np.shape(got.get(key))} != {np.shape(value)}"
        elif value.dtype.kind in "iu":
            out[key] = int((np.asarray(got[key]) != value).sum())
        else:
            out[key] = float(np.abs(np.asarray(got[key], dtype=np.float64) - value).max())
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[2:]),
    )
    p.add_argument("--mmf-source", required=True, help="an MMF source tree (its tools/ folder)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--chelsea",
        help="scikit-image's data/chelsea.png (default: found in the scikit-image installed here)",
    )
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", help="write the port's numbers (.npz)")
    group.add_argument("--check", help="run the port and compare with this fixture")
    args = p.parse_args(argv)
    numbers = run_port(args.mmf_source, args.seed, args.chelsea)
    if args.out:
        np.savez_compressed(args.out, seed=np.int64(args.seed), **numbers)
        print(f"{args.out}: {len(numbers['boxes'])} regions of MMF's frcnn port")
        return 0
    with np.load(args.check, allow_pickle=False) as fixture:
        want = {k: fixture[k] for k in fixture.files if k != "seed"}
    diffs = compare(numbers, want)
    bad = {
        k: v
        for k, v in diffs.items()
        if isinstance(v, str)
        or (k in TOLERANCE and v > TOLERANCE[k])
        or (k not in TOLERANCE and v != 0)
    }
    print(json.dumps(diffs))
    if bad:
        print(f"{args.check}: MMF's frcnn port differs: {bad}", file=sys.stderr)
        return 1
    print(f"{args.check}: MMF's frcnn port gives the fixture's numbers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
