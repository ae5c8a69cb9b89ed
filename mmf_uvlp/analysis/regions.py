"""An image's detected regions, read from MMF feature files (LMDB or npy folder).

Per region: its box (pixels), appearance features, detector confidence and, when class
names are given, its label. The confidence is ``cls_prob[k, objects[k] + 1]`` (MMF's
convention: column 0 of ``cls_prob`` is the background, ``objects`` index the classes).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mmf_uvlp.data_formats.mmf_features import LmdbFeatures, load_npy
from mmf_uvlp.errors import FormatError


@dataclass(frozen=True)
class ImageRegions:
    """The detections of one image (R regions, D feature dims)."""

    image_id: str
    width: int
    height: int
    boxes: np.ndarray  # (R, 4) float32 [x1, y1, x2, y2] pixels
    features: np.ndarray  # (R, D) float32
    confidences: np.ndarray  # (R,) float32
    labels: tuple[str, ...]  # (R,) class names; empty when no names were given

    def __len__(self) -> int:
        return int(self.boxes.shape[0])


def read_class_names(path: str | os.PathLike) -> list[str]:
    """Class names by class id: a toy world's ``vocabulary.json`` or one name a line."""
    path = Path(path)
    if path.suffix == ".json":
        with open(path, encoding="utf-8") as f:
            classes = json.load(f).get("classes")
        if not isinstance(classes, list) or not all(
            isinstance(c, dict) and "name" in c for c in classes
        ):
            raise FormatError(path, "classes", "a list of objects with a 'name'")
        return [str(c["name"]) for c in classes]
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


class RegionStore:
    """Regions by image id from an MMF feature LMDB or npy folder.

    ``max_regions`` keeps each image's first regions (MMF's ``max_features``).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        class_names: list[str] | None = None,
        max_regions: int | None = None,
    ):
        self.path = Path(path)
        self.class_names = class_names
        self.max_regions = max_regions
        self._lmdb = LmdbFeatures(self.path) if (self.path / "data.mdb").is_file() else None
        if self._lmdb is None and not self.path.is_dir():
            raise FileNotFoundError(
                f"region features not found: {self.path} (expected an MMF "
                "feature LMDB folder or an npy feature folder)"
            )

    def _record(self, image_id: str) -> dict:
        if self._lmdb is not None:
            return self._lmdb[image_id]
        if not (self.path / f"{image_id}.npy").is_file():
            raise KeyError(f"{image_id!r} not in {self.path}")
        return load_npy(self.path, image_id)

    def __getitem__(self, image_id: str) -> ImageRegions:
        record = self._record(image_id)
        n = int(record["num_boxes"])
        if self.max_regions is not None:
            n = min(n, self.max_regions)
        objects = np.asarray(record["objects"])[:n]
        cls_prob = np.asarray(record["cls_prob"])[:n]
        if n and objects.max() + 1 >= cls_prob.shape[1]:
            raise FormatError(
                self.path,
                "cls_prob",
                "a background column 0 and one column per class (objects[k] + 1 < C)",
                cls_prob.shape,
                key=image_id,
            )
        labels: tuple[str, ...] = ()
        if self.class_names is not None:
            if n and objects.max() >= len(self.class_names):
                raise FormatError(
                    self.path,
                    "objects",
                    f"class ids < {len(self.class_names)} (the class names given)",
                    int(objects.max()),
                    key=image_id,
                )
            labels = tuple(self.class_names[int(k)] for k in objects)
        return ImageRegions(
            image_id=image_id,
            width=int(record["image_width"]),
            height=int(record["image_height"]),
            boxes=np.asarray(record["bbox"], dtype=np.float32)[:n],
            features=np.asarray(record["features"], dtype=np.float32)[:n],
            confidences=cls_prob[np.arange(n), objects + 1].astype(np.float32),
            labels=labels,
        )

    @property
    def feature_dim(self) -> int:
        """D, from the first image."""
        if self._lmdb is not None:
            return int(self._lmdb[self._lmdb.keys()[0]]["features"].shape[1])
        first = next(
            (p for p in sorted(self.path.glob("*.npy")) if not p.name.endswith("_info.npy")), None
        )
        if first is None:
            raise FileNotFoundError(f"no <id>.npy feature files in {self.path}")
        return int(np.load(first, mmap_mode="r").shape[1])

    def close(self) -> None:
        if self._lmdb is not None:
            self._lmdb.close()
