"""VQA accuracy per question type (or answer type) of MMF's test predictions.

A fine-tuning run with ``evaluation.predict=True`` writes its test predictions to
``<save_dir>/<experiment>/reports/vqa2_run_test_<time>.json``, a list of
``{"question_id", "answer"}``. The types and the ten annotator answers come from the
split's imdb (``imdb_test.npy``, fields ``question_type`` / ``answer_type``). Scores are
MMF's soft VQA accuracy (:func:`~mmf_uvlp.report.trivial.vqa_answer_score`), so the
"all" row equals the run's logged ``vqa_accuracy``. The prior of a type is the best single
train answer of that type, scored on the same questions: the trivial rate beside each row.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from mmf_uvlp.errors import FormatError
from mmf_uvlp.report.trivial import answer_per_type, vqa_answer_score

ALL = "all"


@dataclass(frozen=True)
class Cell:
    """Accuracy of one group of questions."""

    count: int
    accuracy: float


def find_predictions(path: str | os.PathLike) -> Path:
    """``path`` when it is a file, else the newest ``reports/vqa2*test*.json`` under it."""
    path = Path(path)
    if path.is_file():
        return path
    found = sorted(path.glob("**/reports/vqa2*test*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(
            f"{path}: no VQA test predictions (reports/vqa2*test*.json) under it; run the "
            "fine-tuning with evaluation.predict=True"
        )
    return found[-1]


def read_predictions(path: str | os.PathLike) -> dict[int, str]:
    """question_id -> predicted answer of an MMF prediction file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise FormatError(
            path, "predictions", "a json list of {question_id, answer}", str(e)
        ) from None
    if not isinstance(data, list):
        raise FormatError(path, "predictions", "a json list", type(data).__name__)
    predictions = {}
    for index, record in enumerate(data):
        if not isinstance(record, dict) or not {"question_id", "answer"} <= set(record):
            raise FormatError(path, "question_id/answer", "both keys", record, key=f"[{index}]")
        predictions[int(record["question_id"])] = str(record["answer"])
    return predictions


def _group(record: Mapping, by: str, source: str | os.PathLike) -> str:
    if by not in record:
        raise FormatError(
            source, by, f"a {by} in every question to group by", key=str(record.get("question_id"))
        )
    return str(record[by])


def breakdown(
    questions: Sequence[Mapping], predictions: Mapping[int, str], by: str, source: str | os.PathLike
) -> dict[str, Cell]:
    """Accuracy of ``predictions`` per value of ``by`` over ``questions`` (imdb records of
    ``source``), and over all of them under :data:`ALL`. Every question needs a prediction."""
    scores: dict[str, list[float]] = {}
    missing = [q["question_id"] for q in questions if int(q["question_id"]) not in predictions]
    if missing:
        raise ValueError(
            f"{source}: {len(missing)} of {len(questions)} questions have no "
            f"prediction (first: question_id {missing[0]}); were the predictions "
            "made on this split?"
        )
    for question in questions:
        score = vqa_answer_score(question["answers"], predictions[int(question["question_id"])])
        scores.setdefault(_group(question, by, source), []).append(score)
        scores.setdefault(ALL, []).append(score)
    return {group: Cell(len(values), sum(values) / len(values)) for group, values in scores.items()}


def prior_breakdown(
    train: Iterable[Mapping], questions: Sequence[Mapping], by: str, source: str | os.PathLike
) -> dict[str, Cell]:
    """The per-group trivial rate: each question answered with the best train answer of its
    question type (of every train question when train lacks that type)."""
    best = answer_per_type((str(r.get("question_type", "")), r["answers"]) for r in train)
    prior = {
        int(q["question_id"]): best.get(str(q.get("question_type", "")), best[""])
        for q in questions
    }
    return breakdown(questions, prior, by, source)


def markdown(columns: Mapping[str, Mapping[str, Cell]], by: str) -> str:
    """A table: one row per group (:data:`ALL` first), n, then one column per name."""
    first = next(iter(columns.values()))
    groups = [ALL] + sorted(g for g in first if g != ALL)
    lines = [f"| {by} | n | " + " | ".join(columns) + " |", "|---|---:|" + "---:|" * len(columns)]
    for group in groups:
        cells = " | ".join(f"{100 * column[group].accuracy:.1f}" for column in columns.values())
        lines.append(f"| {group} | {first[group].count} | {cells} |")
    return "\n".join(lines)
