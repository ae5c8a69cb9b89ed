"""Shared base of the μ-VLA pre-training datasets read from the weakly aligned corpus.

A dataset turns one annotation item (an image, or a retrieved (image, sentence) pair, see
``unit``) plus its image's region features into the raw input of its masking processor
(see :mod:`mmf_uvlp.datasets.builders.pretraining`).
"""

from __future__ import annotations

from mmf_uvlp.datasets.builders.pretraining import PretrainingBuilder, RegionsDataset
from mmf_uvlp.datasets.databases.aligned_corpus import AlignedCorpusDatabase


class WeaklyAlignedDataset(RegionsDataset):
    """An MMF dataset over the aligned corpus; subclasses choose ``unit`` and the raw input."""

    unit = "image"

    def build_annotation_db(self) -> AlignedCorpusDatabase:
        path = self._get_path_based_on_index(self.config, "annotations", self._index)
        holdout = int(self.config.get("holdout_every", 0))
        top_k = self.config.get("top_k", None)
        return AlignedCorpusDatabase(
            path,
            self.unit,
            self.dataset_type,
            holdout,
            None if top_k is None else int(top_k),
            config_key=f"dataset_config.{self.dataset_name}",
            features=self.feature_names(),
            link_noise=float(self.config.get("link_noise", 0.0)),
        )


class WeaklyAlignedBuilder(PretrainingBuilder):
    """Builder of a dataset over the aligned corpus (the output of uvlp-build-corpus)."""

    DATASET_CLASS = WeaklyAlignedDataset
