"""``mmf_predict`` on MMF's own nlvr2 and visual_entailment datasets (rc10 and MMF main).

Both datasets inherit ``format_for_prediction`` from VQA2's dataset, which reads an answer
vocabulary and ``question_id`` that they do not have, and their samples carry no id. Each
sample now carries ``id``, its index in the split's annotations, and each dataset writes one
prediction per item with the annotation's own identifier: NLVR2's ``identifier`` and the
predicted label ``True`` / ``False`` (NLVR2's leaderboard format), SNLI-VE's ``pairID`` and
one of ``entailment``, ``neutral``, ``contradiction``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Sequence

import torch

NLVR2_LABELS = ("False", "True")  # MMF's NLVR2Dataset: targets 1 for "True"


def _with_id(load_item: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    @functools.wraps(load_item)
    def load(self: Any, idx: int) -> Any:
        sample = load_item(self, idx)
        sample.id = torch.tensor(idx, dtype=torch.long)
        return sample

    return load


def _formatter(id_key: str, labels: Sequence[str]) -> Callable[[Any, Any], List[Dict[str, Any]]]:
    def format_for_prediction(self: Any, report: Any) -> List[Dict[str, Any]]:
        """One prediction per item: its annotation's ``{id_key}`` and the predicted label."""
        if "id" not in report:
            raise ValueError(
                f"{self.dataset_name}: the report has no item ids to name the "
                "predictions by (samples without 'id')"
            )
        predicted = report.scores.argmax(dim=1).tolist()
        return [
            {id_key: self.annotation_db[int(index)][id_key], "prediction": labels[label]}
            for index, label in zip(report.id.view(-1).tolist(), predicted)
        ]

    return format_for_prediction


def nlvr2_and_visual_entailment_predictions() -> None:
    """Give MMF's NLVR2 and visual-entailment datasets item ids and their own predictions."""
    from mmf.datasets.builders.nlvr2.dataset import NLVR2Dataset
    from mmf.datasets.builders.visual_entailment.dataset import (
        LABEL_TO_INT_MAPPING,
        VisualEntailmentDataset,
    )

    entailment = tuple(sorted(LABEL_TO_INT_MAPPING, key=LABEL_TO_INT_MAPPING.get))
    for dataset, id_key, labels in (
        (NLVR2Dataset, "identifier", NLVR2_LABELS),
        (VisualEntailmentDataset, "pairID", entailment),
    ):
        dataset.load_item = _with_id(dataset.load_item)
        dataset.format_for_prediction = _formatter(id_key, labels)
