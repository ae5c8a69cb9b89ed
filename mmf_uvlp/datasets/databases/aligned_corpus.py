"""The weakly aligned corpus (``tools/build_corpus.py`` output) as an MMF annotation database.

One item per image (``unit: image``) or per retrieved (image, sentence) pair
(``unit: sentence``). Every item carries ``feature_path`` = ``<feature_key>.npy``, the
name MMF's FeaturesDatabase resolves in an LMDB or a ``.npy`` folder.

``top_k``: with ``unit: sentence``, use only each image's ``top_k`` best retrieved
sentences (null = all K the corpus holds), e.g. the paper's K = 1 / 5 / 10 ablation
from one corpus built with K = 10.

Split: images whose ``position`` (their line in the detections file) is a multiple of
``holdout_every`` form the val/test split, all others the train split; 0 = no hold-out
(every split sees every image).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from torch.utils.data import Dataset

from mmf_uvlp.corpus.shards import iter_records

UNITS = ("image", "sentence")


class AlignedCorpusDatabase(Dataset):
    """Image records (or image-sentence pairs) of the aligned corpus in ``path``."""

    def __init__(self, path: str, unit: str, dataset_type: str, holdout_every: int = 0,
                 top_k: Optional[int] = None):
        if unit not in UNITS:
            raise ValueError(f"aligned corpus: unit must be one of {UNITS}, got {unit!r}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"aligned corpus: top_k must be >= 1 or null, got {top_k}")
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"aligned corpus {path!r} does not exist: build it with tools/build_corpus.py "
                "and point dataset_config.<name>.annotations at its output folder"
            )
        self.path = path
        self.images: List[Dict[str, Any]] = []
        self.items: List[tuple] = []  # (image index, sentence index or -1)
        for record in iter_records(path):
            held_out = holdout_every > 0 and int(record["position"]) % holdout_every == 0
            if holdout_every > 0 and held_out == (dataset_type == "train"):
                continue
            image = len(self.images)
            self.images.append(_compact(record, top_k))
            if unit == "image":
                self.items.append((image, -1))
            else:
                count = len(self.images[image]["sentences"])
                self.items.extend((image, s) for s in range(count))
        if not self.items:
            raise ValueError(
                f"aligned corpus {path!r}: no {unit} items for the {dataset_type} split "
                f"(holdout_every={holdout_every})"
            )

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, idx: int) -> Dict[str, Any]:
        image, sentence = self.items[idx]
        record = self.images[image]
        item = {"image_index": image, **record}
        if sentence >= 0:
            item["sentence"] = record["sentences"][sentence]
        return item

    def sentence_of(self, image: int, sentence: int) -> Dict[str, Any]:
        """Sentence ``sentence`` retrieved for image number ``image``."""
        return self.images[image]["sentences"][sentence]


def _compact(record: Dict[str, Any], top_k: Optional[int]) -> Dict[str, Any]:
    """The fields the datasets use (the ``top_k`` best sentences); the rest is dropped."""
    sentences = sorted(record["sentences"], key=lambda sentence: sentence["rank"])[:top_k]
    return {
        "image_id": record["image_id"],
        "feature_path": f"{record['feature_key']}.npy",
        "region_labels": [region["label"] for region in record["regions"]],
        "sentences": [
            {"text": s["text"], "score": s["score"], "noun_phrases": s["noun_phrases"]}
            for s in sentences
        ],
    }
