"""VinVL's X152-C4 detector (scene_graph_benchmark's ``AttrRCNN``) in detectron2's registries.

The detector of VinVL and OSCAR+ (``vinvl_vg_x152c4.pth``, ``sgg_configs/vgattr/
vinvl_x152c4.yaml``): a ResNeXt-152 32x8d C4 Faster R-CNN trained on Visual Genome and more
(1,594 classes, 524 attributes), whose maskrcnn-benchmark weights
:func:`mmf_uvlp.extraction.maskrcnn_benchmark.convert` renames. As scene_graph_benchmark
computes it at test time:

- the box head: ``ROIAlign`` (14 x 14, legacy, any sampling ratio) of each proposal on res4,
  then res5 with stride 2 in its first block's 3x3 conv, averaged over its 7 x 7 map: the
  2048-d ``box_features``;
- the boxes (``ROI_HEADS.NMS_FILTER 1``, :func:`select_boxes`): per class, NMS at IoU 0.3 over
  every proposal's box regressed for that class; each proposal's label is its best class
  surviving NMS; proposals sorted by that score, those scoring at least 0.2 kept, at least 10
  and at most 100 (``MIN_DETECTIONS_PER_IMG``, ``DETECTIONS_PER_IMG``);
- the attribute head (``attribute.feature_extractor``, ``attribute.predictor``): each kept box
  (regressed, clipped) pooled again and passed through its own res5 (the file stores it under
  its own names; scene_graph_benchmark shares the box head's by default, which the file then
  holds twice), averaged, concatenated with the embedding of its 1-based label, through
  ``fc_attr`` (ReLU) to ``attr_score`` (524 attributes + "no attribute" in row 0);
  :func:`select_attributes` keeps, as its post-processor, a box's 16 best attributes scoring
  above 0.05 (``MAX_NUM_ATTR_PER_OBJ``, ``POSTPROCESS_ATTRIBUTES_THRESHOLD``).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import torch
from detectron2.config import CfgNode, configurable
from detectron2.layers import ShapeSpec
from detectron2.modeling import ROI_HEADS_REGISTRY
from detectron2.modeling.roi_heads import Res5ROIHeads
from detectron2.structures import Boxes
from torch import nn
from torchvision.ops import batched_nms

from mmf_uvlp.extraction.maskrcnn_benchmark import maskrcnn_benchmark_predictor

NUM_CLASSES = 1594
NUM_ATTRIBUTES = 524


class VinVLAttributePredictor(nn.Module):
    """scene_graph_benchmark's ``AttributeRCNNPredictor``: attribute logits (row 0: "no
    attribute") of pooled region features and their 1-based class labels."""

    def __init__(
        self,
        input_dim: int,
        num_classes: int,
        num_attributes: int,
        embed_dim: int = 256,
        fc_dim: int = 512,
    ):
        super().__init__()
        self.cls_embedding = nn.Embedding(num_classes + 1, embed_dim)
        self.fc_attr = nn.Linear(input_dim + embed_dim, fc_dim)
        self.attr_score = nn.Linear(fc_dim, num_attributes + 1)

    def forward(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(N, input_dim) features, (N,) labels from 1 -> (N, num_attributes + 1) logits."""
        x = torch.cat([features, self.cls_embedding(labels)], dim=1)
        return self.attr_score(torch.relu(self.fc_attr(x)))


@ROI_HEADS_REGISTRY.register()
class VinVLRes5ROIHeads(Res5ROIHeads):
    """Res5 RoI heads with VinVL's attribute head (its own res5 and predictor)."""

    @configurable
    def __init__(
        self, *, attribute_res5: nn.Module, attribute_predictor: VinVLAttributePredictor, **kwargs
    ):
        super().__init__(**kwargs)
        self.attribute_res5 = attribute_res5
        self.attribute_predictor = attribute_predictor

    @classmethod
    def from_config(cls, cfg: CfgNode, input_shape: Dict[str, ShapeSpec]):
        ret = super().from_config(cfg, input_shape)
        maskrcnn_benchmark_predictor(ret["box_predictor"])
        ret["attribute_res5"], channels = cls._build_res5_block(cfg)
        attr = cfg.MODEL.ROI_ATTRIBUTE_HEAD
        ret["attribute_predictor"] = VinVLAttributePredictor(
            channels,
            cfg.MODEL.ROI_HEADS.NUM_CLASSES,
            attr.NUM_ATTRIBUTES,
            attr.OBJ_EMBED_DIM,
            attr.FC_DIM,
        )
        return ret

    def attribute_logits(
        self, features: Dict[str, torch.Tensor], boxes: List[Boxes], classes: torch.Tensor
    ) -> torch.Tensor:
        """The attribute logits of ``boxes`` (in the network's input pixels) of 0-based
        ``classes``, concatenated over the images."""
        x = self.pooler([features[f] for f in self.in_features], boxes)
        x = self.attribute_res5(x).mean(dim=[2, 3])
        return self.attribute_predictor(x.float(), classes + 1)


def vinvl_config(cfg: CfgNode) -> CfgNode:
    """``cfg`` (detectron2's defaults) turned into VinVL's X152-C4 test-time recipe."""
    from mmf_uvlp.extraction import bottom_up

    bottom_up.add_attribute_config(cfg)
    cfg.MODEL.META_ARCHITECTURE = "GeneralizedRCNN"
    cfg.MODEL.BACKBONE.NAME = "build_resnet_backbone"
    cfg.MODEL.RESNETS.DEPTH = 152
    cfg.MODEL.RESNETS.NUM_GROUPS = 32
    cfg.MODEL.RESNETS.WIDTH_PER_GROUP = 8
    cfg.MODEL.RESNETS.STRIDE_IN_1X1 = False
    cfg.MODEL.RESNETS.NORM = "FrozenBN"
    cfg.MODEL.RESNETS.OUT_FEATURES = ["res4"]
    cfg.MODEL.RESNETS.RES5_DILATION = 1
    cfg.MODEL.RPN.IN_FEATURES = ["res4"]
    cfg.MODEL.RPN.PRE_NMS_TOPK_TEST = 6000
    cfg.MODEL.RPN.NMS_THRESH = 0.7
    cfg.MODEL.PROPOSAL_GENERATOR.NAME = "LegacyRPN"
    cfg.MODEL.RPN.BBOX_REG_WEIGHTS = (1.0, 1.0, 1.0, 1.0)
    cfg.MODEL.ANCHOR_GENERATOR.NAME = "FileAnchorGenerator"
    cfg.MODEL.ANCHOR_GENERATOR.SIZES = [[32, 64, 128, 256, 512]]
    cfg.MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS = [[0.5, 1.0, 2.0]]
    cfg.MODEL.ROI_HEADS.NAME = "VinVLRes5ROIHeads"
    cfg.MODEL.ROI_HEADS.IN_FEATURES = ["res4"]
    cfg.MODEL.ROI_HEADS.NUM_CLASSES = NUM_CLASSES
    cfg.MODEL.ROI_BOX_HEAD.POOLER_TYPE = "ROIAlign"
    cfg.MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION = 14
    cfg.MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO = 0
    cfg.MODEL.ROI_BOX_HEAD.BBOX_REG_WEIGHTS = (10.0, 10.0, 5.0, 5.0)
    cfg.MODEL.ROI_BOX_HEAD.CLS_AGNOSTIC_BBOX_REG = False
    cfg.MODEL.ROI_ATTRIBUTE_HEAD.NUM_ATTRIBUTES = NUM_ATTRIBUTES
    cfg.MODEL.ROI_ATTRIBUTE_HEAD.OBJ_EMBED_DIM = 256
    cfg.MODEL.ROI_ATTRIBUTE_HEAD.FC_DIM = 512
    cfg.MODEL.PIXEL_MEAN = [103.530, 116.280, 123.675]
    cfg.MODEL.PIXEL_STD = [1.0, 1.0, 1.0]
    cfg.INPUT.FORMAT = "BGR"
    cfg.INPUT.MIN_SIZE_TEST = 600
    cfg.INPUT.MAX_SIZE_TEST = 1000
    return cfg


def select_boxes(
    probs: torch.Tensor,
    regressed: torch.Tensor,
    conf_thresh: float = 0.2,
    min_boxes: int = 10,
    max_boxes: int = 100,
    nms_iou: float = 0.3,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """scene_graph_benchmark's ``filter_results_peter``: (proposal indices, 0-based labels,
    scores) of the kept boxes, by descending score.

    ``probs`` (N, C): the foreground classes' probabilities; ``regressed`` (N, C, 4): each
    proposal's box regressed for each class, clipped. NMS counts a box's far pixel in (its IoU
    of ``x1..x2`` is maskrcnn-benchmark's, ``x2 - x1 + 1`` wide)."""
    n, c = probs.shape
    boxes = regressed.reshape(-1, 4).float().clone()
    boxes[:, 2:] += 1
    flat = probs.reshape(-1).float()
    keep = batched_nms(boxes, flat, torch.arange(c).repeat(n), nms_iou)
    survived = torch.zeros_like(flat)
    survived[keep] = flat[keep]
    best, labels = survived.view(n, c).max(dim=1)
    candidates = torch.nonzero(best > 0).flatten()
    best, labels = best[candidates], labels[candidates]
    order = torch.argsort(best, descending=True, stable=True)
    count = int((best >= conf_thresh).sum())
    count = min(max(count, min_boxes), max_boxes)
    order = order[:count]
    return candidates[order], labels[order], best[order]


def select_attributes(
    logits: torch.Tensor, thresh: float = 0.05, per_image: int = 100, per_box: int = 16
) -> Tuple[torch.Tensor, torch.Tensor]:
    """scene_graph_benchmark's ``AttributePostProcessor`` on one image's (N, A + 1) logits:
    (N, per_box) attribute ids (1-based, as the logits' rows) and scores, by descending score.
    An attribute scoring at most ``thresh`` scores 0 (its id then means nothing), and so does
    one under the k-th smallest of all N x (A + 1) scores, zeros included, where k is the
    count above ``thresh`` less ``per_image`` plus 1, when positive: scene_graph_benchmark's
    cap of ``MAX_NUM_ATTR_PER_IMG``, which the zeros make remove few or none."""
    scores = torch.softmax(logits.float(), dim=-1)
    scores[:, 0] = 0.0
    above = scores > thresh
    count = int(above.sum())
    scores[~above] = 0.0
    if count > per_image > 0:
        kth = torch.kthvalue(scores.flatten(), count - per_image + 1).values
        scores[scores < kth] = 0.0
    values, ids = scores.topk(min(per_box, scores.shape[1]), dim=1)
    return ids, values
