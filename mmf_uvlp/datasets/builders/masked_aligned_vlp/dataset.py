"""MMF's ``masked_coco`` pre-training samples, read from the aligned_vlp image pool.

MMF's VisualBERT and ViLBERT pre-train on ``masked_coco``: an image's features (15 % of
the regions zeroed 90 % of the time, ``image_labels`` marking them) with one of its
captions masked by MMF's ``masked_token`` processor (``lm_label_ids``) and, with
``false_caption``, replaced by another image's caption half of the time (``is_correct``).
:class:`MaskedAlignedVLPDataset` is that dataset class unchanged, except where its items
come from: the pre-training pool of Aligned VLP (the detector's output plus
``captions_gt.tsv``, read by :class:`ImagePoolDatabase`), with the same ``holdout_every``
split, so MMF's reference models pre-train on exactly the images and captions Aligned VLP does.
"""

from __future__ import annotations

from typing import Any, Dict

from mmf.datasets.builders.coco.masked_dataset import MaskedCOCODataset
from torch.utils.data import Dataset

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.datasets.annotation_db import AnnotationDbHook
from mmf_uvlp.datasets.databases.image_pool import ImagePoolDatabase

NAME = "masked_aligned_vlp"


class CaptionedImages(Dataset):
    """The image pool as MMF's caption annotations: ``image_id``, ``feature_path`` and
    ``captions`` (the image's own caption, a list as in MMF's COCO imdbs)."""

    def __init__(self, pool: ImagePoolDatabase):
        self.pool = pool

    def __len__(self) -> int:
        return len(self.pool)

    def __getitem__(self, idx: int) -> Dict[str, Any]:
        item = self.pool[idx]
        return {
            "image_id": item["image_id"],
            "feature_path": item["feature_path"],
            "captions": [item["caption"]],
        }


class MaskedAlignedVLPDataset(AnnotationDbHook, MaskedCOCODataset):
    """MMF's ``MaskedCOCODataset`` over the aligned pairs of the pre-training pool."""

    def __init__(self, config: Any, dataset_type: str, index: int, *args: Any, **kwargs: Any):
        super().__init__(config, dataset_type, index, *args, **kwargs)
        self.dataset_name = NAME

    def build_annotation_db(self) -> CaptionedImages:
        path = self._get_path_based_on_index(self.config, "annotations", self._index)
        captions = self.config.get("captions", None)
        if captions is None:
            raise UserConfigError(
                f"dataset_config.{NAME}.captions must be set: the pool's "
                "captions_gt.tsv (image_id<TAB>caption), relative to data_dir"
            )
        pool = ImagePoolDatabase(
            path,
            self.dataset_type,
            int(self.config.get("holdout_every", 0)),
            self._add_root_dir(str(captions)),
            str(self.config.get("feature_key_template", "{image_id}")),
            self.feature_names(),
        )
        if len(pool) < 2 and self.config.get("false_caption", False):
            raise UserConfigError(
                f"{NAME}: the {self.dataset_type} split has {len(pool)} image(s); false "
                f"captions need at least 2 (change dataset_config.{NAME}.holdout_every)"
            )
        return CaptionedImages(pool)
