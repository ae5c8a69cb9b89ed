"""U-VisualBERT (Li et al., 2021): pre-training on uni-modal batches, never a joint input.

- ``u_visualbert_text``: one sentence of the text corpora (``annotations``: text files,
  comma-separated in one entry), text-only MLM (``uvla_text_masking``);
- ``u_visualbert_image``: one image of the pool, input [detector tags; regions] with joint
  tag/region masking: tag MLM, MRC, MRFR (``uvla_image_tag_masking``).

Run together, MMF's multi-dataset loader draws each batch from one of them.
"""

from __future__ import annotations

from typing import Any, Dict

from mmf_uvlp.datasets.builders.image_pool import ImagePoolDataset
from mmf_uvlp.datasets.builders.pretraining import PretrainingDataset
from mmf_uvlp.datasets.databases.text_corpus import TextCorpusDatabase


class UVisualBERTTextDataset(PretrainingDataset):
    """Sentences of the text corpora."""

    def __init__(self, config: Any, dataset_type: str, index: int, *args: Any, **kwargs: Any):
        super().__init__("u_visualbert_text", config, dataset_type, index, *args, **kwargs)

    def build_annotation_db(self) -> TextCorpusDatabase:
        path = self._get_path_based_on_index(self.config, "annotations", self._index)
        return TextCorpusDatabase(path, self.dataset_type, int(self.config.get("holdout_every", 0)))

    def raw_input(self, idx: int) -> Dict[str, Any]:
        return self.annotation_db[idx]


class UVisualBERTImageDataset(ImagePoolDataset):
    """Images of the pool with their detector tags."""

    def __init__(self, config: Any, dataset_type: str, index: int, *args: Any, **kwargs: Any):
        super().__init__("u_visualbert_image", config, dataset_type, index, *args, **kwargs)

    def raw_input(self, idx: int) -> Dict[str, Any]:
        return self.image_input(self.annotation_db[idx])
