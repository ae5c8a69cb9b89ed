"""Text alone is not enough in the toy world: text-only classifiers stay at the majority rate."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression

from mmf_uvlp.toy_world import PRESETS
from mmf_uvlp.toy_world import downstream as ds
from mmf_uvlp.toy_world.scene import sample_scene
from mmf_uvlp.toy_world.vocabulary import CLASS_INDEX, ClassSet


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
    _, vqa = ds.build_vqa2(
        rng, classes, {"train": 6000, "val": 0, "test": 3000}, make_scene, coco_ids
    )
    _, nlvr = ds.build_nlvr2(rng, classes, {"train": 2000, "val": 0, "test": 1000}, make_scene)
    _, ve = ds.build_visual_entailment(
        rng, classes, {"train": 3000, "val": 0, "test": 1500}, make_scene, flickr_ids
    )
    ref_scenes, refer = ds.build_refcoco(
        rng, classes, {"train": 1500, "val": 600, "testA": 0, "testB": 0}, make_scene, coco_ids
    )
    return vqa, nlvr, ve, (ref_scenes, refer)


def _assert_vqa_text_only_at_majority(vqa: dict[str, list[dict]]) -> None:
    """Within each question type, the question text does not predict the answer."""

    def answers(records):
        return [Counter(r["answers"]).most_common(1)[0][0] for r in records]

    for qtype in ds.QUESTION_TYPES:
        train = [r for r in vqa["train"] if r["question_type"] == qtype]
        test = [r for r in vqa["test"] if r["question_type"] == qtype]
        bow = _bow_accuracy(
            [r["question_str"] for r in train],
            answers(train),
            [r["question_str"] for r in test],
            answers(test),
        )
        rate, bound = _majority_bound(answers(test))
        assert bow <= bound, (qtype, bow, rate)


def _assert_hypothesis_only_at_majority(ve: dict[str, list[dict]]) -> tuple[float, float]:
    """A VE hypothesis alone does not predict its label; the majority rate and its bound."""
    labels_tr = [r["gold_label"] for r in ve["train"]]
    labels_te = [r["gold_label"] for r in ve["test"]]
    bow = _bow_accuracy(
        [r["sentence2"] for r in ve["train"]],
        labels_tr,
        [r["sentence2"] for r in ve["test"]],
        labels_te,
    )
    rate, bound = _majority_bound(labels_te)
    assert bow <= bound, (bow, rate)
    return rate, bound


def test_vqa_text_only_stays_at_the_per_type_majority(large_downstream):
    _assert_vqa_text_only_at_majority(large_downstream[0])


def _assert_nlvr2_text_only_at_majority(nlvr: dict) -> None:
    """A bag of words over the statement alone predicts no better than the majority."""
    train, test = nlvr["train"], nlvr["test"]
    bow = _bow_accuracy(
        [r["sentence"] for r in train],
        [r["label"] for r in train],
        [r["sentence"] for r in test],
        [r["label"] for r in test],
    )
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
        rng,
        classes,
        {"train": 2000, "val": 0, "test": 1000},
        lambda image_id, spec: sample_scene(rng, classes, image_id, spec),
        ds.NLVR2_PRESENCE_KINDS,
    )
    records = nlvr["train"] + nlvr["test"]
    return nlvr, list(zip(records, scenes[0::2], scenes[1::2]))


def test_presence_statements_are_true_exactly_when_labelled(presence_statements):
    """Each statement says which images show a class; the label is its truth in the pair's
    scenes, and every kind is drawn with both labels."""
    _, examples = presence_statements
    seen = Counter()
    for record, left, right in examples:
        text, kind = record["sentence"], record["statement_type"]
        cls = next(
            CLASS_INDEX[n]
            for n in sorted(CLASS_INDEX, key=len, reverse=True)
            if re.search(rf"\b(a|an) {n}\b", text)
        )
        has = [any(o.cls == cls for o in scene.objects) for scene in (left, right)]
        truth = {
            "side_presence": has["right" in text.split()],
            "both_present": all(has),
            "one_not_other": has[0] != has[1],
        }[kind]
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
    both = _bow_accuracy(
        [r["sentence1"] + " | " + r["sentence2"] for r in train],
        labels_tr,
        [r["sentence1"] + " | " + r["sentence2"] for r in test],
        labels_te,
    )
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

    _, vqa = ds.build_vqa2(
        rng,
        classes,
        {"train": preset.vqa2_questions[0], "val": 0, "test": 3000},
        make_scene,
        ds.IdAllocator(rng, 1, 10**7),
    )
    _, ve = ds.build_visual_entailment(
        rng,
        classes,
        {"train": preset.ve_hypotheses[0], "val": 0, "test": 1500},
        make_scene,
        ds.IdAllocator(rng, 10**9, 10**10),
    )
    _, nlvr = ds.build_nlvr2(
        rng,
        classes,
        {"train": preset.nlvr2_pairs[0], "val": 0, "test": preset.nlvr2_pairs[2]},
        make_scene,
        ds.NLVR2_STATEMENTS[preset.nlvr2_statements],
        classes.first(preset.nlvr2_classes),
        preset.nlvr2_classes_percent,
    )
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
