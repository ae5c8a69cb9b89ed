"""Named extraction recipes: a public detector checkpoint and how its users extract with it.

``--recipe NAME`` selects one whole: the architecture (chosen from the checkpoint's own keys
where the public file comes with and without a head), the checkpoint's layout of names, the
box selection and detectron2 overrides, each defaulted as the recipe's own code does. A flag
given on the command line wins over the recipe's value. A recipe is one
:func:`register_recipe` call (:data:`RECIPES`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection, Dict, Optional, Tuple

RECIPES: Dict[str, "Recipe"] = {}


@dataclass(frozen=True)
class Recipe:
    """One anchor's extraction, with the public checkpoint it expects."""

    name: str
    description: str
    checkpoint: str  # the public file and where its users download it
    arch: Callable[[Optional[Collection[str]]], str]  # the checkpoint's keys (None: random)
    layout: str = "detectron2"  # mmf_uvlp.extraction.checkpoints.LAYOUTS
    selection: Dict[str, object] = field(default_factory=dict)  # Selection's fields
    opts: Tuple[str, ...] = ()  # detectron2 config overrides, KEY VALUE ...
    feature_layer: str = "fc7"  # an FPN box head's layer the features come from
    mmf_script: Optional[str] = None  # --mmf-out FOLDER: that MMF script's files (mmf_scripts)


def register_recipe(recipe: Recipe) -> Recipe:
    if recipe.name in RECIPES:
        raise ValueError(f"recipe {recipe.name!r} is registered twice")
    RECIPES[recipe.name] = recipe
    return recipe


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"--recipe {name!r}: expected one of {', '.join(RECIPES)}")
    return RECIPES[name]


ATTRIBUTE_KEY = "roi_heads.box_predictor.attr_score.weight"
PY_BOTTOM_UP = (
    "py-bottom-up-attention's http://nlp.cs.unc.edu/models/{} (what "
    "github.com/airsplay/py-bottom-up-attention's demos load)"
)


def bottom_up_arch(keys: Optional[Collection[str]]) -> str:
    """The bottom-up detector with its attribute head when the checkpoint has one (random
    weights: with it)."""
    return "VG-R101-C4-attr" if keys is None or ATTRIBUTE_KEY in keys else "VG-R101-C4"


register_recipe(
    Recipe(
        name="bottom-up-attention",
        description="bottom-up attention's generate_tsv.py: per-class NMS 0.3 over the 300 "
        "proposals, the boxes scoring at least 0.2, 10 to 100 of them; attributes "
        "scoring at least 0.1",
        checkpoint=PY_BOTTOM_UP.format("faster_rcnn_from_caffe_attr.pkl") + " (or "
        "faster_rcnn_from_caffe.pkl, without attributes)",
        arch=bottom_up_arch,
        selection={
            "method": "per-class",
            "proposals": 300,
            "nms_iou": 0.3,
            "conf_thresh": 0.2,
            "min_boxes": 10,
            "max_boxes": 100,
            "boxes": "proposals",
            "attr_thresh": 0.1,
            "max_attributes": 1,
        },
    )
)

register_recipe(
    Recipe(
        name="lxmert-36",
        description="LXMERT's detectron2 script (py-bottom-up-attention's "
        "detectron2_mscoco_proposal_maxnms.py): each proposal's best class and its "
        "regressed box, one NMS from 0.3 raised by 0.1 until 36 survive, exactly 36 "
        "boxes; with an attribute head, each box's best attribute",
        checkpoint=PY_BOTTOM_UP.format("faster_rcnn_from_caffe.pkl") + " (or "
        "faster_rcnn_from_caffe_attr.pkl, with attributes)",
        arch=bottom_up_arch,
        selection={
            "method": "max-class",
            "proposals": 300,
            "nms_iou": 0.3,
            "min_boxes": 36,
            "max_boxes": 36,
            "attr_thresh": 0.0,
            "max_attributes": 1,
        },
    )
)

register_recipe(
    Recipe(
        name="vinvl",
        description="VinVL's scene_graph_benchmark as MMF's extract_features_vinvl.py runs it "
        "(NMS_FILTER 1, SCORE_THRESH 0.2): per-class NMS 0.3 over the 300 proposals' "
        "regressed boxes, each box labelled with its best class surviving NMS, by "
        "score, those at least 0.2, 10 to 100 of them; each box's 16 best attributes "
        "above 0.05; 600 / 1000 px; --mmf-out FOLDER: extract_features_vinvl.py's "
        "files",
        checkpoint="VinVL's vinvl_vg_x152c4.pth (https://penzhanwu2.blob.core.windows.net/sgg/"
        "sgg_benchmark/vinvl_model_zoo/vinvl_vg_x152c4.pth, MMF's copy https://"
        "dl.fbaipublicfiles.com/mmf/data/models/vinvl/detection/vinvl_vg_x152c4.pth; "
        "names: VG-SGG-dicts-vgoi6-clipped.json beside it)",
        arch=lambda keys: "VinVL-X152-C4",
        layout="maskrcnn-benchmark",
        selection={
            "method": "vinvl",
            "proposals": 300,
            "nms_iou": 0.3,
            "conf_thresh": 0.2,
            "min_boxes": 10,
            "max_boxes": 100,
            "boxes": "regressed",
            "attr_thresh": 0.05,
            "max_attributes": 16,
        },
        mmf_script="vinvl",
    )
)

register_recipe(
    Recipe(
        name="mmf-vmb",
        description="MMF's extract_features_vmb.py: per-class NMS 0.5 over the proposals, each "
        "one's best surviving score above 0, the 100 best whatever their score, "
        "labelled with their best class; fc6 features; 800 / 1333 px; --mmf-out "
        "FOLDER: extract_features_vmb.py's files (cls_prob: every class's "
        "probability)",
        checkpoint="MMF's detectron_model.pth (https://dl.fbaipublicfiles.com/pythia/"
        "detectron_model/detectron_model.pth; names: the 1,600 Visual Genome classes, "
        "https://dl.fbaipublicfiles.com/pythia/data/visual_genome_categories.json)",
        arch=lambda keys: "vmb-X101-FPN",
        layout="maskrcnn-benchmark",
        selection={
            "method": "mmf-vmb",
            "proposals": 2000,
            "nms_iou": 0.5,
            "conf_thresh": 0.0,
            "min_boxes": 1,
            "max_boxes": 100,
            "boxes": "proposals",
        },
        feature_layer="fc6",
        mmf_script="vmb",
    )
)
