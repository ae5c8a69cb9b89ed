"""Stage 1: read detector output, validated, one image at a time.

Inputs (see docs/corpus.md): VinVL ``predictions.tsv`` or the simple ``detections.jsonl``,
optionally with VinVL ``features.tsv`` in the same row order. Every row is parsed and checked
by ``mmf_uvlp.data_formats.vinvl`` (the project's one implementation of these formats); a
features row must also name the same image and box count as its detections row.

An image's *position* is its 0-based line index in the detections file (blank and bad lines
count too), so that chunking and sharding never depend on what was skipped. ``DetectionReader``
yields ``(position, source, Detection)`` for good rows and ``(position, source, FormatError)``
for bad ones; the caller decides (``ErrorPolicy``) whether to stop or count. A bad row drops
the whole image (a dropped box would shift the alignment between boxes and feature rows). A
features row out of step (other image id) or extra features rows are always fatal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Tuple, Union

from mmf_uvlp.corpus.errors import FormatError
from mmf_uvlp.data_formats.vinvl import (
    VinvlPrediction, paired_rows, parse_detections_jsonl_row, parse_features_row,
    parse_predictions_row,
)


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

    @classmethod
    def from_prediction(cls, prediction: VinvlPrediction, position: int) -> "Detection":
        """The corpus's view of a parsed detections row."""
        objects = prediction.objects
        return cls(prediction.image_id, float(prediction.image_w), float(prediction.image_h),
                   [list(o.rect) for o in objects], [o.cls for o in objects],
                   [o.conf for o in objects], position)


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
        parse = parse_predictions_row if self.kind == "predictions" else \
            parse_detections_jsonl_row
        for line, raw, features_raw in paired_rows(self.path, self.features):
            position, self.positions = line - 1, line
            if self._wanted is not None and not self._wanted(position):
                continue
            try:
                prediction = parse(raw, self.path, line, self.box_tolerance)
            except FormatError as err:
                yield position, self.kind, err
                continue
            detection = Detection.from_prediction(prediction, position)
            if features_raw is not None and self.validate_features:
                try:
                    row = parse_features_row(features_raw, self.features, line,
                                             self.feature_dim, match=prediction)
                except FormatError as err:
                    if err.field == "image_id":
                        raise  # rows out of step: nothing after this can be trusted
                    yield position, "features", err
                    continue
                detection.feature_dim = row.feature_dim
                # the first good row with boxes fixes D for the rest of the file
                self.feature_dim = self.feature_dim or row.feature_dim or None
            yield position, self.kind, detection

    _wanted: Optional[Callable[[int], bool]] = None

    def select(self, wanted: Optional[Callable[[int], bool]]) -> "DetectionReader":
        self._wanted = wanted
        return self
