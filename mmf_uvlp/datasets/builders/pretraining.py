"""Shared base of the pre-training datasets (μ-VLA's and the baselines').

A dataset turns one annotation item into the raw input of its masking processor
(``processors.masking_processor`` in the dataset config), which produces the uvla batch
fields. :class:`RegionsDataset` adds the image side: an item's region features, boxes and
detector classes, read by MMF's FeaturesDatabase (LMDB or ``.npy`` folder); an image whose
features hold another number of regions than its record lists is counted and reported
(:mod:`mmf_uvlp.datasets.region_counts`).

A DataLoader asks for a whole batch at once (``__getitems__``): its samples are made with
the feature rows unpadded and collated by :func:`mmf_uvlp.datasets.collate.collate`
(padded to the batch's longest, one copy of the features); ``dataset[idx]`` still gives
one sample at the processors' fixed sizes.
"""

from __future__ import annotations

import zlib
from typing import Any, Dict, List

import torch

from mmf.common.sample import Sample, SampleList
from mmf.datasets.mmf_dataset import MMFDataset
from mmf.datasets.mmf_dataset_builder import MMFDatasetBuilder
from mmf_uvlp.datasets.annotation_db import AnnotationDbHook
from mmf_uvlp.datasets.collate import collate
from mmf_uvlp.datasets.region_counts import RegionCounts
from mmf_uvlp.training.progress import register_train_samples
from mmf_uvlp.training.reproducibility import derived_seed
from mmf_uvlp.utils.config_files import default_config


def config_probability(dataset_name: str, config: Any, key: str, default: float) -> float:
    """``dataset_config.<dataset_name>.<key>``, which must be a probability."""
    value = float(config.get(key, default))
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"dataset_config.{dataset_name}.{key} must be in [0, 1], got {value}")
    return value


class PretrainingDataset(AnnotationDbHook, MMFDataset):
    """An MMF dataset whose samples are ``masking_processor(raw_input(idx))``; subclasses
    override ``build_annotation_db`` (see :mod:`mmf_uvlp.datasets.annotation_db`)."""

    def __init__(self, dataset_name: str, config: Any, dataset_type: str, index: int,
                 *args: Any, **kwargs: Any):
        super().__init__(dataset_name, config, dataset_type, index, *args, **kwargs)
        if dataset_type == "train":
            register_train_samples(dataset_name, len(self.annotation_db))

    def raw_input(self, idx: int) -> Dict[str, Any]:
        """The masking processor's raw input of sample ``idx``."""
        raise NotImplementedError

    def sample_fields(self, idx: int, padded: bool = True) -> Dict[str, Any]:
        """The fields of sample ``idx``; with ``padded=False`` its feature rows unpadded.

        An ``idx`` with a ``seed`` (the run's sampler gives a :class:`SampleIndex`) makes
        every random draw of the sample (the dataset's, e.g. ITM negatives, and the masking
        processor's) follow from that seed and the dataset's name, whatever process makes it.
        """
        seed = getattr(idx, "seed", None)
        if seed is None:
            return self.masking_processor(self.raw_input(idx), padded=padded)
        seed = derived_seed(seed, zlib.crc32(self.dataset_name.encode()))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derived_seed(seed, 0))
            generator = torch.Generator().manual_seed(derived_seed(seed, 1))
            return self.masking_processor(self.raw_input(idx), generator, padded=padded)

    def __getitem__(self, idx: int) -> Sample:
        return Sample(self.sample_fields(idx))

    def __getitems__(self, indices: List[int]) -> SampleList:
        """The batch of ``indices``, padded to its longest (what a DataLoader asks for)."""
        return collate([self.sample_fields(idx, padded=False) for idx in indices])


class RegionsDataset(PretrainingDataset):
    """A pre-training dataset of images: each annotation item has ``image_id``,
    ``feature_path`` and ``region_labels`` (the detector's tag of each region)."""

    def __init__(self, dataset_name: str, config: Any, dataset_type: str, index: int,
                 *args: Any, **kwargs: Any):
        super().__init__(dataset_name, config, dataset_type, index, *args, **kwargs)
        if not self._use_features:
            raise ValueError(f"dataset_config.{dataset_name}.use_features must be true")
        self.region_counts = RegionCounts(dataset_name)

    def image_input(self, item: Dict[str, Any]) -> Dict[str, Any]:
        """The raw image keys of the masking processors, read by MMF's FeaturesDatabase."""
        features = self.features_db.from_path(item["feature_path"])
        info = features["image_info_0"]
        rows, listed = int(info["max_features"]), len(item["region_labels"])
        self.region_counts.check(item["image_id"], item["feature_path"], listed, rows)
        count = min(rows, listed, features["image_feature_0"].shape[0])
        boxes = torch.as_tensor(info["bbox"], dtype=torch.float32)[:count]
        if boxes.shape[0] < count:
            raise ValueError(
                f"{self.dataset_name}: image {item['image_id']} has {rows} feature rows but "
                f"{boxes.shape[0]} boxes in {item['feature_path']}"
            )
        return {
            "features": features["image_feature_0"][:count],
            "boxes": boxes,
            "image_width": info["image_width"],
            "image_height": info["image_height"],
            "region_classes": torch.as_tensor(info["objects"], dtype=torch.long)[:count],
            "region_labels": item["region_labels"][:count],
        }

    def sample_fields(self, idx: int, padded: bool = True) -> Dict[str, Any]:
        fields = super().sample_fields(idx, padded)
        fields["image_id"] = self.annotation_db[idx]["image_id"]
        return fields


class PretrainingBuilder(MMFDatasetBuilder):
    """Builder of a pre-training dataset; its defaults are configs/datasets/<NAME>/defaults.yaml."""

    NAME = ""
    DATASET_CLASS = PretrainingDataset

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(self.NAME, self.DATASET_CLASS, *args, **kwargs)

    @classmethod
    def config_path(cls) -> str:
        return default_config("datasets", cls.NAME, "defaults.yaml")

    def build(self, config: Any, dataset_type: str = "train", *args: Any, **kwargs: Any) -> None:
        """Nothing to download: the data are local files (see the dataset's defaults)."""

    def update_registry_for_model(self, config: Any) -> None:
        """Nothing to tell the model: the masking processors fix every size."""
