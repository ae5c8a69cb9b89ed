"""Shared base of the baselines' datasets over the pre-training image pool.

They read the images from the detector's output (``annotations``: a ``predictions.tsv``
or ``detections.jsonl``, see :class:`ImagePoolDatabase`) and the region features from
``features``, without the weakly aligned corpus. Dataset config keys: ``holdout_every``
(the val/test split, as the corpus datasets'), ``captions`` (the pool's
``captions_gt.tsv`` relative to ``data_dir``, or null) and ``feature_key_template``.
"""

from __future__ import annotations

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.datasets.builders.pretraining import RegionsDataset
from mmf_uvlp.datasets.databases.image_pool import ImagePoolDatabase


class ImagePoolDataset(RegionsDataset):
    """An MMF dataset over the image pool; subclasses choose the raw input."""

    def needs_captions(self) -> bool:
        """Whether every image needs its own caption (``captions`` must be set)."""
        return False

    def build_annotation_db(self) -> ImagePoolDatabase:
        path = self._get_path_based_on_index(self.config, "annotations", self._index)
        captions = self.config.get("captions", None)
        if captions is None and self.needs_captions():
            raise UserConfigError(
                f"dataset_config.{self.dataset_name}.captions must be set: the "
                "pool's captions_gt.tsv (image_id<TAB>caption), relative to data_dir"
            )
        return ImagePoolDatabase(
            path,
            self.dataset_type,
            int(self.config.get("holdout_every", 0)),
            None if captions is None else self._add_root_dir(str(captions)),
            str(self.config.get("feature_key_template", "{image_id}")),
            self.feature_names(),
        )
