"""MMF's vmb detector (``extract_features_vmb.py``'s ``detectron_model.pth``) in detectron2.

The Faster R-CNN of MMF's stock VQA2, TextVQA and Hateful Memes features (vqa-maskrcnn-benchmark
``e2e_faster_rcnn_X-101-64x4d-FPN_1x_MLP_2048_FPN_512``): a ResNeXt-101 64x4d FPN of 512
channels trained on Visual Genome (1,600 classes), whose box head is two 2048-d fully connected
layers, ``fc6`` and ``fc7`` (each followed by a ReLU), over a 7 x 7 legacy ``ROIAlign``
(sampling ratio 2) of each proposal. Its maskrcnn-benchmark weights
:func:`mmf_uvlp.extraction.maskrcnn_benchmark.convert` renames (``fc6`` -> ``box_head.fc1``,
``fc7`` -> ``box_head.fc2``). MMF's features are ``fc6``'s output (``--feature_name fc6``);
:func:`box_features` gives either layer's; :func:`select_boxes` is the script's box selection.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from detectron2 import model_zoo
from detectron2.config import CfgNode
from detectron2.layers import ShapeSpec
from detectron2.modeling import ROI_HEADS_REGISTRY
from detectron2.modeling.roi_heads import StandardROIHeads
from detectron2.structures import Boxes
from torchvision.ops import nms

from mmf_uvlp.extraction.maskrcnn_benchmark import maskrcnn_benchmark_predictor

NUM_CLASSES = 1600
FEATURE_LAYERS = ("fc6", "fc7")
ZOO_FPN = "COCO-Detection/faster_rcnn_X_101_32x8d_FPN_3x.yaml"


@ROI_HEADS_REGISTRY.register()
class VmbROIHeads(StandardROIHeads):
    """FPN RoI heads whose box predictor also regresses the background (maskrcnn-benchmark's
    layout)."""

    @classmethod
    def _init_box_head(cls, cfg: CfgNode, input_shape: Dict[str, ShapeSpec]):
        ret = super()._init_box_head(cfg, input_shape)
        maskrcnn_benchmark_predictor(ret["box_predictor"])
        return ret


def box_features(
    heads: StandardROIHeads,
    features: Dict[str, torch.Tensor],
    boxes: List[Boxes],
    layer: str = "fc7",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(the region features of ``layer``, the box head's output for the predictor)."""
    if layer not in FEATURE_LAYERS:
        raise ValueError(f"--feature-layer {layer}: expected one of {', '.join(FEATURE_LAYERS)}")
    head = heads.box_head
    x = heads.box_pooler([features[f] for f in heads.box_in_features], boxes)
    x = torch.flatten(x, start_dim=1)
    fc6 = head.fc_relu1(head.fc1(x))
    fc7 = head.fc_relu2(head.fc2(fc6))
    return (fc6 if layer == "fc6" else fc7), fc7


def vmb_config(cfg: CfgNode) -> CfgNode:
    """``cfg`` (detectron2's defaults) turned into MMF's vmb X101-FPN test-time recipe."""
    cfg.merge_from_file(model_zoo.get_config_file(ZOO_FPN))
    cfg.MODEL.RESNETS.DEPTH = 101
    cfg.MODEL.RESNETS.NUM_GROUPS = 64
    cfg.MODEL.RESNETS.WIDTH_PER_GROUP = 4
    cfg.MODEL.RESNETS.STRIDE_IN_1X1 = False
    cfg.MODEL.RESNETS.NORM = "FrozenBN"
    cfg.MODEL.FPN.OUT_CHANNELS = 512
    cfg.MODEL.ANCHOR_GENERATOR.NAME = "FileAnchorGenerator"
    cfg.MODEL.ANCHOR_GENERATOR.SIZES = [[32], [64], [128], [256], [512]]
    cfg.MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS = [[0.5, 1.0, 2.0]]
    cfg.MODEL.RPN.PRE_NMS_TOPK_TEST = 6000
    cfg.MODEL.RPN.NMS_THRESH = 0.7
    cfg.MODEL.PROPOSAL_GENERATOR.NAME = "LegacyRPN"
    cfg.MODEL.RPN.BBOX_REG_WEIGHTS = (1.0, 1.0, 1.0, 1.0)
    cfg.MODEL.ROI_HEADS.NAME = "VmbROIHeads"
    cfg.MODEL.ROI_HEADS.NUM_CLASSES = NUM_CLASSES
    cfg.MODEL.ROI_BOX_HEAD.NAME = "FastRCNNConvFCHead"
    cfg.MODEL.ROI_BOX_HEAD.NUM_CONV = 0
    cfg.MODEL.ROI_BOX_HEAD.NUM_FC = 2
    cfg.MODEL.ROI_BOX_HEAD.FC_DIM = 2048
    cfg.MODEL.ROI_BOX_HEAD.POOLER_TYPE = "ROIAlign"
    cfg.MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION = 7
    cfg.MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO = 2
    cfg.MODEL.ROI_BOX_HEAD.BBOX_REG_WEIGHTS = (10.0, 10.0, 5.0, 5.0)
    cfg.MODEL.ROI_BOX_HEAD.CLS_AGNOSTIC_BBOX_REG = False
    cfg.MODEL.PIXEL_MEAN = [102.9801, 115.9465, 122.7717]
    cfg.MODEL.PIXEL_STD = [1.0, 1.0, 1.0]
    cfg.INPUT.FORMAT = "BGR"
    cfg.INPUT.MIN_SIZE_TEST = 800
    cfg.INPUT.MAX_SIZE_TEST = 1333
    return cfg


def select_boxes(
    probs: torch.Tensor,
    boxes: torch.Tensor,
    conf_thresh: float = 0.0,
    max_boxes: int = 100,
    nms_iou: float = 0.5,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``extract_features_vmb.py``'s selection: (indices of the kept proposals, their best
    class score surviving NMS, 0 where none is above ``conf_thresh``), by descending score.

    ``probs`` (N, C): the foreground classes' probabilities; ``boxes`` (N, 4): the proposals
    in the image's pixels. Per class, NMS at ``nms_iou`` over every proposal (maskrcnn-benchmark's
    IoU, ``x2 - x1 + 1`` wide); each proposal keeps its best surviving score above
    ``conf_thresh``; the ``max_boxes`` best are kept, whatever their score."""
    legacy = boxes.float().clone()
    legacy[:, 2:] += 1
    best = torch.zeros(len(probs))
    for column in probs.float().T:
        keep = nms(legacy, column, nms_iou)
        better = (column[keep] > best[keep]) & (column[keep] > conf_thresh)
        best[keep] = torch.where(better, column[keep], best[keep])
    order = torch.argsort(best, descending=True, stable=True)[:max_boxes]
    return order, best[order]
