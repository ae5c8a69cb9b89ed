"""R-N dataset: one sample per retrieved (image, sentence) pair with its phrase-region links."""

from typing import Any, Dict

from mmf_uvlp.datasets.builders.weakly_aligned import WeaklyAlignedDataset


class RegionPhraseDataset(WeaklyAlignedDataset):
    unit = "sentence"

    def __init__(self, config: Any, dataset_type: str, index: int, *args, **kwargs):
        super().__init__("uvla_region_phrase", config, dataset_type, index, *args, **kwargs)

    def raw_input(self, idx: int) -> Dict[str, Any]:
        item = self.annotation_db[idx]
        raw = self.image_input(item)
        raw["sentence"] = item["sentence"]["text"]
        raw["noun_phrases"] = item["sentence"]["noun_phrases"]
        return raw
