"""The collapse check at the end of an evaluation: one line when a classifier's predictions
are one answer for every item, or its accuracy is below the split's majority rate.

A classifier that learned nothing from the image and the text still scores the rate of its
most frequent answer; one that ends below it, or answers the same for everything, has
collapsed (a schedule or loss that does not fit its backbone, too few updates), and its
accuracy would otherwise be read as a result. It applies to the tasks whose answers come
from a fixed set, scored by MMF's ``accuracy`` or ``vqa_accuracy`` (VQA, NLVR2, VE), on the
``scores`` (N, C) and ``targets`` MMF concatenates over the evaluation: class indices (N,)
or per-answer scores (N, C), VQA's soft scores, where an item's accuracy is its target score
of the predicted answer and the majority rate is the best single answer's mean.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, NamedTuple, Optional

import torch

logger = logging.getLogger(__name__)

CHECKED_METRICS = ("accuracy", "vqa_accuracy")


class Collapse(NamedTuple):
    """What an evaluation's predictions show: accuracy and majority rate in [0, 1]."""

    items: int
    distinct: int  # distinct predicted answers
    predicted: int  # the most frequent predicted answer
    accuracy: float
    majority_rate: float
    majority: int  # the answer whose constant prediction scores the majority rate

    @property
    def collapsed(self) -> bool:
        return self.items > 1 and self.distinct == 1

    @property
    def below_majority(self) -> bool:
        return self.accuracy < self.majority_rate - 1e-9

    def message(self, where: str) -> Optional[str]:
        """One line for ``where`` (e.g. ``vqa2 test``) when collapsed or below the
        majority rate, else None."""
        if not (self.collapsed or self.below_majority):
            return None
        rates = (
            f"accuracy {100 * self.accuracy:.1f}, majority rate "
            f"{100 * self.majority_rate:.1f} (answer {self.majority} for every item)"
        )
        if self.collapsed:
            what = f"collapsed: all {self.items} predictions are answer {self.predicted}"
        else:
            what = (
                f"accuracy below the majority rate with {self.distinct} distinct answers "
                f"over {self.items} items"
            )
        return (
            f"{where}: {what}; {rates}: the model has not learned the task (too few "
            "updates, or a schedule or loss that does not fit its backbone)"
        )


def measure(predictions: torch.Tensor, targets: torch.Tensor) -> Collapse:
    """The :class:`Collapse` of ``predictions`` (N,) against ``targets``: class indices
    (N,) or per-answer scores (N, C)."""
    predictions = predictions.reshape(-1).long().cpu()
    targets = targets.detach().cpu()
    if targets.dim() == 1:
        targets = targets.long()
        classes = int(max(predictions.max().item(), targets.max().item())) + 1
        counts = torch.bincount(targets, minlength=classes).float()
        accuracy = (predictions == targets).float().mean().item()
        majority_rate = (counts.max() / targets.numel()).item()
        majority = int(counts.argmax().item())
    elif targets.dim() == 2 and targets.size(0) == predictions.numel():
        targets = targets.float()
        accuracy = targets.gather(1, predictions.view(-1, 1)).mean().item()
        means = targets.mean(dim=0)
        majority_rate, majority = means.max().item(), int(means.argmax().item())
    else:
        raise ValueError(
            f"collapse check: expected targets (N,) or (N, C) for "
            f"{predictions.numel()} predictions, got {tuple(targets.shape)}"
        )
    values, counts = torch.unique(predictions, return_counts=True)
    return Collapse(
        items=predictions.numel(),
        distinct=values.numel(),
        predicted=int(values[counts.argmax()].item()),
        accuracy=accuracy,
        majority_rate=majority_rate,
        majority=majority,
    )


def _metric_names(metrics: Iterable[Any]) -> list:
    return [m if isinstance(m, str) else m.get("type") for m in metrics or ()]


def warn_if_collapsed(report: Any, metrics: Iterable[Any]) -> Optional[str]:
    """Log the collapse line of an evaluation's combined ``report`` (MMF's, with ``scores``
    and ``targets`` over the split) when the run's evaluation ``metrics`` are those of a
    fixed answer set; returns the line (None when there is none)."""
    names = _metric_names(metrics)
    if not any(name in CHECKED_METRICS for name in names) or report is None:
        return None
    scores, targets = report.get("scores"), report.get("targets")
    if (
        not isinstance(scores, torch.Tensor)
        or not isinstance(targets, torch.Tensor)
        or scores.dim() != 2
        or scores.size(0) < 2
    ):
        return None
    scores = scores.detach().float()
    if "vqa_accuracy" in names and targets.dim() == 2:
        scores = scores.clone()
        scores[:, 0] = float("-inf")  # vqa_accuracy never predicts <unk> (index 0)
    where = " ".join(
        str(report.get(key))
        for key in ("dataset_name", "dataset_type")
        if report.get(key) is not None
    )
    line = measure(scores.argmax(dim=1), targets).message(where or "evaluation")
    if line is not None:
        logger.warning(line)
    return line
