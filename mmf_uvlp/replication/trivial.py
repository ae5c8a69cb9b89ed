"""Trivial rates of a world's downstream test sets, from its own annotation files.

- VQA: the best single answer for each question type, given to every test question of
  that type, scored by MMF's soft VQA accuracy (``vqa_answer`` processor: an answer's score
  is the mean, over the ten annotator answers left out in turn, of min(1, matches among the
  other nine / 3)). The type is read off the question's words (the toy world's text says
  nothing else about the answer), so a model that ignores the image reaches this rate; the
  best answer overall (``best_constant_vqa``) is lower;
- NLVR2 and VE: the majority label of the test split;
- RefCOCO+ val / testA / testB: the chance that a proposal drawn uniformly from the image's
  first ``max_proposals`` detected regions overlaps the gold box by IoU >= 0.5.

Paths follow the toy world's layout (:data:`TEST_FILES`), the one the fine-tuning configs
read by default. A file that is missing leaves its cells out.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from mmf_uvlp.data_formats.annotations import read_jsonl, read_nlvr2, read_vqa2_imdb
from mmf_uvlp.data_formats.mmf_features import LmdbFeatures
from mmf_uvlp.data_formats.refer import Refer
from mmf_uvlp.report.results import Cell
from mmf_uvlp.utils.boxes import MATCH_IOU, iou

TEST_FILES = {
    "vqa2": "mmf/vqa2/annotations/imdb_test.npy",
    "nlvr2": "mmf/nlvr2/annotations/test1.jsonl",
    "visual_entailment": "mmf/visual_entailment/annotations/snli_ve_test.jsonl",
    "refer": "refer",  # refer root holding refcoco+/
    "refcoco_features": "features/coco.lmdb",
}
REFCOCO_SPLITS = ("val", "testA", "testB")


def vqa_answer_score(answers: Sequence[str], answer: str) -> float:
    """MMF's soft VQA accuracy of ``answer`` against ten annotator answers."""
    scores = []
    for left_out in range(len(answers)):
        matches = sum(1 for i, a in enumerate(answers) if i != left_out and a == answer)
        scores.append(min(1.0, matches / 3))
    return sum(scores) / len(scores)


def best_constant_vqa(questions: Iterable[Sequence[str]]) -> float:
    """Accuracy of the single answer that scores best over all ``questions`` (each the
    list of its annotator answers)."""
    totals: Counter[str] = Counter()
    count = 0
    for answers in questions:
        count += 1
        for answer in set(answers):
            totals[answer] += vqa_answer_score(answers, answer)
    if not count:
        raise ValueError("no VQA questions to score")
    return max(totals.values()) / count


def best_answer_per_type(questions: Iterable[tuple[str, Sequence[str]]]) -> float:
    """Accuracy of the best single answer of each question type (``questions``: pairs of
    type and annotator answers), over all questions."""
    by_type: dict[str, list[Sequence[str]]] = {}
    for question_type, answers in questions:
        by_type.setdefault(question_type, []).append(answers)
    if not by_type:
        raise ValueError("no VQA questions to score")
    total = sum(best_constant_vqa(group) * len(group) for group in by_type.values())
    return total / sum(len(group) for group in by_type.values())


def majority_rate(labels: Iterable[str]) -> float:
    """Share of the most frequent label."""
    counts = Counter(labels)
    if not counts:
        raise ValueError("no labels to count")
    return max(counts.values()) / sum(counts.values())


def proposal_chance(proposals: torch.Tensor, gold: torch.Tensor) -> float:
    """Share of ``proposals`` (n, 4) whose IoU with ``gold`` (4,) reaches the match
    threshold (0 when there is none): a uniformly drawn proposal's chance of a hit."""
    if proposals.numel() == 0:
        return 0.0
    hits = iou(proposals, gold.view(1, 4)).view(-1) >= MATCH_IOU
    return float(hits.float().mean())


def refcoco_chance(refer_root: str | os.PathLike, features: str | os.PathLike,
                   max_proposals: int, split: str) -> float:
    """Mean :func:`proposal_chance` over the expressions of a RefCOCO+ split."""
    refer = Refer(refer_root, "refcoco+")
    chances = []
    with LmdbFeatures(features) as db:
        for expression in refer.expressions(split):
            record = db[os.path.splitext(expression.image_file)[0]]
            boxes = np.asarray(record["bbox"], dtype=np.float32)[:max_proposals]
            chances.append(proposal_chance(torch.from_numpy(boxes),
                                           torch.tensor(expression.box, dtype=torch.float32)))
    if not chances:
        raise ValueError(f"{refer.refs_path}: no expressions of split {split!r}")
    return sum(chances) / len(chances)


def trivial_rates(world: str | os.PathLike, max_proposals: int) -> dict[Cell, float]:
    """Every trivial rate whose files the world has, as (task, split) -> fraction."""
    root = Path(world)
    path = {name: root / relative for name, relative in TEST_FILES.items()}
    rates: dict[Cell, float] = {}
    if path["vqa2"].exists():
        rates["vqa2", "test"] = best_answer_per_type(
            (str(record.get("question_type", "")), [str(a) for a in record["answers"]])
            for record in read_vqa2_imdb(path["vqa2"]))
    if path["nlvr2"].exists():
        rates["nlvr2", "test"] = majority_rate(r["label"] for r in read_nlvr2(path["nlvr2"]))
    if path["visual_entailment"].exists():
        records = read_jsonl(path["visual_entailment"], ("gold_label",))
        rates["visual_entailment", "test"] = majority_rate(r["gold_label"] for r in records)
    if (path["refer"] / "refcoco+").is_dir() and path["refcoco_features"].exists():
        for split in REFCOCO_SPLITS:
            rates["refcoco_plus", split] = refcoco_chance(path["refer"], path["refcoco_features"],
                                                          max_proposals, split)
    return rates
