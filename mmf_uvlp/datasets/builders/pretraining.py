"""Shared base of the pre-training datasets (μ-VLA's and the baselines').

A dataset turns one annotation item into the raw input of its masking processor
(``processors.masking_processor`` in the dataset config), which produces the uvla batch
fields. :class:`RegionsDataset` adds the image side: an item's region features, boxes and
detector classes, read from MMF's feature files (LMDB or ``.npy`` folder) without MMF's padding
(:mod:`mmf_uvlp.datasets.region_features`); an image whose
features hold another number of regions than its record lists is counted and reported
(:mod:`mmf_uvlp.datasets.region_counts`). With ``resident_features: True`` the images are
read once, when the dataset is built, into the training device's table
(:mod:`mmf_uvlp.datasets.resident_features`), and samples carry table rows instead.

A DataLoader asks for a whole batch at once (``__getitems__``): its raw inputs are read
(feature rows unpadded), masked at once by the processor's ``batch`` (one tokenizer call,
the masks drawn per sample and applied to the batch) and collated by
:func:`mmf_uvlp.datasets.collate.collate` (padded to the batch's longest, one copy of the
features); ``dataset[idx]`` still gives one sample, the same, at the processors' fixed
sizes.
"""

from __future__ import annotations

import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from mmf.common.registry import registry
from mmf.common.sample import Sample, SampleList
from mmf.datasets.mmf_dataset import MMFDataset
from mmf.datasets.mmf_dataset_builder import MMFDatasetBuilder
from mmf_uvlp.datasets.annotation_db import AnnotationDbHook
from mmf_uvlp.datasets.collate import collate, restore_region_copies
from mmf_uvlp.datasets import resident_features
from mmf_uvlp.datasets.region_features import RegionFeaturesDatabase
from mmf_uvlp.datasets.resident_features import ImageRows, ResidentFeatures
from mmf_uvlp.datasets.region_counts import RegionCounts
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.trainers.progress import register_train_samples
from mmf_uvlp.utils.config_files import default_config


def config_probability(dataset_name: str, config: Any, key: str, default: float) -> float:
    """``dataset_config.<dataset_name>.<key>``, which must be a probability."""
    value = config.get(key, default)
    try:
        probability = float(value)
    except (TypeError, ValueError):
        probability = float("nan")
    if not 0.0 <= probability <= 1.0:
        raise UserConfigError(
            f"dataset_config.{dataset_name}.{key} must be a number in [0, 1], got {value!r}"
        )
    return probability


def sample_seeds(seed: int, dataset_name: str) -> Tuple[int, int]:
    """The seeds of a sample's dataset draws and masking draws (63 bits each), from its
    :class:`SampleIndex` seed and the dataset's name: one ``SeedSequence`` for both."""
    words = [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, zlib.crc32(dataset_name.encode())]
    state = np.random.SeedSequence(words).generate_state(2, np.uint64)
    return int(state[0]) >> 1, int(state[1]) >> 1


def pad_to_multiple() -> int:
    """The run's ``training.pad_to_multiple`` (the ``uvlp`` trainer's key; 1 elsewhere)."""
    config = registry.get("config", None, no_warning=True)
    training = config.get("training", {}) if config is not None else {}
    value = training.get("pad_to_multiple", 1)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserConfigError(
            f"training.pad_to_multiple={value!r}: expected a whole number "
            "of 1 or more (1: pad to the batch's longest)"
        )
    return value


class PretrainingDataset(AnnotationDbHook, MMFDataset):
    """An MMF dataset whose samples are ``masking_processor(raw_input(idx))``; subclasses
    override ``build_annotation_db`` (see :mod:`mmf_uvlp.datasets.annotation_db`)."""

    def __init__(
        self,
        dataset_name: str,
        config: Any,
        dataset_type: str,
        index: int,
        *args: Any,
        **kwargs: Any,
    ):
        super().__init__(dataset_name, config, dataset_type, index, *args, **kwargs)
        if dataset_type == "train":
            register_train_samples(dataset_name, len(self.annotation_db))
        self.resident_table: Optional[ResidentFeatures] = None  # the resident features
        self.pad_to_multiple = pad_to_multiple()

    def raw_input(self, idx: int) -> Dict[str, Any]:
        """The masking processor's raw input of sample ``idx``."""
        raise NotImplementedError

    def sample_fields(self, idx: int, padded: bool = True) -> Dict[str, Any]:
        """The fields of sample ``idx``; with ``padded=False`` its feature rows unpadded."""
        return self.batch_fields([idx], padded)[0]

    def batch_fields(self, indices: Sequence[int], padded: bool = True) -> List[Dict[str, Any]]:
        """The fields of each sample of ``indices``: each raw input, then the masking
        processor on all of them at once (one tokenizer call); every sample the same as
        alone (its draws follow from its own seed, see :meth:`raw_sample`)."""
        raws, generators = [], []
        for idx in indices:
            raw, generator = self.raw_sample(idx)
            raws.append(raw)
            generators.append(generator)
        samples = self.masking_processor.batch(raws, generators, padded=padded)
        return [self.sample_extras(idx, fields) for idx, fields in zip(indices, samples)]

    def raw_sample(self, idx: int) -> Tuple[Dict[str, Any], Optional[torch.Generator]]:
        """Sample ``idx``'s raw input and the generator of its masking draws.

        An ``idx`` with a ``seed`` (the run's sampler gives a :class:`SampleIndex`) makes
        every random draw of the sample (the dataset's, e.g. ITM negatives, and the masking
        processor's) follow from that seed and the dataset's name, whatever process makes it
        and whatever else is in its batch. Without one, the processor draws as its module
        docstring says (generator None).
        """
        seed = getattr(idx, "seed", None)
        if seed is None:
            return self.raw_input(idx), None
        dataset_seed, masking_seed = sample_seeds(seed, self.dataset_name)
        with torch.random.fork_rng(devices=[]):
            # the CPU generator only: torch.manual_seed would reseed every device's too
            # (outside fork_rng's restore) and capture a stack trace for each lazily
            torch.default_generator.manual_seed(dataset_seed)
            raw = self.raw_input(idx)
        return raw, torch.Generator().manual_seed(masking_seed)

    def sample_extras(self, idx: int, fields: Dict[str, Any]) -> Dict[str, Any]:
        """``fields`` of sample ``idx`` with the dataset's own additions (none here)."""
        return fields

    def __getitem__(self, idx: int) -> Sample:
        return Sample(self.sample_fields(idx))

    def __getitems__(self, indices: List[int]) -> SampleList:
        """The batch of ``indices``, padded to its longest (what a DataLoader asks for)."""
        return collate(self.batch_fields(indices, padded=False), self.pad_to_multiple)

    def prepare_batch(self, batch: Any) -> Any:
        """MMF's (the batch on the run's device), then its features made there: from the
        dataset's resident table (:mod:`mmf_uvlp.datasets.resident_features`), and the
        original features of a collated batch (:func:`restore_region_copies`). The model
        gets finished tensors."""
        batch = super().prepare_batch(batch)
        if self.resident_table is not None:
            self.resident_table.fill(batch)
        restore_region_copies(batch)
        return batch


class RegionsDataset(PretrainingDataset):
    """A pre-training dataset of images: each annotation item has ``image_id``,
    ``feature_path`` and ``region_labels`` (the detector's tag of each region)."""

    def __init__(
        self,
        dataset_name: str,
        config: Any,
        dataset_type: str,
        index: int,
        *args: Any,
        **kwargs: Any,
    ):
        super().__init__(dataset_name, config, dataset_type, index, *args, **kwargs)
        if not self._use_features:
            raise UserConfigError(f"dataset_config.{dataset_name}.use_features must be true")
        self.region_counts = RegionCounts(dataset_name)
        self.resident: Optional[Dict[str, ImageRows]] = None
        if resident_features.option(self.config, dataset_name):
            paths = dict.fromkeys(
                self.annotation_db[i]["feature_path"] for i in range(len(self.annotation_db))
            )
            self.resident_table = ResidentFeatures()
            self.resident = self.resident_table.load(self.features_db, paths, dataset_name)

    def build_features_db(self) -> RegionFeaturesDatabase:
        """The split's features, real rows only (MMF main's name of the hook)."""
        if self.config.get("fast_read", False):
            raise UserConfigError(
                f"dataset_config.{self.dataset_name}.fast_read: not supported by "
                "the plugin's pre-training datasets (each image is read when "
                "its sample is made); set it to false"
            )
        path = self._get_path_based_on_index(self.config, "features", self._index)
        return RegionFeaturesDatabase(path, int(self.config.get("max_features", 100)))

    def _build_features_db(self) -> RegionFeaturesDatabase:  # MMF rc10's name of the hook
        return self.build_features_db()

    def image_input(self, item: Dict[str, Any]) -> Dict[str, Any]:
        """The raw image keys of the masking processors: the image's real feature rows."""
        if self.resident is not None:  # the table holds the rows: zero-width features here
            start, real_rows, info = self.resident[item["feature_path"]]
            features = torch.empty((real_rows, 0))
        else:
            read = self.features_db.from_path(item["feature_path"])
            features, info = read["image_feature_0"], read["image_info_0"]
        rows, listed = int(info["max_features"]), len(item["region_labels"])
        self.region_counts.check(item["image_id"], item["feature_path"], listed, rows)
        count = min(rows, listed, features.shape[0])
        boxes = torch.as_tensor(info["bbox"], dtype=torch.float32)[:count]
        if boxes.shape[0] < count:
            raise ValueError(
                f"{self.dataset_name}: image {item['image_id']} has {rows} feature rows but "
                f"{boxes.shape[0]} boxes in {item['feature_path']}"
            )
        raw = {
            "features": features[:count],
            "boxes": boxes,
            "image_width": info["image_width"],
            "image_height": info["image_height"],
            "region_classes": torch.as_tensor(info["objects"], dtype=torch.long)[:count],
            "region_labels": item["region_labels"][:count],
        }
        if self.resident is not None:
            raw["feature_rows"] = torch.arange(start, start + count)
        return raw

    def sample_extras(self, idx: int, fields: Dict[str, Any]) -> Dict[str, Any]:
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
