"""The generated toy world: determinism, formats read back, answers grounded, CLI."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression

from mmf_uvlp.cli import make_toy_world
from mmf_uvlp.data_formats.annotations import (
    read_nlvr2, read_visual_entailment, read_vqa2_imdb,
)
from mmf_uvlp.data_formats.mmf_features import LmdbFeatures, read_lmdb, read_npy_folder
from mmf_uvlp.data_formats.refer import Refer
from mmf_uvlp.data_formats.text import read_captions, read_corpus
from mmf_uvlp.data_formats.vinvl import read_detections_jsonl, read_vinvl
from mmf_uvlp.toy_world import PRESETS, generate_world
from mmf_uvlp.toy_world import downstream as ds
from mmf_uvlp.toy_world.scene import sample_scene
from mmf_uvlp.toy_world.vocabulary import (
    CLASS_INDEX, CLASSES, FOREGROUND, MIN_FOREGROUND_CLASSES, ClassSet, plural,
    round_robin_foreground,
)

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "make_toy_world.py"
POOLS = ("cc", "coco", "nlvr2", "flickr30k")
PLURAL_TO_CLASS = {plural(c.name): c.name for c in CLASSES}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, dict, float]:
    out = tmp_path_factory.mktemp("toy") / "tiny"
    start = time.perf_counter()
    manifest = generate_world(PRESETS["tiny"], out)
    return out, manifest, time.perf_counter() - start


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _gt(out: Path, pool: str) -> dict[str, dict]:
    return {r["image_id"]: r for r in map(json.loads, open(out / "images_gt" / f"{pool}.jsonl"))}


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


# ---------------------------------------------------------------- generation


def test_tiny_preset_is_fast(world):
    _, manifest, seconds = world
    assert seconds < 10, f"tiny world took {seconds:.1f} s"
    assert manifest["preset"] == "tiny" and manifest["feature_dim"] == 64
    assert len(CLASSES) >= 150


def test_same_seed_same_bytes(world, tmp_path):
    """Every file, the LMDB data.mdb files included, is byte-identical across runs."""
    out, _, _ = world
    generate_world(PRESETS["tiny"], tmp_path / "again")
    first, second = _files(out), _files(tmp_path / "again")
    assert sorted(first) == sorted(second)
    assert any(name.endswith("data.mdb") for name in first)
    different = [name for name in first if first[name] != second[name]]
    assert different == []


def test_other_seed_other_world(world, tmp_path):
    out, _, _ = world
    generate_world(replace(PRESETS["tiny"], seed=1, downstream=False), tmp_path / "s1")
    name = "detections/cc/predictions.tsv"
    assert (out / name).read_bytes() != (tmp_path / "s1" / name).read_bytes()


def test_manifest_paths_exist(world):
    out, manifest, _ = world

    def walk(value):
        for key, v in value.items():
            if isinstance(v, dict):
                yield from walk(v)
            elif key != "pool":
                yield v

    paths = list(walk(manifest["paths"]))
    assert len(paths) > 30
    for rel in paths:
        assert (out / rel).exists(), rel
    assert json.loads((out / "world.json").read_text()) == manifest
    for key in ("predictions_tsv", "features_tsv", "pretrain_lmdb", "captions_gt",
                "caption_corpus", "narrative_corpus"):
        assert key in manifest["paths"]
    for task in ("vqa2", "nlvr2", "visual_entailment"):
        assert {"train", "val", "test", "features_lmdb", "features_npy"} <= set(
            manifest["paths"][task])


# ---------------------------------------------------------------- formats read back


@pytest.mark.parametrize("pool", POOLS)
def test_vinvl_files_read_back(world, pool):
    out, manifest, _ = world
    paths = manifest["paths"]["pools"][pool]
    rows = list(read_vinvl(out / paths["predictions_tsv"], out / paths["features_tsv"],
                           feature_dim=manifest["feature_dim"]))
    assert len(rows) == manifest["counts"]["pools"][pool]["images"]
    ids = [p.image_id for p, _ in rows]
    assert ids == sorted(ids)
    simple = list(read_detections_jsonl(out / paths["detections_jsonl"]))
    for (pred, feats), det in zip(rows, simple):
        assert det.image_id == pred.image_id
        assert [o.rect for o in det.objects] == [o.rect for o in pred.objects]
        geometry = np.array([[o.rect[0] / pred.image_w, o.rect[1] / pred.image_h,
                              o.rect[2] / pred.image_w, o.rect[3] / pred.image_h]
                             for o in pred.objects])
        np.testing.assert_allclose(feats.geometry[:, :4], geometry, atol=1e-5)
    gt = _gt(out, pool)
    assert sorted(gt) == ids


@pytest.mark.parametrize("pool", POOLS)
def test_mmf_features_read_back(world, pool):
    out, manifest, _ = world
    paths = manifest["paths"]["pools"][pool]
    dim, ncls = manifest["feature_dim"], manifest["cls_prob_columns"]
    vinvl = {p.image_id: (p, f) for p, f in read_vinvl(out / paths["predictions_tsv"],
                                                        out / paths["features_tsv"])}
    lmdb_records = list(read_lmdb(out / paths["lmdb"], dim, ncls))
    npy_records = list(read_npy_folder(out / paths["npy_dir"], dim, ncls))
    assert [k for k, _ in lmdb_records] == [k for k, _ in npy_records] == sorted(vinvl)
    for (key, rec), (_, npy) in zip(lmdb_records, npy_records):
        pred, feats = vinvl[key]
        assert rec["image_id"] == key and rec["num_boxes"] == pred.num_boxes
        assert (rec["image_width"], rec["image_height"]) == (pred.image_w, pred.image_h)
        np.testing.assert_array_equal(rec["features"], feats.appearance)
        np.testing.assert_array_equal(npy["features"], rec["features"])
        np.testing.assert_array_equal(npy["cls_prob"], rec["cls_prob"])
        np.testing.assert_allclose(rec["bbox"], [o.rect for o in pred.objects] or
                                   np.zeros((0, 4)), atol=1e-3)
        assert [CLASSES[c].name for c in rec["objects"]] == [o.cls for o in pred.objects]
        np.testing.assert_allclose(rec["cls_prob"].sum(axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(rec["cls_prob"][np.arange(len(pred.objects)),
                                                   rec["objects"] + 1],
                                   [o.conf for o in pred.objects], atol=1e-3)


def _mmf_lmdb_key(feature_path: str, keys: set[str]) -> str:
    """The key MMF rc10's LMDBFeatureReader._load looks up for ``feature_path``."""
    split = feature_path.split(".npy")[0]
    try:
        key = str(int(split.split("_")[-1]))
        if key in keys:
            return key
    except ValueError:
        pass
    return split


def test_downstream_files_read_back_and_find_their_features(world):
    out, manifest, _ = world
    paths = manifest["paths"]
    counts = manifest["counts"]
    coco = LmdbFeatures(out / paths["vqa2"]["features_lmdb"])
    nlvr = LmdbFeatures(out / paths["nlvr2"]["features_lmdb"])
    flickr = LmdbFeatures(out / paths["visual_entailment"]["features_lmdb"])
    try:
        for split in ("train", "val", "test"):
            vqa = list(read_vqa2_imdb(out / paths["vqa2"][split]))
            assert len(vqa) == counts["vqa2"][split]
            for r in vqa:
                key = _mmf_lmdb_key(r["feature_path"], set(coco.keys()))
                assert key == r["image_name"] and coco[key]["num_boxes"] > 0
                assert (out / paths["vqa2"]["features_npy"] / r["feature_path"]).exists()
                assert isinstance(r["image_id"], int) and isinstance(r["question_id"], int)
            records = list(read_nlvr2(out / paths["nlvr2"][split]))
            assert len(records) == counts["nlvr2"][split]
            for r in records:  # as MMF's NLVR2Dataset derives the two feature paths
                stem = "-".join(r["identifier"].split("-")[:-1])
                for side in ("img0", "img1"):
                    assert _mmf_lmdb_key(f"{stem}-{side}.npy", set(nlvr.keys())) in nlvr
            records = list(read_visual_entailment(out / paths["visual_entailment"][split]))
            assert len(records) == counts["visual_entailment"][split]
            for r in records:  # as MMF's VisualEntailmentDataset derives it
                feature_path = "{}.npy".format(r["Flikr30kID"].split(".")[0])
                assert _mmf_lmdb_key(feature_path, set(flickr.keys())) in flickr
        refer = Refer(out / paths["refcoco+"]["root"])
        expressions = list(refer.expressions())
        assert len(expressions) == sum(counts["refcoco+"]["sentences"].values())
        for e in expressions:
            assert e.image_file[: -len(".jpg")] in coco
        answers = (out / paths["vqa2"]["answers"]).read_text().split("\n")
        assert "yes" in answers and "red" in answers and "dog" in answers
    finally:
        for db in (coco, nlvr, flickr):
            db.close()


def test_text_files_read_back(world):
    out, manifest, _ = world
    paths, counts = manifest["paths"], manifest["counts"]
    captions = list(read_captions(out / paths["captions_gt"]))
    assert [i for i, _ in captions] == sorted(_gt(out, "cc"))
    corpus = list(read_corpus(out / paths["caption_corpus"]))
    assert len(corpus) == counts["caption_corpus"] > len(captions)
    assert not Counter(c for _, c in captions) - Counter(corpus)  # all captions, unpaired
    assert corpus[: len(captions)] != [c for _, c in captions]
    narrative = list(read_corpus(out / paths["narrative_corpus"]))
    assert len(narrative) == counts["narrative_corpus"]
    names = [c.name for c in CLASSES if not c.background]
    visual = [s for s in narrative if any(f" {n}" in s for n in names)]
    assert 0.3 * len(narrative) < len(visual) < len(narrative)


# ---------------------------------------------------------------- the world's content


def test_detector_makes_realistic_errors(world):
    out, manifest, _ = world
    gt = _gt(out, "cc")
    preds = read_vinvl(out / manifest["paths"]["predictions_tsv"],
                       out / manifest["paths"]["features_tsv"])
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
        return {objects[r[other]]["class"] for r in scene["relations"]
                if r[role] == index and r["predicate"] == predicate}

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
    gt = _gt(out, "coco")
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
# words that name an object class but also occur otherwise: a colour, narrative fillers
NOT_OBJECTS = ("orange", "went back to bed", "put on a coat")
_CLASS_WORDS = {w: c.name for c in CLASSES for w in (c.name, plural(c.name))}
_CLASS_PATTERN = re.compile(r"\b(" + "|".join(
    re.escape(w) for w in sorted(_CLASS_WORDS, key=len, reverse=True)) + r")\b")


@pytest.fixture(scope="module")
def few_world(tmp_path_factory) -> tuple[Path, dict]:
    """The tiny world restricted to ``FEW`` foreground classes."""
    out = tmp_path_factory.mktemp("toy") / f"tiny_k{FEW}"
    return out, generate_world(replace(PRESETS["tiny"], foreground_classes=FEW), out)


def _classes_named(texts) -> Counter:
    """Class names mentioned in ``texts`` (longest name first: "hot dog" is no "dog")."""
    found = Counter()
    for text in texts:
        text = text.lower()
        for words in NOT_OBJECTS:
            text = re.sub(rf"\b{words}\b", " ", text)
        found.update(_CLASS_WORDS[w] for w in _CLASS_PATTERN.findall(text))
    return found


def test_every_size_from_the_minimum_meets_the_tasks_needs():
    assert ClassSet.of_size(0).foreground == FOREGROUND
    for k in range(MIN_FOREGROUND_CLASSES, len(FOREGROUND) + 1):
        classes = ClassSet.of_size(k)
        assert len(set(classes.foreground)) == k and set(classes.foreground) <= set(FOREGROUND)
        for kind in (classes.persons, classes.handheld, classes.rideable, classes.surfaces,
                     classes.coloured, classes.material):
            assert len(kind) >= 2, k
        assert all(len(classes.on_items(s)) >= 2 for s in classes.surfaces), k
    few = ClassSet.of_size(FEW)
    supercategories = {CLASSES[c].supercategory for c in FOREGROUND}
    assert {CLASSES[c].supercategory for c in few.foreground} == supercategories
    assert set(round_robin_foreground()[: len(supercategories)]) <= set(few.foreground)


@pytest.mark.parametrize("k", [MIN_FOREGROUND_CLASSES - 1, len(FOREGROUND) + 1])
def test_too_few_or_too_many_foreground_classes_are_refused(k):
    with pytest.raises(ValueError, match=rf"WorldConfig\.foreground_classes .*got {k}: .*"
                                         rf"at least {MIN_FOREGROUND_CLASSES} classes"):
        replace(PRESETS["tiny"], foreground_classes=k)


def test_fewer_classes_are_the_same_for_every_seed_and_recorded(few_world, tmp_path):
    out, manifest = few_world
    active = manifest["active_classes"]
    assert active == ClassSet.of_size(FEW).names and manifest["num_classes"] == len(CLASSES)
    assert sum(not CLASSES[CLASS_INDEX[n]].background for n in active) == FEW
    assert all(c.name in active for c in CLASSES if c.background)
    vocabulary = json.loads((out / "vocabulary.json").read_text())
    assert [c["name"] for c in vocabulary["classes"] if c["active"]] == active
    other = generate_world(replace(PRESETS["tiny"], foreground_classes=FEW, seed=1,
                                   downstream=False), tmp_path / "s1")
    assert other["active_classes"] == active


def test_fewer_classes_same_seed_same_bytes(few_world, tmp_path):
    out, _ = few_world
    generate_world(replace(PRESETS["tiny"], foreground_classes=FEW), tmp_path / "again")
    first, second = _files(out), _files(tmp_path / "again")
    assert sorted(first) == sorted(second)
    assert [name for name in first if first[name] != second[name]] == []


def test_fewer_classes_in_scenes_and_detections(few_world):
    out, manifest = few_world
    active = set(manifest["active_classes"])
    columns = {0} | {CLASS_INDEX[n] + 1 for n in active}
    for pool, paths in manifest["paths"]["pools"].items():
        gt = _gt(out, pool)
        assert {o["class"] for g in gt.values() for o in g["objects"]} <= active, pool
        labels = [o.cls for p, _ in read_vinvl(out / paths["predictions_tsv"],
                                               out / paths["features_tsv"]) for o in p.objects]
        assert set(labels) <= active, pool
        for _, rec in read_lmdb(out / paths["lmdb"], manifest["feature_dim"],
                                manifest["cls_prob_columns"]):
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
        "vqa2": [], "nlvr2": [], "visual_entailment": [],
        "refcoco+": [s["raw"] for r in Refer(out / paths["refcoco+"]["root"]).refs
                     for s in r["sentences"]],
    }
    for split in ("train", "val", "test"):
        texts["vqa2"] += [t for r in read_vqa2_imdb(out / paths["vqa2"][split])
                          for t in [r["question_str"], *r["answers"]]]
        texts["nlvr2"] += [r["sentence"] for r in read_nlvr2(out / paths["nlvr2"][split])]
        texts["visual_entailment"] += [
            t for r in read_visual_entailment(out / paths["visual_entailment"][split])
            for t in (r["sentence1"], r["sentence2"])]
    for name, lines in texts.items():
        named = _classes_named(lines)
        assert set(named) <= active, (name, set(named) - active)
        assert any(not CLASSES[CLASS_INDEX[n]].background for n in named), name


# ---------------------------------------------------------------- text alone is not enough


def _bow_accuracy(train_x, train_y, test_x, test_y) -> float:
    vectorizer = CountVectorizer(token_pattern=r"\w+")
    clf = LogisticRegression(max_iter=500)
    clf.fit(vectorizer.fit_transform(train_x), train_y)
    return float(clf.score(vectorizer.transform(test_x), test_y))


def _majority_bound(test_y) -> tuple[float, float]:
    """The majority-class rate of ``test_y`` (the best any text-blind guess can do)
    plus three binomial standard deviations of an accuracy measured on it."""
    rate = Counter(test_y).most_common(1)[0][1] / len(test_y)
    return rate, rate + 3 * float(np.sqrt(rate * (1 - rate) / len(test_y)))


@pytest.fixture(scope="module")
def large_downstream():
    rng = np.random.default_rng(123)
    classes = ClassSet.of_size(0)

    def make_scene(image_id, spec):
        return sample_scene(rng, classes, image_id, spec)

    coco_ids = ds.IdAllocator(rng, 1, 10**7)
    flickr_ids = ds.IdAllocator(rng, 10**9, 10**10)
    _, vqa = ds.build_vqa2(rng, classes, {"train": 6000, "val": 0, "test": 3000}, make_scene,
                           coco_ids)
    _, nlvr = ds.build_nlvr2(rng, classes, {"train": 2000, "val": 0, "test": 1000}, make_scene)
    _, ve = ds.build_visual_entailment(rng, classes, {"train": 3000, "val": 0, "test": 1500},
                                       make_scene, flickr_ids)
    ref_scenes, refer = ds.build_refcoco(rng, classes, {"train": 1500, "val": 600, "testA": 0,
                                                        "testB": 0}, make_scene, coco_ids)
    return vqa, nlvr, ve, (ref_scenes, refer)


def _assert_vqa_text_only_at_majority(vqa: dict[str, list[dict]]) -> None:
    """Within each question type, the question text does not predict the answer."""

    def answers(records):
        return [Counter(r["answers"]).most_common(1)[0][0] for r in records]

    for qtype in ds.QUESTION_TYPES:
        train = [r for r in vqa["train"] if r["question_type"] == qtype]
        test = [r for r in vqa["test"] if r["question_type"] == qtype]
        bow = _bow_accuracy([r["question_str"] for r in train], answers(train),
                            [r["question_str"] for r in test], answers(test))
        rate, bound = _majority_bound(answers(test))
        assert bow <= bound, (qtype, bow, rate)


def _assert_hypothesis_only_at_majority(ve: dict[str, list[dict]]) -> tuple[float, float]:
    """A VE hypothesis alone does not predict its label; the majority rate and its bound."""
    labels_tr = [r["gold_label"] for r in ve["train"]]
    labels_te = [r["gold_label"] for r in ve["test"]]
    bow = _bow_accuracy([r["sentence2"] for r in ve["train"]], labels_tr,
                        [r["sentence2"] for r in ve["test"]], labels_te)
    rate, bound = _majority_bound(labels_te)
    assert bow <= bound, (bow, rate)
    return rate, bound


def test_vqa_text_only_stays_at_the_per_type_majority(large_downstream):
    _assert_vqa_text_only_at_majority(large_downstream[0])


def _assert_nlvr2_text_only_at_majority(nlvr: dict) -> None:
    """A bag of words over the statement alone predicts no better than the majority."""
    train, test = nlvr["train"], nlvr["test"]
    bow = _bow_accuracy([r["sentence"] for r in train], [r["label"] for r in train],
                        [r["sentence"] for r in test], [r["label"] for r in test])
    rate, bound = _majority_bound([r["label"] for r in test])
    assert bow <= bound, (bow, rate)


def test_nlvr2_text_only_stays_at_majority(large_downstream):
    _assert_nlvr2_text_only_at_majority(large_downstream[1])


@pytest.fixture(scope="module")
def presence_statements():
    """NLVR2 with presence statements only, and the scenes of each record (left, right)."""
    rng = np.random.default_rng(7)
    classes = ClassSet.of_size(24)
    scenes, nlvr = ds.build_nlvr2(
        rng, classes, {"train": 2000, "val": 0, "test": 1000},
        lambda image_id, spec: sample_scene(rng, classes, image_id, spec),
        ds.NLVR2_PRESENCE_KINDS)
    records = nlvr["train"] + nlvr["test"]
    return nlvr, list(zip(records, scenes[0::2], scenes[1::2]))


def test_presence_statements_are_true_exactly_when_labelled(presence_statements):
    """Each statement says which images show a class; the label is its truth in the pair's
    scenes, and every kind is drawn with both labels."""
    _, examples = presence_statements
    seen = Counter()
    for record, left, right in examples:
        text, kind = record["sentence"], record["statement_type"]
        cls = next(CLASS_INDEX[n] for n in sorted(CLASS_INDEX, key=len, reverse=True)
                   if re.search(rf"\b(a|an) {n}\b", text))
        has = [any(o.cls == cls for o in scene.objects) for scene in (left, right)]
        truth = {"side_presence": has["right" in text.split()],
                 "both_present": all(has),
                 "one_not_other": has[0] != has[1]}[kind]
        assert record["label"] == str(truth), (text, has)
        seen[kind, record["label"]] += 1
    assert set(seen) == {(k, v) for k in ds.NLVR2_PRESENCE_KINDS for v in ("True", "False")}


def test_presence_statements_text_only_stays_at_majority(presence_statements):
    _assert_nlvr2_text_only_at_majority(presence_statements[0])


def test_visual_entailment_hypothesis_only_stays_at_majority(large_downstream):
    ve = large_downstream[2]
    train, test = ve["train"], ve["test"]
    labels_tr, labels_te = [r["gold_label"] for r in train], [r["gold_label"] for r in test]
    rate, bound = _assert_hypothesis_only_at_majority(ve)
    # the premise caption never names what the hypothesis is about
    both = _bow_accuracy([r["sentence1"] + " | " + r["sentence2"] for r in train], labels_tr,
                         [r["sentence1"] + " | " + r["sentence2"] for r in test], labels_te)
    assert both <= bound, (both, rate)


@pytest.fixture(scope="module")
def calibrated_downstream():
    """VQA and VE at the calibrated preset's classes and training sizes (the largest sets a
    preset trains on, so the most a text-only model could learn from)."""
    preset = PRESETS["calibrated"]
    rng = np.random.default_rng(11)
    classes = ClassSet.of_size(preset.foreground_classes)

    def make_scene(image_id, spec):
        return sample_scene(rng, classes, image_id, spec)

    _, vqa = ds.build_vqa2(rng, classes, {"train": preset.vqa2_questions[0], "val": 0,
                                          "test": 3000}, make_scene,
                           ds.IdAllocator(rng, 1, 10**7))
    _, ve = ds.build_visual_entailment(rng, classes, {"train": preset.ve_hypotheses[0],
                                                      "val": 0, "test": 1500}, make_scene,
                                       ds.IdAllocator(rng, 10**9, 10**10))
    _, nlvr = ds.build_nlvr2(rng, classes, {"train": preset.nlvr2_pairs[0], "val": 0,
                                            "test": preset.nlvr2_pairs[2]}, make_scene,
                             ds.NLVR2_STATEMENTS[preset.nlvr2_statements],
                             classes.first(preset.nlvr2_classes), preset.nlvr2_classes_percent)
    return vqa, ve, nlvr


def test_calibrated_sizes_keep_text_only_at_majority(calibrated_downstream):
    """With 12,000 training examples over 24 classes, neither a VQA question (within its
    type) nor a VE hypothesis predicts its label beyond the majority rate; nor does an
    NLVR2 statement with the preset's 6,000 presence-statement pairs, half of them about 4
    classes (the narrow half is where a text-only model would find a cue if there were one)."""
    vqa, ve, nlvr = calibrated_downstream
    assert len(vqa["train"]) == len(ve["train"]) == 12_000
    _assert_vqa_text_only_at_majority(vqa)
    _assert_hypothesis_only_at_majority(ve)
    assert len(nlvr["train"]) == 6000
    assert {r["statement_type"] for r in nlvr["train"]} == set(ds.NLVR2_PRESENCE_KINDS)
    _assert_nlvr2_text_only_at_majority(nlvr)


def test_refcoco_text_does_not_tell_where_the_target_is(large_downstream):
    scenes, refer = large_downstream[3]
    by_image = {s.image_id: s for s in scenes}
    images = {img["id"]: img["file_name"][: -len(".jpg")] for img in refer.images}
    boxes = {a["id"]: a["bbox"] for a in refer.annotations}
    data = {"train": ([], []), "val": ([], [])}
    for ref in refer.refs:
        x, _, w, _ = boxes[ref["ann_id"]]
        width = by_image[images[ref["image_id"]]].width
        for s in ref["sentences"]:
            data[ref["split"]][0].append(s["sent"])
            data[ref["split"]][1].append(x + w / 2 < width / 2)
    bow = _bow_accuracy(*data["train"], *data["val"])
    rate, bound = _majority_bound(data["val"][1])
    assert bow <= bound, (bow, rate)


# ---------------------------------------------------------------- command line


def _run_tool(capsys, *argv: str) -> tuple[int, str, str]:
    """``python tools/make_toy_world.py *argv`` in-process: its name is the program's."""
    program = sys.argv[0]
    sys.argv[0] = str(TOOL)
    try:
        code = make_toy_world.main(list(argv))
    except SystemExit as e:
        code = e.code
    finally:
        sys.argv[0] = program
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("argv, message", [
    (["--preset", "huge", "--out", "x"], "argument --preset: invalid choice: 'huge'"),
    (["--preset", "tiny"], "the following arguments are required: --out"),
    (["--preset", "tiny", "--out", "x", "--feature-dim", "0"],
     "argument --feature-dim: expected a positive integer, got '0'"),
    (["--preset", "tiny", "--out", "x", "--num-images", "many"],
     "argument --num-images: expected a positive integer, got 'many'"),
    (["--preset", "tiny", "--out", "x", "--seed", "-3"],
     "argument --seed: expected a non-negative integer, got '-3'"),
    (["--preset", "tiny", "--out", "x", "--downstream-scale", "nan"],
     "argument --downstream-scale: expected a positive number, got 'nan'"),
    (["--preset", "tiny", "--out", "x", "--npy", "--no-npy"], "not allowed with argument"),
    (["--preset", "tiny", "--out", "x", "--foreground-classes", "3"],
     f"WorldConfig.foreground_classes must be 0 (every foreground class) or from "
     f"{MIN_FOREGROUND_CLASSES} to {len(FOREGROUND)}, got 3"),
    (["--preset", "tiny", "--out", "x", "--nlvr2-statements", "counts"],
     "argument --nlvr2-statements: invalid choice: 'counts'"),
    (["--preset", "tiny", "--out", "x", "--foreground-classes", "8", "--nlvr2-classes", "9"],
     "WorldConfig.nlvr2_classes must be 0 (every active foreground class) or at most the 8 "
     "active foreground classes, got 9"),
    (["--preset", "tiny", "--out", "x", "--nlvr2-classes", "-1"],
     "argument --nlvr2-classes: expected a non-negative integer, got '-1'"),
    (["--preset", "tiny", "--out", "x", "--nlvr2-classes", "4", "--nlvr2-classes-percent", "101"],
     "WorldConfig.nlvr2_classes_percent must be at most 100, got 101"),
    (["--preset", "tiny", "--out", "x", "--nlvr2-classes-percent", "50"],
     "WorldConfig.nlvr2_classes_percent 50 needs nlvr2_classes (the classes those pairs name), "
     "got 0"),
    (["--preset", "tiny", "--out", "x", "--nlvr2-pairs", "10", "5"],
     "argument --nlvr2-pairs: expected 3 arguments"),
    (["--preset", "tiny", "--out", "x", "--refcoco-images", "4", "1", "-1", "1"],
     "argument --refcoco-images: expected a non-negative integer, got '-1'"),
])
def test_cli_rejects_malformed_options(capsys, argv, message):
    code, _, err = _run_tool(capsys, *argv)
    assert code == 2 and message in err and "usage: make_toy_world.py" in err


def test_cli_refuses_a_foreign_non_empty_directory(capsys, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    code, _, err = _run_tool(capsys, "--preset", "tiny", "--out", str(tmp_path))
    assert code == 2 and "argument --out" in err and "not empty" in err
    code, _, err = _run_tool(capsys, "--preset", "tiny", "--out", str(tmp_path), "--overwrite")
    assert code == 2 and "no world.json" in err and (tmp_path / "keep.txt").exists()


def test_cli_writes_a_world_and_summarises_it(capsys, tmp_path):
    out = tmp_path / "w"
    code, stdout, _ = _run_tool(capsys, "--preset", "tiny", "--out", str(out), "--seed", "7",
                                "--feature-dim", "16", "--no-downstream", "--no-progress",
                                "--nlvr2-statements", "presence", "--nlvr2-classes", "4",
                                "--nlvr2-classes-percent", "40")
    assert code == 0
    assert "toy world 'tiny' (seed 7)" in stdout and "MiB" in stdout and " s, " in stdout
    manifest = json.loads((out / "world.json").read_text())
    assert manifest["feature_dim"] == 16 and manifest["seed"] == 7
    assert manifest["config"]["nlvr2_statements"] == "presence"
    assert manifest["config"]["nlvr2_classes"] == 4
    assert manifest["config"]["nlvr2_classes_percent"] == 40
    assert "vqa2" not in manifest["paths"]
    code, _, _ = _run_tool(capsys, "--preset", "tiny", "--out", str(out), "--overwrite",
                           "--no-downstream", "--no-progress")
    assert code == 0


def test_cli_sets_each_downstream_split_size(capsys, tmp_path):
    out = tmp_path / "w"
    code, _, _ = _run_tool(capsys, "--preset", "tiny", "--out", str(out), "--no-progress",
                           "--nlvr2-pairs", "5", "3", "2", "--ve-hypotheses", "4", "2", "1")
    assert code == 0
    config = json.loads((out / "world.json").read_text())["config"]
    assert config["nlvr2_pairs"] == [5, 3, 2] and config["ve_hypotheses"] == [4, 2, 1]
    assert config["vqa2_questions"] == list(PRESETS["tiny"].vqa2_questions)
    lines = {path.name: len(path.read_text().splitlines())
             for path in (out / "mmf").glob("*/annotations/*.jsonl")}
    assert lines == {"train.jsonl": 5, "dev.jsonl": 3, "test1.jsonl": 2,
                     "snli_ve_train.jsonl": 4, "snli_ve_dev.jsonl": 2, "snli_ve_test.jsonl": 1}


_KILL_SCRIPT = textwrap.dedent("""
    import os, runpy, signal, sys
    from mmf_uvlp.toy_world import generate

    def kill(*args):
        os.kill(os.getpid(), signal.SIGKILL)

    where, tool = sys.argv[1], sys.argv[2]
    if where == "generating":  # after the pre-training pool, before the downstream sets
        generate.WorldGenerator.downstream = kill
    else:  # "moving": while a replaced world's files move in (the file list, 3 files, kill)
        real, calls = os.replace, []

        def replace(src, dst):
            calls.append(dst)
            if len(calls) == 5:
                kill()
            real(src, dst)

        os.replace = replace
    sys.argv = [tool] + sys.argv[3:]
    runpy.run_path(tool, run_name="__main__")
""")


def _killed(where: str, *argv: str) -> None:
    """Run make_toy_world.py with ``argv`` and SIGKILL it at ``where``."""
    result = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, where, str(TOOL), *argv],
                            capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]


SMALL = ("--preset", "tiny", "--no-progress", "--feature-dim", "8")
MINE = {"notes.txt": b"mine", "text/my_corpus.txt": b"mine too"}


def test_a_killed_generation_leaves_nothing_half_made(world, tmp_path, capsys):
    out = tmp_path / "w"
    _killed("generating", "--preset", "tiny", "--no-progress", "--out", str(out))
    assert not out.exists()  # the world's place is untouched
    partial = tmp_path / ".w.partial"
    assert (partial / "detections" / "cc" / "predictions.tsv").is_file()
    assert not (partial / "world.json").exists()
    code, _, err = _run_tool(capsys, "--preset", "tiny", "--no-progress", "--out", str(out))
    assert code == 0, err
    assert not partial.exists()
    assert _files(out) == _files(world[0])  # the bytes of an uninterrupted run


def test_overwrite_replaces_only_the_generators_files(tmp_path, capsys):
    out, fresh = tmp_path / "w", tmp_path / "fresh"
    assert _run_tool(capsys, *SMALL, "--out", str(out))[0] == 0
    for rel, data in MINE.items():
        (out / rel).write_bytes(data)
    before = _files(out)
    _killed("generating", *SMALL, "--seed", "3", "--out", str(out), "--overwrite")
    assert _files(out) == before  # a killed overwrite changes nothing
    other = (*SMALL, "--seed", "3", "--no-downstream")
    assert _run_tool(capsys, *other, "--out", str(out), "--overwrite")[0] == 0
    assert _run_tool(capsys, *other, "--out", str(fresh / "a"))[0] == 0
    files = _files(out)
    assert {rel: files.pop(rel) for rel in MINE} == MINE  # the user's files stay
    assert files == _files(fresh / "a")  # the old world's other files are gone
    assert not (out / "mmf").exists() and not (out / "refer").exists()
    # killed while the new files move in: the list in OUT covers both worlds, a rerun ends it
    _killed("moving", *SMALL, "--out", str(out), "--overwrite")
    assert json.loads((out / "world.json").read_text())["seed"] == 3
    assert _run_tool(capsys, *SMALL, "--out", str(out), "--overwrite")[0] == 0
    assert _run_tool(capsys, *SMALL, "--out", str(fresh / "b"))[0] == 0
    files = _files(out)
    assert {rel: files.pop(rel) for rel in MINE} == MINE
    assert files == _files(fresh / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "w"]  # no leftovers


# ---------------------------------------------------------------- MMF's own datasets

_MMF_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, torch
    from omegaconf import OmegaConf
    from mmf.common.batch_collator import BatchCollator
    from mmf.datasets.builders.nlvr2.dataset import NLVR2Dataset
    from mmf.datasets.builders.visual_entailment.dataset import VisualEntailmentDataset
    from mmf.datasets.builders.vqa2.dataset import VQA2Dataset
    from mmf_uvlp.data_formats.mmf_features import LmdbFeatures

    world = sys.argv[1]
    paths = json.load(open(world + "/world.json"))["paths"]
    text = {"type": "vocab", "params": {"max_length": 14, "vocab": {
        "type": "random", "embedding_dim": 8,
        "vocab_file": world + "/" + paths["mmf_vocabulary"]},
        "preprocessor": {"type": "simple_sentence", "params": {}}}}
    answer = {"type": "vqa_answer", "params": {
        "num_answers": 10, "vocab_file": world + "/" + paths["vqa2"]["answers"],
        "preprocessor": {"type": "simple_word", "params": {}}}}
    out = {}
    for kind, cls, task, procs in [
            (kind, *spec) for kind in ("lmdb", "npy") for spec in (
                (VQA2Dataset, "vqa2", {"text_processor": text, "answer_processor": answer}),
                (NLVR2Dataset, "nlvr2", {"text_processor": text}),
                (VisualEntailmentDataset, "visual_entailment", {"text_processor": text}))]:
        feature = paths[task]["features_lmdb" if kind == "lmdb" else "features_npy"]
        config = OmegaConf.create({
            "data_dir": world, "depth_first": False, "fast_read": False,
            "use_images": False, "use_features": True, "max_features": 30,
            "return_features_info": True, "use_ocr": False, "use_ocr_info": False,
            "features": {"train": [feature]}, "annotations": {"train": [paths[task]["train"]]},
            "processors": procs})
        dataset = cls(config, "train", 0)
        dataset.init_processors()
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=4, collate_fn=BatchCollator(task, "train"))
        batch = next(iter(loader))
        first = dataset.annotation_db[0]
        features = batch["img0"]["image_feature_0"] if task == "nlvr2" \\
            else batch["image_feature_0"]
        key = first["feature_path"][: -len(".npy")]
        if task == "nlvr2":
            key = key.replace("-img1", "-img0")
        del dataset, loader
        with LmdbFeatures(world + "/" + paths[task]["features_lmdb"]) as db:
            expected = db[key]["features"]
        got = features[0, : len(expected)].numpy()
        out[kind + ":" + task] = {"batch": int(batch["targets"].shape[0]),
                     "features": list(features.shape),
                     "match": bool(np.array_equal(got, expected))}
    print(json.dumps(out))
""")


def test_mmf_datasets_load_a_batch(world):
    """MMF rc10's own vqa2 / nlvr2 / visual_entailment datasets read the tiny world,
    from the LMDBs and from the npy folders, and see the features we wrote (an MMF that
    cannot be imported fails this test)."""
    out, manifest, _ = world
    result = subprocess.run([sys.executable, "-c", _MMF_SCRIPT, str(out)],
                            capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    dim = manifest["feature_dim"]
    for kind in ("lmdb", "npy"):
        for task in ("vqa2", "nlvr2", "visual_entailment"):
            entry = report[f"{kind}:{task}"]
            assert entry["batch"] == 4 and entry["features"] == [4, 30, dim], (kind, task)
            assert entry["match"], (kind, task)


# ------------------------------------------------------------ caption style (calibration)

def _caption_style_world(tmp_path_factory, style: str) -> Path:
    """The tiny world with ``caption_style=style``."""
    out = tmp_path_factory.mktemp("toy") / f"tiny_{style}"
    generate_world(replace(PRESETS["tiny"], caption_style=style), out)
    return out


@pytest.fixture(scope="module")
def object_caption_world(tmp_path_factory) -> Path:
    return _caption_style_world(tmp_path_factory, "objects")


def test_object_captions_list_only_the_image_s_own_foreground_classes(object_caption_world):
    out = object_caption_world
    scenes = _gt(out, "cc")
    captions = dict(read_captions(out / "text/captions_gt.tsv"))
    assert sorted(captions) == sorted(scenes)
    sizes = Counter()
    for image_id, text in captions.items():
        named = _classes_named([text])
        foreground = {o["class"] for o in scenes[image_id]["objects"] if not o["background"]}
        assert set(named) <= foreground, (image_id, text)
        assert all(n == 1 for n in named.values()), text  # distinct classes
        assert re.fullmatch(r"an? [a-z ]+((, an? [a-z ]+)* and an? [a-z ]+)?", text), text
        sizes[len(named)] += 1
    assert set(sizes) == {1, 2, 3}  # 1-3 classes a caption, each count seen




@pytest.fixture(scope="module")
def attribute_caption_world(tmp_path_factory) -> Path:
    return _caption_style_world(tmp_path_factory, "attributes")


def test_attribute_captions_describe_only_the_image_s_own_objects(attribute_caption_world):
    """Each phrase of a caption is one foreground object of its image, with none, some or
    all of that object's own attributes before its class name."""
    out = attribute_caption_world
    scenes = _gt(out, "cc")
    captions = dict(read_captions(out / "text/captions_gt.tsv"))
    assert sorted(captions) == sorted(scenes)
    sizes, with_attributes = Counter(), 0
    for image_id, text in captions.items():
        objects = [o for o in scenes[image_id]["objects"] if not o["background"]]
        phrases = re.split(r", | and ", text)
        sizes[len(phrases)] += 1
        for phrase in phrases:
            words = phrase.split()
            assert words[0] in ("a", "an"), text
            described = [o for o in objects if " ".join(words[1:]).endswith(o["class"])
                         and set(words[1:-len(o["class"].split())])
                         <= set(o["attributes"].values())]
            assert described, (image_id, phrase, objects)
            with_attributes += len(words) > 1 + len(described[0]["class"].split())
    assert set(sizes) == {1, 2, 3}
    assert with_attributes > sum(n * c for n, c in sizes.items()) / 2


@pytest.mark.parametrize("style, fixture", [("objects", "object_caption_world"),
                                            ("attributes", "attribute_caption_world")])
def test_caption_style_changes_only_the_pretraining_captions(world, style, fixture, request,
                                                            tmp_path):
    """The same seed gives the same scenes, features and downstream files in every style;
    only the two caption files (and world.json's record of the style) differ, and each
    style is byte-deterministic too."""
    web, styled = _files(world[0]), _files(request.getfixturevalue(fixture))
    assert sorted(web) == sorted(styled)
    differ = sorted(name for name in web if web[name] != styled[name])
    assert differ == ["text/caption_corpus.txt", "text/captions_gt.tsv", "world.json"]
    assert json.loads(styled["world.json"])["config"]["caption_style"] == style
    generate_world(replace(PRESETS["tiny"], caption_style=style), tmp_path / "again")
    assert _files(tmp_path / "again") == styled


def test_nlvr2_statements_change_only_the_nlvr2_files(world, tmp_path):
    """``nlvr2_statements="presence"`` rewrites NLVR2's annotations and the features of its
    images, and the vocabulary lists the statements' words; every other file is the mixed
    world's, byte for byte."""
    out = tmp_path / "presence"
    generate_world(replace(PRESETS["tiny"], nlvr2_statements="presence"), out)
    mixed, presence = _files(world[0]), _files(out)
    assert sorted(mixed) == sorted(presence)
    differ = {name for name in mixed if mixed[name] != presence[name]}
    assert "mmf/nlvr2/annotations/train.jsonl" in differ and "world.json" in differ
    others = differ - {"world.json", "mmf/vocabs/vocabulary_toy.txt"}
    assert all("nlvr2" in name for name in others), sorted(others)
    kinds = {r["statement_type"] for r in read_nlvr2(out / "mmf/nlvr2/annotations/train.jsonl")}
    assert kinds <= set(ds.NLVR2_PRESENCE_KINDS)
    assert json.loads(presence["world.json"])["config"]["nlvr2_statements"] == "presence"


def test_class_set_first_takes_classes_round_robin():
    """``first(k)`` keeps the first ``k`` active classes in round-robin order, one per
    supercategory before a second of any, in vocabulary order; 0 or every class keeps all."""
    classes = ClassSet.of_size(24)
    four = classes.first(4)
    order = [c for c in round_robin_foreground() if c in classes.foreground]
    assert four.foreground == tuple(sorted(order[:4]))
    assert len({CLASSES[c].supercategory for c in four.foreground}) == 4
    assert classes.first(0) is classes and classes.first(24) is classes


def _assert_only_nlvr2_differs(config, changed, tmp_path) -> None:
    """Generates ``config`` (``tmp_path/all``) and ``changed`` (``tmp_path/changed``) and
    checks that they hold the same files and NLVR2's training pairs differ, while every file
    that a VQA, VE, RefCOCO+ or pre-training run reads keeps its bytes."""
    generate_world(config, tmp_path / "all")
    generate_world(changed, tmp_path / "changed")
    every, other = _files(tmp_path / "all"), _files(tmp_path / "changed")
    assert sorted(every) == sorted(other)
    differ = {name for name in every if every[name] != other[name]}
    assert "mmf/nlvr2/annotations/train.jsonl" in differ
    others = differ - {"world.json", "mmf/vocabs/vocabulary_toy.txt"}
    assert all("nlvr2" in name for name in others), sorted(others)


def test_nlvr2_classes_change_only_the_nlvr2_files(tmp_path):
    """``nlvr2_classes=4`` makes every NLVR2 statement name one of 4 classes; every file
    that a VQA, VE, RefCOCO+ or pre-training run reads is the world's without it, byte for
    byte (so only NLVR2's runs change)."""
    base = replace(PRESETS["tiny"], nlvr2_statements="presence", nlvr2_pairs=(60, 8, 8))
    _assert_only_nlvr2_differs(base, replace(base, nlvr2_classes=4), tmp_path)
    named = {CLASSES[c].name for c in base.class_set().first(4).foreground}
    records = list(read_nlvr2(tmp_path / "changed" / "mmf/nlvr2/annotations/train.jsonl"))
    said = {name for r in records for name in named if re.search(rf"\b{name}\b", r["sentence"])}
    assert said == named
    assert all(any(re.search(rf"\b{n}\b", r["sentence"]) for n in named) for r in records)


def test_nlvr2_classes_percent_holds_that_share_of_pairs_to_the_named_classes(tmp_path):
    """At ``nlvr2_classes_percent=50`` about half the pairs name one of the 4 classes and
    the rest any active class; the other tasks' files keep their bytes."""
    base = replace(PRESETS["tiny"], nlvr2_statements="presence", nlvr2_pairs=(400, 8, 8),
                   nlvr2_classes=4)
    _assert_only_nlvr2_differs(base, replace(base, nlvr2_classes_percent=50), tmp_path)
    named = {CLASSES[c].name for c in base.class_set().first(4).foreground}
    records = list(read_nlvr2(tmp_path / "changed" / "mmf/nlvr2/annotations/train.jsonl"))
    share = np.mean([any(re.search(rf"\b{n}\b", r["sentence"]) for n in named)
                     for r in records])
    active = len(base.class_set().foreground)
    expected = 0.5 + 0.5 * 4 / active  # the other half names a named class 4 / active times
    assert abs(share - expected) < 0.08, (share, expected)


def test_nlvr2_pairs_change_only_the_nlvr2_files(world, tmp_path):
    """More NLVR2 pairs draw from NLVR2's own random stream and image pool: every file that
    a VQA, VE, RefCOCO+ or pre-training run reads is the default world's, byte for byte (so
    runs of those tasks stay valid when only NLVR2's size changes)."""
    out = tmp_path / "more_pairs"
    generate_world(replace(PRESETS["tiny"], nlvr2_pairs=(40, 8, 8)), out)
    default, more = _files(world[0]), _files(out)
    added = set(more) - set(default)
    assert added and all("nlvr2" in name for name in added), sorted(added)
    assert set(default) <= set(more)
    differ = {name for name in default if default[name] != more[name]} | added
    assert "mmf/nlvr2/annotations/train.jsonl" in differ
    others = differ - {"world.json", "world_files.txt", "mmf/vocabs/vocabulary_toy.txt"}
    assert others and all("nlvr2" in name for name in others), sorted(others)
    assert len(list(read_nlvr2(out / "mmf/nlvr2/annotations/train.jsonl"))) == 40


def test_unknown_nlvr2_statements_are_refused():
    with pytest.raises(ValueError, match=r"WorldConfig\.nlvr2_statements must be one of "
                                         r"\['mixed', 'presence'\], got 'counts'"):
        replace(PRESETS["tiny"], nlvr2_statements="counts")


def test_unknown_caption_style_is_refused():
    with pytest.raises(ValueError, match=r"WorldConfig\.caption_style must be one of "
                                         r"\['attributes', 'objects', 'web'\], got 'plain'"):
        replace(PRESETS["tiny"], caption_style="plain")
