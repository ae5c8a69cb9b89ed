"""The fields of a batch of the plugin's pre-training datasets, as the datasets write them
and the processors, the model, its heads and its losses read them
(:mod:`mmf_uvlp.datasets.collate` builds such batches).

Importing this module is cheap: it touches neither torch nor MMF.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

# cut to the batch's longest text (``input_mask``)
TEXT_FIELDS = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "lm_label_ids",
    "text_boxes",
    "text_is_tag",
    "clean_input_ids",
)
# cut to the batch's largest region count (``region_mask``)
REGION_FIELDS = (
    "region_boxes",
    "region_mask",
    "region_zeroed",
    "region_masked",
    "region_class_targets",
    "region_phrase_targets",
    "region_feature_rows",
)
FEATURE_FIELD = "region_features"  # (B, R, D): the masked input
# the original features, rebuilt from FEATURE_FIELD and the restore rows
ORIGINAL_FEATURE_FIELDS = ("region_features_target", "clean_region_features")
COPIES_FIELD = "region_copies"  # which of ORIGINAL_FEATURE_FIELDS a batch rebuilds
RESTORE_INDEX_FIELD = "region_restore_index"  # ragged (Z, 2): (sample, region) zeroed
RESTORE_ROWS_FIELD = "region_restore_rows"  # ragged (Z, D): their original features
ROWS_FIELD = "region_feature_rows"  # (B, R) table row of each region with resident features
IGNORE = -1  # a position without a target


def ragged(batch: Mapping[str, Any], field: str) -> Optional[Any]:
    """The tensor of a one-entry ``{"values": tensor}`` field (one whose first dimension is
    not the batch's), or None when absent."""
    value = batch.get(field) if hasattr(batch, "get") else None
    return None if value is None else value["values"]
