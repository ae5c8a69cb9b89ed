"""Trivial rates recomputed from a world's files without ``trivial_rates``, and a world whose
train and test splits disagree, so that a rate fitted on the wrong split shows."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

from mmf_uvlp.data_formats.annotations import read_vqa2_imdb
from mmf_uvlp.report.trivial import refcoco_chance, vqa_answer_score

VQA = "mmf/vqa2/annotations/imdb_{}.npy"
NLVR2 = "mmf/nlvr2/annotations/{}.jsonl"
VE = "mmf/visual_entailment/annotations/snli_ve_{}.jsonl"


def labels(path: Path, key: str) -> list[str]:
    return [
        json.loads(line)[key]
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def majority(train: list[str]) -> str:
    counts = Counter(train)
    return min(counts, key=lambda label: (-counts[label], label))


def share(label: str, test: list[str]) -> float:
    return test.count(label) / len(test)


def typed_answers(path: Path) -> list[tuple[str, list[str]]]:
    return [
        (str(r.get("question_type", "")), list(map(str, r["answers"])))
        for r in read_vqa2_imdb(path)
    ]


def vqa_prior(fit: list[tuple[str, list[str]]], score: list[tuple[str, list[str]]]) -> float:
    """Each type's best answer on ``fit`` (overall best for a type ``fit`` lacks), scored
    by the soft VQA accuracy on ``score``."""

    def best(group: list[list[str]]) -> str:
        candidates = sorted({a for answers in group for a in answers})
        totals = [
            round(sum(vqa_answer_score(answers, c) for answers in group), 9) for c in candidates
        ]
        return candidates[totals.index(max(totals))]  # first of the best in sorted order

    overall = best([answers for _, answers in fit])
    per_type = {t: best([a for u, a in fit if u == t]) for t in {t for t, _ in fit}}
    return sum(vqa_answer_score(answers, per_type.get(t, overall)) for t, answers in score) / len(
        score
    )


def by_hand(world: Path, max_proposals: int) -> dict[tuple[str, str], float]:
    """Every trivial rate of ``world``, fitted on train and scored on test."""
    vqa_train, vqa_test = (typed_answers(world / VQA.format(s)) for s in ("train", "test"))
    nlvr2_train, nlvr2_test = (labels(world / NLVR2.format(s), "label") for s in ("train", "test1"))
    ve_train, ve_test = (labels(world / VE.format(s), "gold_label") for s in ("train", "test"))
    rates = {
        ("vqa2", "test"): vqa_prior(vqa_train, vqa_test),
        ("nlvr2", "test"): share(majority(nlvr2_train), nlvr2_test),
        ("visual_entailment", "test"): share(majority(ve_train), ve_test),
    }
    for split in ("val", "testA", "testB"):
        rates["refcoco_plus", split] = refcoco_chance(
            world / "refer", world / "features/coco.lmdb", max_proposals, split
        )
    return rates


def _relabel(path: Path, key: str, train_majority: str, other: str) -> None:
    """A quarter of the records get ``train_majority``, the rest ``other``."""
    records = [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    for index, record in enumerate(records):
        record[key] = train_majority if index % 4 == 0 else other
        if "annotator_labels" in record:
            record["annotator_labels"] = [record[key]]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def skewed_copy(world: Path, out: Path) -> Path:
    """``world`` copied to ``out`` with the NLVR2 and VE test labels rewritten so that the
    train split's majority label is a quarter of test (its minority): a rate taken from the
    test split's own majority reads 75 % there, the train-fitted one 25 %."""
    shutil.copytree(world, out)
    for pattern, key, test in ((NLVR2, "label", "test1"), (VE, "gold_label", "test")):
        train = labels(out / pattern.format("train"), key)
        top = majority(train)
        other = sorted(set(train) - {top})[0]
        _relabel(out / pattern.format(test), key, top, other)
    return out
