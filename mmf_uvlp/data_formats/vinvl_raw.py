"""VinVL's detector output as its detector writes it: scene_graph_benchmark's test output.

``tools/test_sg_net.py`` of scene_graph_benchmark (with ``TEST.SAVE_RESULTS_TO_TSV True``)
writes ``predictions.tsv``, one image a line, ``<image key>\\t<json>``::

    {"objects": [{"rect": [x1, y1, x2, y2], "bbox_id": 0, "class": "dog", "conf": 0.93,
                  "feature": "<base64 of D float32>",            # TEST.OUTPUT_FEATURE True
                  "attributes": ["brown"], "attr_scores": [0.6],  # attribute models
                  "scores_all": "<base64 of C + 1 float32>"}],    # optional
     "relations": null}

``rect`` is in pixels of the original image, ``class`` a name (the detector's label map maps
its ids), ``feature`` the box's D appearance values (2048 for VinVL's X152-C4), base64 of
little-endian float32. Which keys appear follows ``TEST.TSV_SAVE_SUBSET``. The row has no
image size: the sizes are in the data set's ``hw.tsv``, ``<image key>\\t[{"height": H,
"width": W}]``, keyed like the predictions (any order).

The released VinVL files (``mmf_uvlp.data_formats.vinvl``) carry ``image_h``, ``image_w`` and
``num_boxes`` in the row and the features in a separate ``features.tsv``.
:func:`parse_detector_row` reads both kinds of row: the sizes come from the row or, given an
:class:`ImageSizes`, from ``hw.tsv`` (a row that has both must agree); a class given by id
goes through a :class:`~mmf_uvlp.data_formats.labelmap.LabelMap`; embedded features, when the
row has them, are decoded and checked against D. Every error is a :class:`FormatError` naming
file, line and field.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass
from typing import Dict, Iterator, Optional, Tuple

import numpy as np

from mmf_uvlp.data_formats.labelmap import LabelMap
from mmf_uvlp.errors import FormatError
from mmf_uvlp.data_formats.vinvl import (
    BOX_TOLERANCE,
    FEATURE_DIM_SAMPLE,
    VinvlPrediction,
    _columns,
    _json,
    _prediction,
    duplicate_id_error,
)

StrPath = str | os.PathLike


@dataclass(frozen=True)
class DetectorRow:
    """One image of a detector's ``predictions.tsv``."""

    prediction: VinvlPrediction
    features: Optional[np.ndarray] = None  # (N, D) float32 embedded appearance features
    scores_all: Optional[np.ndarray] = None  # (N, C + 1) float32 class scores

    @property
    def feature_dim(self) -> Optional[int]:
        return None if self.features is None else self.features.shape[1]


class ImageSizes:
    """``hw.tsv`` read whole: image key -> (height, width), with each key's line."""

    def __init__(self, path: StrPath):
        self.path = str(path)
        self._sizes: Dict[str, Tuple[int, int, int]] = {}
        with open(self.path, "rb") as handle:
            for line, raw in enumerate(handle, start=1):
                key, text = _columns(raw, self.path, line, ("image_key", "hw"))
                if key in self._sizes:
                    raise duplicate_id_error(self.path, line, key, self._sizes[key][2])
                height, width = _size(self.path, line, _json(text, self.path, line))
                self._sizes[key] = (height, width, line)

    def __len__(self) -> int:
        return len(self._sizes)

    def __contains__(self, key: str) -> bool:
        return key in self._sizes

    def size_of(self, image_id: str, path: StrPath, line: int) -> Tuple[int, int]:
        """(height, width) of the image of ``path``'s row ``line``; a FormatError naming that
        row and this file when ``hw.tsv`` has no row for it."""
        if image_id not in self._sizes:
            raise FormatError(
                path,
                "image_id",
                f"an image with a row in {self.path} (its height and width; {len(self)} rows)",
                image_id,
                line=line,
            )
        height, width, _ = self._sizes[image_id]
        return height, width


def _size(path: str, line: int, value) -> Tuple[int, int]:
    """(height, width) of one ``hw.tsv`` json: ``[{"height": H, "width": W}]``."""
    if not isinstance(value, list) or len(value) != 1 or not isinstance(value[0], dict):
        raise FormatError(
            path, "hw", 'a list of one object [{"height": H, "width": W}]', value, line=line
        )
    sizes = []
    for field in ("height", "width"):
        number = value[0].get(field)
        if isinstance(number, float) and number.is_integer():
            number = int(number)
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise FormatError(path, field, "an integer >= 1", number, line=line)
        sizes.append(number)
    return sizes[0], sizes[1]


def _decode(
    path: StrPath, line: int, field: str, blob, size: Optional[int], what: str
) -> np.ndarray:
    """One base64 float32 vector of ``size`` values (any size when None), finite."""
    if not isinstance(blob, str):
        raise FormatError(path, field, f"base64 of {what}", type(blob).__name__, line=line)
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(path, field, f"base64 of {what}", blob, line=line) from None
    if len(raw) % 4 or (size is not None and len(raw) != 4 * size) or not raw:
        expected = f"{size} float32 values ({what})" if size else f"float32 values ({what})"
        got = f"{len(raw) / 4:g} values" if len(raw) % 4 == 0 else f"{len(raw)} bytes"
        raise FormatError(path, field, expected, got, line=line)
    values = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.isfinite(values).all():
        raise FormatError(path, field, "finite values", "NaN or inf", line=line)
    return values


def _embedded(
    path: StrPath, line: int, objects: list, key: str, size: Optional[int], what: str
) -> Optional[np.ndarray]:
    """The (N, size) array of one embedded per-object field, None when no object has it."""
    present = [key in o for o in objects if isinstance(o, dict)]
    if not any(present):
        return None
    if not all(present):
        k = present.index(False)
        raise FormatError(
            path,
            f"objects[{k}].{key}",
            f"a '{key}' in every object (the others have one)",
            None,
            line=line,
        )
    rows = []
    for k, o in enumerate(objects):
        rows.append(_decode(path, line, f"objects[{k}].{key}", o[key], size, what))
        size = size or rows[0].size
    return np.stack(rows)


def parse_detector_row(
    raw: bytes,
    path: StrPath,
    line: int,
    sizes: Optional[ImageSizes] = None,
    labelmap: Optional[LabelMap] = None,
    feature_dim: Optional[int] = None,
    box_tolerance: float = BOX_TOLERANCE,
    with_features: bool = True,
) -> DetectorRow:
    """Parse and check one line of a raw or released ``predictions.tsv``.

    ``feature_dim`` is the D embedded features must have (None: whatever the row has, the
    same for every box); ``with_features=False`` leaves embedded vectors undecoded.
    """
    image_id, text = _columns(raw, path, line, ("image_id", "json"))
    record = _json(text, path, line)
    objects = record.get("objects") if isinstance(record, dict) else None
    if isinstance(objects, list):
        record = dict(record)
        if sizes is not None:
            height, width = sizes.size_of(image_id, path, line)
            for field, value in (("image_h", height), ("image_w", width)):
                if field in record and record[field] != value:
                    raise FormatError(
                        path, field, f"{value} (as in {sizes.path})", record[field], line=line
                    )
            record["image_h"], record["image_w"] = height, width
        elif "image_h" not in record and "image_w" not in record:
            raise FormatError(
                path,
                "image_h",
                "an integer >= 1 (a detector's raw output has no image sizes: give its hw.tsv)",
                None,
                line=line,
            )
        record["objects"] = [_named(o, k, path, line, labelmap) for k, o in enumerate(objects)]
    prediction = _prediction(path, line, record, image_id, True, box_tolerance)
    if not with_features:
        return DetectorRow(prediction)
    features = _embedded(
        path,
        line,
        objects,
        "feature",
        feature_dim,
        f"D = {feature_dim}" if feature_dim else "D appearance values",
    )
    columns = labelmap.num_columns if labelmap is not None else None
    scores = _embedded(
        path,
        line,
        objects,
        "scores_all",
        columns,
        f"{columns} class scores" if columns else "class scores",
    )
    return DetectorRow(prediction, features, scores)


def _named(obj, k: int, path: StrPath, line: int, labelmap: Optional[LabelMap]):
    """The object with its class as a name (an id goes through the label map)."""
    if not isinstance(obj, dict) or "class" not in obj:
        return obj
    cls = obj["class"]
    if labelmap is not None:
        return dict(obj, **{"class": labelmap.name_of(cls, path, line, f"objects[{k}].class")})
    if isinstance(cls, int) and not isinstance(cls, bool):
        raise FormatError(
            path,
            f"objects[{k}].class",
            "a class name (a class id needs the detector's label map)",
            cls,
            line=line,
        )
    return obj


def infer_embedded_feature_dim(path: StrPath, sample: int = FEATURE_DIM_SAMPLE) -> Optional[int]:
    """The most common D among the first ``sample`` rows whose objects embed features (the
    first object's vector; ties: the D seen first); None when no row has a readable one."""
    votes: Dict[int, int] = {}
    with open(path, "rb") as handle:
        for raw in handle:
            dim = _row_embedded_dim(raw)
            if dim is not None:
                votes[dim] = votes.get(dim, 0) + 1
                if sum(votes.values()) >= sample:
                    break
    return max(votes, key=votes.get) if votes else None


def _row_embedded_dim(raw: bytes) -> Optional[int]:
    _, tab, text = raw.partition(b"\t")
    try:
        record = json.loads(text) if tab else None
        blob = record["objects"][0]["feature"]
        size = len(base64.b64decode(blob, validate=True))
    except (ValueError, KeyError, IndexError, TypeError, binascii.Error):
        return None
    return size // 4 if size and size % 4 == 0 else None


def read_detector_rows(
    path: StrPath,
    sizes: Optional[ImageSizes] = None,
    labelmap: Optional[LabelMap] = None,
    feature_dim: Optional[int] = None,
) -> Iterator[DetectorRow]:
    """Stream a raw or released ``predictions.tsv``; D of embedded features is
    ``feature_dim`` or :func:`infer_embedded_feature_dim`'s."""
    feature_dim = feature_dim or infer_embedded_feature_dim(path)
    with open(path, "rb") as handle:
        for line, raw in enumerate(handle, start=1):
            yield parse_detector_row(raw, path, line, sizes, labelmap, feature_dim)
