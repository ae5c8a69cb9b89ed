"""VinVL detector output: ``predictions.tsv``, ``features.tsv`` and a simple jsonl.

- ``predictions.tsv``: ``<image_id>\\t<json>``, the json being
  ``{"image_h", "image_w", "num_boxes", "objects": [{"rect": [x1, y1, x2, y2],
  "class", "conf", "attributes", "attr_scores"}]}``.
- ``features.tsv``: ``<image_id>\\t<num_boxes>\\t<base64 float32 (num_boxes, D + 6)>``,
  the last 6 dims being x1/W, y1/H, x2/W, y2/H, w/W, h/H.
- ``detections.jsonl``: ``{"image_id", "image_h", "image_w", "objects": [{"rect",
  "class", "conf"}]}`` per line.

All readers stream line by line and raise :class:`FormatError` on malformed rows.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from mmf_uvlp.data_formats.errors import FormatError

GEOMETRY_DIMS = 6
BOX_TOLERANCE = 1.0  # pixels a box may stick out of the image (detector rounding)


@dataclass(frozen=True)
class VinvlObject:
    """One detected region."""

    rect: tuple[float, float, float, float]
    cls: str
    conf: float
    attributes: tuple[str, ...] = ()
    attr_scores: tuple[float, ...] = ()

    @property
    def area(self) -> float:
        return (self.rect[2] - self.rect[0]) * (self.rect[3] - self.rect[1])


@dataclass(frozen=True)
class VinvlPrediction:
    """Detections of one image."""

    image_id: str
    image_h: int
    image_w: int
    objects: tuple[VinvlObject, ...]

    @property
    def num_boxes(self) -> int:
        return len(self.objects)


@dataclass(frozen=True)
class VinvlFeatures:
    """Region features of one image: (num_boxes, D + 6) float32."""

    image_id: str
    features: np.ndarray

    @property
    def appearance(self) -> np.ndarray:
        """The D appearance dims, without the 6 geometry dims."""
        return self.features[:, :-GEOMETRY_DIMS]

    @property
    def geometry(self) -> np.ndarray:
        return self.features[:, -GEOMETRY_DIMS:]


def _lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            if line:
                yield number, line


def _columns(path, number: int, line: str, count: int, names: str) -> list[str]:
    columns = line.split("\t")
    if len(columns) != count:
        raise FormatError(path, "columns", f"{count} tab-separated columns ({names})",
                          len(columns), line=number)
    if not columns[0]:
        raise FormatError(path, "image_id", "a non-empty image id", columns[0], line=number)
    return columns


def _int(path, number, record: dict, field: str, minimum: int) -> int:
    value = record.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FormatError(path, field, f"an integer >= {minimum}", value, line=number)
    return value


def _number(path, number, value, field: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FormatError(path, field, "a finite number", value, line=number)
    if not low <= value <= high:
        raise FormatError(path, field, f"a number in [{low}, {high}]", value, line=number)
    return float(value)


def _object(path, number: int, k: int, raw, w: int, h: int, with_attributes: bool):
    prefix = f"objects[{k}]"
    if not isinstance(raw, dict):
        raise FormatError(path, prefix, "a json object", raw, line=number)
    rect = raw.get("rect")
    if not isinstance(rect, list) or len(rect) != 4:
        raise FormatError(path, f"{prefix}.rect", "a list [x1, y1, x2, y2]", rect, line=number)
    x1, x2 = (_number(path, number, v, f"{prefix}.rect", -BOX_TOLERANCE, w + BOX_TOLERANCE)
              for v in (rect[0], rect[2]))
    y1, y2 = (_number(path, number, v, f"{prefix}.rect", -BOX_TOLERANCE, h + BOX_TOLERANCE)
              for v in (rect[1], rect[3]))
    if x2 < x1 or y2 < y1:
        raise FormatError(path, f"{prefix}.rect", "x1 <= x2 and y1 <= y2", rect, line=number)
    cls = raw.get("class")
    if not isinstance(cls, str) or not cls:
        raise FormatError(path, f"{prefix}.class", "a non-empty string", cls, line=number)
    conf = _number(path, number, raw.get("conf"), f"{prefix}.conf", 0.0, 1.0)
    attributes: tuple[str, ...] = ()
    scores: tuple[float, ...] = ()
    if with_attributes:
        attributes = tuple(raw.get("attributes", []))
        if not all(isinstance(a, str) for a in attributes):
            raise FormatError(path, f"{prefix}.attributes", "a list of strings",
                              raw.get("attributes"), line=number)
        raw_scores = raw.get("attr_scores", [])
        if not isinstance(raw_scores, list) or len(raw_scores) != len(attributes):
            raise FormatError(path, f"{prefix}.attr_scores",
                              f"a list of {len(attributes)} scores", raw_scores, line=number)
        scores = tuple(_number(path, number, s, f"{prefix}.attr_scores", 0.0, 1.0)
                       for s in raw_scores)
    return VinvlObject((x1, y1, x2, y2), cls, conf, attributes, scores)


def _prediction(path, number: int, image_id: str, record, with_attributes: bool):
    if not isinstance(record, dict):
        raise FormatError(path, "json", "a json object", record, line=number)
    h = _int(path, number, record, "image_h", 1)
    w = _int(path, number, record, "image_w", 1)
    objects = record.get("objects")
    if not isinstance(objects, list):
        raise FormatError(path, "objects", "a list", objects, line=number)
    if "num_boxes" in record or with_attributes:
        num_boxes = _int(path, number, record, "num_boxes", 0)
        if num_boxes != len(objects):
            raise FormatError(path, "num_boxes", f"len(objects) = {len(objects)}", num_boxes,
                              line=number)
    parsed = tuple(_object(path, number, k, o, w, h, with_attributes)
                   for k, o in enumerate(objects))
    return VinvlPrediction(image_id, h, w, parsed)


def _json(path, number: int, text: str, field: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(path, field, f"valid json ({e.msg} at char {e.pos})",
                          text, line=number) from None


def read_predictions(path: str | os.PathLike) -> Iterator[VinvlPrediction]:
    """Stream a VinVL ``predictions.tsv``."""
    for number, line in _lines(path):
        image_id, text = _columns(path, number, line, 2, "image_id, json")
        yield _prediction(path, number, image_id, _json(path, number, text, "json"), True)


def read_detections_jsonl(path: str | os.PathLike) -> Iterator[VinvlPrediction]:
    """Stream the simple ``detections.jsonl`` (no attributes)."""
    for number, line in _lines(path):
        record = _json(path, number, line, "json")
        image_id = record.get("image_id") if isinstance(record, dict) else None
        if not isinstance(image_id, str) or not image_id:
            raise FormatError(path, "image_id", "a non-empty string", image_id, line=number)
        yield _prediction(path, number, image_id, record, False)


def decode_features(
    path, number: int, num_boxes_text: str, blob: str, feature_dim: int | None,
) -> np.ndarray:
    """Decode and check one ``features.tsv`` row into (num_boxes, D + 6) float32."""
    try:
        num_boxes = int(num_boxes_text)
    except ValueError:
        num_boxes = -1
    if num_boxes < 0:
        raise FormatError(path, "num_boxes", "an integer >= 0", num_boxes_text, line=number)
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(path, "features", "base64 of a float32 array", blob,
                          line=number) from None
    if len(raw) % 4:
        raise FormatError(path, "features", "a whole number of float32 values",
                          f"{len(raw)} bytes", line=number)
    values = np.frombuffer(raw, dtype="<f4")
    if feature_dim is not None:
        width = feature_dim + GEOMETRY_DIMS
    elif num_boxes:
        width = values.size // num_boxes
    else:
        width = GEOMETRY_DIMS
    if values.size != num_boxes * width or width <= GEOMETRY_DIMS:
        dim = "D" if feature_dim is None else str(feature_dim)
        raise FormatError(path, "features",
                          f"{num_boxes} x ({dim} + {GEOMETRY_DIMS}) float32 values",
                          f"{values.size} values", line=number)
    features = values.reshape(num_boxes, width).astype(np.float32)
    if not np.isfinite(features).all():
        raise FormatError(path, "features", "finite values", "NaN or inf", line=number)
    geometry = features[:, -GEOMETRY_DIMS:]
    if (geometry < -1e-3).any() or (geometry > 1 + 1e-3).any():
        raise FormatError(path, "features", "geometry dims in [0, 1] (box inside the image)",
                          geometry.min(initial=0.0) if (geometry < 0).any()
                          else geometry.max(initial=0.0), line=number)
    return features


def read_features(
    path: str | os.PathLike, feature_dim: int | None = None,
) -> Iterator[VinvlFeatures]:
    """Stream a VinVL ``features.tsv``; ``feature_dim`` (D) is inferred when None.

    Every row must have the same D as the first one.
    """
    for number, line in _lines(path):
        image_id, num_boxes, blob = _columns(path, number, line, 3,
                                             "image_id, num_boxes, base64")
        features = decode_features(path, number, num_boxes, blob, feature_dim)
        if feature_dim is None and len(features):
            feature_dim = features.shape[1] - GEOMETRY_DIMS
        yield VinvlFeatures(image_id, features)


def read_vinvl(
    predictions_path: str | os.PathLike, features_path: str | os.PathLike,
    feature_dim: int | None = None,
) -> Iterator[tuple[VinvlPrediction, VinvlFeatures]]:
    """Stream the two files together; rows must list the same images in the same order."""
    features = read_features(features_path, feature_dim)
    for number, prediction in enumerate(read_predictions(predictions_path), start=1):
        row = next(features, None)
        if row is None or row.image_id != prediction.image_id:
            raise FormatError(features_path, "image_id",
                              f"{prediction.image_id!r} as in {predictions_path}",
                              None if row is None else row.image_id, line=number)
        if len(row.features) != prediction.num_boxes:
            raise FormatError(features_path, "num_boxes",
                              f"{prediction.num_boxes} as in {predictions_path}",
                              len(row.features), line=number)
        yield prediction, row
    extra = next(features, None)
    if extra is not None:
        raise FormatError(features_path, "image_id", f"no more rows than {predictions_path}",
                          extra.image_id)


class FeatureTsvIndex:
    """Random access to ``features.tsv`` rows by image id (one streaming pass to index)."""

    def __init__(self, path: str | os.PathLike, feature_dim: int | None = None):
        self.path, self.feature_dim = str(path), feature_dim
        self._offsets: dict[str, tuple[int, int]] = {}
        with open(self.path, "rb") as f:
            number = 0
            while True:
                offset = f.tell()
                line = f.readline()
                if not line:
                    break
                number += 1
                image_id = line.split(b"\t", 1)[0].decode("utf-8")
                if image_id in self._offsets:
                    raise FormatError(self.path, "image_id", "unique image ids", image_id,
                                      line=number)
                if image_id:
                    self._offsets[image_id] = (offset, number)

    def __len__(self) -> int:
        return len(self._offsets)

    def __contains__(self, image_id: str) -> bool:
        return image_id in self._offsets

    def keys(self) -> list[str]:
        return list(self._offsets)

    def __getitem__(self, image_id: str) -> VinvlFeatures:
        if image_id not in self._offsets:
            raise KeyError(f"{image_id!r} not in {self.path}")
        offset, number = self._offsets[image_id]
        with open(self.path, encoding="utf-8") as f:
            f.seek(offset)
            line = f.readline().rstrip("\n")
        _, num_boxes, blob = _columns(self.path, number, line, 3, "image_id, num_boxes, base64")
        return VinvlFeatures(image_id, decode_features(self.path, number, num_boxes, blob,
                                                       self.feature_dim))
