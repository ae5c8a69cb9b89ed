"""Random pairs (and partly true pairs): each pre-training image with one sentence.

A ``true_pair_ratio`` share of the images (0: the paper's random-pairs baseline, 0.2 ...
1.0: its Table 6) keeps its own caption (``captions``, required when the ratio is above
0); every other image gets a random sentence of the text corpora (``sentences``: text
files relative to ``data_dir``), never its own caption when ``captions`` is given. The
pairs are fixed for a run and follow from ``pairing_seed`` (default ``training.seed``),
see :mod:`pairing`. Input [sentence; regions] with joint MLM + MRM (``uvla_pair_masking``),
no ITM.
"""

from __future__ import annotations

from typing import Any, Dict

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.datasets.builders.image_pool import ImagePoolDataset
from mmf_uvlp.datasets.builders.pretraining import config_probability
from mmf_uvlp.datasets.builders.random_pairs.pairing import choose_true_pairs, draw_partners
from mmf_uvlp.datasets.databases.text_corpus import read_sentences


class RandomPairsDataset(ImagePoolDataset):
    """Images with their own caption or a random sentence, fixed by the seed."""

    def __init__(self, config: Any, dataset_type: str, index: int, *args: Any, **kwargs: Any):
        super().__init__("random_pairs", config, dataset_type, index, *args, **kwargs)
        ratio = self._true_pair_ratio()
        seed = self.config.get("pairing_seed", None)
        if seed is None:
            raise UserConfigError(
                "dataset_config.random_pairs.pairing_seed must be set (an integer)"
            )
        files = self.config.get("sentences", None)
        if not files or isinstance(files, str):
            raise UserConfigError(
                "dataset_config.random_pairs.sentences: expected a list of text "
                f"files (one sentence a line) relative to data_dir, got {files!r}"
            )
        self.sentences = read_sentences([self._add_root_dir(str(f)) for f in files])
        if not self.sentences and ratio < 1:
            raise UserConfigError(
                f"dataset_config.random_pairs.sentences: {list(files)} hold no sentence"
            )
        self.true_pairs = choose_true_pairs(len(self.annotation_db), ratio, int(seed))
        own = [item.get("caption") for item in self.annotation_db.items]
        self.partners = draw_partners(own, self.sentences, self.true_pairs, int(seed))

    def _true_pair_ratio(self) -> float:
        return config_probability("random_pairs", self.config, "true_pair_ratio", 0.0)

    def needs_captions(self) -> bool:
        return self._true_pair_ratio() > 0

    def sentence(self, idx: int) -> str:
        """The sentence paired with image ``idx``."""
        partner = self.partners[idx]
        return self.annotation_db[idx]["caption"] if partner < 0 else self.sentences[partner]

    def raw_input(self, idx: int) -> Dict[str, Any]:
        raw = self.image_input(self.annotation_db[idx])
        raw["sentence"] = self.sentence(idx)
        return raw
