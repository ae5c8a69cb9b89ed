"""The pre-training image pool as an MMF annotation database, read from the detector's output.

For the baselines that use the images without the weakly aligned corpus (Aligned VLP,
random pairs, U-VisualBERT's image-only batches). ``path``: a VinVL ``predictions.tsv``
or a ``detections.jsonl`` (:mod:`mmf_uvlp.data_formats.vinvl`). One item per image:

- ``image_id``, ``position`` (its 0-based line), ``feature_path`` (``feature_key_template``
  formatted with the image id, plus ``.npy``: the name MMF's FeaturesDatabase resolves in
  an LMDB or a ``.npy`` folder), ``region_labels`` (the detector's tag of every region,
  in file order, the order of the feature rows);
- with ``captions`` (a ``captions_gt.tsv``: image_id<TAB>caption), ``caption``: the
  image's own caption; every image of the split must have one.

Every image's feature name must stay inside the features folder (no absolute path, no
``..``) and, given ``features``, be one of its images: an error naming the detections file
and line when the dataset is built.

Split: as the aligned corpus's: images whose position is a multiple of ``holdout_every``
form the val/test split, all others the train split; 0 = no hold-out.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Optional

from torch.utils.data import Dataset

from mmf_uvlp.data_formats.mmf_features import FeatureNames
from mmf_uvlp.data_formats.text import read_captions
from mmf_uvlp.data_formats.vinvl import VinvlPrediction, read_detections_jsonl, read_predictions
from mmf_uvlp.errors import FormatError
from mmf_uvlp.utils.safe_loading import stays_inside, unsafe_name


def read_detections(path: str) -> Iterator[VinvlPrediction]:
    """Stream a ``predictions.tsv`` (``.tsv``) or a ``detections.jsonl`` (``.jsonl``)."""
    if path.endswith(".tsv"):
        return read_predictions(path)
    if path.endswith(".jsonl"):
        return read_detections_jsonl(path)
    raise ValueError(
        f"image pool {path!r}: expected a VinVL predictions .tsv or a detections .jsonl file"
    )


class ImagePoolDatabase(Dataset):
    """Images of one detections file (``dataset_type``'s split), optionally with captions."""

    def __init__(
        self,
        path: str,
        dataset_type: str,
        holdout_every: int = 0,
        captions: Optional[str] = None,
        feature_key_template: str = "{image_id}",
        features: Optional[FeatureNames] = None,
    ):
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"image pool {path!r} does not exist: point dataset_config.<name>.annotations at "
                "the detector's predictions.tsv (or detections.jsonl)"
            )
        if holdout_every < 0:
            raise ValueError(f"image pool: holdout_every must be >= 0, got {holdout_every}")
        self.path = path
        own = dict(read_captions(captions)) if captions is not None else None
        self.items: List[Dict[str, Any]] = []
        for position, prediction in enumerate(read_detections(path)):
            held_out = holdout_every > 0 and position % holdout_every == 0
            if holdout_every > 0 and held_out == (dataset_type == "train"):
                continue
            feature_path = feature_key_template.format(image_id=prediction.image_id) + ".npy"
            _check_feature_path(feature_path, path, position + 1, features)
            item = {
                "image_id": prediction.image_id,
                "position": position,
                "feature_path": feature_path,
                "region_labels": [obj.cls for obj in prediction.objects],
            }
            if own is not None:
                if prediction.image_id not in own:
                    raise ValueError(
                        f"{captions}: no caption of image {prediction.image_id!r} "
                        f"(line {position + 1} of {path})"
                    )
                item["caption"] = own[prediction.image_id]
            self.items.append(item)
        if not self.items:
            raise ValueError(
                f"image pool {path!r}: no images for the {dataset_type} split "
                f"(holdout_every={holdout_every})"
            )

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, idx: int) -> Dict[str, Any]:
        return self.items[idx]


def _check_feature_path(
    feature_path: str, path: str, line: int, features: Optional[FeatureNames]
) -> None:
    """An image's feature name stays inside the features (and, given ``features``, is one
    of its images): refused at build, naming the detections file and line."""
    reason = unsafe_name(feature_path)
    if reason is not None:
        raise FormatError(
            path,
            "image_id",
            stays_inside("the features (through feature_key_template)", reason),
            feature_path[: -len(".npy")],
            line=line,
        )
    if features is not None:
        features.check(feature_path, path, "image_id", line=line)
