"""Detectors on detectron2: boxes, pooled region features, classes and attributes of a batch.

``--arch`` names one of :data:`ARCHITECTURES` (detectron2 model-zoo Faster R-CNN configs, the
Visual Genome bottom-up-attention detector of ``bottom_up.py``, with or without its attribute
head, VinVL's X152-C4 and MMF's vmb X101-FPN; one :func:`register_architecture` each), or a
detectron2 yaml file (``arch_yaml.py``).
What a region's feature is depends on the heads:

- C4 (``Res5ROIHeads``): res5 on the RoI-pooled proposal, averaged over its map: 2048-d for a
  ResNet (the bottom-up recipe's ``pool5_flat``);
- FPN (``StandardROIHeads``): the box head's last fully connected layer, ``fc7``
  (``MODEL.ROI_BOX_HEAD.FC_DIM``: 1024-d in the model zoo), or its first, ``fc6``
  (``feature_layer``; MMF's vmb features). A model that expects 2048-d features
  (``model_config.uvla.feature_dim``) cannot read 1024: ``--feature-dim`` refuses it.

VinVL's X152-C4 (``vinvl.py``) and MMF's vmb X101-FPN (``vmb.py``) are maskrcnn-benchmark
detectors whose files load through the ``maskrcnn-benchmark`` layout
(``maskrcnn_benchmark.py``).

Weights are a local file, read as data and loaded whole or refused (``checkpoints.py``: a
``.pkl`` or ``.pth``, its names through a layout); nothing is downloaded. An attribute head is
a box predictor with ``num_attributes`` and ``attribute_probs(features, class_logits)``, or
VinVL's, whose RoI heads pool the kept boxes again (``attribute_logits``).
``random_seed`` builds randomly initialised weights instead, for tests and benchmarks only:
detectron2's initialisation with each residual branch's last norm zeroed (torchvision's
``zero_init_residual``), without which a random ResNet-101's activations overflow and its
RPN proposes nothing.

The boxes follow a :class:`Selection` (``selection.py``): bottom-up attention's
``generate_tsv.py`` rule (``per-class``), LXMERT's (``max-class``), scene_graph_benchmark's
(``vinvl``) or MMF's ``extract_features_vmb.py``'s (``mmf-vmb``), every setting a field; the
last two also put in :attr:`Detections.extra` what those MMF scripts write.

A batch gives each image what it gives alone (:meth:`Detector._regions`): the images of one
size go through the detector together, those of other sizes apart. ``precision`` ``auto`` is
fp16 on CUDA and fp32 on a CPU; in fp16 or bf16 only the convolutional trunk computes in the
half type, the boxes, scores and attributes in float32.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from detectron2 import model_zoo
from detectron2.config import CfgNode, get_cfg
from detectron2.data import MetadataCatalog
from detectron2.data import transforms as T
from detectron2.modeling import build_model
from detectron2.modeling.backbone.resnet import BottleneckBlock
from detectron2.modeling.roi_heads import Res5ROIHeads, StandardROIHeads
from detectron2.structures import Boxes

from mmf_uvlp.extraction import bottom_up, vinvl, vmb
from mmf_uvlp.extraction.arch_yaml import merge_yaml
from mmf_uvlp.extraction.checkpoints import LoadReport, load_weights
from mmf_uvlp.extraction.selection import Selection, select_max_class, select_per_class

logger = logging.getLogger(__name__)

HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}  # --precision
ZOO = "COCO-Detection/faster_rcnn_{}_3x.yaml"
# name -> (what it is, fn(cfg) that makes detectron2's default config that architecture)
ARCHITECTURES: Dict[str, Tuple[str, Callable[[CfgNode], None]]] = {}


def register_architecture(name: str, description: str) -> Callable:
    """Register ``fn(cfg)``, which turns detectron2's default config into ``name``."""

    def wrap(fn: Callable[[CfgNode], None]) -> Callable[[CfgNode], None]:
        if name in ARCHITECTURES:
            raise ValueError(f"architecture {name!r} is registered twice")
        ARCHITECTURES[name] = (description, fn)
        return fn

    return wrap


def _zoo(config: str) -> Callable[[CfgNode], None]:
    return lambda cfg: cfg.merge_from_file(model_zoo.get_config_file(config))


for _name, _zoo_name in (
    ("R50-C4", "R_50_C4"),
    ("R101-C4", "R_101_C4"),
    ("R50-FPN", "R_50_FPN"),
    ("R101-FPN", "R_101_FPN"),
    ("X101-FPN", "X_101_32x8d_FPN"),
):
    register_architecture(_name, f"detectron2 model zoo {ZOO.format(_zoo_name)} (COCO)")(
        _zoo(ZOO.format(_zoo_name))
    )


@register_architecture(
    "VG-R101-C4-attr",
    "bottom-up attention (Visual Genome, 1,600 classes, "
    "400 attributes): faster_rcnn_from_caffe_attr.pkl",
)
def _bottom_up_attr(cfg: CfgNode) -> None:
    _zoo(ZOO.format("R_101_C4"))(cfg)
    bottom_up.bottom_up_config(cfg, attributes=True)


@register_architecture(
    "VG-R101-C4",
    "bottom-up attention without its attribute head "
    "(Visual Genome, 1,600 classes): faster_rcnn_from_caffe.pkl",
)
def _bottom_up(cfg: CfgNode) -> None:
    _zoo(ZOO.format("R_101_C4"))(cfg)
    bottom_up.bottom_up_config(cfg, attributes=False)


register_architecture(
    "VinVL-X152-C4",
    "VinVL's ResNeXt-152 32x8d C4 with its attribute head "
    "(1,594 classes, 524 attributes): vinvl_vg_x152c4.pth",
)(vinvl.vinvl_config)
register_architecture(
    "vmb-X101-FPN",
    "MMF's vmb ResNeXt-101 64x4d FPN, 2048-d fc6/fc7 "
    "(Visual Genome, 1,600 classes): detectron_model.pth",
)(vmb.vmb_config)


@dataclass
class Detections:
    """One image's regions, in pixels of the image given."""

    boxes: np.ndarray  # (N, 4) float32 x1, y1, x2, y2
    features: np.ndarray  # (N, D) float32
    classes: np.ndarray  # (N,) int64, 0-based detector classes
    scores: np.ndarray  # (N,) float32
    attributes: List[List[int]]  # 0-based attribute ids per region (empty without a head)
    attr_scores: List[List[float]]
    extra: Dict[str, np.ndarray] = field(default_factory=dict)  # what MMF's scripts also write


def read_names(path: str, what: str) -> List[str]:
    """Class or attribute names: one a line (the first comma-separated synonym kept whole),
    or a VinVL json label map (``VG-SGG-dicts-vgoi6-clipped.json``), whose ``label_to_idx`` /
    ``attribute_to_idx`` give each name its id from 1."""
    if path.endswith(".json"):
        names = _json_names(path, "label_to_idx" if what == "class" else "attribute_to_idx")
    else:
        with open(path, encoding="utf-8") as handle:
            names = [line.strip() for line in handle if line.strip()]
    if len(set(names)) != len(names):
        seen = sorted({n for n in names if names.count(n) > 1})[:3]
        raise ValueError(f"{path}: {what} names must be unique, repeated: {seen}")
    return names


def _json_names(path: str, key: str) -> List[str]:
    """The names of a json label map's ``key`` (name -> id), by id; the ids must be 1..N."""
    with open(path, encoding="utf-8") as handle:
        try:
            data = json.load(handle)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not json ({exc})") from None
    ids = data.get(key) if isinstance(data, dict) else None
    if not isinstance(ids, dict) or not ids:
        raise ValueError(f"{path}: expected a json object with {key!r} (name -> id from 1)")
    bad = [name for name, index in ids.items() if type(index) is not int]
    if bad:
        raise ValueError(f"{path}: {key}[{bad[0]!r}] is not an integer id")
    if sorted(ids.values()) != list(range(1, len(ids) + 1)):
        raise ValueError(f"{path}: {key}'s ids must be 1 to {len(ids)}, each once")
    return sorted(ids, key=ids.__getitem__)


def build_config(
    arch: str, selection: Selection, opts: Sequence[str] = (), trust_arch: bool = False
) -> CfgNode:
    """The detectron2 config of ``arch`` (a registered name, or a yaml file: read as plain
    data, see :func:`mmf_uvlp.extraction.arch_yaml.merge_yaml`) with the selection's
    proposal count and ``opts``."""
    cfg = get_cfg()
    bottom_up.add_attribute_config(cfg)
    if arch in ARCHITECTURES:
        ARCHITECTURES[arch][1](cfg)
    elif os.path.isfile(arch):
        merge_yaml(cfg, arch, trust_arch)
    else:
        raise ValueError(
            f"--arch {arch!r}: expected one of {', '.join(ARCHITECTURES)} or a detectron2 yaml file"
        )
    cfg.MODEL.RPN.POST_NMS_TOPK_TEST = selection.proposals
    cfg.MODEL.WEIGHTS = ""
    cfg.merge_from_list(list(opts))
    return cfg


def _zero_init_residuals(model: torch.nn.Module) -> None:
    """Zero the scale of each bottleneck block's last norm (its residual branch)."""
    for module in model.modules():
        if isinstance(module, BottleneckBlock):
            module.conv3.norm.weight.data.zero_()


class Detector:
    """A detectron2 Faster R-CNN in eval mode, run on batches of RGB arrays."""

    def __init__(
        self,
        cfg: CfgNode,
        weights: Optional[str],
        selection: Selection,
        device: str = "cpu",
        random_seed: Optional[int] = None,
        precision: str = "fp32",
        layout: str = "detectron2",
        allow_partial: bool = False,
        state: Optional[Dict[str, torch.Tensor]] = None,
        feature_layer: str = "fc7",
    ):
        self.cfg = cfg.clone()
        self.cfg.MODEL.DEVICE = device
        self.selection = selection.validate()
        if (weights is None) == (random_seed is None):
            raise ValueError(
                "--weights: give the detector's weights (a .pkl or .pth file), "
                "or --random-weights SEED (tests, benchmarks)"
            )
        if random_seed is not None:
            torch.manual_seed(random_seed)
        self.model = build_model(self.cfg).eval()
        if weights is None:
            _zero_init_residuals(self.model)
            self.weights = LoadReport(
                None,
                None,
                random_seed=random_seed,
                tensors_in_detector=len(self.model.state_dict()),
            )
        else:
            self.weights = load_weights(self.model, weights, layout, allow_partial, state)
        heads = self.model.roi_heads
        if not isinstance(heads, (Res5ROIHeads, StandardROIHeads)):
            raise ValueError(
                f"{type(heads).__name__}: expected C4 (Res5ROIHeads) or FPN "
                "(StandardROIHeads) RoI heads"
            )
        if feature_layer not in vmb.FEATURE_LAYERS:
            raise ValueError(
                f"--feature-layer {feature_layer}: expected one of {', '.join(vmb.FEATURE_LAYERS)}"
            )
        if feature_layer != "fc7" and not isinstance(heads, StandardROIHeads):
            raise ValueError(
                f"--feature-layer {feature_layer}: a C4 detector's feature is "
                "res5's; fc6 is an FPN box head's"
            )
        self.feature_layer = feature_layer
        self.num_classes = self.cfg.MODEL.ROI_HEADS.NUM_CLASSES
        predictor = heads.box_predictor
        self.attribute_head = predictor if hasattr(predictor, "attribute_probs") else None
        self.num_attributes = (
            self.attribute_head.num_attributes if self.attribute_head is not None else 0
        )
        if isinstance(heads, vinvl.VinVLRes5ROIHeads):
            self.num_attributes = self.cfg.MODEL.ROI_ATTRIBUTE_HEAD.NUM_ATTRIBUTES
        self.feature_dim = self._feature_dim()
        self.device = torch.device(device)
        if precision == "auto":
            precision = "fp16" if self.device.type == "cuda" else "fp32"
        if precision not in HALF and precision != "fp32":
            raise ValueError(f"--precision {precision}: expected auto, fp32, fp16 or bf16")
        if precision != "fp32" and self.device.type != "cuda":
            raise ValueError(f"--precision {precision}: mixed precision needs a CUDA device")
        self.precision = precision
        self.resize = T.ResizeShortestEdge(
            [self.cfg.INPUT.MIN_SIZE_TEST] * 2, self.cfg.INPUT.MAX_SIZE_TEST
        )

    def _feature_dim(self) -> int:
        heads = self.model.roi_heads
        if isinstance(heads, Res5ROIHeads):
            return self.cfg.MODEL.RESNETS.RES2_OUT_CHANNELS * 8
        return heads.box_head.output_shape.channels

    @property
    def feature_kind(self) -> str:
        if isinstance(self.model.roi_heads, Res5ROIHeads):
            return f"res5 of each RoI-pooled box, averaged over its map ({self.feature_dim}-d)"
        return f"the FPN box head's {self.feature_layer} output ({self.feature_dim}-d)"

    def describe(self) -> Dict[str, object]:
        """What the output depends on, for the run's fingerprint and report."""
        return {
            "meta_architecture": self.cfg.MODEL.META_ARCHITECTURE,
            "feature": self.feature_kind,
            "feature_dim": self.feature_dim,
            "num_classes": self.num_classes,
            "num_attributes": self.num_attributes,
            "weights": {
                k: v
                for k, v in self.weights.as_dict().items()
                if k in ("status", "layout", "random_seed")
            },
            "selection": asdict(self.selection),
            "precision": self.precision,
            "config": self.cfg.dump(),
        }

    def default_class_names(self) -> Optional[List[str]]:
        """COCO's 80 names for the model-zoo COCO configs, else None."""
        if self.num_classes == 80:
            return list(MetadataCatalog.get("coco_2017_train").thing_classes)
        return None

    def _inputs(self, images: Sequence[np.ndarray]) -> List[Dict[str, object]]:
        inputs = []
        for rgb in images:
            array = rgb[:, :, ::-1] if self.cfg.INPUT.FORMAT == "BGR" else rgb
            height, width = array.shape[:2]
            resized = self.resize.get_transform(array).apply_image(np.ascontiguousarray(array))
            tensor = torch.as_tensor(resized.astype("float32").transpose(2, 0, 1))
            inputs.append({"image": tensor, "height": height, "width": width})
        return inputs

    @torch.inference_mode()
    def __call__(self, images: Sequence[np.ndarray]) -> List[Detections]:
        """The regions of each (H, W, 3) uint8 RGB image."""
        if not images:
            return []
        model = self.model
        inputs = self._inputs(images)
        sizes, boxes, pooled, head_out, features = self._regions(inputs)
        logits, deltas = model.roi_heads.box_predictor(head_out)
        logits = logits.float()
        probs = torch.softmax(logits, dim=-1)
        # the selection runs on the CPU: its NMS loops over the classes
        logits, probs, deltas, pooled = logits.cpu(), probs.cpu(), deltas.cpu(), pooled.cpu()
        boxes = [b.to("cpu") for b in boxes]
        counts = [len(b) for b in boxes]
        out = []
        for k, (image, logits_k, probs_k, deltas_k, pooled_k, boxes_k) in enumerate(
            zip(
                inputs,
                logits.split(counts),
                probs.split(counts),
                deltas.split(counts),
                pooled.split(counts),
                boxes,
            )
        ):
            scale = (image["width"] / sizes[k][1], image["height"] / sizes[k][0])
            det = self._select(
                logits_k,
                probs_k,
                deltas_k,
                pooled_k,
                boxes_k,
                sizes[k],
                scale,
                (image["height"], image["width"]),
            )
            if isinstance(model.roi_heads, vinvl.VinVLRes5ROIHeads):
                with self._half():
                    self._vinvl_attributes(det, features[k])
            out.append(det)
        return out

    def _half(self):
        """Autocast to the half type of ``precision`` (nothing in fp32)."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=HALF[self.precision])

    def _regions(self, inputs: List[Dict[str, object]]):
        """Of each input: its size as the detector sees it, its proposals, their region
        features and box head outputs (float32, every input's in order), and its backbone
        features.

        The inputs of one size go through the detector as one batch, those of another size
        apart: a batch pads its images to the largest, which would change the features and
        proposals near an image's lower and right edges, so that an image would not give
        what it gives alone. In half precision only the convolutional trunk (the backbone;
        res5, or the FPN box head) computes in the half type: the RPN, its box decoding,
        the classifier, the selection and the attributes' scores stay float32, and a region
        feature that is not finite stops the run."""
        model = self.model
        groups: Dict[Tuple[int, ...], List[int]] = {}
        for i, item in enumerate(inputs):
            groups.setdefault(tuple(item["image"].shape), []).append(i)
        sizes, boxes, pooled, head_out, features = {}, {}, {}, {}, {}
        for members in groups.values():
            batch = model.preprocess_image([inputs[i] for i in members])
            with self._half():
                maps = model.backbone(batch.tensor)
            maps = {name: value.float() for name, value in maps.items()}
            proposals, _ = model.proposal_generator(batch, maps, None)
            group_boxes = [p.proposal_boxes for p in proposals]
            with self._half():
                group_pooled, group_out = self._pooled(maps, group_boxes)
            counts = [len(b) for b in group_boxes]
            for k, (i, part, out) in enumerate(
                zip(members, group_pooled.split(counts), group_out.split(counts))
            ):
                sizes[i], boxes[i] = batch.image_sizes[k], group_boxes[k]
                pooled[i], head_out[i] = part.float(), out.float()
                features[i] = {name: value[k : k + 1] for name, value in maps.items()}
        order = range(len(inputs))
        regions = torch.cat([pooled[i] for i in order])
        if not torch.isfinite(regions).all():
            raise RuntimeError(
                "the detector's region features hold inf or NaN"
                + (
                    f" in --precision {self.precision}: run with --precision fp32"
                    if self.precision != "fp32"
                    else ": its weights or input are broken"
                )
            )
        return (
            [sizes[i] for i in order],
            [boxes[i] for i in order],
            regions,
            torch.cat([head_out[i] for i in order]),
            [features[i] for i in order],
        )

    def _pooled(
        self, features: Dict[str, torch.Tensor], boxes: List[Boxes]
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """(each box's region feature, the box head's output for the predictor)."""
        heads = self.model.roi_heads
        if isinstance(heads, Res5ROIHeads):
            x = heads._shared_roi_transform([features[f] for f in heads.in_features], boxes)
            x = x.mean(dim=[2, 3])
            return x, x
        if self.feature_layer == "fc7":
            x = heads.box_head(
                heads.box_pooler([features[f] for f in heads.box_in_features], boxes)
            )
            return x, x
        return vmb.box_features(heads, features, boxes, self.feature_layer)

    def _select(
        self, logits, probs, deltas, pooled, proposals: Boxes, size, scale, original
    ) -> Detections:
        sel = self.selection
        n, c = probs.shape[0], self.num_classes
        fg = probs[:, :c]  # detectron2 puts the background last
        if sel.method == "vinvl":
            return self._select_vinvl(probs, deltas, pooled, proposals, size, scale, original)
        if sel.method == "mmf-vmb":
            return self._select_vmb(fg, pooled, proposals, size, scale, original)
        if sel.boxes == "regressed" or sel.method == "max-class":
            regressed = self.model.roi_heads.box_predictor.box2box_transform.apply_deltas(
                deltas, proposals.tensor
            ).view(n, -1, 4)
            if regressed.shape[1] == 1:  # class-agnostic regression
                regressed = regressed.expand(n, c, 4)
            candidates = regressed[:, :c]
        else:
            candidates = proposals.tensor[:, None, :].expand(n, c, 4)
        if sel.method == "max-class":
            chosen = select_max_class(fg, candidates, size, sel)
        else:
            chosen = select_per_class(fg, candidates, sel)
        scores, labels = fg[chosen].max(dim=1)
        picked = Boxes(candidates[chosen, labels].clone())
        picked.clip(size)
        picked.scale(*scale)
        picked.clip(original)
        attributes: List[List[int]] = [[] for _ in range(len(chosen))]
        attr_scores: List[List[float]] = [[] for _ in range(len(chosen))]
        if self.attribute_head is not None and len(chosen):
            attr = (
                self.attribute_head.attribute_probs(
                    pooled[chosen].to(self.device), logits[chosen].to(self.device)
                )
                .float()
                .cpu()
            )
            top = attr.topk(min(sel.max_attributes, attr.shape[1]), dim=1)
            for i, (values, ids) in enumerate(zip(top.values.tolist(), top.indices.tolist())):
                for value, index in zip(values, ids):
                    if value >= sel.attr_thresh:
                        attributes[i].append(index)
                        attr_scores[i].append(value)
        return Detections(
            picked.tensor.numpy().astype(np.float32),
            pooled[chosen].numpy().astype(np.float32),
            labels.numpy().astype(np.int64),
            scores.numpy().astype(np.float32),
            attributes,
            attr_scores,
        )

    def _select_vinvl(
        self, probs, deltas, pooled, proposals: Boxes, size, scale, original
    ) -> Detections:
        """scene_graph_benchmark's boxes (:func:`vinvl.select_boxes`), its fields for MMF's
        ``extract_features_vinvl.py`` in ``extra`` (background first, as there)."""
        sel, n, c = self.selection, probs.shape[0], self.num_classes
        regressed = self.model.roi_heads.box_predictor.box2box_transform.apply_deltas(
            deltas, proposals.tensor
        ).view(n, -1, 4)
        # maskrcnn-benchmark clips a box to the last pixel: x in [0, W - 1]
        regressed[..., 0::2] = regressed[..., 0::2].clamp(0, size[1] - 1)
        regressed[..., 1::2] = regressed[..., 1::2].clamp(0, size[0] - 1)
        chosen, labels, scores = vinvl.select_boxes(
            probs[:, :c],
            regressed[:, :c],
            sel.conf_thresh,
            sel.min_boxes,
            sel.max_boxes,
            sel.nms_iou,
        )
        picked = regressed[chosen, labels]
        boxes = Boxes(picked.clone())
        boxes.scale(*scale)
        background_first = torch.cat([torch.arange(c, probs.shape[1]), torch.arange(c)])
        empty = [[] for _ in range(len(chosen))]
        return Detections(
            boxes.tensor.numpy().astype(np.float32),
            pooled[chosen].numpy().astype(np.float32),
            labels.numpy().astype(np.int64),
            scores.numpy().astype(np.float32),
            empty,
            [[] for _ in range(len(chosen))],
            extra={
                "input_boxes": picked,
                "scores_all": probs[chosen][:, background_first].numpy(),
                "boxes_all": regressed[chosen][:, background_first].numpy(),
            },
        )

    def _vinvl_attributes(self, det: Detections, features: Dict[str, torch.Tensor]) -> None:
        """VinVL's attributes of ``det``'s boxes (:func:`vinvl.select_attributes`): into its
        ``attributes`` (0-based, those scoring above 0) and, whole, its ``extra``."""
        sel = self.selection
        boxes = det.extra.pop("input_boxes")
        ids = np.zeros((len(boxes), sel.max_attributes), np.int64)
        values = np.zeros((len(boxes), sel.max_attributes), np.float32)
        if len(boxes):
            logits = self.model.roi_heads.attribute_logits(
                features,
                [Boxes(boxes.to(self.device))],
                torch.from_numpy(det.classes).to(self.device),
            )
            top_ids, top_values = vinvl.select_attributes(
                logits.float().cpu(), sel.attr_thresh, per_box=sel.max_attributes
            )
            ids, values = top_ids.numpy(), top_values.numpy()
        for i in range(len(boxes)):
            kept = values[i] > 0
            det.attributes[i] = [int(a) - 1 for a in ids[i][kept]]
            det.attr_scores[i] = [float(v) for v in values[i][kept]]
        det.extra.update(attr_labels=ids, attr_scores=values)

    def _select_vmb(self, fg, pooled, proposals: Boxes, size, scale, original) -> Detections:
        """``extract_features_vmb.py``'s boxes (:func:`vmb.select_boxes`) on the proposals
        in the image's pixels; its ``cls_prob`` and ``num_boxes`` in ``extra``."""
        sel = self.selection
        boxes = Boxes(proposals.tensor.clone())
        boxes.scale(*scale)
        chosen, best = vmb.select_boxes(
            fg, boxes.tensor, sel.conf_thresh, sel.max_boxes, sel.nms_iou
        )
        scores, labels = fg[chosen].max(dim=1)
        empty = [[] for _ in range(len(chosen))]
        return Detections(
            boxes.tensor[chosen].numpy().astype(np.float32),
            pooled[chosen].numpy().astype(np.float32),
            labels.numpy().astype(np.int64),
            scores.numpy().astype(np.float32),
            empty,
            [[] for _ in range(len(chosen))],
            extra={"cls_prob": fg[chosen].numpy(), "num_boxes": int((best > 0).sum())},
        )
