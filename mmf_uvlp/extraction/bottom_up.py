"""The Visual Genome bottom-up-attention Faster R-CNN, as layers in detectron2's registries.

The detector of Anderson et al.'s bottom-up attention (a Caffe ResNet-101 C4 Faster R-CNN
trained on Visual Genome: 1,600 object classes and 400 attributes), under the names of its
public detectron2 weights (py-bottom-up-attention's ``faster_rcnn_from_caffe_attr.pkl``, and
``faster_rcnn_from_caffe.pkl`` without the attribute head), so that they load as they are:

- ``build_caffe_resnet_backbone`` (``BACKBONE_REGISTRY``): detectron2's ResNet with Caffe's
  stem, whose max-pool has no padding and rounds up (``ceil_mode``);
- ``BottomUpRes5ROIHeads`` (``ROI_HEADS_REGISTRY``): res5 on each RoI-pooled (``ROIPool``,
  14 x 14) proposal, with stride 1 and dilation 2 in res5 as in Caffe, so the pooled feature is
  the mean of a 14 x 14 map (2048-d);
- ``AttributeOutputLayers``: the box predictor with the attribute head in it
  (``roi_heads.box_predictor.{cls_embedding,fc_attr,attr_score}``): the feature and an
  embedding of the best class logit through ``fc_attr`` (Linear, ReLU) to ``attr_score``
  (400 attributes, then "no attribute" as the last row).

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
    BasicStem,
    BottleneckBlock,
    ResNet,
    build_resnet_backbone,
)
from detectron2.modeling.roi_heads import FastRCNNOutputLayers, Res5ROIHeads
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
    stem = CaffeStem(
        input_shape.channels, cfg.MODEL.RESNETS.STEM_OUT_CHANNELS, cfg.MODEL.RESNETS.NORM
    )
    if cfg.MODEL.BACKBONE.FREEZE_AT >= 1:
        stem.freeze()
    backbone.stem = stem
    return backbone


class AttributeOutputLayers(FastRCNNOutputLayers):
    """detectron2's box predictor with the bottom-up attribute head, under the public file's
    names: ``cls_embedding`` (an embedding of the best of the 1,601 class logits,
    background included, as the public code indexes it), ``fc_attr`` (Linear, ReLU) and
    ``attr_score`` (400 attributes, then "no attribute" as the LAST row)."""

    @configurable
    def __init__(self, *, num_attributes: int, embed_dim: int, fc_dim: int, **kwargs):
        super().__init__(**kwargs)
        input_dim = self.cls_score.in_features
        self.num_attributes = num_attributes
        self.cls_embedding = nn.Embedding(self.num_classes + 1, embed_dim)
        self.fc_attr = nn.Linear(input_dim + embed_dim, fc_dim)
        self.attr_score = nn.Linear(fc_dim, num_attributes + 1)

    @classmethod
    def from_config(cls, cfg: CfgNode, input_shape: ShapeSpec):
        attr = cfg.MODEL.ROI_ATTRIBUTE_HEAD
        return {
            **super().from_config(cfg, input_shape),
            "num_attributes": attr.NUM_ATTRIBUTES,
            "embed_dim": attr.OBJ_EMBED_DIM,
            "fc_dim": attr.FC_DIM,
        }

    def attribute_logits(self, features: torch.Tensor, class_logits: torch.Tensor) -> torch.Tensor:
        """(N, 401) attribute logits of (N, D) region features and their (N, C + 1) class
        logits; the last column is "no attribute"."""
        embedded = self.cls_embedding(class_logits.argmax(dim=1))
        return self.attr_score(F.relu(self.fc_attr(torch.cat([features, embedded], dim=1))))

    def attribute_probs(self, features: torch.Tensor, class_logits: torch.Tensor) -> torch.Tensor:
        """(N, 400) probabilities of the named attributes: a softmax over the logits without
        the "no attribute" column (py-bottom-up-attention's and MMF's frcnn port's)."""
        return torch.softmax(self.attribute_logits(features, class_logits)[:, :-1].float(), dim=-1)


@ROI_HEADS_REGISTRY.register()
class BottomUpRes5ROIHeads(Res5ROIHeads):
    """Res5 RoI heads with Caffe's stride-1, dilation-2 res5 and, when
    ``MODEL.ROI_ATTRIBUTE_HEAD.NUM_ATTRIBUTES`` > 0, the attribute head."""

    @classmethod
    def from_config(cls, cfg: CfgNode, input_shape: Dict[str, ShapeSpec]):
        ret = super().from_config(cfg, input_shape)
        if cfg.MODEL.ROI_ATTRIBUTE_HEAD.NUM_ATTRIBUTES > 0:
            channels = cfg.MODEL.RESNETS.RES2_OUT_CHANNELS * 8
            ret["box_predictor"] = AttributeOutputLayers(
                cfg, ShapeSpec(channels=channels, height=1, width=1)
            )
        return ret

    @classmethod
    def _build_res5_block(cls, cfg: CfgNode):
        res = cfg.MODEL.RESNETS
        bottleneck = res.NUM_GROUPS * res.WIDTH_PER_GROUP * 8
        out_channels = res.RES2_OUT_CHANNELS * 8
        blocks: List[nn.Module] = ResNet.make_stage(
            BottleneckBlock,
            3,
            stride_per_block=[1, 1, 1],
            in_channels=out_channels // 2,
            bottleneck_channels=bottleneck,
            out_channels=out_channels,
            num_groups=res.NUM_GROUPS,
            norm=res.NORM,
            stride_in_1x1=res.STRIDE_IN_1X1,
            dilation=2,
        )
        return nn.Sequential(*blocks), out_channels


def add_attribute_config(cfg: CfgNode) -> None:
    """The attribute head's keys (``MODEL.ROI_ATTRIBUTE_HEAD``), when missing."""
    if "ROI_ATTRIBUTE_HEAD" not in cfg.MODEL:
        cfg.MODEL.ROI_ATTRIBUTE_HEAD = CfgNode(
            {"NUM_ATTRIBUTES": NUM_ATTRIBUTES, "OBJ_EMBED_DIM": 256, "FC_DIM": 512}
        )


def bottom_up_config(cfg: CfgNode, attributes: bool = True) -> CfgNode:
    """``cfg`` (detectron2's R101-C4 Faster R-CNN) turned into the bottom-up detector, with
    its attribute head (``faster_rcnn_from_caffe_attr.pkl``) or without
    (``faster_rcnn_from_caffe.pkl``)."""
    add_attribute_config(cfg)
    cfg.MODEL.ROI_ATTRIBUTE_HEAD.NUM_ATTRIBUTES = NUM_ATTRIBUTES if attributes else 0
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
