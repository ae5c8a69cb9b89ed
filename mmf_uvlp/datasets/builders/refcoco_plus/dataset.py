"""RefCOCO+ samples: one per referring-expression sentence, scored over detected proposals.

Annotations are a refer folder (``<folder>/refs(<split_by>).p`` + ``instances.json``, read
with :class:`mmf_uvlp.data_formats.refer.Refer`); ``refer_splits.<dataset type>`` names the
refer splits (train / val / testA / testB) a dataset type reads. The proposals are the
regions of the image's MMF features (LMDB or npy folder, read by MMF's own
``FeaturesDatabase``; ``COCO_train2014_<id>.jpg`` -> ``COCO_train2014_<id>.npy``).
An image whose file name leads outside the features or is not among them is an error
naming ``instances.json`` and the image when the dataset is built.

Every expression is kept, also when no proposal overlaps its gold box by IoU >= 0.5: its
``targets`` are all 0 and it can only count as a miss.

Sample fields (R = ``max_features``, L = ``max_seq_length``):

- text (``bert_tokenizer``): ``input_ids``, ``input_mask``, ``segment_ids`` (L,), ``tokens``,
  ``text``, ``lm_label_ids``;
- visual, as MMF's vqa2 with ``return_features_info: true``: ``image_feature_0`` (R, D),
  ``image_info_0`` (``max_features`` = number of real regions, ``bbox`` (n, 4) pixels,
  ``image_width``, ``image_height``, and the feature file's other fields); plus
  ``region_boxes`` (R, 5) ``[x1/W, y1/H, x2/W, y2/H, area/(W*H)]`` and ``region_mask`` (R,);
- targets: ``targets`` (R,) 1.0 where IoU(proposal, gold) >= 0.5, ``gold_box`` (4,) and
  ``proposal_boxes`` (R, 4) ``[x1, y1, x2, y2]`` pixels, ``ref_id``, ``sentence_id``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch
from mmf.common.sample import Sample
from mmf.datasets.mmf_dataset import MMFDataset
from mmf.utils.general import get_absolute_path
from torch.utils.data import Dataset

from mmf_uvlp.data_formats.mmf_features import FeatureNames
from mmf_uvlp.data_formats.refer import REFER_SPLITS, Refer
from mmf_uvlp.datasets.annotation_db import AnnotationDbHook
from mmf_uvlp.errors import FormatError, UserConfigError
from mmf_uvlp.utils.boxes import MATCH_IOU, iou, normalized_boxes
from mmf_uvlp.utils.safe_loading import stays_inside, unsafe_name

REQUIRED_INFO = ("bbox", "image_width", "image_height", "max_features")


class ReferAnnotationDatabase(Dataset):
    """The sentences of some refer splits of one refer folder, as plain dicts."""

    def __init__(
        self,
        folder: str,
        split_by: str,
        splits: Sequence[str],
        features: Optional[FeatureNames] = None,
    ):
        refer = Refer(os.path.dirname(folder), os.path.basename(folder), split_by)
        self.path = str(refer.refs_path)
        self.data: list[dict[str, Any]] = []
        checked: set[str] = set()
        for split in splits:
            expressions = list(refer.expressions(split))
            if not expressions:
                raise ValueError(f"{self.path}: no referring expressions of split {split!r}")
            for e in expressions:
                feature_path = os.path.splitext(e.image_file)[0] + ".npy"
                if feature_path not in checked:
                    _check_feature_path(feature_path, refer.instances_path, e.image_id, features)
                    checked.add(feature_path)
                self.data.append(
                    {
                        "ref_id": e.ref_id,
                        "sent_id": e.sent_id,
                        "split": e.split,
                        "sentence": e.sentence,
                        "image_id": e.image_id,
                        "feature_path": feature_path,
                        "image_width": e.image_width,
                        "image_height": e.image_height,
                        "gold_box": list(e.box),
                    }
                )

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return self.data[idx]


def _check_feature_path(
    feature_path: str, instances: os.PathLike, image_id: int, features: Optional[FeatureNames]
) -> None:
    """An image's ``file_name`` names a feature file inside the features (and, given
    ``features``, one of its images), refused at build naming the instances file."""
    reason = unsafe_name(feature_path)
    if reason is not None:
        raise FormatError(
            instances,
            "images.file_name",
            stays_inside("the features", reason),
            feature_path,
            key=f"image {image_id}",
        )
    if features is not None:
        features.check(feature_path, instances, "images.file_name", key=f"image {image_id}")


class RefCOCOPlusDataset(AnnotationDbHook, MMFDataset):
    """RefCOCO+ for MMF (``dataset_name`` is the registered builder's name)."""

    def __init__(
        self,
        config: Any,
        dataset_type: str,
        index: int,
        dataset_name: str = "refcoco_plus",
        *args: Any,
        **kwargs: Any,
    ):
        super().__init__(dataset_name, config, dataset_type, index, *args, **kwargs)
        if not self._use_features or not config.get("return_features_info", False):
            raise UserConfigError(
                f"dataset_config.{dataset_name}: RefCOCO+ scores detected regions; set "
                f"use_features: true and return_features_info: true (got "
                f"{self._use_features}, {config.get('return_features_info', False)})"
            )

    def build_annotation_db(self) -> ReferAnnotationDatabase:
        folder = self._get_path_based_on_index(self.config, "annotations", self._index)
        key = f"dataset_config.{self.dataset_name}.refer_splits.{self.dataset_type}"
        splits = self.config.get("refer_splits", {}).get(self.dataset_type)
        if not splits or isinstance(splits, str) or any(s not in REFER_SPLITS for s in splits):
            raise UserConfigError(
                f"{key}: expected a list of refer splits from {list(REFER_SPLITS)}, got {splits!r}"
            )
        return ReferAnnotationDatabase(
            get_absolute_path(folder),
            self.config.get("split_by", "unc"),
            list(splits),
            self.feature_names(),
        )

    def __getitem__(self, idx: int) -> Sample:
        item = self.annotation_db[idx]
        sample = Sample()
        sample.update(self.text_processor({"text": item["sentence"]}))

        features = self.features_db[idx]
        info = dict(features["image_info_0"])  # a copy: MMF may cache the reader's dict
        missing = [k for k in REQUIRED_INFO if k not in info]
        if missing:
            raise ValueError(
                f"features of {item['feature_path']} in {self.features_db.paths}: "
                f"info lacks {missing}"
            )
        if (info["image_width"], info["image_height"]) != (
            item["image_width"],
            item["image_height"],
        ):
            raise ValueError(
                f"features of {item['feature_path']}: image size "
                f"{info['image_width']}x{info['image_height']}, but the refer instances give "
                f"{item['image_width']}x{item['image_height']} (proposal boxes must be in "
                f"the pixels of the annotated image)"
            )
        feature = features["image_feature_0"]  # (R, D), zero-padded by MMF's reader
        regions = feature.size(0)
        # MMF's reader truncates the features to R but reports the file's region count.
        count = min(int(info["max_features"]), regions)
        boxes = torch.as_tensor(np.asarray(info["bbox"], dtype=np.float32)[:count])  # (n, 4)
        info["bbox"] = boxes.numpy()
        info["max_features"] = torch.tensor(count, dtype=torch.long)
        sample.image_feature_0 = feature
        sample.image_info_0 = info

        width, height = item["image_width"], item["image_height"]
        gold = torch.tensor(item["gold_box"], dtype=torch.float32)  # (4,)
        proposal_boxes = torch.zeros(regions, 4)
        proposal_boxes[:count] = boxes
        region_boxes = torch.zeros(regions, 5)
        region_boxes[:count] = normalized_boxes(boxes, width, height)
        region_mask = torch.zeros(regions, dtype=torch.long)
        region_mask[:count] = 1
        targets = torch.zeros(regions)
        targets[:count] = (iou(boxes, gold.view(1, 4)).view(-1) >= MATCH_IOU).float()

        sample.region_boxes = region_boxes
        sample.region_mask = region_mask
        sample.targets = targets
        sample.gold_box = gold
        sample.proposal_boxes = proposal_boxes
        sample.ref_id = torch.tensor(item["ref_id"], dtype=torch.long)
        sample.sentence_id = torch.tensor(item["sent_id"], dtype=torch.long)
        return sample

    def format_for_prediction(self, report: Any) -> list[dict[str, Any]]:
        """One prediction per expression (``evaluation.predict=true``): the top-scored
        proposal's pixel box and whether it hits the gold box (IoU >= 0.5)."""
        scores = report.scores.masked_fill(report.region_mask == 0, float("-inf"))  # (B, R)
        best = scores.argmax(dim=1)
        rows = torch.arange(best.numel())
        boxes = report.proposal_boxes[rows, best]  # (B, 4)
        overlaps = iou(boxes.unsqueeze(1), report.gold_box.unsqueeze(1)).view(-1)  # (B,)
        return [
            {
                "ref_id": int(ref),
                "sentence_id": int(sentence),
                "box": box.tolist(),
                "correct": bool(overlap >= MATCH_IOU),
            }
            for ref, sentence, box, overlap in zip(
                report.ref_id, report.sentence_id, boxes, overlaps
            )
        ]
