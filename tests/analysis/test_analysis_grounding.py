"""The grounding probe on crafted attention: hand-computed accuracies, baselines, sources."""

import os

import numpy as np
import pytest
import torch

from mmf_uvlp.analysis.examples import ENTITY, ExampleBuilder
from mmf_uvlp.analysis.grounding import (
    GroundingProbe,
    argmax_credit,
    region_hits,
    run_probe,
    score_source,
)
from mmf_uvlp.analysis.regions import ImageRegions
from mmf_uvlp.analysis.systems import Outputs, System
from mmf_uvlp.data_formats.flickr30k_entities import Annotation, EntityImage, parse_sentence

T, F = True, False


# ---------------------------------------------------------------- argmax and ties
def test_argmax_credit_picks_the_most_attended_valid_region():
    hits = np.array([F, T, F])
    assert argmax_credit(np.array([0.1, 0.5, 0.2]), hits, np.array([T, T, T])) == 1.0
    assert argmax_credit(np.array([0.6, 0.5, 0.2]), hits, np.array([T, T, T])) == 0.0


def test_ties_share_the_credit():
    scores = np.array([0.4, 0.4, 0.2, 0.4])
    assert argmax_credit(scores, np.array([T, F, F, F]), np.array([T, T, T, T])) == 1 / 3
    assert argmax_credit(scores, np.array([T, F, F, T]), np.array([T, T, T, T])) == 2 / 3


def test_padding_regions_never_compete():
    scores = np.array([0.1, 0.2, 0.9])  # the padding region gets the most
    valid = np.array([T, T, F])
    assert argmax_credit(scores, np.array([F, T, F]), valid) == 1.0
    assert argmax_credit(scores, np.array([F, T, F]), np.array([F, F, F])) == 0.0
    batch = argmax_credit(np.array([[0.1, 0.2, 0.9], [0.3, 0.2, 0.0]]), np.array([F, T, F]), valid)
    assert batch.tolist() == [1.0, 0.0]


def test_score_source_averages_the_source_tokens_and_measures_the_region_share():
    rows = np.zeros((1, 2, 2, 3))  # (layers, heads, S, R); the rest of each row goes to text
    rows[0, 0] = [[0.1, 0.6, 0.1], [0.3, 0.2, 0.1]]  # mean [0.2, 0.4, 0.1] -> region 1
    rows[0, 1] = [[0.5, 0.0, 0.0], [0.1, 0.0, 0.6]]  # mean [0.3, 0.0, 0.3] -> tie 0 / 2
    hits = np.array([F, T, T])
    credit, share = score_source(rows, np.array([T, T, T]), hits)
    assert credit.tolist() == [[1.0, 0.5]]
    np.testing.assert_allclose(share, [[0.7, 0.6]])
    credit, share = score_source(rows, np.array([T, T, F]), hits)  # region 2 is padding
    assert credit.tolist() == [[1.0, 0.0]]
    np.testing.assert_allclose(share, [[0.6, 0.3]])


def test_region_hits_use_iou_at_least_one_half():
    boxes = np.array([[0, 0, 10, 10], [20, 20, 40, 40]], dtype=np.float32)
    assert region_hits(boxes, np.array([[0, 0, 10, 20]])).tolist() == [T, F]  # IoU exactly 0.5
    assert region_hits(boxes, np.array([[0, 0, 10, 21]])).tolist() == [F, F]  # IoU 0.476
    assert region_hits(boxes, np.zeros((0, 4))).tolist() == [F, F]  # no gold box


# ---------------------------------------------------------------- probe and baselines
BOXES = np.array([[0, 0, 10, 10], [20, 20, 40, 40], [100, 100, 110, 110]], dtype=np.float32)
VALID = np.array([T, T, F])  # region 2 is padding
CONFIDENCES = np.array([0.9, 0.5, 0.99])  # the padding region is "most confident"


def _rows(*heads):
    """One source token; one row of region weights per head."""
    return np.array(heads, dtype=np.float64)[None, :, None, :]


def _crafted_probe():
    probe = GroundingProbe(layers=1, heads=2)
    # head 0: attends region 1 (region share 0.6); head 1: little attention on regions
    probe.add(
        ENTITY,
        _rows([0.1, 0.5, 0.3], [0.10, 0.05, 0.8]),
        BOXES,
        VALID,
        CONFIDENCES,
        np.array([[0, 0, 10, 10]]),
    )  # gold = region 0
    probe.add(
        ENTITY,
        _rows([0.1, 0.5, 0.3], [0.05, 0.10, 0.8]),
        BOXES,
        VALID,
        CONFIDENCES,
        np.array([[21, 21, 40, 40]]),
    )  # gold = region 1 (IoU 0.90)
    probe.add(
        ENTITY,
        _rows([0.1, 0.5, 0.3], [0.10, 0.05, 0.8]),
        BOXES,
        VALID,
        CONFIDENCES,
        np.array([[100, 100, 110, 110]]),
    )  # only the padding region matches: unreachable
    return probe


def test_probe_accuracy_baselines_and_upper_bound_by_hand():
    summary = _crafted_probe().summary()["entity"]
    assert summary["n"] == 3
    np.testing.assert_allclose(summary["accuracy"], [[100 / 3, 200 / 3]], atol=1e-3)
    np.testing.assert_allclose(summary["attention_to_regions"], [[0.6, 0.15]], atol=1e-4)
    # rule: the most confident *real* region (region 0) -> right for the first source only
    assert summary["rule_baseline"] == pytest.approx(100 / 3, abs=1e-3)
    # random: 1 of 2 real regions for the first two sources, 0 for the third
    assert summary["random_baseline"] == pytest.approx(100 / 3, abs=1e-3)
    assert summary["upper_bound"] == pytest.approx(200 / 3, abs=1e-3)


def test_best_head_is_chosen_among_active_heads_only():
    best = _crafted_probe().summary()["entity"]["best_head"]
    # head 2 is more accurate (66.7%) but gives only 15% of its attention to regions
    assert (best["layer"], best["head"], best["active"]) == (1, 1, True)
    assert best["accuracy"] == pytest.approx(100 / 3, abs=1e-3)


def test_without_active_heads_the_best_head_is_flagged():
    probe = GroundingProbe(layers=1, heads=2)
    probe.add(
        ENTITY,
        _rows([0.01, 0.02, 0.9], [0.02, 0.01, 0.9]),
        BOXES,
        VALID,
        CONFIDENCES,
        np.array([[0, 0, 10, 10]]),
    )
    best = probe.summary()["entity"]["best_head"]
    assert (best["head"], best["active"], best["accuracy"]) == (2, False, 100.0)


def test_summary_keeps_the_most_frequent_relations():
    probe = GroundingProbe(layers=1, heads=1)
    rows, gold = _rows([0.5, 0.1, 0.0]), np.array([[0, 0, 10, 10]])
    for kind, count in (("det", 3), ("amod", 2), ("nsubj", 2), ("prep", 1)):
        for _ in range(count):
            probe.add(kind, rows, BOXES, VALID, CONFIDENCES, gold)
    assert list(probe.summary(relations=3)["syntactic"]) == ["det", "amod", "nsubj"]


# ---------------------------------------------------------------- sources from captions
@pytest.fixture(scope="module")
def tokenizer():
    from transformers import BertTokenizerFast

    return BertTokenizerFast.from_pretrained(os.environ["UVLP_BERT"])


CAPTION = "[/EN#1/people A man] holding [/EN#2/other a red cup] on [/EN#3/scene the beach] ."
#          A    man    holding cup's det/amod   cup     on      the    beach  .
HEADS = [1, 1, 1, 5, 5, 2, 2, 8, 6, 1]
RELATIONS = ["det", "ROOT", "acl", "det", "amod", "dobj", "prep", "det", "pobj", "punct"]


def _image(image_id="1", boxes=None, width=100, height=100):
    boxes = boxes or {"1": ((0.0, 0.0, 10.0, 10.0),), "2": ((20.0, 20.0, 40.0, 40.0),)}
    annotation = Annotation(f"{image_id}.jpg", width, height, 3, boxes, frozenset({"3"}))
    return EntityImage(image_id, (parse_sentence(CAPTION, "x.txt", 1),), annotation)


def test_entity_and_syntactic_sources_of_a_caption(tokenizer):
    builder = ExampleBuilder(tokenizer, nlp=None)
    image = _image()
    example = builder.example(image, image.sentences[0], HEADS, RELATIONS)
    assert example.input_ids[0] == tokenizer.cls_token_id and len(example.input_ids) == 12
    assert [(s.entity_id, s.tokens, s.target_root) for s in example.entities] == [
        ("1", (1, 2), 1),
        ("2", (4, 5, 6), 5),
    ]
    assert builder.skipped == {"phrase without a gold box": 1}  # "the beach": scene, no box
    # each arc touching a grounded phrase's root word: the other word -> that entity
    assert [(s.kind, s.text, s.tokens, s.entity_id) for s in example.syntactic] == [
        ("det", "A", (1,), "1"),
        ("acl", "holding", (3,), "1"),
        ("det", "a", (4,), "2"),
        ("amod", "red", (5,), "2"),
        ("dobj", "holding", (3,), "2"),
        ("punct", ".", (10,), "1"),
    ]


def test_sources_cut_off_by_max_length_are_skipped(tokenizer):
    builder = ExampleBuilder(tokenizer, nlp=None, max_length=5)  # [CLS] A man holding [SEP]
    image = _image()
    example = builder.example(image, image.sentences[0], HEADS, RELATIONS)
    assert [s.entity_id for s in example.entities] == ["1"]
    assert [s.kind for s in example.syntactic] == ["det", "acl"]
    assert builder.skipped["phrase cut off by max_length"] == 1
    assert builder.skipped["arc cut off by max_length"] == 1  # "." -> man


def test_parse_comes_from_spacy_on_the_caption_words(tokenizer):
    from mmf_uvlp.corpus.noun_phrases import load_spacy

    (example,) = ExampleBuilder(tokenizer, load_spacy())(_image())
    assert len(example.heads) == len(example.words) == 10
    assert example.relations[example.words.index("man")] == "ROOT"
    assert ("det", "A", "1") in [(s.kind, s.text, s.entity_id) for s in example.syntactic]


# ---------------------------------------------------------------- run_probe end to end
class _FixedAttention(System):
    """Every text position attends to the regions with a fixed weight vector per image."""

    def __init__(self, weights):
        self.weights, self.layers, self.heads = weights, 1, 1
        self.name, self.spec = "fixed", "fixed"

    def __call__(self, batch, attentions=True):
        size, length = batch.input_ids.shape
        regions = batch.region_mask.size(1)
        maps = torch.zeros(size, 1, length + regions, length + regions)
        for b in range(size):
            image = self.image_ids[b]
            maps[b, 0, :length, length:] = torch.tensor(self.weights[image][:regions])
        return Outputs((maps,), torch.zeros(size, length + regions, 4))


def _regions(image_id, boxes, confidences):
    boxes = np.array(boxes, dtype=np.float32)
    return ImageRegions(
        image_id,
        100,
        100,
        boxes,
        np.zeros((len(boxes), 4), np.float32),
        np.array(confidences, np.float32),
        (),
    )


def test_run_probe_excludes_the_padding_of_a_batch(tokenizer):
    builder = ExampleBuilder(tokenizer, nlp=None)
    first = _image("1", {"1": ((50.0, 50.0, 60.0, 60.0),), "2": ((0.0, 0.0, 10.0, 10.0),)})
    second = _image("2", {"1": ((20.0, 20.0, 40.0, 40.0),), "2": ((0.0, 0.0, 10.0, 10.0),)})
    examples = [builder.example(i, i.sentences[0], HEADS, RELATIONS) for i in (first, second)]
    store = {
        "1": _regions("1", [[0, 0, 10, 10], [20, 20, 40, 40], [50, 50, 60, 60]], [0.9, 0.5, 0.4]),
        "2": _regions("2", [[0, 0, 10, 10], [20, 20, 40, 40]], [0.2, 0.7]),  # padded to 3
    }
    # image 2's third column is padding: it gets the most attention and must be ignored
    system = _FixedAttention({"1": [0.1, 0.2, 0.3], "2": [0.05, 0.1, 0.8]})
    system.image_ids = ["1", "2"]
    summary = run_probe(system, examples, store, batch_size=2).summary()
    entity = summary["entity"]
    assert entity["n"] == 4
    # man: image 1 -> region 2 (right), image 2 -> region 1 (right); cup: both wrong
    assert entity["accuracy"] == [[50.0]]
    # rule: image 1 region 0 (cup right, man wrong); image 2 region 1 (man right, cup wrong)
    assert entity["rule_baseline"] == 50.0
    assert entity["random_baseline"] == pytest.approx(100 * (1 / 3 + 1 / 3 + 1 / 2 + 1 / 2) / 4)
    np.testing.assert_allclose(entity["attention_to_regions"], [[(0.6 + 0.6 + 0.15 + 0.15) / 4]])
    assert summary["syntactic"]["det"]["n"] == 4 and summary["syntactic"]["dobj"]["n"] == 2


def test_batches_keep_the_regions_of_every_example_in_a_group(monkeypatch):
    """Many distinct images: the region cache is never emptied in the middle of a group."""
    import types

    import mmf_uvlp.analysis.batches as batching

    monkeypatch.setattr(batching, "make_batch", lambda ids, regions: None)
    store = {f"img{i}": f"regions of img{i}" for i in range(30)}
    examples = [types.SimpleNamespace(image_id=f"img{i}", input_ids=[i]) for i in range(30)]
    groups = list(batching.batches(examples, store, batch_size=4))
    assert [len(group) for group, _, _ in groups] == [4] * 7 + [2]
    for group, regions, _ in groups:
        assert regions == [store[e.image_id] for e in group]
