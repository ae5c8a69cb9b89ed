"""The Visual Genome bottom-up-attention Faster R-CNN, as layers in detectron2's registries.

The detector of Anderson et al.'s bottom-up attention (a Caffe ResNet-101 C4 Faster R-CNN
trained on Visual Genome: 1,600 object classes and 400 attributes), in the layout of its public
detectron2 weights (``faster_rcnn_from_caffe_attr.pkl``), which ``DetectionCheckpointer``
loads:

- ``build_caffe_resnet_backbone`` (``BACKBONE_REGISTRY``): detectron2's ResNet with Caffe's
  stem, whose max-pool has no padding and rounds up (``ceil_mode``);
- ``BottomUpRes5ROIHeads`` (``ROI_HEADS_REGISTRY``): res5 on each RoI-pooled (``ROIPool``,
  14 x 14) proposal, with stride 1 and dilation 2 in res5 as in Caffe, so the pooled feature is
  the mean of a 14 x 14 map (2048-d); and the attribute head ``attribute_predictor``: the
  feature and an embedding of the predicted class through ``fc`` (Linear, ReLU) to
  ``attr_score`` (400 attributes + "no attribute" in column 0).

:func:`bottom_up_config` is the whole recipe's config (BGR input, Caffe's pixel means, 600 /
1000 px test sizes, a 512-channel RPN, anchors 64-512).
"""

from __future__ import annotations

from typing import Dict, List

import torch
import torch.nn.functional as F
from detectron2.config import CfgNode, configurable
from detectron2.layers import ShapeSpec
from detectron2.modeling import BACKBONE_REGISTRY, ROI_HEADS_REGISTRY
from detectron2.modeling.backbone.resnet import (
    BasicStem, BottleneckBlock, ResNet, build_resnet_backbone,
)
from detectron2.modeling.roi_heads import Res5ROIHeads
from torch import nn

NUM_CLASSES = 1600
NUM_ATTRIBUTES = 400


class CaffeStem(BasicStem):
    """ResNet's stem as Caffe computes it: conv 7x7/2, ReLU, max-pool 3x3/2, no padding,
    rounding up."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu_(self.conv1(x))
        return F.max_pool2d(x, kernel_size=3, stride=2, padding=0, ceil_mode=True)


@BACKBONE_REGISTRY.register()
def build_caffe_resnet_backbone(cfg: CfgNode, input_shape: ShapeSpec) -> ResNet:
    """detectron2's ResNet backbone with :class:`CaffeStem`."""
    backbone = build_resnet_backbone(cfg, input_shape)
    stem = CaffeStem(input_shape.channels, cfg.MODEL.RESNETS.STEM_OUT_CHANNELS,
                     cfg.MODEL.RESNETS.NORM)
    if cfg.MODEL.BACKBONE.FREEZE_AT >= 1:
        stem.freeze()
    backbone.stem = stem
    return backbone


class AttributePredictor(nn.Module):
    """Attribute scores from a region feature and its predicted class."""

    def __init__(self, input_dim: int, num_classes: int, num_attributes: int,
                 embed_dim: int, fc_dim: int):
        super().__init__()
        self.obj_embed = nn.Embedding(num_classes + 1, embed_dim)
        self.fc = nn.Sequential(nn.Linear(input_dim + embed_dim, fc_dim), nn.ReLU())
        self.attr_score = nn.Linear(fc_dim, num_attributes + 1)

    def forward(self, features: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
        return self.attr_score(self.fc(torch.cat([features, self.obj_embed(classes)], dim=1)))


@ROI_HEADS_REGISTRY.register()
class BottomUpRes5ROIHeads(Res5ROIHeads):
    """Res5 RoI heads with Caffe's stride-1, dilation-2 res5 and the attribute head."""

    @configurable
    def __init__(self, *, attribute_predictor: AttributePredictor, **kwargs):
        super().__init__(**kwargs)
        self.attribute_predictor = attribute_predictor

    @classmethod
    def from_config(cls, cfg: CfgNode, input_shape: Dict[str, ShapeSpec]):
        ret = super().from_config(cfg, input_shape)
        attr = cfg.MODEL.ROI_ATTRIBUTE_HEAD
        ret["attribute_predictor"] = AttributePredictor(
            cfg.MODEL.RESNETS.RES2_OUT_CHANNELS * 8, cfg.MODEL.ROI_HEADS.NUM_CLASSES,
            attr.NUM_ATTRIBUTES, attr.OBJ_EMBED_DIM, attr.FC_DIM)
        return ret

    @classmethod
    def _build_res5_block(cls, cfg: CfgNode):
        res = cfg.MODEL.RESNETS
        bottleneck = res.NUM_GROUPS * res.WIDTH_PER_GROUP * 8
        out_channels = res.RES2_OUT_CHANNELS * 8
        blocks: List[nn.Module] = ResNet.make_stage(
            BottleneckBlock, 3, stride_per_block=[1, 1, 1], in_channels=out_channels // 2,
            bottleneck_channels=bottleneck, out_channels=out_channels,
            num_groups=res.NUM_GROUPS, norm=res.NORM, stride_in_1x1=res.STRIDE_IN_1X1,
            dilation=2)
        return nn.Sequential(*blocks), out_channels


def add_attribute_config(cfg: CfgNode) -> None:
    """The attribute head's keys (``MODEL.ROI_ATTRIBUTE_HEAD``), when missing."""
    if "ROI_ATTRIBUTE_HEAD" not in cfg.MODEL:
        cfg.MODEL.ROI_ATTRIBUTE_HEAD = CfgNode({"NUM_ATTRIBUTES": NUM_ATTRIBUTES,
                                                "OBJ_EMBED_DIM": 256, "FC_DIM": 512})


def bottom_up_config(cfg: CfgNode) -> CfgNode:
    """``cfg`` (detectron2's R101-C4 Faster R-CNN) turned into the bottom-up recipe."""
    add_attribute_config(cfg)
    cfg.MODEL.BACKBONE.NAME = "build_caffe_resnet_backbone"
    cfg.MODEL.RESNETS.DEPTH = 101
    cfg.MODEL.RESNETS.STRIDE_IN_1X1 = True
    cfg.MODEL.RESNETS.NORM = "FrozenBN"
    cfg.MODEL.RESNETS.OUT_FEATURES = ["res4"]
    cfg.MODEL.RPN.CONV_DIMS = [512]
    cfg.MODEL.ANCHOR_GENERATOR.SIZES = [[64, 128, 256, 512]]
    cfg.MODEL.ANCHOR_GENERATOR.ASPECT_RATIOS = [[0.5, 1.0, 2.0]]
    cfg.MODEL.RPN.PRE_NMS_TOPK_TEST = 6000
    cfg.MODEL.ROI_HEADS.NAME = "BottomUpRes5ROIHeads"
    cfg.MODEL.ROI_HEADS.NUM_CLASSES = NUM_CLASSES
    cfg.MODEL.ROI_BOX_HEAD.POOLER_TYPE = "ROIPool"
    cfg.MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION = 14
    cfg.MODEL.PIXEL_MEAN = [102.9801, 115.9465, 122.7717]
    cfg.MODEL.PIXEL_STD = [1.0, 1.0, 1.0]
    cfg.INPUT.FORMAT = "BGR"
    cfg.INPUT.MIN_SIZE_TEST = 600
    cfg.INPUT.MAX_SIZE_TEST = 1000
    return cfg
