"""One image's detections as the corpus pipeline reads them (stage 1, :mod:`.detections`),
and as the tag query ranks them (stage 2, :mod:`.tag_query`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from mmf_uvlp.data_formats.vinvl import VinvlPrediction


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
        return cls(
            prediction.image_id,
            float(prediction.image_w),
            float(prediction.image_h),
            [list(o.rect) for o in objects],
            [o.cls for o in objects],
            [o.conf for o in objects],
            position,
        )
