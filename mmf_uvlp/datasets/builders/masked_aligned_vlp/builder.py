"""Builder of ``masked_aligned_vlp``: MMF's masked-caption data (VisualBERT / ViLBERT
pre-training) over the aligned image-caption pairs of the pre-training pool."""

from __future__ import annotations

from typing import Any

from mmf.common.registry import registry
from mmf.datasets.builders.coco.masked_builder import MaskedCOCOBuilder

from mmf_uvlp.datasets.builders.masked_aligned_vlp.dataset import NAME, MaskedAlignedVLPDataset
from mmf_uvlp.utils.config_files import default_config


@registry.register_builder(NAME)
class MaskedAlignedVLPBuilder(MaskedCOCOBuilder):
    """MMF's ``masked_coco`` builder with the pool's dataset class and defaults."""

    def __init__(self) -> None:
        super().__init__()
        self.dataset_name = NAME
        self.set_dataset_class(MaskedAlignedVLPDataset)

    @classmethod
    def config_path(cls) -> str:
        return default_config("datasets", NAME, "defaults.yaml")

    def build(self, config: Any, dataset_type: str = "train", *args: Any, **kwargs: Any) -> None:
        """Nothing to download: the data are local files (see the dataset's defaults)."""
