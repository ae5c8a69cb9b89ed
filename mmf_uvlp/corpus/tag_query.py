"""Stage 2: an image's tag query, the string that retrieves its sentences.

Rules (the paper's and the reference code's, every number configurable in ``tags.*``):
keep detections with ``conf >= min_conf`` and box area ``>= min_area_ratio`` of the image;
de-duplicate labels; order labels by salience

    salience(label) = count_weight * count(label) / total + area_weight * max_area(label) / (W*H)

where ``count`` is the number of kept detections with that label, ``total`` the number kept,
``max_area`` the area of its largest kept box. Ties keep the detector's order (first
occurrence). Labels are joined with ``separator`` ("wall couch sofa woman").
"""

from __future__ import annotations

from typing import List, Sequence

from mmf_uvlp.corpus.config import TagsConfig
from mmf_uvlp.corpus.detection import Detection


def box_area(box: Sequence[float]) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def kept_regions(detection: Detection, rule: TagsConfig) -> List[int]:
    """Indices of the detections that pass the confidence and area filters."""
    image_area = detection.image_w * detection.image_h
    return [
        i
        for i, (box, conf) in enumerate(zip(detection.boxes, detection.confs))
        if conf >= rule.min_conf and box_area(box) >= rule.min_area_ratio * image_area
    ]


def ranked_tags(detection: Detection, rule: TagsConfig) -> List[str]:
    """De-duplicated labels of the kept detections, most salient first."""
    kept = kept_regions(detection, rule)
    if not kept:
        return []
    image_area = detection.image_w * detection.image_h
    counts, largest, first = {}, {}, {}
    for order, i in enumerate(kept):
        label = detection.labels[i].lower() if rule.lowercase else detection.labels[i]
        counts[label] = counts.get(label, 0) + 1
        largest[label] = max(largest.get(label, 0.0), box_area(detection.boxes[i]))
        first.setdefault(label, order)
    total = len(kept)

    def salience(label: str) -> float:
        return (
            rule.count_weight * counts[label] / total
            + rule.area_weight * largest[label] / image_area
        )

    labels = sorted(counts, key=lambda label: (-salience(label), first[label]))
    if rule.max_tags is not None:
        labels = labels[: rule.max_tags]
    return labels


def tag_query(detection: Detection, rule: TagsConfig) -> str:
    return rule.separator.join(ranked_tags(detection, rule))
