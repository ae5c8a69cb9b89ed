"""What MMF's own feature scripts write, image by image: ``<key>.npy`` and ``<key>_info.npy``.

- ``vinvl`` (``tools/scripts/features/extract_features_vinvl.py``): ``<key>.npy`` is each
  box's 2048-d ``box_features`` with 6 box values appended, ``x1 / W, y1 / H, x2 / W, y2 / H``
  and the normalised width and height (N, 2054); ``<key>_info.npy`` a pickled dict of every
  field of scene_graph_benchmark's output: ``labels`` (1-based), ``scores``, ``box_features``,
  ``scores_all`` (N, C + 1, background first), ``boxes_all`` (N, C + 1, 4, in the network's
  input pixels, as scene_graph_benchmark leaves them), ``attr_labels`` and ``attr_scores`` (N,
  16), ``bbox`` (the 6 values), ``image_width``, ``image_height``.
- ``vmb`` (``extract_features_vmb.py``): ``<key>.npy`` the boxes' ``fc6`` (or ``fc7``)
  features; ``<key>_info.npy`` ``bbox`` (N, 4 pixels), ``num_boxes`` (those whose best class
  surviving NMS scores above the threshold),
  ``objects`` (each box's best class, 0-based), ``cls_prob`` (N, C), ``image_width``,
  ``image_height``.

The detector puts the fields only these layouts need in :attr:`Detections.extra`. Each file is
written whole or not at all, inside the output folder (a key that would leave it is refused).
"""

from __future__ import annotations

import os
from typing import Dict, Tuple

import numpy as np

from mmf_uvlp.utils.atomic import atomic_open
from mmf_uvlp.utils.safe_loading import resolve_inside

LAYOUTS = ("vinvl", "vmb")


def normalised_boxes(boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """(N, 6): ``x1 / W, y1 / H, x2 / W, y2 / H``, then the normalised width and height."""
    out = np.zeros((len(boxes), 6), dtype=np.float32)
    out[:, :4] = boxes
    out[:, [0, 2]] /= width
    out[:, [1, 3]] /= height
    out[:, 4] = out[:, 2] - out[:, 0]
    out[:, 5] = out[:, 3] - out[:, 1]
    return out


def vinvl_record(det, width: int, height: int) -> Tuple[np.ndarray, Dict[str, object]]:
    """(features, info) of ``extract_features_vinvl.py`` for one image's detections."""
    bbox = normalised_boxes(det.boxes, width, height)
    info: Dict[str, object] = {
        "labels": det.classes.astype(np.int64) + 1,
        "scores": det.scores.astype(np.float32),
        "box_features": det.features.astype(np.float32),
        "scores_all": det.extra["scores_all"],
        "boxes_all": det.extra["boxes_all"],
        "attr_labels": det.extra["attr_labels"],
        "attr_scores": det.extra["attr_scores"],
        "bbox": bbox,
        "image_width": width,
        "image_height": height,
    }
    return np.concatenate([info["box_features"], bbox], axis=1), info


def vmb_record(det, width: int, height: int) -> Tuple[np.ndarray, Dict[str, object]]:
    """(features, info) of ``extract_features_vmb.py`` for one image's detections."""
    cls_prob = det.extra["cls_prob"].astype(np.float32)
    info: Dict[str, object] = {
        "bbox": det.boxes.astype(np.float32),
        "num_boxes": int(det.extra["num_boxes"]),
        "objects": cls_prob.argmax(axis=1) if len(cls_prob) else np.zeros(0, np.int64),
        "cls_prob": cls_prob,
        "image_width": width,
        "image_height": height,
    }
    return det.features.astype(np.float32), info


class ScriptOutput:
    """A folder of one MMF script's per-image files."""

    def __init__(self, folder: str, layout: str):
        if layout not in LAYOUTS:
            raise ValueError(f"{layout!r}: expected one of {', '.join(LAYOUTS)}")
        self.folder = folder
        self.record = vinvl_record if layout == "vinvl" else vmb_record
        os.makedirs(folder, exist_ok=True)

    def write(self, key: str, det, width: int, height: int) -> None:
        """``<key>.npy`` and ``<key>_info.npy`` of one image."""
        features, info = self.record(det, width, height)
        for name, value in ((f"{key}.npy", features), (f"{key}_info.npy", info)):
            path = resolve_inside(self.folder, name)
            with atomic_open(path, "wb") as handle:
                np.save(handle, value, allow_pickle=isinstance(value, dict))
