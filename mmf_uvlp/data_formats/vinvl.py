"""VinVL detector output: ``predictions.tsv``, ``features.tsv`` and a simple jsonl.

- ``predictions.tsv``: ``<image_id>\\t<json>``, the json being
  ``{"image_h", "image_w", "num_boxes", "objects": [{"rect": [x1, y1, x2, y2],
  "class", "conf", "attributes", "attr_scores"}]}``.
- ``features.tsv``: ``<image_id>\\t<num_boxes>\\t<base64 float32 (num_boxes, D + 6)>``,
  the last 6 dims being x1/W, y1/H, x2/W, y2/H, w/W, h/H.
- ``detections.jsonl``: ``{"image_id", "image_h", "image_w", "objects": [{"rect",
  "class", "conf"}]}`` per line.

The project's one implementation of these rows: ``parse_predictions_row``,
``parse_detections_jsonl_row`` and ``parse_features_row`` take one line as read from the
file in binary mode and return the record or raise :class:`FormatError` naming file, line,
field and what was expected. A blank line, a non-UTF-8 line or a missing row is an error
too. The ``read_*`` readers stream files through them; ``mmf_uvlp.corpus.detections``
uses them with its skip-and-count policy. The detector's raw output (features embedded in the
objects, sizes in ``hw.tsv``) is read by ``mmf_uvlp.data_formats.vinvl_raw`` with these
checks.

The appearance size D of ``features.tsv`` is the caller's ``feature_dim`` when given, else
``infer_feature_dim``: the most common D among the first ``FEATURE_DIM_SAMPLE`` rows with
boxes (read from the base64 lengths; ties go to the D seen first), so one corrupt row,
the first one included, never sets the size the other rows are checked against.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from mmf_uvlp.errors import FormatError

GEOMETRY_DIMS = 6
FEATURE_DIM_SAMPLE = 100  # rows with boxes that vote on D when it is not configured
BOX_TOLERANCE = 1.0  # pixels a box may stick out of the image (detector rounding)

StrPath = str | os.PathLike


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

    @property
    def feature_dim(self) -> int:
        """D; 0 for a row without boxes read while D was unknown."""
        return self.features.shape[1] - GEOMETRY_DIMS


# ---------------------------------------------------------------- lines and fields
def _lines(path: StrPath) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as f:
        yield from enumerate(f, start=1)


def paired_rows(
    path: StrPath,
    features_path: StrPath | None = None,
) -> Iterator[tuple[int, bytes, bytes | None]]:
    """Stream ``(line, row, features row)``: the same-numbered lines of two files.

    The features row is ``b""`` past the end of ``features_path`` (the row parsers report it)
    and None without a ``features_path``; a ``features_path`` with more rows is an error.
    """
    line = 0
    with open(features_path, "rb") if features_path else contextlib.nullcontext() as feats:
        for line, raw in _lines(path):
            yield line, raw, feats.readline() if feats else None
        if feats and feats.readline():
            raise FormatError(
                features_path, "row", f"{line} rows (as many as {path})", "more rows", line=line + 1
            )


def _text(raw: bytes, path: StrPath, line: int) -> str:
    """One line's text without its line ending; end of file, bad UTF-8 or blank: an error."""
    if not raw:
        raise FormatError(path, "row", "a row", "end of file", line=line)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(path, "encoding", "UTF-8", str(e), line=line) from None
    text = text.rstrip("\r\n")
    if not text.strip():
        raise FormatError(path, "row", "a non-empty row", "an empty line", line=line)
    return text


def is_blank(raw: bytes) -> bool:
    """Whether a line (as read in binary mode) holds nothing but whitespace."""
    return not raw.strip()


def row_image_id(raw: bytes, jsonl: bool = False) -> str | None:
    """The image id of a row, read without checking the rest; None when it cannot be read.

    A tsv row's first column, or a ``detections.jsonl`` record's ``image_id`` (an int id
    becomes str, as in the parsers).
    """
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        return None
    if not jsonl:
        image_id, tab, _ = text.partition("\t")
        return image_id if tab and image_id else None
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None
    image_id = record.get("image_id") if isinstance(record, dict) else None
    if isinstance(image_id, int) and not isinstance(image_id, bool):
        image_id = str(image_id)
    return image_id if isinstance(image_id, str) and image_id else None


def _row_feature_dim(raw: bytes) -> int | None:
    """D of a ``features.tsv`` row from its box count and base64 length; None if unclear."""
    columns = raw.strip().split(b"\t")
    if len(columns) != 3:
        return None
    try:
        num_boxes = int(columns[1])
    except ValueError:
        return None
    blob = columns[2]
    if num_boxes <= 0 or len(blob) % 4:
        return None
    size = len(blob) // 4 * 3 - (len(blob) - len(blob.rstrip(b"="))) if blob else 0
    values, rest = divmod(size, 4)
    width, uneven = divmod(values, num_boxes)
    if rest or uneven or width <= GEOMETRY_DIMS:
        return None
    return width - GEOMETRY_DIMS


def infer_feature_dim(path: StrPath, sample: int = FEATURE_DIM_SAMPLE) -> int | None:
    """The most common D among the first ``sample`` rows with boxes (ties: the D seen
    first); None when no row with boxes has a readable size."""
    votes: dict[int, int] = {}
    with open(path, "rb") as f:
        for raw in f:
            dim = _row_feature_dim(raw)
            if dim is not None:
                votes[dim] = votes.get(dim, 0) + 1
                if sum(votes.values()) >= sample:
                    break
    return max(votes, key=votes.get) if votes else None  # dicts keep first-seen order


def _columns(raw: bytes, path: StrPath, line: int, names: tuple[str, ...]) -> list[str]:
    columns = _text(raw, path, line).split("\t")
    if len(columns) != len(names):
        raise FormatError(
            path,
            "columns",
            f"{len(names)} tab-separated columns ({', '.join(names)})",
            len(columns),
            line=line,
        )
    if not columns[0]:
        raise FormatError(path, "image_id", "a non-empty image id", columns[0], line=line)
    return columns


def _json(text: str, path: StrPath, line: int):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(
            path, "json", f"valid json ({e.msg} at char {e.pos})", text, line=line
        ) from None


def _int(path: StrPath, line: int, record: dict, field: str, minimum: int) -> int:
    value = record.get(field)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FormatError(path, field, f"an integer >= {minimum}", value, line=line)
    return value


def _number(
    path: StrPath, line: int, value, field: str, low: float | None = None, high: float | None = None
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FormatError(path, field, "a finite number", value, line=line)
    if low is not None and not low <= value <= high:
        raise FormatError(path, field, f"a number in [{low:g}, {high:g}]", value, line=line)
    return float(value)


# ---------------------------------------------------------------- detection rows
def _object(
    path: StrPath,
    line: int,
    k: int,
    raw,
    w: int,
    h: int,
    with_attributes: bool,
    box_tolerance: float,
) -> VinvlObject:
    prefix = f"objects[{k}]"
    if not isinstance(raw, dict):
        raise FormatError(path, prefix, "a json object", raw, line=line)
    rect = raw.get("rect")
    if not isinstance(rect, list) or len(rect) != 4:
        raise FormatError(path, f"{prefix}.rect", "a list [x1, y1, x2, y2]", rect, line=line)
    x1, y1, x2, y2 = (_number(path, line, v, f"{prefix}.rect") for v in rect)
    if x2 < x1 or y2 < y1:
        raise FormatError(path, f"{prefix}.rect", "x1 <= x2 and y1 <= y2", rect, line=line)
    tol = box_tolerance
    if x1 < -tol or y1 < -tol or x2 > w + tol or y2 > h + tol:
        raise FormatError(
            path, f"{prefix}.rect", f"a box inside the {w}x{h} image", rect, line=line
        )
    cls = raw.get("class")
    if not isinstance(cls, str) or not cls.strip():
        raise FormatError(path, f"{prefix}.class", "a non-empty string", cls, line=line)
    conf = _number(path, line, raw.get("conf"), f"{prefix}.conf", 0.0, 1.0)
    attributes: tuple[str, ...] = ()
    scores: tuple[float, ...] = ()
    if with_attributes:
        raw_attributes = raw.get("attributes", [])
        if not isinstance(raw_attributes, list) or not all(
            isinstance(a, str) for a in raw_attributes
        ):
            raise FormatError(
                path, f"{prefix}.attributes", "a list of strings", raw_attributes, line=line
            )
        attributes = tuple(raw_attributes)
        raw_scores = raw.get("attr_scores", [])
        if not isinstance(raw_scores, list) or len(raw_scores) != len(attributes):
            raise FormatError(
                path,
                f"{prefix}.attr_scores",
                f"a list of {len(attributes)} scores",
                raw_scores,
                line=line,
            )
        scores = tuple(
            _number(path, line, s, f"{prefix}.attr_scores", 0.0, 1.0) for s in raw_scores
        )
    return VinvlObject((x1, y1, x2, y2), cls.strip(), conf, attributes, scores)


def _prediction(
    path: StrPath,
    line: int,
    record,
    image_id: str | None,
    with_attributes: bool,
    box_tolerance: float,
) -> VinvlPrediction:
    """Check one image's json; ``image_id`` None: the record's own (an int id becomes str)."""
    if not isinstance(record, dict):
        raise FormatError(path, "json", "a json object", type(record).__name__, line=line)
    if image_id is None:
        image_id = record.get("image_id")
        if isinstance(image_id, int) and not isinstance(image_id, bool):
            image_id = str(image_id)
        if not isinstance(image_id, str) or not image_id:
            raise FormatError(path, "image_id", "a non-empty string", image_id, line=line)
    h = _int(path, line, record, "image_h", 1)
    w = _int(path, line, record, "image_w", 1)
    objects = record.get("objects")
    if not isinstance(objects, list):
        raise FormatError(path, "objects", "a list", type(objects).__name__, line=line)
    if "num_boxes" in record and _int(path, line, record, "num_boxes", 0) != len(objects):
        raise FormatError(
            path, "num_boxes", f"len(objects) = {len(objects)}", record["num_boxes"], line=line
        )
    parsed = tuple(
        _object(path, line, k, o, w, h, with_attributes, box_tolerance)
        for k, o in enumerate(objects)
    )
    return VinvlPrediction(image_id, h, w, parsed)


def parse_predictions_row(
    raw: bytes,
    path: StrPath,
    line: int,
    box_tolerance: float = BOX_TOLERANCE,
) -> VinvlPrediction:
    """Parse and check one ``predictions.tsv`` line (attributes included)."""
    image_id, text = _columns(raw, path, line, ("image_id", "json"))
    return _prediction(path, line, _json(text, path, line), image_id, True, box_tolerance)


def parse_detections_jsonl_row(
    raw: bytes,
    path: StrPath,
    line: int,
    box_tolerance: float = BOX_TOLERANCE,
) -> VinvlPrediction:
    """Parse and check one ``detections.jsonl`` line (no attributes)."""
    record = _json(_text(raw, path, line), path, line)
    return _prediction(path, line, record, None, False, box_tolerance)


# ---------------------------------------------------------------- feature rows
def decode_features(
    path: StrPath,
    line: int,
    num_boxes: int,
    blob: str,
    feature_dim: int | None,
) -> np.ndarray:
    """Decode and check one ``features.tsv`` payload into (num_boxes, D + 6) float32.

    D is ``feature_dim``, or inferred from the size when None (0 for a row without boxes).
    """
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(path, "features", "base64 of a float32 array", blob, line=line) from None
    if len(raw) % 4:
        raise FormatError(
            path, "features", "a whole number of float32 values", f"{len(raw)} bytes", line=line
        )
    values = np.frombuffer(raw, dtype="<f4")
    if feature_dim is not None:
        width = feature_dim + GEOMETRY_DIMS
    elif num_boxes:
        width = values.size // num_boxes
    else:
        width = GEOMETRY_DIMS
    if values.size != num_boxes * width or (num_boxes and width <= GEOMETRY_DIMS):
        dim = "D" if feature_dim is None else str(feature_dim)
        raise FormatError(
            path,
            "features",
            f"{num_boxes} x ({dim} + {GEOMETRY_DIMS}) float32 values",
            f"{values.size} values",
            line=line,
        )
    features = values.reshape(num_boxes, width).astype(np.float32)
    if not np.isfinite(features).all():
        raise FormatError(path, "features", "finite values", "NaN or inf", line=line)
    geometry = features[:, -GEOMETRY_DIMS:]
    if (geometry < -1e-3).any() or (geometry > 1 + 1e-3).any():
        raise FormatError(
            path,
            "features",
            "geometry dims in [0, 1] (box inside the image)",
            geometry.min(initial=0.0) if (geometry < 0).any() else geometry.max(initial=0.0),
            line=line,
        )
    return features


def parse_features_row(
    raw: bytes,
    path: StrPath,
    line: int,
    feature_dim: int | None = None,
    match: VinvlPrediction | None = None,
) -> VinvlFeatures:
    """Parse and check one ``features.tsv`` line; D is inferred when ``feature_dim`` is None.

    With ``match`` the row must belong to that detections row: same image id (field
    ``image_id``: the files are out of step) and box count (field ``num_boxes``).
    """
    image_id, num_boxes_text, blob = _columns(raw, path, line, ("image_id", "num_boxes", "base64"))
    if match is not None and image_id != match.image_id:
        raise FormatError(
            path,
            "image_id",
            f"{match.image_id!r} (the same row order as the detections)",
            image_id,
            line=line,
        )
    try:
        num_boxes = int(num_boxes_text)
    except ValueError:
        num_boxes = -1
    if num_boxes < 0:
        raise FormatError(path, "num_boxes", "an integer >= 0", num_boxes_text, line=line)
    if match is not None and num_boxes != match.num_boxes:
        raise FormatError(
            path, "num_boxes", f"{match.num_boxes} (boxes in the detections)", num_boxes, line=line
        )
    return VinvlFeatures(image_id, decode_features(path, line, num_boxes, blob, feature_dim))


def duplicate_id_error(
    path: StrPath, line: int, image_id: str, first_line: int, first_path: StrPath | None = None
) -> FormatError:
    """The error of a second row for one image: names both lines."""
    return FormatError(
        path,
        "image_id",
        f"an image id not used before ({first_path or path}:{first_line} has it already)",
        image_id,
        line=line,
    )


# ---------------------------------------------------------------- streaming readers
def read_predictions(path: StrPath) -> Iterator[VinvlPrediction]:
    """Stream a VinVL ``predictions.tsv``."""
    for line, raw in _lines(path):
        yield parse_predictions_row(raw, path, line)


def read_detections_jsonl(path: StrPath) -> Iterator[VinvlPrediction]:
    """Stream the simple ``detections.jsonl`` (no attributes)."""
    for line, raw in _lines(path):
        yield parse_detections_jsonl_row(raw, path, line)


def read_features(path: StrPath, feature_dim: int | None = None) -> Iterator[VinvlFeatures]:
    """Stream a VinVL ``features.tsv``; D is ``feature_dim`` or ``infer_feature_dim``'s."""
    feature_dim = feature_dim or infer_feature_dim(path)
    for line, raw in _lines(path):
        yield parse_features_row(raw, path, line, feature_dim)


def read_vinvl(
    predictions_path: StrPath,
    features_path: StrPath,
    feature_dim: int | None = None,
) -> Iterator[tuple[VinvlPrediction, VinvlFeatures]]:
    """Stream the two files together; rows must list the same images in the same order.

    D is ``feature_dim`` or ``infer_feature_dim``'s.
    """
    feature_dim = feature_dim or infer_feature_dim(features_path)
    for line, raw, features_raw in paired_rows(predictions_path, features_path):
        prediction = parse_predictions_row(raw, predictions_path, line)
        yield (
            prediction,
            parse_features_row(features_raw, features_path, line, feature_dim, prediction),
        )


class FeatureTsvIndex:
    """Random access to ``features.tsv`` rows by image id (one streaming pass to index).

    D is ``feature_dim`` or ``infer_feature_dim``'s.
    """

    def __init__(self, path: StrPath, feature_dim: int | None = None):
        self.path = str(path)
        self.feature_dim = feature_dim or infer_feature_dim(self.path)
        self._offsets: dict[str, tuple[int, int]] = {}
        with open(self.path, "rb") as f:
            for line, raw in enumerate(iter(f.readline, b""), start=1):
                image_id = _text(raw, self.path, line).split("\t", 1)[0]
                if not image_id:
                    raise FormatError(
                        self.path, "image_id", "a non-empty image id", image_id, line=line
                    )
                if image_id in self._offsets:
                    raise duplicate_id_error(self.path, line, image_id, self._offsets[image_id][1])
                self._offsets[image_id] = (f.tell() - len(raw), line)

    def __len__(self) -> int:
        return len(self._offsets)

    def __contains__(self, image_id: str) -> bool:
        return image_id in self._offsets

    def keys(self) -> list[str]:
        return list(self._offsets)

    def __getitem__(self, image_id: str) -> VinvlFeatures:
        if image_id not in self._offsets:
            raise KeyError(f"{image_id!r} not in {self.path}")
        offset, line = self._offsets[image_id]
        with open(self.path, "rb") as f:
            f.seek(offset)
            return parse_features_row(f.readline(), self.path, line, self.feature_dim)
