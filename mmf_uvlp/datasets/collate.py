"""Batches of the plugin's pre-training datasets: padded to the batch's longest, one copy of
the region features, gather indices computed on the host.

MMF's collation stacks every field at the processors' fixed sizes (``max_seq_length``,
``max_regions``), so a batch of images with 12 detections carries 100 feature rows each,
and the masked input, the MRFR target and the curriculum's clean copy each carry them
again. :func:`collate` (called by :meth:`PretrainingDataset.__getitems__`, in the
DataLoader's worker) instead builds, from samples made with ``padded=False``:

- the text fields cut to ``L'`` = the batch's longest text (``input_mask``), the region
  fields to ``R'`` = its largest region count (``region_mask``, at least 1), each rounded
  up to a multiple of ``training.pad_to_multiple`` (1: none) within the processors' sizes;
  every position a field loses is padding, so attention and every loss see the same values;
- ``region_features`` (B, R', D), the masked input, once. The original features
  (``region_features_target``, ``clean_region_features``) are not a second copy: their
  zeroed rows are kept as ``region_restore_index`` (Z, 2) (sample, region) and
  ``region_restore_rows`` (Z, D), and ``region_copies`` names the fields the model
  rebuilds from them on its device (:func:`restore_region_copies`);
- the heads' gather indices, row-major (sample, position) pairs as ``nonzero`` gives them,
  so that the model's step never waits for the device to count targets:
  ``lm_label_index`` (``lm_label_ids`` != -1), ``region_class_index``
  (``region_class_targets`` != -1), ``region_masked_index`` (masked real regions),
  ``region_phrase_index`` (a phrase target), ``itm_label_index`` (M,) (``itm_label`` != -1);
- ``curriculum_weighted_host``: the per-sample flags as Python booleans.
- with resident features (:mod:`mmf_uvlp.datasets.resident_features`), the region field
  ``region_feature_rows`` (B, R') and zero-width feature fields: the model's device fills
  them from the table.

MMF's ``SampleList`` wants every top-level tensor to have one row per sample, so a field
with another first dimension (an index, the restore rows) is a one-entry mapping
``{"values": tensor}`` (a nested ``SampleList``, moved and pinned with the batch); read
it with :func:`ragged`.

Fixed sizes stay where MMF's own datasets and heads want them: ``masked_aligned_vlp``
(MMF's ``masked_coco``, whose ``image_labels`` and ``image_feature_0`` have
``max_features`` rows) and the fine-tuning datasets (VQA, VE, NLVR2, RefCOCO+: MMF's
readers pad to ``max_features``, and RefCOCO+'s targets index the padded regions).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

import torch

from mmf_uvlp.batch import (
    COPIES_FIELD,
    FEATURE_FIELD,
    IGNORE,
    ORIGINAL_FEATURE_FIELDS,
    REGION_FIELDS,
    RESTORE_INDEX_FIELD,
    RESTORE_ROWS_FIELD,
    TEXT_FIELDS,
    ragged,
)


def _longest(
    samples: Sequence[Mapping[str, Any]], field: str, minimum: int, multiple: int = 1
) -> int:
    """The batch's longest ``field`` count (at least ``minimum``), rounded up to a multiple
    of ``multiple`` within the samples' full size."""
    longest = max([minimum] + [int(sample[field].sum()) for sample in samples])
    return min(-(-longest // multiple) * multiple, max(longest, samples[0][field].size(0)))


def _stack_cut(samples: Sequence[Mapping[str, Any]], field: str, size: int) -> torch.Tensor:
    """The field's first ``size`` positions of every sample, stacked (B, size, ...)."""
    return torch.stack([sample[field][:size] for sample in samples])


def _pad_rows(rows: Sequence[torch.Tensor], size: int) -> torch.Tensor:
    """Feature rows (N_i <= size, D) of every sample in one zero-padded (B, size, D)."""
    out = rows[0].new_zeros((len(rows), size, rows[0].size(-1)))
    for i, sample_rows in enumerate(rows):
        count = min(sample_rows.size(0), size)
        out[i, :count] = sample_rows[:count]
    return out


def collate(samples: Sequence[Mapping[str, Any]], multiple: int = 1) -> Any:
    """One batch of the processors' samples, an MMF ``SampleList`` (see the module
    docstring); ``multiple``: the text and region lengths are rounded up to a multiple of it
    (``training.pad_to_multiple``), so that a compiled model sees few distinct shapes."""
    from mmf.common.sample import SampleList  # here: the model imports this module

    if not samples:
        raise ValueError("collate: an empty batch")
    keys = list(samples[0].keys())
    for index, sample in enumerate(samples):
        if list(sample.keys()) != keys:
            raise ValueError(
                f"collate: sample {index} has fields {sorted(sample.keys())}, "
                f"sample 0 has {sorted(keys)}"
            )
    batch: Dict[str, Any] = {}
    if multiple < 1:
        raise ValueError(f"collate: pad to a multiple of {multiple}: expected 1 or more")
    text_length = _longest(samples, "input_mask", 1, multiple) if "input_mask" in keys else None
    region_count = _longest(samples, "region_mask", 1, multiple) if "region_mask" in keys else None
    for key in keys:
        first = samples[0][key]
        if key in ORIGINAL_FEATURE_FIELDS:
            continue
        if key in TEXT_FIELDS and text_length is not None:
            batch[key] = _stack_cut(samples, key, text_length)
        elif key in REGION_FIELDS and region_count is not None:
            batch[key] = _stack_cut(samples, key, region_count)
        elif key == FEATURE_FIELD and region_count is not None:
            batch[key] = _pad_rows([sample[key] for sample in samples], region_count)
        elif torch.is_tensor(first):
            batch[key] = torch.stack([sample[key] for sample in samples])
        else:
            batch[key] = [sample[key] for sample in samples]
    copies = [key for key in ORIGINAL_FEATURE_FIELDS if key in keys]
    if copies:
        _keep_originals_as_rows(samples, copies[0], batch)
        batch[COPIES_FIELD] = copies
    _gather_indices(batch)
    if "curriculum_weighted" in batch:
        batch["curriculum_weighted_host"] = [bool(flag) for flag in batch["curriculum_weighted"]]
    return SampleList(batch)


def _keep_originals_as_rows(
    samples: Sequence[Mapping[str, Any]], original: str, batch: Dict[str, Any]
) -> None:
    """The original features of the zeroed regions only (see the module docstring)."""
    if "region_zeroed" not in batch:
        raise ValueError(f"collate: samples with '{original}' need 'region_zeroed' (R,)")
    index = batch["region_zeroed"].nonzero()  # (Z, 2), real regions only
    rows = [samples[i][original][r] for i, r in index.tolist()]
    dim = batch[FEATURE_FIELD].size(-1)
    batch[RESTORE_INDEX_FIELD] = _values(index)
    batch[RESTORE_ROWS_FIELD] = _values(
        torch.stack(rows) if rows else batch[FEATURE_FIELD].new_zeros((0, dim))
    )


def _gather_indices(batch: Dict[str, Any]) -> None:
    """The heads' and losses' gather indices, on the host (see the module docstring)."""
    if "lm_label_ids" in batch:
        batch["lm_label_index"] = _values((batch["lm_label_ids"] != IGNORE).nonzero())
    if "region_class_targets" in batch:
        batch["region_class_index"] = _values((batch["region_class_targets"] != IGNORE).nonzero())
    if "region_masked" in batch and "region_mask" in batch:
        batch["region_masked_index"] = _values(
            ((batch["region_masked"] != 0) & (batch["region_mask"] != 0)).nonzero()
        )
    if "region_phrase_targets" in batch:
        batch["region_phrase_index"] = _values(
            (batch["region_phrase_targets"] != IGNORE).any(-1).nonzero()
        )
    if "itm_label" in batch:
        batch["itm_label_index"] = _values(
            (batch["itm_label"].view(-1) != IGNORE).nonzero().view(-1)
        )


def _values(tensor: torch.Tensor) -> Dict[str, torch.Tensor]:
    return {"values": tensor}


def restore_region_copies(sample_list: Any) -> None:
    """Rebuild the original features a :func:`collate` batch names in ``region_copies``
    (on the batch's device: one copy of ``region_features`` with the zeroed rows put
    back) and set each of those fields to it; a batch without them is left as it is."""
    copies: List[str] = sample_list.get(COPIES_FIELD) or []
    if not copies or sample_list.get(copies[0]) is not None:
        return
    features = sample_list[FEATURE_FIELD]
    index = ragged(sample_list, RESTORE_INDEX_FIELD)
    rows = ragged(sample_list, RESTORE_ROWS_FIELD)
    original = features.index_put((index[:, 0], index[:, 1]), rows.to(features.dtype))
    for key in copies:
        sample_list[key] = original
