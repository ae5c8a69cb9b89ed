"""The downstream tasks of the study: their names, metrics, splits and run names, in one
place for the study runner, the report, the reference models and the toy world.

- :data:`TASKS`: the fine-tuning tasks, in the order of the paper's tables (MMF's dataset
  keys; RefCOCO+ is the plugin's ``refcoco_plus``);
- :data:`METRICS`: the metric MMF logs for each (``<split>/<dataset>/<metric>``);
- :data:`REFCOCO_PLUS_SPLITS`: the RefCOCO+ evaluation splits, and
  :data:`REFCOCO_PLUS_SPLIT_DATASETS` the datasets MMF evaluates them as;
- :data:`RESULT_SPLITS`: the splits a result table has columns for;
- :data:`PRETRAIN_RUN` and :data:`SPLITS_RUN`: the run folders of pre-training and of the
  RefCOCO+ split evaluation; a fine-tuning run is named after its task.
"""

from __future__ import annotations

TASKS = ("vqa2", "nlvr2", "visual_entailment", "refcoco_plus")
METRICS = {
    "vqa2": "vqa_accuracy",
    "nlvr2": "accuracy",
    "visual_entailment": "accuracy",
    "refcoco_plus": "refcoco_accuracy",
}
REFCOCO_PLUS_SPLITS = ("val", "testA", "testB")
REFCOCO_PLUS_SPLIT_DATASETS = tuple(f"refcoco_plus_{split}" for split in REFCOCO_PLUS_SPLITS)
RESULT_SPLITS = ("val", "test", "testA", "testB")
PRETRAIN_RUN = "pretrain"
SPLITS_RUN = "refcoco_plus_splits"
