"""The collapse check: one line at the end of an evaluation whose predictions are one
answer for every item, or whose accuracy is below the majority rate; none for a model that
answers varied and above it. Its accuracy is compared with MMF's own ``accuracy`` and
``vqa_accuracy`` metrics on the same scores."""

from __future__ import annotations

import logging

import pytest
import torch
from mmf.common.registry import registry
from mmf.common.report import Report
from mmf.common.sample import SampleList

from mmf_uvlp.metrics.collapse import measure, warn_if_collapsed


def _report(scores: torch.Tensor, targets: torch.Tensor, name: str = "vqa2") -> Report:
    batch = SampleList({"targets": targets, "dataset_name": name, "dataset_type": "test"})
    return Report(batch, {"scores": scores})


def _vqa(n: int = 60, answers: int = 12, seed: int = 0):
    """Soft-score targets as VQA's: each question's answers scored 1.0, 0.6 or 0.3, the
    first answer most often right (the majority), index 0 the unknown answer."""
    generator = torch.Generator().manual_seed(seed)
    targets = torch.zeros(n, answers)
    for i in range(n):
        right = 1 if i % 3 == 0 else int(torch.randint(2, answers, (1,), generator=generator))
        targets[i, right] = 1.0
        targets[i, (right % (answers - 1)) + 1] = max(targets[i, (right % (answers - 1)) + 1], 0.3)
    return targets


def _mmf_metric(name: str, scores: torch.Tensor, targets: torch.Tensor) -> float:
    metric = registry.get_metric_class(name)()
    return float(metric.calculate({"targets": targets}, {"scores": scores}))


def test_a_constant_vqa_predictor_is_named_in_one_line(caplog):
    targets = _vqa()
    scores = torch.zeros_like(targets)
    scores[:, 5] = 3.0  # answer 5 for every question
    with caplog.at_level(logging.WARNING, logger="mmf_uvlp.metrics.collapse"):
        line = warn_if_collapsed(_report(scores, targets), ["vqa_accuracy"])
    measured = measure(scores[:, 1:].argmax(1) + 1, targets)
    assert measured.accuracy == pytest.approx(_mmf_metric("vqa_accuracy", scores, targets))
    assert line is not None and "\n" not in line
    assert line.startswith("vqa2 test: collapsed: all 60 predictions are answer 5; ")
    assert f"majority rate {100 * measured.majority_rate:.1f} (answer 1 for every item)" in line
    assert [r.getMessage() for r in caplog.records] == [line]


def test_a_varied_predictor_above_the_majority_rate_says_nothing(caplog):
    targets = _vqa()
    scores = targets + 0.1 * torch.randn(targets.shape, generator=torch.Generator().manual_seed(1))
    measured = measure(scores[:, 1:].argmax(1) + 1, targets)
    assert measured.distinct > 5 and measured.accuracy > measured.majority_rate
    assert measured.accuracy == pytest.approx(_mmf_metric("vqa_accuracy", scores, targets))
    with caplog.at_level(logging.WARNING, logger="mmf_uvlp.metrics.collapse"):
        assert warn_if_collapsed(_report(scores, targets), ["vqa_accuracy"]) is None
    assert caplog.records == []


def test_varied_answers_below_the_majority_rate_are_named():
    targets = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2])  # majority rate 50 %
    predictions = torch.tensor([1, 2, 1, 2, 0, 0, 0, 1])  # 0 right of 8
    scores = torch.nn.functional.one_hot(predictions, 3).float()
    line = warn_if_collapsed(_report(scores, targets, "nlvr2"), [{"type": "accuracy"}])
    assert _mmf_metric("accuracy", scores, targets) == pytest.approx(0.0)
    assert line == (
        "nlvr2 test: accuracy below the majority rate with 3 distinct answers over "
        "8 items; accuracy 0.0, majority rate 50.0 (answer 0 for every item): the "
        "model has not learned the task (too few updates, or a schedule or loss "
        "that does not fit its backbone)"
    )


def test_a_constant_classifier_at_the_majority_rate_is_still_collapsed():
    targets = torch.tensor([1, 1, 1, 0])
    scores = torch.tensor([[0.0, 1.0]] * 4)
    line = warn_if_collapsed(_report(scores, targets, "visual_entailment"), ["accuracy"])
    assert line is not None and "collapsed: all 4 predictions are answer 1" in line
    assert "accuracy 75.0, majority rate 75.0" in line


def test_tasks_without_a_fixed_answer_set_are_not_checked():
    targets = torch.zeros(4, 3)
    scores = torch.zeros(4, 3)
    assert warn_if_collapsed(_report(scores, targets, "refcoco_plus"), ["refcoco_accuracy"]) is None
    assert warn_if_collapsed(_report(scores, targets, "uvla_region_tag"), []) is None
