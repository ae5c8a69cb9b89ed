"""Trivial rates of a world's downstream test sets, from its own annotation files.

A trivial predictor is fitted on the train split and scored on the test split, as a model
that ignores the image would be; choosing it on the test labels instead would give a rate
no predictor can reach without them (on the demo world: VQA 29.4 % against 24.4 %, NLVR2
51.2 % against 48.8 %).

- VQA: the best single answer of each question type on the train split, given to every test
  question of that type (the best train answer overall to a type train lacks), scored by
  MMF's soft VQA accuracy (``vqa_answer`` processor: an answer's score is the mean, over
  the ten annotator answers left out in turn, of min(1, matches among the other nine / 3)).
  The type is read off the question's words (the toy world's text says nothing else about
  the answer), so a model that reads only the question reaches this rate;
- NLVR2 and VE: the share of the train split's majority label in the test split;
- RefCOCO+ val / testA / testB: the chance that a proposal drawn uniformly from the image's
  first ``max_proposals`` detected regions overlaps the gold box by IoU >= 0.5.

Paths follow the toy world's layout (:data:`SPLIT_FILES`), the one the fine-tuning configs
read by default. A task whose train or test file is missing leaves its cells out.
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
from mmf_uvlp.tasks import REFCOCO_PLUS_SPLITS
from mmf_uvlp.utils.boxes import MATCH_IOU, iou

SPLIT_FILES = {  # task -> (train file, test file)
    "vqa2": ("mmf/vqa2/annotations/imdb_train.npy", "mmf/vqa2/annotations/imdb_test.npy"),
    "nlvr2": ("mmf/nlvr2/annotations/train.jsonl", "mmf/nlvr2/annotations/test1.jsonl"),
    "visual_entailment": (
        "mmf/visual_entailment/annotations/snli_ve_train.jsonl",
        "mmf/visual_entailment/annotations/snli_ve_test.jsonl",
    ),
}
REFER = "refer"  # refer root holding refcoco+/
REFCOCO_FEATURES = "features/coco.lmdb"


def vqa_answer_score(answers: Sequence[str], answer: str) -> float:
    """MMF's soft VQA accuracy of ``answer`` against ten annotator answers."""
    scores = []
    for left_out in range(len(answers)):
        matches = sum(1 for i, a in enumerate(answers) if i != left_out and a == answer)
        scores.append(min(1.0, matches / 3))
    return sum(scores) / len(scores)


def best_constant_vqa(questions: Iterable[Sequence[str]]) -> str:
    """The single answer that scores best over ``questions`` (each the list of its
    annotator answers); ties go to the answer first in sorted order."""
    totals: Counter[str] = Counter()
    for answers in questions:
        for answer in set(answers):
            totals[answer] += vqa_answer_score(answers, answer)
    if not totals:
        raise ValueError("no VQA questions to score")
    return min(totals, key=lambda answer: (-totals[answer], answer))


def answer_per_type(train: Iterable[tuple[str, Sequence[str]]]) -> dict[str, str]:
    """The best answer of each question type of ``train`` (pairs of type and annotator
    answers), and of every type under ``""`` (for types train lacks)."""
    train = list(train)
    by_type: dict[str, list[Sequence[str]]] = {}
    for question_type, answers in train:
        by_type.setdefault(question_type, []).append(answers)
    best = {t: best_constant_vqa(group) for t, group in by_type.items()}
    return {**best, "": best_constant_vqa(answers for _, answers in train)}


def vqa_prior_rate(
    train: Iterable[tuple[str, Sequence[str]]], test: Iterable[tuple[str, Sequence[str]]]
) -> float:
    """Accuracy on ``test`` of the best train answer of each question type."""
    best = answer_per_type(train)
    scores = [
        vqa_answer_score(answers, best.get(question_type, best[""]))
        for question_type, answers in test
    ]
    if not scores:
        raise ValueError("no VQA test questions to score")
    return sum(scores) / len(scores)


def majority_rate(train: Iterable[str], test: Iterable[str]) -> float:
    """Share in ``test`` of the most frequent label of ``train`` (ties: first in sorted
    order)."""
    counts, test = Counter(train), list(test)
    if not counts or not test:
        raise ValueError("no labels to count")
    majority = min(counts, key=lambda label: (-counts[label], label))
    return sum(label == majority for label in test) / len(test)


def proposal_chance(proposals: torch.Tensor, gold: torch.Tensor) -> float:
    """Share of ``proposals`` (n, 4) whose IoU with ``gold`` (4,) reaches the match
    threshold (0 when there is none): a uniformly drawn proposal's chance of a hit."""
    if proposals.numel() == 0:
        return 0.0
    hits = iou(proposals, gold.view(1, 4)).view(-1) >= MATCH_IOU
    return float(hits.float().mean())


def refcoco_chance(
    refer_root: str | os.PathLike, features: str | os.PathLike, max_proposals: int, split: str
) -> float:
    """Mean :func:`proposal_chance` over the expressions of a RefCOCO+ split."""
    refer = Refer(refer_root, "refcoco+")
    chances = []
    with LmdbFeatures(features) as db:
        for expression in refer.expressions(split):
            record = db[os.path.splitext(expression.image_file)[0]]
            boxes = np.asarray(record["bbox"], dtype=np.float32)[:max_proposals]
            chances.append(
                proposal_chance(
                    torch.from_numpy(boxes), torch.tensor(expression.box, dtype=torch.float32)
                )
            )
    if not chances:
        raise ValueError(f"{refer.refs_path}: no expressions of split {split!r}")
    return sum(chances) / len(chances)


def _typed_answers(path: Path) -> list[tuple[str, list[str]]]:
    return [
        (str(record.get("question_type", "")), [str(a) for a in record["answers"]])
        for record in read_vqa2_imdb(path)
    ]


def trivial_rates(world: str | os.PathLike, max_proposals: int) -> dict[Cell, float]:
    """Every trivial rate whose files the world has, as (task, split) -> fraction."""
    root = Path(world)
    files = {task: (root / train, root / test) for task, (train, test) in SPLIT_FILES.items()}
    have = {task for task, paths in files.items() if all(p.exists() for p in paths)}
    rates: dict[Cell, float] = {}
    if "vqa2" in have:
        rates["vqa2", "test"] = vqa_prior_rate(*map(_typed_answers, files["vqa2"]))
    if "nlvr2" in have:
        rates["nlvr2", "test"] = majority_rate(
            *([r["label"] for r in read_nlvr2(p)] for p in files["nlvr2"])
        )
    if "visual_entailment" in have:
        rates["visual_entailment", "test"] = majority_rate(
            *(
                [r["gold_label"] for r in read_jsonl(p, ("gold_label",))]
                for p in files["visual_entailment"]
            )
        )
    refer, features = root / REFER, root / REFCOCO_FEATURES
    if (refer / "refcoco+").is_dir() and features.exists():
        for split in REFCOCO_PLUS_SPLITS:
            rates["refcoco_plus", split] = refcoco_chance(refer, features, max_proposals, split)
    return rates
