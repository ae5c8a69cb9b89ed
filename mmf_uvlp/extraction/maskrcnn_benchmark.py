"""maskrcnn-benchmark checkpoints in detectron2: their names, row orders and box conventions.

VinVL's ``vinvl_vg_x152c4.pth`` (scene_graph_benchmark) and MMF's vmb ``detectron_model.pth``
(vqa-maskrcnn-benchmark) are ``torch.save({"model": state_dict})`` files of maskrcnn-benchmark
modules. :func:`convert` gives each tensor the name of the detectron2 module that computes
the same thing (``backbone.body.layer3.5.bn2.weight`` -> ``backbone.res4.5.conv2.norm.weight``,
``rpn.head.cls_logits`` -> ``proposal_generator.rpn_head.objectness_logits``, ...) and moves
what the names do not show:

- the background is row 0 of ``cls_score`` and the first 4 rows of ``bbox_pred`` there, and
  last in detectron2: those rows move to the end (both keep every row);
- maskrcnn-benchmark's ``FrozenBatchNorm2d`` divides by ``sqrt(running_var)``, detectron2's by
  ``sqrt(running_var + eps)``: ``eps`` is taken off ``running_var``, so both compute the same;
- the RPN's cell anchors are in the file, in its order of the RPN's output channels (ratio by
  ratio, then size), with its ``+1`` pixel conventions: :class:`FileAnchorGenerator` keeps them
  as ordinary (saved) buffers so that the file's anchors are the ones used.

A tensor no rule names keeps its name, so that the whole-load check reports it as unexpected.
:func:`convert` is the checkpoint layout ``maskrcnn-benchmark``. Boxes are decoded as
maskrcnn-benchmark decodes them (:class:`LegacyBox2BoxTransform`: widths ``x2 - x1 + 1``, the
far corner one pixel in), in the RPN (:class:`LegacyRPN`, ``MODEL.PROPOSAL_GENERATOR.NAME``)
and the box predictor (:func:`maskrcnn_benchmark_predictor`, which also gives it the
background's regression rows).
"""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Mapping, Tuple

import torch
from detectron2.config import CfgNode
from detectron2.layers import FrozenBatchNorm2d, ShapeSpec
from detectron2.modeling import ANCHOR_GENERATOR_REGISTRY, PROPOSAL_GENERATOR_REGISTRY
from detectron2.modeling.anchor_generator import DefaultAnchorGenerator
from detectron2.modeling.box_regression import Box2BoxTransform
from detectron2.modeling.proposal_generator import RPN
from torch import nn

from mmf_uvlp.extraction.checkpoints import register_layout

FROZEN_BN_EPS = FrozenBatchNorm2d(1).eps


def _block(suffix: str) -> str:
    """A ResNet block's inner name: ``conv2.weight``, ``bn2.bias``, ``downsample.1.weight``."""
    suffix = re.sub(r"^bn(\d)\.", r"conv\1.norm.", suffix)
    suffix = re.sub(r"^downsample\.0\.", "shortcut.", suffix)
    return re.sub(r"^downsample\.1\.", "shortcut.norm.", suffix)


# a tensor of a module (a norm's statistics included), and one of a ResNet block's modules
TENSOR = r"(weight|bias|running_mean|running_var)"
BLOCK = r"((?:conv\d|bn\d|downsample\.[01])\.(?:weight|bias|running_mean|running_var))"


def _rules(body: str) -> List[Tuple[re.Pattern, Callable[[re.Match], str]]]:
    """(pattern, new name) of every maskrcnn-benchmark tensor; ``body`` is the ResNet's prefix
    in detectron2 (``backbone.`` for C4, ``backbone.bottom_up.`` under an FPN). A name no
    pattern matches whole keeps the file's spelling."""
    rules = {
        rf"backbone\.body\.stem\.conv1\.{TENSOR}": lambda m: f"{body}stem.conv1.{m[1]}",
        rf"backbone\.body\.stem\.bn1\.{TENSOR}": lambda m: f"{body}stem.conv1.norm.{m[1]}",
        rf"backbone\.body\.layer(\d)\.(\d+)\.{BLOCK}": lambda m: (
            f"{body}res{int(m[1]) + 1}.{m[2]}.{_block(m[3])}"
        ),
        rf"backbone\.fpn\.fpn_inner(\d)\.{TENSOR}": lambda m: (
            f"backbone.fpn_lateral{int(m[1]) + 1}.{m[2]}"
        ),
        rf"backbone\.fpn\.fpn_layer(\d)\.{TENSOR}": lambda m: (
            f"backbone.fpn_output{int(m[1]) + 1}.{m[2]}"
        ),
        r"rpn\.anchor_generator\.cell_anchors\.(\d+)": lambda m: (
            f"proposal_generator.anchor_generator.cell_anchors.{m[1]}"
        ),
        rf"rpn\.head\.conv\.{TENSOR}": lambda m: f"proposal_generator.rpn_head.conv.{m[1]}",
        rf"rpn\.head\.cls_logits\.{TENSOR}": lambda m: (
            f"proposal_generator.rpn_head.objectness_logits.{m[1]}"
        ),
        rf"rpn\.head\.bbox_pred\.{TENSOR}": lambda m: (
            f"proposal_generator.rpn_head.anchor_deltas.{m[1]}"
        ),
        rf"roi_heads\.box\.feature_extractor\.head\.layer4\.(\d+)\.{BLOCK}": lambda m: (
            f"roi_heads.res5.{m[1]}.{_block(m[2])}"
        ),
        rf"roi_heads\.box\.feature_extractor\.fc6\.{TENSOR}": lambda m: (
            f"roi_heads.box_head.fc1.{m[1]}"
        ),
        rf"roi_heads\.box\.feature_extractor\.fc7\.{TENSOR}": lambda m: (
            f"roi_heads.box_head.fc2.{m[1]}"
        ),
        rf"roi_heads\.box\.predictor\.(cls_score|bbox_pred)\.{TENSOR}": lambda m: (
            f"roi_heads.box_predictor.{m[1]}.{m[2]}"
        ),
        rf"attribute\.feature_extractor\.head\.layer4\.(\d+)\.{BLOCK}": lambda m: (
            f"roi_heads.attribute_res5.{m[1]}.{_block(m[2])}"
        ),
        rf"attribute\.predictor\.(cls_embedding|fc_attr|attr_score)\.{TENSOR}": lambda m: (
            f"roi_heads.attribute_predictor.{m[1]}.{m[2]}"
        ),
    }
    return [(re.compile(pattern + "$"), rename) for pattern, rename in rules.items()]


def is_maskrcnn_benchmark(state: Mapping[str, object]) -> bool:
    """Whether ``state`` is named as maskrcnn-benchmark names its modules."""
    return any(key.startswith(("backbone.body.", "rpn.head.", "roi_heads.box.")) for key in state)


def new_name(key: str, body: str = "backbone.") -> str:
    """The detectron2 name of the maskrcnn-benchmark tensor ``key`` (itself when no rule
    names it)."""
    for pattern, rename in _rules(body):
        match = pattern.match(key)
        if match:
            return rename(match)
    return key


def _background_last(key: str, tensor: torch.Tensor) -> torch.Tensor:
    """``cls_score`` / ``bbox_pred`` rows with the background's moved from first to last."""
    rows = 4 if key.startswith("roi_heads.box_predictor.bbox_pred.") else 1
    return torch.cat([tensor[rows:], tensor[:rows]])


def convert(state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """maskrcnn-benchmark's ``state`` with detectron2's names, row orders and norms."""
    body = (
        "backbone.bottom_up." if any(k.startswith("backbone.fpn.") for k in state) else "backbone."
    )
    out: Dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        name = new_name(key, body)
        value = torch.as_tensor(tensor)
        if name.startswith("roi_heads.box_predictor.") and name != key:
            value = _background_last(name, value)
        elif name.endswith(".norm.running_var") and name != key:
            value = value - FROZEN_BN_EPS
        out[name] = value
    return out


@ANCHOR_GENERATOR_REGISTRY.register()
class FileAnchorGenerator(DefaultAnchorGenerator):
    """detectron2's anchor generator whose cell anchors are saved and loaded with the weights
    (a checkpoint's own anchors, in its order, replace those the config generates)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, anchors in list(self.cell_anchors.named_buffers()):
            self.cell_anchors.register_buffer(name, anchors, persistent=True)


class LegacyBox2BoxTransform(Box2BoxTransform):
    """maskrcnn-benchmark's box decoding: a box ``x1..x2`` is ``x2 - x1 + 1`` wide, and the
    decoded box's far corner is one pixel in from its centre plus half its size."""

    def apply_deltas(self, deltas: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        deltas = deltas.float()
        boxes = boxes.to(deltas.dtype)
        widths = boxes[:, 2] - boxes[:, 0] + 1
        heights = boxes[:, 3] - boxes[:, 1] + 1
        ctr_x = boxes[:, 0] + 0.5 * widths
        ctr_y = boxes[:, 1] + 0.5 * heights
        wx, wy, ww, wh = self.weights
        dx, dy = deltas[:, 0::4] / wx, deltas[:, 1::4] / wy
        dw = torch.clamp(deltas[:, 2::4] / ww, max=self.scale_clamp)
        dh = torch.clamp(deltas[:, 3::4] / wh, max=self.scale_clamp)
        pred_ctr_x = dx * widths[:, None] + ctr_x[:, None]
        pred_ctr_y = dy * heights[:, None] + ctr_y[:, None]
        pred_w = torch.exp(dw) * widths[:, None]
        pred_h = torch.exp(dh) * heights[:, None]
        x1, y1 = pred_ctr_x - 0.5 * pred_w, pred_ctr_y - 0.5 * pred_h
        x2, y2 = pred_ctr_x + 0.5 * pred_w - 1, pred_ctr_y + 0.5 * pred_h - 1
        return torch.stack((x1, y1, x2, y2), dim=-1).view(deltas.shape)


def maskrcnn_benchmark_predictor(predictor: nn.Module) -> nn.Module:
    """A ``FastRCNNOutputLayers`` made maskrcnn-benchmark's: a box regression for the
    background too (its last 4 rows), decoded by :class:`LegacyBox2BoxTransform`."""
    num_rows = predictor.cls_score.out_features * 4
    predictor.bbox_pred = nn.Linear(predictor.bbox_pred.in_features, num_rows)
    transform = predictor.box2box_transform
    predictor.box2box_transform = LegacyBox2BoxTransform(transform.weights, transform.scale_clamp)
    return predictor


@PROPOSAL_GENERATOR_REGISTRY.register()
class LegacyRPN(RPN):
    """detectron2's RPN decoding its anchors as maskrcnn-benchmark does."""

    @classmethod
    def from_config(cls, cfg: CfgNode, input_shape: Dict[str, ShapeSpec]):
        ret = super().from_config(cfg, input_shape)
        ret["box2box_transform"] = LegacyBox2BoxTransform(cfg.MODEL.RPN.BBOX_REG_WEIGHTS)
        return ret


register_layout("maskrcnn-benchmark")(convert)
