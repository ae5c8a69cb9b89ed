"""Stage 1: read detector output, validated, one image at a time.

Inputs (see docs/corpus.md):

* VinVL ``predictions.tsv``: ``<image_id>\\t<json>``, json = ``{"image_h", "image_w",
  "num_boxes", "objects": [{"rect": [x1, y1, x2, y2], "class", "conf", "attributes",
  "attr_scores"}]}``;
* optionally VinVL ``features.tsv`` in the same row order: ``<image_id>\\t<num_boxes>\\t<base64
  float32 num_boxes x (D + 6)>`` (validated: decodable, right size, finite, same image and box
  count as the predictions row; decoding and checks are ``mmf_uvlp.data_formats.vinvl``'s
  ``decode_features``, which also requires the 6 geometry dims to lie in [0, 1]);
* or a simple jsonl: ``{"image_id", "image_h", "image_w", "objects": [{"rect", "class",
  "conf"}]}``.

An image's *position* is its 0-based line index in the detections file (blank and bad lines
count too), so that chunking and sharding never depend on what was skipped. ``DetectionReader``
yields ``(position, Detection)`` for good rows and ``(position, FormatError)`` for bad ones;
the caller decides (``ErrorPolicy``) whether to stop or count. A bad row drops the whole image
(a dropped box would shift the alignment between boxes and feature rows).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Tuple, Union

from mmf_uvlp.corpus.errors import FormatError, make_error
from mmf_uvlp.data_formats.vinvl import GEOMETRY_DIMS, decode_features


@dataclass
class Detection:
    """One image's detections; ``objects[i]`` is region ``i`` (and feature row ``i``)."""

    image_id: str
    image_w: float
    image_h: float
    boxes: List[List[float]]
    labels: List[str]
    confs: List[float]
    position: int = -1
    feature_dim: Optional[int] = None

    @property
    def num_boxes(self) -> int:
        return len(self.boxes)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite_number(path, line, fieldname, value, positive=False) -> float:
    if not _is_number(value) or not math.isfinite(value):
        raise make_error(path, line, fieldname, "a finite number", value)
    if positive and value <= 0:
        raise make_error(path, line, fieldname, "a positive number", value)
    return float(value)


def parse_detection_json(
    data, path: str, line: int, image_id: Optional[str] = None, box_tolerance: float = 1.0
) -> Detection:
    """Validate one image's detection dict (VinVL json or jsonl record)."""
    if not isinstance(data, dict):
        raise make_error(path, line, "json", "a JSON object", type(data).__name__)
    if image_id is None:
        image_id = data.get("image_id")
        if isinstance(image_id, int) and not isinstance(image_id, bool):
            image_id = str(image_id)
        if not isinstance(image_id, str) or not image_id:
            raise make_error(path, line, "image_id", "a non-empty string", image_id)
    width = _finite_number(path, line, "image_w", data.get("image_w"), positive=True)
    height = _finite_number(path, line, "image_h", data.get("image_h"), positive=True)
    objects = data.get("objects")
    if not isinstance(objects, list):
        raise make_error(path, line, "objects", "a list", type(objects).__name__)
    if "num_boxes" in data and data["num_boxes"] != len(objects):
        raise make_error(path, line, "num_boxes", f"{len(objects)} (the number of objects)",
                         data["num_boxes"])
    boxes, labels, confs = [], [], []
    for i, obj in enumerate(objects):
        name = f"objects[{i}]"
        if not isinstance(obj, dict):
            raise make_error(path, line, name, "an object", obj)
        rect = obj.get("rect")
        if not isinstance(rect, list) or len(rect) != 4:
            raise make_error(path, line, f"{name}.rect", "[x1, y1, x2, y2]", rect)
        box = [_finite_number(path, line, f"{name}.rect", v) for v in rect]
        x1, y1, x2, y2 = box
        if x2 < x1 or y2 < y1:
            raise make_error(path, line, f"{name}.rect", "x1 <= x2 and y1 <= y2", rect)
        tol = box_tolerance
        if x1 < -tol or y1 < -tol or x2 > width + tol or y2 > height + tol:
            raise make_error(path, line, f"{name}.rect",
                             f"a box inside the {width:g}x{height:g} image", rect)
        label = obj.get("class")
        if not isinstance(label, str) or not label.strip():
            raise make_error(path, line, f"{name}.class", "a non-empty string", label)
        conf = _finite_number(path, line, f"{name}.conf", obj.get("conf"))
        if conf < 0 or conf > 1:
            raise make_error(path, line, f"{name}.conf", "a number in [0, 1]", conf)
        boxes.append(box)
        labels.append(label.strip())
        confs.append(conf)
    return Detection(image_id, width, height, boxes, labels, confs)


def parse_predictions_row(text: str, path: str, line: int, box_tolerance: float) -> Detection:
    parts = text.split("\t")
    if len(parts) != 2 or not parts[0]:
        raise make_error(path, line, "row", "'<image_id>\\t<json>' (2 tab-separated fields)",
                         f"{len(parts)} field(s)")
    try:
        data = json.loads(parts[1])
    except json.JSONDecodeError as exc:
        raise make_error(path, line, "json", "valid JSON", str(exc)) from None
    return parse_detection_json(data, path, line, image_id=parts[0],
                                box_tolerance=box_tolerance)


def parse_jsonl_row(text: str, path: str, line: int, box_tolerance: float) -> Detection:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise make_error(path, line, "json", "valid JSON", str(exc)) from None
    return parse_detection_json(data, path, line, box_tolerance=box_tolerance)


def check_features_row(
    text: str, path: str, line: int, detection: Detection, feature_dim: Optional[int]
) -> int:
    """Validate one features.tsv row against its predictions row; returns D."""
    parts = text.split("\t")
    if len(parts) != 3:
        raise make_error(path, line, "row", "'<image_id>\\t<num_boxes>\\t<base64>'",
                         f"{len(parts)} field(s)")
    image_id, num_text, payload = parts
    if image_id != detection.image_id:
        raise make_error(path, line, "image_id",
                         f"{detection.image_id!r} (same row order as predictions.tsv)",
                         image_id)
    try:
        num_boxes = int(num_text)
    except ValueError:
        raise make_error(path, line, "num_boxes", "an integer", num_text) from None
    if num_boxes != detection.num_boxes:
        raise make_error(path, line, "num_boxes",
                         f"{detection.num_boxes} (boxes in predictions.tsv)", str(num_boxes))
    if num_boxes == 0:
        if payload.strip():
            raise make_error(path, line, "features", "no data for 0 boxes", payload[:20])
        return feature_dim or 0
    features = decode_features(path, line, num_text, payload, feature_dim)
    return features.shape[1] - GEOMETRY_DIMS if num_boxes else (feature_dim or 0)


class DetectionReader:
    """Stream an image's detections by position; validate features.tsv alongside.

    ``wanted(position)`` selects the rows to parse (the others are only counted), so a shard
    reads the file but parses only its own images. After iteration ``positions`` holds the
    number of rows (lines) seen and ``feature_dim`` the appearance dimension D found.
    """

    def __init__(
        self,
        predictions: Optional[str] = None,
        detections_jsonl: Optional[str] = None,
        features: Optional[str] = None,
        feature_dim: Optional[int] = None,
        validate_features: bool = True,
        box_tolerance: float = 1.0,
    ) -> None:
        if bool(predictions) == bool(detections_jsonl):
            raise ValueError("give exactly one of predictions / detections_jsonl")
        self.path = predictions or detections_jsonl
        self.kind = "predictions" if predictions else "detections_jsonl"
        self.features = features
        self.feature_dim = feature_dim
        self.validate_features = validate_features
        self.box_tolerance = box_tolerance
        self.positions = 0

    def __iter__(self) -> Iterator[Tuple[int, str, Union[Detection, FormatError]]]:
        parse = parse_predictions_row if self.kind == "predictions" else parse_jsonl_row
        feats = open(self.features, "rb") if self.features else None
        try:
            with open(self.path, "rb") as handle:
                for position, raw in enumerate(handle):
                    self.positions = position + 1
                    line = position + 1
                    fraw = feats.readline() if feats is not None else None
                    if self._wanted is not None and not self._wanted(position):
                        continue
                    try:
                        detection = self._parse(raw, line, parse)
                    except FormatError as err:
                        yield position, self.kind, err
                        continue
                    detection.position = position
                    if feats is not None and self.validate_features:
                        try:
                            detection.feature_dim = self._check_features(fraw, line, detection)
                        except FormatError as err:
                            if getattr(err, "field", "") == "image_id":
                                raise  # rows out of step: nothing after this can be trusted
                            yield position, "features", err
                            continue
                    yield position, self.kind, detection
                if feats is not None and feats.readline():
                    raise make_error(self.features, self.positions + 1, "row",
                                     f"{self.positions} rows (as many as {self.path})",
                                     "more rows")
        finally:
            if feats is not None:
                feats.close()

    _wanted: Optional[Callable[[int], bool]] = None

    def select(self, wanted: Optional[Callable[[int], bool]]) -> "DetectionReader":
        self._wanted = wanted
        return self

    def _parse(self, raw: bytes, line: int, parse) -> Detection:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise make_error(self.path, line, "encoding", "UTF-8", str(exc)) from None
        text = text.rstrip("\r\n")
        if not text.strip():
            raise make_error(self.path, line, "row", "a detection row", "an empty line")
        return parse(text, self.path, line, self.box_tolerance)

    def _check_features(self, raw: Optional[bytes], line: int, detection: Detection) -> int:
        if not raw:
            raise make_error(self.features, line, "row",
                             f"a features row for image {detection.image_id!r}", "end of file")
        try:
            text = raw.decode("ascii").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise make_error(self.features, line, "encoding", "ASCII", str(exc)) from None
        dim = check_features_row(text, self.features, line, detection, self.feature_dim)
        if self.feature_dim is None and detection.num_boxes:
            self.feature_dim = dim  # the first good row fixes D for the rest of the file
        return dim
