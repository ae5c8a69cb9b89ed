"""The toy world's content: detector errors, answers grounded in the scenes, RefCOCO splits, and
worlds with fewer foreground classes."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mmf_uvlp.data_formats.annotations import (
    read_nlvr2,
    read_visual_entailment,
    read_vqa2_imdb,
)
from mmf_uvlp.data_formats.mmf_features import LmdbFeatures, read_lmdb
from mmf_uvlp.data_formats.refer import Refer
from mmf_uvlp.data_formats.text import read_captions, read_corpus
from mmf_uvlp.data_formats.vinvl import read_vinvl
from mmf_uvlp.toy_world import PRESETS, generate_world
from mmf_uvlp.toy_world import downstream as ds
from mmf_uvlp.toy_world.vocabulary import (
    CLASS_INDEX,
    CLASSES,
    FOREGROUND,
    MIN_FOREGROUND_CLASSES,
    ClassSet,
    plural,
    round_robin_foreground,
)

from helpers.toy_world import classes_named, files_under, ground_truth

PLURAL_TO_CLASS = {plural(c.name): c.name for c in CLASSES}


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


# ---------------------------------------------------------------- the world's content


def test_detector_makes_realistic_errors(world):
    out, manifest, _ = world
    gt = ground_truth(out, "cc")
    preds = read_vinvl(
        out / manifest["paths"]["predictions_tsv"], out / manifest["paths"]["features_tsv"]
    )
    kinds, wrong, objects, low_conf, tiny = Counter(), 0, 0, 0, 0
    for pred, _ in preds:
        g = gt[pred.image_id]
        for region, o in zip(g["regions"], pred.objects):
            kinds[region["kind"]] += 1
            if region["kind"] == "object":
                objects += 1
                wrong += o.cls != g["objects"][region["source"]]["class"]
            low_conf += o.conf < 0.3
            tiny += o.area < 0.01 * pred.image_w * pred.image_h
    assert 0.03 < wrong / objects < 0.2
    assert kinds["duplicate"] > 0 and kinds["spurious"] > 0
    total = sum(kinds.values())
    assert low_conf > 0.03 * total and tiny > 0.03 * total


def _vqa_truth(scene: dict, record: dict) -> set[str]:
    """Every answer the scene supports for the question (one, when the world is right)."""
    objects = scene["objects"]
    classes = [o["class"] for o in objects]
    q, kind = record["question_str"], record["question_type"]

    def related(index: int, predicate: str, role: str) -> set[str]:
        other = "object" if role == "subject" else "subject"
        return {
            objects[r[other]]["class"]
            for r in scene["relations"]
            if r[role] == index and r["predicate"] == predicate
        }

    def the(name: str) -> int:
        (index,) = [i for i, c in enumerate(classes) if c == name]  # exactly one
        return index

    if kind == "counting":
        many = re.match(r"How many (.+?) (are|can) ", q).group(1)
        return {str(classes.count(PLURAL_TO_CLASS[many]))}
    if kind == "presence":
        match = re.match(r"(Is there an? (.+?)( in the picture)?|Are there any (.+))\?$", q)
        name = match.group(2) or PLURAL_TO_CLASS[match.group(4)]
        return {"yes" if name in classes else "no"}
    if kind == "colour":
        return {objects[the(q.rstrip("?").split(" the ")[-1])]["attributes"]["colour"]}
    if kind in ("holding", "riding"):
        name = re.match(rf"What is (?:the|this) (.+) {kind}\?$", q).group(1)
        return related(the(name), kind, "subject")
    if kind == "on":
        name = re.match(r"What is (?:lying )?on the (.+)\?$", q).group(1)
        return related(the(name), "on", "object")
    if kind == "material":
        match = re.match(r"What is the (.+) made of\?$|What material is the (.+)\?$", q)
        return {objects[the(match.group(1) or match.group(2))]["attributes"]["material"]}
    raise AssertionError(f"question type {kind!r} has no check")


def test_vqa_answers_match_ground_truth(world):
    """Every question type's majority answer is what the scene shows, and only that."""
    out, manifest, _ = world
    gt = ground_truth(out, "coco")
    seen = Counter()
    for split in ("train", "val", "test"):
        for r in read_vqa2_imdb(out / manifest["paths"]["vqa2"][split]):
            majority = Counter(r["answers"]).most_common(1)[0][0]
            assert _vqa_truth(gt[r["image_name"]], r) == {majority}, r["question_str"]
            seen[r["question_type"]] += 1
    assert set(seen) == set(ds.QUESTION_TYPES) and len(ds.QUESTION_TYPES) == 7, seen


def test_refcoco_splits_and_proposals(world):
    out, manifest, _ = world
    refer = Refer(out / manifest["paths"]["refcoco+"]["root"])
    person = {CLASS_INDEX[c.name] + 1 for c in CLASSES if c.is_person}
    hits = total = 0
    with LmdbFeatures(out / manifest["paths"]["refcoco+"]["features_lmdb"]) as coco:
        for e in refer.expressions():
            if e.split == "testA":
                assert e.category_id in person
            if e.split == "testB":
                assert e.category_id not in person
            boxes = coco[e.image_file[: -len(".jpg")]]["bbox"]
            total += 1
            hits += max(_iou(b, e.box) for b in boxes) >= 0.5
    assert {r["split"] for r in refer.refs} == {"train", "val", "testA", "testB"}
    assert hits / total > 0.85


# ---------------------------------------------------------------- fewer foreground classes

FEW = 24


@pytest.fixture(scope="module")
def few_world(tmp_path_factory) -> tuple[Path, dict]:
    """The tiny world restricted to ``FEW`` foreground classes."""
    out = tmp_path_factory.mktemp("toy") / f"tiny_k{FEW}"
    return out, generate_world(replace(PRESETS["tiny"], foreground_classes=FEW), out)


def test_every_size_from_the_minimum_meets_the_tasks_needs():
    assert ClassSet.of_size(0).foreground == FOREGROUND
    for k in range(MIN_FOREGROUND_CLASSES, len(FOREGROUND) + 1):
        classes = ClassSet.of_size(k)
        assert len(set(classes.foreground)) == k and set(classes.foreground) <= set(FOREGROUND)
        for kind in (
            classes.persons,
            classes.handheld,
            classes.rideable,
            classes.surfaces,
            classes.coloured,
            classes.material,
        ):
            assert len(kind) >= 2, k
        assert all(len(classes.on_items(s)) >= 2 for s in classes.surfaces), k
    few = ClassSet.of_size(FEW)
    supercategories = {CLASSES[c].supercategory for c in FOREGROUND}
    assert {CLASSES[c].supercategory for c in few.foreground} == supercategories
    assert set(round_robin_foreground()[: len(supercategories)]) <= set(few.foreground)


@pytest.mark.parametrize("k", [MIN_FOREGROUND_CLASSES - 1, len(FOREGROUND) + 1])
def test_too_few_or_too_many_foreground_classes_are_refused(k):
    with pytest.raises(
        ValueError,
        match=rf"WorldConfig\.foreground_classes .*got {k}: .*"
        rf"at least {MIN_FOREGROUND_CLASSES} classes",
    ):
        replace(PRESETS["tiny"], foreground_classes=k)


def test_fewer_classes_are_the_same_for_every_seed_and_recorded(few_world, tmp_path):
    out, manifest = few_world
    active = manifest["active_classes"]
    assert active == ClassSet.of_size(FEW).names and manifest["num_classes"] == len(CLASSES)
    assert sum(not CLASSES[CLASS_INDEX[n]].background for n in active) == FEW
    assert all(c.name in active for c in CLASSES if c.background)
    vocabulary = json.loads((out / "vocabulary.json").read_text())
    assert [c["name"] for c in vocabulary["classes"] if c["active"]] == active
    other = generate_world(
        replace(PRESETS["tiny"], foreground_classes=FEW, seed=1, downstream=False), tmp_path / "s1"
    )
    assert other["active_classes"] == active


def test_fewer_classes_same_seed_same_bytes(few_world, tmp_path):
    out, _ = few_world
    generate_world(replace(PRESETS["tiny"], foreground_classes=FEW), tmp_path / "again")
    first, second = files_under(out), files_under(tmp_path / "again")
    assert sorted(first) == sorted(second)
    assert [name for name in first if first[name] != second[name]] == []


def test_fewer_classes_in_scenes_and_detections(few_world):
    out, manifest = few_world
    active = set(manifest["active_classes"])
    columns = {0} | {CLASS_INDEX[n] + 1 for n in active}
    for pool, paths in manifest["paths"]["pools"].items():
        gt = ground_truth(out, pool)
        assert {o["class"] for g in gt.values() for o in g["objects"]} <= active, pool
        labels = [
            o.cls
            for p, _ in read_vinvl(out / paths["predictions_tsv"], out / paths["features_tsv"])
            for o in p.objects
        ]
        assert set(labels) <= active, pool
        for _, rec in read_lmdb(
            out / paths["lmdb"], manifest["feature_dim"], manifest["cls_prob_columns"]
        ):
            assert set(np.nonzero(rec["cls_prob"])[1]) <= columns, pool
    refer = Refer(out / manifest["paths"]["refcoco+"]["root"])
    assert {CLASSES[r["category_id"] - 1].name for r in refer.refs} <= active


def test_fewer_classes_in_every_text(few_world):
    """Captions, corpora and downstream sentences name active classes only."""
    out, manifest = few_world
    paths = manifest["paths"]
    active = set(manifest["active_classes"])
    texts = {
        "captions": [c for _, c in read_captions(out / paths["captions_gt"])],
        "caption corpus": list(read_corpus(out / paths["caption_corpus"])),
        "narrative": list(read_corpus(out / paths["narrative_corpus"])),
        "vqa2": [],
        "nlvr2": [],
        "visual_entailment": [],
        "refcoco+": [
            s["raw"] for r in Refer(out / paths["refcoco+"]["root"]).refs for s in r["sentences"]
        ],
    }
    for split in ("train", "val", "test"):
        texts["vqa2"] += [
            t
            for r in read_vqa2_imdb(out / paths["vqa2"][split])
            for t in [r["question_str"], *r["answers"]]
        ]
        texts["nlvr2"] += [r["sentence"] for r in read_nlvr2(out / paths["nlvr2"][split])]
        texts["visual_entailment"] += [
            t
            for r in read_visual_entailment(out / paths["visual_entailment"][split])
            for t in (r["sentence1"], r["sentence2"])
        ]
    for name, lines in texts.items():
        named = classes_named(lines)
        assert set(named) <= active, (name, set(named) - active)
        assert any(not CLASSES[CLASS_INDEX[n]].background for n in named), name
