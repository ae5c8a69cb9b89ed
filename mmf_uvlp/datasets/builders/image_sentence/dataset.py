"""I-S dataset: retrieved (image, sentence) pairs; with probability ``negative_prob`` the
sentence is replaced by one retrieved for another image (ITM label 0)."""

from typing import Any, Dict

import torch

from mmf_uvlp.datasets.builders.weakly_aligned import WeaklyAlignedDataset


class ImageSentenceDataset(WeaklyAlignedDataset):
    unit = "sentence"

    def __init__(self, config: Any, dataset_type: str, index: int, *args, **kwargs):
        super().__init__("uvla_image_sentence", config, dataset_type, index, *args, **kwargs)
        self.negative_prob = float(self.config.get("negative_prob", 0.5))
        if self.negative_prob > 0:
            self.annotation_db.require_images(2, "negatives (negative_prob > 0) need")

    def raw_input(self, idx: int) -> Dict[str, Any]:
        item = self.annotation_db[idx]
        raw = self.image_input(item)
        raw["sentence"], raw["itm_label"] = item["sentence"]["text"], 1
        if float(torch.rand(())) < self.negative_prob:
            raw["sentence"], raw["itm_label"] = self._random_other_sentence(item["image_index"]), 0
        return raw

    def _random_other_sentence(self, image: int) -> str:
        images = self.annotation_db.images
        other = int(torch.randint(len(images) - 1, ()))
        other += other >= image  # any image but this one
        sentences = images[other]["sentences"]
        return sentences[int(torch.randint(len(sentences), ()))]["text"]
