"""Shared base of the pre-training datasets read from the weakly aligned corpus.

A dataset turns one annotation item plus its image's region features into the raw
input of its masking processor (``processors.masking_processor`` in the dataset
config), which produces the μ-VLA batch fields.
"""

from __future__ import annotations

import os
from typing import Any, Dict

import torch

import mmf_uvlp
from mmf.common.sample import Sample
from mmf.datasets.mmf_dataset import MMFDataset
from mmf.datasets.mmf_dataset_builder import MMFDatasetBuilder
from mmf_uvlp.datasets.databases.aligned_corpus import AlignedCorpusDatabase
from mmf_uvlp.training_progress import register_train_samples


class WeaklyAlignedDataset(MMFDataset):
    """An MMF dataset over the aligned corpus; subclasses choose ``unit`` and the raw input."""

    unit = "image"

    def __init__(self, dataset_name: str, config: Any, dataset_type: str, index: int, *args, **kwargs):
        super().__init__(dataset_name, config, dataset_type, index, *args, **kwargs)
        if not self._use_features:
            raise ValueError(f"dataset_config.{dataset_name}.use_features must be true")
        if dataset_type == "train":
            register_train_samples(dataset_name, len(self.annotation_db))

    def _build_annotation_db(self) -> AlignedCorpusDatabase:
        path = self._get_path_based_on_index(self.config, "annotations", self._index)
        holdout = int(self.config.get("holdout_every", 0))
        top_k = self.config.get("top_k", None)
        return AlignedCorpusDatabase(
            path, self.unit, self.dataset_type, holdout, None if top_k is None else int(top_k)
        )

    def image_input(self, item: Dict[str, Any]) -> Dict[str, Any]:
        """The raw image keys of the masking processors, read by MMF's FeaturesDatabase."""
        features = self.features_db.from_path(item["feature_path"])
        info = features["image_info_0"]
        count = min(int(info["max_features"]), features["image_feature_0"].shape[0])
        boxes = torch.as_tensor(info["bbox"], dtype=torch.float32)[:count]
        if len(item["region_labels"]) < count or boxes.shape[0] < count:
            raise ValueError(
                f"{self.dataset_name}: image {item['image_id']} has {len(item['region_labels'])} "
                f"regions in the corpus but {count} feature rows in {item['feature_path']}: "
                "the corpus and the features come from different detector outputs"
            )
        return {
            "features": features["image_feature_0"][:count],
            "boxes": boxes,
            "image_width": info["image_width"],
            "image_height": info["image_height"],
            "region_classes": torch.as_tensor(info["objects"], dtype=torch.long)[:count],
            "region_labels": item["region_labels"][:count],
        }

    def raw_input(self, idx: int) -> Dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, idx: int) -> Sample:
        sample = Sample(self.masking_processor(self.raw_input(idx)))
        sample.image_id = self.annotation_db[idx]["image_id"]
        return sample


class WeaklyAlignedBuilder(MMFDatasetBuilder):
    """Builder of a pre-training dataset; its defaults are configs/datasets/<NAME>/defaults.yaml."""

    NAME = ""
    DATASET_CLASS = WeaklyAlignedDataset

    def __init__(self, *args, **kwargs):
        super().__init__(self.NAME, self.DATASET_CLASS, *args, **kwargs)

    @classmethod
    def config_path(cls) -> str:
        root = os.path.dirname(os.path.dirname(os.path.abspath(mmf_uvlp.__file__)))
        return os.path.join(root, "configs", "datasets", cls.NAME, "defaults.yaml")

    def build(self, config: Any, dataset_type: str = "train", *args, **kwargs) -> None:
        """Nothing to download: the corpus comes from tools/build_corpus.py."""

    def update_registry_for_model(self, config: Any) -> None:
        """Nothing to tell the model: the masking processors fix every size."""
