"""The weakly aligned corpus (``uvlp-build-corpus`` output) as an MMF annotation database.

One item per image (``unit: image``) or per retrieved (image, sentence) pair
(``unit: sentence``). Every item carries ``feature_path`` = ``<feature_key>.npy``, the
name MMF's FeaturesDatabase resolves in an LMDB or a ``.npy`` folder.

A ``feature_key`` must be a relative name without ``..`` (it is a path in an npy feature
folder); with ``features`` (:class:`FeatureNames`) every key must also be one of its images.
Either error names the part file and line, when the dataset is built.

``top_k``: with ``unit: sentence``, use only each image's ``top_k`` best retrieved
sentences (null = all K the corpus holds), e.g. the paper's K = 1 / 5 / 10 ablation
from one corpus built with K = 10.

Split: images whose ``position`` (their line in the detections file) is a multiple of
``holdout_every`` form the val/test split, all others the train split; 0 = no hold-out
(every split sees every image). A split too small for its dataset is an error that names
``<config_key>.holdout_every``, what the split holds and the largest value that fits.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
from torch.utils.data import Dataset

from mmf_uvlp.corpus.shards import part_paths, read_numbered_part
from mmf_uvlp.data_formats.mmf_features import FeatureNames
from mmf_uvlp.datasets.databases.link_noise import LinkNoise
from mmf_uvlp.errors import FormatError
from mmf_uvlp.utils.run_log import write_run_log
from mmf_uvlp.utils.safe_loading import stays_inside, unsafe_name

UNITS = ("image", "sentence")


class AlignedCorpusDatabase(Dataset):
    """Image records (or image-sentence pairs) of the aligned corpus in ``path``."""

    def __init__(
        self,
        path: str,
        unit: str,
        dataset_type: str,
        holdout_every: int = 0,
        top_k: Optional[int] = None,
        config_key: str = "aligned corpus",
        features: Optional[FeatureNames] = None,
        link_noise: float = 0.0,
    ):
        if unit not in UNITS:
            raise ValueError(f"aligned corpus: unit must be one of {UNITS}, got {unit!r}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"aligned corpus: top_k must be >= 1 or null, got {top_k}")
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"aligned corpus {path!r} does not exist: build it with uvlp-build-corpus "
                "and point dataset_config.<name>.annotations at its output folder"
            )
        _check_top_k(path, top_k, config_key)
        try:
            noise = LinkNoise(float(link_noise))
        except ValueError as error:
            raise ValueError(f"{config_key}.{error}") from None
        self.path, self.dataset_type, self.config_key = path, dataset_type, config_key
        self.holdout_every = holdout_every
        self.images: List[Dict[str, Any]] = []
        self.items: List[tuple] = []  # (image index, sentence index or -1)
        positions = []  # of every image of the corpus, for the split's error messages
        for part, line, record in _numbered_records(path):
            _check_feature_key(record, part, line, features)
            positions.append(int(record["position"]))
            held_out = holdout_every > 0 and int(record["position"]) % holdout_every == 0
            if holdout_every > 0 and held_out == (dataset_type == "train"):
                continue
            image = len(self.images)
            self.images.append(_compact(record, top_k, noise))
            if unit == "image":
                self.items.append((image, -1))
            else:
                count = len(self.images[image]["sentences"])
                self.items.extend((image, s) for s in range(count))
        self._positions = np.asarray(positions, dtype=np.int64)
        if noise.share:
            write_run_log(f"{config_key} ({dataset_type} split of {path}): {noise.summary()}")
        if not self.items:
            raise ValueError(self._split_error(1, f"no {unit} items: a split needs"))

    def require_images(self, need: int, why: str) -> None:
        """Raise, naming ``holdout_every`` and a value that fits, unless the split holds
        at least ``need`` images (``why``: what needs them)."""
        if len(self.images) < need:
            raise ValueError(self._split_error(need, why))

    def _split_error(self, need: int, why: str) -> str:
        key, every = f"{self.config_key}.holdout_every", self.holdout_every
        total = len(self._positions)
        rule = (
            f"{key}={every} puts the images at positions divisible by {every} in "
            "val/test and the others in train"
            if every > 0
            else f"{key}=0: every split uses every image"
        )
        fits = _largest_holdout(self._positions, need)
        if fits:
            fix = (
                f"set {key} to {fits} (the largest value that leaves {need} image(s) in "
                "each split) or smaller, or to 0 (no hold-out)"
            )
        elif total >= need:
            fix = f"set {key} to 0 (no hold-out)"
        else:
            fix = f"build a corpus of at least {need} images"
        return (
            f"{self.config_key}: {why} at least {need} image(s), but the "
            f"{self.dataset_type} split of aligned corpus {self.path!r} holds "
            f"{len(self.images)} of its {total} images ({rule}); {fix}"
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


def _numbered_records(path: str) -> Iterator[Tuple[str, int, Dict[str, Any]]]:
    """``(part file, line, record)`` of every image record, in position order."""
    for part in part_paths(path):
        for line, record in read_numbered_part(part):
            yield part, line, record


def _check_feature_key(
    record: Dict[str, Any], part: str, line: int, features: Optional[FeatureNames]
) -> None:
    """A record's ``feature_key`` is a relative name inside the features (and, given
    ``features``, one of its images): refused at build, not when training reaches it."""
    key = record.get("feature_key")
    if not isinstance(key, str):
        raise FormatError(part, "feature_key", "a string", key, line=line)
    reason = unsafe_name(key)
    if reason is not None:
        raise FormatError(part, "feature_key", stays_inside("the features", reason), key, line=line)
    if features is not None:
        features.check(f"{key}.npy", part, "feature_key", line=line)


def _check_top_k(path: str, top_k: Optional[int], config_key: str) -> None:
    """Refuse a ``top_k`` above the K the corpus was built with (it would quietly use fewer)."""
    config = os.path.join(path, "config.yaml")
    if top_k is None or not os.path.isfile(config):
        return
    from omegaconf import OmegaConf

    built_k = OmegaConf.load(config).get("retrieve", {}).get("k", None)
    if built_k is not None and top_k > int(built_k):
        raise ValueError(
            f"{config_key}.top_k={top_k}: the corpus {path!r} holds only the top {built_k} "
            f"sentences per image ({config}: retrieve.k); build it with uvlp-build-corpus "
            f"--k {top_k} or lower top_k"
        )


def _compact(record: Dict[str, Any], top_k: Optional[int], noise: LinkNoise) -> Dict[str, Any]:
    """The fields the datasets use (the ``top_k`` best sentences, their links through
    ``noise``); the rest is dropped."""
    sentences = sorted(record["sentences"], key=lambda sentence: sentence["rank"])[:top_k]
    sentences = noise.apply(str(record["image_id"]), sentences, len(record["regions"]))
    return {
        "image_id": record["image_id"],
        "feature_path": f"{record['feature_key']}.npy",
        "region_labels": [region["label"] for region in record["regions"]],
        "sentences": [
            {"text": s["text"], "score": s["score"], "noun_phrases": s["noun_phrases"]}
            for s in sentences
        ],
    }


def _largest_holdout(positions: np.ndarray, need: int, tries: int = 1000) -> int:
    """The largest ``holdout_every`` >= 2 that leaves ``need`` images in both splits
    (0: none among the ``tries`` largest candidates)."""
    if positions.size < 2 * need:
        return 0
    start = int(positions.max()) // max(need - 1, 1)
    for every in range(start, max(start - tries, 1), -1):
        held = int(np.count_nonzero(positions % every == 0))
        if held >= need and positions.size - held >= need:
            return every
    return 0
