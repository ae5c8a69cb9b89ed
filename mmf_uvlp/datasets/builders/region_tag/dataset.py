"""R-T dataset: one sample per image, [detector tags; regions]."""

from typing import Any, Dict

from mmf_uvlp.datasets.builders.weakly_aligned import WeaklyAlignedDataset


class RegionTagDataset(WeaklyAlignedDataset):
    unit = "image"

    def __init__(self, config: Any, dataset_type: str, index: int, *args, **kwargs):
        super().__init__("uvla_region_tag", config, dataset_type, index, *args, **kwargs)

    def raw_input(self, idx: int) -> Dict[str, Any]:
        return self.image_input(self.annotation_db[idx])
