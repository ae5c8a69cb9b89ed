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
PY_BOTTOM_UP = ("py-bottom-up-attention's http://nlp.cs.unc.edu/models/{} (what "
                "github.com/airsplay/py-bottom-up-attention's demos load)")


def bottom_up_arch(keys: Optional[Collection[str]]) -> str:
    """The bottom-up detector with its attribute head when the checkpoint has one (random
    weights: with it)."""
    return "VG-R101-C4-attr" if keys is None or ATTRIBUTE_KEY in keys else "VG-R101-C4"


register_recipe(Recipe(
    name="bottom-up-attention",
    description="bottom-up attention's generate_tsv.py: per-class NMS 0.3 over the 300 "
                "proposals, the boxes scoring at least 0.2, 10 to 100 of them; attributes "
                "scoring at least 0.1",
    checkpoint=PY_BOTTOM_UP.format("faster_rcnn_from_caffe_attr.pkl") + " (or "
               "faster_rcnn_from_caffe.pkl, without attributes)",
    arch=bottom_up_arch,
    selection={"method": "per-class", "proposals": 300, "nms_iou": 0.3, "conf_thresh": 0.2,
               "min_boxes": 10, "max_boxes": 100, "boxes": "proposals", "attr_thresh": 0.1,
               "max_attributes": 1}))

register_recipe(Recipe(
    name="lxmert-36",
    description="LXMERT's detectron2 script (py-bottom-up-attention's "
                "detectron2_mscoco_proposal_maxnms.py): each proposal's best class and its "
                "regressed box, one NMS from 0.3 raised by 0.1 until 36 survive, exactly 36 "
                "boxes; with an attribute head, each box's best attribute",
    checkpoint=PY_BOTTOM_UP.format("faster_rcnn_from_caffe.pkl") + " (or "
               "faster_rcnn_from_caffe_attr.pkl, with attributes)",
    arch=bottom_up_arch,
    selection={"method": "max-class", "proposals": 300, "nms_iou": 0.3, "min_boxes": 36,
               "max_boxes": 36, "attr_thresh": 0.0, "max_attributes": 1}))
