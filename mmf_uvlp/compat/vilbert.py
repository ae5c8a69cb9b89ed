"""MMF 1.0.0rc10's ViLBERT: batches of images with different region counts, NLVR2's image
pairs, and the random initialisation that ``bert_model_name: null`` documents."""

from __future__ import annotations

import functools
from typing import Any, Dict


def _rows_per_sample(values: Any, rows: int) -> Any:
    """Per-sample ``(n_i, C)`` arrays as one ``(B, rows, C)`` float32 array, each sample's
    rows truncated to ``rows`` or zero-padded up to it."""
    import numpy as np

    arrays = [np.asarray(value, dtype=np.float32) for value in values]
    arrays = [array.reshape(array.shape[0], -1) for array in arrays]
    width = max((array.shape[1] for array in arrays), default=0)
    padded = np.zeros((len(arrays), rows, width), dtype=np.float32)
    for index, array in enumerate(arrays):
        count = min(rows, array.shape[0])
        padded[index, :count] = array[:count]
    return padded


def _pad_image_info(holder: Any) -> None:
    """Make ``holder.image_info_0``'s ``bbox`` and ``cls_prob`` (B, R, ·), R being the
    feature rows of ``holder.image_feature_0``."""
    if holder is None or holder.get("image_feature_0") is None:
        return
    info = holder.get("image_info_0")
    if info is None:
        return
    rows = holder["image_feature_0"].size(-2)
    for key in ("bbox", "cls_prob"):
        if info.get(key) is not None:
            info[key] = _rows_per_sample(info[key], rows)


def pad_region_counts() -> None:
    """``bbox`` and ``cls_prob`` are padded or cut to the feature rows before ViLBERT stacks them."""
    from mmf.models.vilbert import ViLBERT

    read = ViLBERT.get_image_and_text_features

    @functools.wraps(read)
    def get_image_and_text_features(self: Any, sample_list: Any) -> Dict[str, Any]:
        for holder in (sample_list, sample_list.get("img0"), sample_list.get("img1")):
            _pad_image_info(holder)
        return read(self, sample_list)

    ViLBERT.get_image_and_text_features = get_image_and_text_features


def pair_nlvr2_images() -> None:
    """The two images of an NLVR2 example are adjacent rows, as the nlvr2 head pairs them."""
    import torch
    from mmf.models.vilbert import ViLBERT

    read = ViLBERT.get_image_and_text_features

    @functools.wraps(read)
    def get_image_and_text_features(self: Any, sample_list: Any) -> Dict[str, Any]:
        params = read(self, sample_list)
        batch = sample_list["input_ids"].size(0)
        if params["input_ids"].size(0) != 2 * batch:
            return params
        first = torch.arange(batch, device=params["input_ids"].device)
        order = torch.stack([first, first + batch], dim=1).view(-1)  # 0, B, 1, B+1, ...
        return {
            key: value.index_select(0, order.to(value.device))
            if torch.is_tensor(value) and value.size(0) == 2 * batch
            else value
            for key, value in params.items()
        }

    ViLBERT.get_image_and_text_features = get_image_and_text_features


def random_init() -> None:
    """``ViLBERTBase.from_pretrained(None)`` builds a randomly initialised model."""
    from mmf.models.vilbert import ViLBERTBase

    from_pretrained = ViLBERTBase.from_pretrained.__func__

    @functools.wraps(from_pretrained)
    def from_pretrained_or_random(cls: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
        if name is None:
            return cls(kwargs["config"])
        return from_pretrained(cls, name, *args, **kwargs)

    ViLBERTBase.from_pretrained = classmethod(from_pretrained_or_random)
