"""A simulated object detector and its region features.

Every ground-truth object gives one detection with a jittered box; the label is wrong
for about ``error_rate`` of them (an active class of the same supercategory, lower
confidence).
Duplicates, low-confidence boxes and tiny boxes are added so that tag filtering
(confidence >= 0.3, area >= 1% of the image) matters.

A region feature is ``relu(class prototype + attribute prototypes + noise)`` where the
prototypes are fixed random vectors drawn from the world's seed: what a region shows
can only be learned from data. The detector's label does not enter the feature.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mmf_uvlp.toy_world.scene import Scene, clip_box
from mmf_uvlp.toy_world.vocabulary import ATTRIBUTE_INDEX, ATTRIBUTES, CLASSES, ClassSet

NUM_GEOMETRY_DIMS = 6


@dataclass(frozen=True)
class DetectorConfig:
    """Error model of the simulated detector."""

    error_rate: float = 0.10  # wrong label on a real object
    duplicate_rate: float = 0.12  # second, looser box on a real object
    junk_per_image: float = 1.5  # Poisson mean of spurious boxes (tiny or low confidence)
    box_jitter: float = 0.05  # std of corner noise, as a fraction of the box side
    max_regions: int = 24


class FeatureModel:
    """Class and attribute prototypes that region features are built from."""

    CLASS_SCALE = 1.0
    ATTRIBUTE_SCALE = 0.5
    NOISE_SCALE = 0.5

    def __init__(self, rng: np.random.Generator, feature_dim: int):
        if feature_dim < 1:
            raise ValueError(f"feature_dim must be a positive integer, got {feature_dim}")
        self.feature_dim = feature_dim
        self.class_prototypes = rng.standard_normal((len(CLASSES), feature_dim))
        self.attribute_prototypes = rng.standard_normal((len(ATTRIBUTES), feature_dim))

    def feature(self, rng, cls: int, attrs: list[str], strength: float) -> np.ndarray:
        """A region feature of an object of ``cls`` with ``attrs``; ``strength`` in (0, 1]."""
        f = strength * self.CLASS_SCALE * self.class_prototypes[cls]
        for a in attrs:
            f = f + strength * self.ATTRIBUTE_SCALE * self.attribute_prototypes[ATTRIBUTE_INDEX[a]]
        f = f + self.NOISE_SCALE * rng.standard_normal(self.feature_dim)
        return np.maximum(f, 0.0).astype(np.float32)


@dataclass
class Detections:
    """Detector output for one image, ordered by decreasing confidence."""

    image_id: str
    width: int
    height: int
    boxes: list[list[float]]  # [x1, y1, x2, y2] pixels
    labels: list[int]  # class indices
    confs: list[float]
    attributes: list[list[str]]
    attr_scores: list[list[float]]
    sources: list[int]  # index of the ground-truth object, -1 for spurious boxes
    kinds: list[str]  # "object", "duplicate", "spurious"
    features: np.ndarray | None  # (N, D) float32
    cls_prob: np.ndarray | None  # (N, num_classes + 1) float32, column 0 = background

    def __len__(self) -> int:
        return len(self.labels)

    def geometry(self) -> np.ndarray:
        """VinVL's 6 geometry dims: x1/W, y1/H, x2/W, y2/H, w/W, h/H, float32 (N, 6)."""
        b = np.asarray(self.boxes, dtype=np.float64).reshape(-1, 4)
        w, h = float(self.width), float(self.height)
        g = np.stack(
            [
                b[:, 0] / w,
                b[:, 1] / h,
                b[:, 2] / w,
                b[:, 3] / h,
                (b[:, 2] - b[:, 0]) / w,
                (b[:, 3] - b[:, 1]) / h,
            ],
            axis=1,
        )
        return g.astype(np.float32)


def _confusable(rng: np.random.Generator, classes: ClassSet, cls: int) -> int:
    pool = classes.confusions(cls)
    return pool[int(rng.integers(len(pool)))]


def _jitter(rng, box, scale, w, h) -> list[float]:
    x1, y1, x2, y2 = box
    bw, bh = x2 - x1, y2 - y1
    noise = rng.normal(0.0, scale, 4) * np.array([bw, bh, bw, bh])
    return clip_box([x1 + noise[0], y1 + noise[1], x2 + noise[2], y2 + noise[3]], w, h)


def _cls_prob(rng, classes: ClassSet, label: int, conf: float, true_cls: int | None) -> np.ndarray:
    """A class distribution peaked at ``label`` with mass ``conf``."""
    p = np.zeros(len(CLASSES) + 1, dtype=np.float64)
    rest = 1.0 - conf
    others = [_confusable(rng, classes, label) for _ in range(3)]
    if true_cls is not None and true_cls != label:
        others[0] = true_cls
    share = rng.dirichlet(np.ones(len(others) + 1)) * rest
    p[0] += share[0]
    for c, s in zip(others, share[1:]):
        p[c + 1] += s
    p[label + 1] += conf
    return p.astype(np.float32)


def detect(
    rng: np.random.Generator,
    classes: ClassSet,
    scene: Scene,
    config: DetectorConfig,
    features: FeatureModel | None,
) -> Detections:
    """Simulate the detector on ``scene``; features are skipped when ``features`` is None.

    Wrong labels and spurious boxes are classes of ``classes`` only.
    """
    w, h = scene.width, scene.height
    rows: list[tuple] = []  # (box, label, conf, attrs, source, kind, true_cls, strength)
    for i, obj in enumerate(scene.objects):
        attrs = list(obj.attrs.values())
        box = _jitter(rng, obj.box, config.box_jitter, w, h)
        area = (box[2] - box[0]) * (box[3] - box[1]) / (w * h)
        if rng.random() < config.error_rate:
            label, conf = _confusable(rng, classes, obj.cls), 0.1 + 0.5 * rng.beta(2, 3)
        else:
            label, conf = obj.cls, 0.35 + 0.64 * rng.beta(5, 2)
        if area < 0.01:
            conf *= 0.7
        rows.append((box, label, conf, attrs, i, "object", obj.cls, 1.0))
        if rng.random() < config.duplicate_rate:
            dup = _jitter(rng, obj.box, 3 * config.box_jitter, w, h)
            dup_label = obj.cls if rng.random() < 0.7 else _confusable(rng, classes, obj.cls)
            rows.append(
                (dup, dup_label, conf * rng.uniform(0.4, 0.9), attrs, i, "duplicate", obj.cls, 0.7)
            )
    for _ in range(int(rng.poisson(config.junk_per_image))):
        cls = classes.foreground[int(rng.integers(len(classes.foreground)))]
        if rng.random() < 0.5:  # tiny box, possibly confident
            side = rng.uniform(0.03, 0.09)
            conf = rng.uniform(0.2, 0.8)
        else:  # any size, low confidence
            side = rng.uniform(0.1, 0.5)
            conf = rng.uniform(0.02, 0.3)
        bw, bh = side * w, side * h
        x1, y1 = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
        box = clip_box([x1, y1, x1 + bw, y1 + bh], w, h)
        rows.append((box, cls, conf, [], -1, "spurious", None, 0.3))

    rows.sort(key=lambda r: -r[2])
    rows = rows[: config.max_regions]
    feats, probs, attr_scores = [], [], []
    for box, label, conf, attrs, source, kind, true_cls, strength in rows:
        attr_scores.append([round(float(rng.uniform(0.3, 0.95)), 4) for _ in attrs])
        if features is None:
            continue
        base = true_cls if true_cls is not None else label
        feats.append(features.feature(rng, base, attrs, strength))
        probs.append(_cls_prob(rng, classes, label, conf, true_cls))
    return Detections(
        image_id=scene.image_id,
        width=w,
        height=h,
        boxes=[r[0] for r in rows],
        labels=[int(r[1]) for r in rows],
        confs=[round(float(r[2]), 4) for r in rows],
        attributes=[list(r[3]) for r in rows],
        attr_scores=attr_scores,
        sources=[int(r[4]) for r in rows],
        kinds=[r[5] for r in rows],
        features=np.stack(feats) if features is not None else None,
        cls_prob=np.stack(probs) if features is not None else None,
    )
