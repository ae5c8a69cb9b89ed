"""Attention-map weights and the alignment number on crafted inputs."""

import numpy as np
import pytest
import torch

from mmf_uvlp.analysis.alignment import (
    Instance,
    Representations,
    region_word_mrr,
    sample_instances,
)
from mmf_uvlp.analysis.attention_maps import select_heads, shown_words, word_gold, word_weights
from mmf_uvlp.analysis.examples import ENTITY, Example, Source
from mmf_uvlp.analysis.regions import ImageRegions
from mmf_uvlp.analysis.systems import make_batch


def _example(**fields):
    base = dict(
        image_id="1",
        line=1,
        words=("a", "man", "."),
        input_ids=(101, 1, 2, 3, 102),
        word_tokens=((1,), (2, 3), (4,)),
        heads=(1, 1, 1),
        relations=("det", "ROOT", "punct"),
        entities=(),
        syntactic=(),
    )
    base.update(fields)
    return Example(**base)


def test_select_heads():
    last = select_heads("last", 3, 4)
    assert last.layer == 2 and last.heads == (0, 1, 2, 3)
    assert select_heads("layer:1", 3, 4).layer == 0
    probe = {"systems": {"B": {"entity": {"best_head": {"layer": 2, "head": 3}}}}}
    best = select_heads("best", 3, 4, probe, "B")
    assert (best.layer, best.heads) == (1, (2,)) and "2-3" in best.label
    for spec, message in (
        ("layer:4", "1..3"),
        ("layer:x", "1..3"),
        ("first", "expected"),
        ("best", "needs --probe"),
    ):
        with pytest.raises(ValueError, match=message):
            select_heads(spec, 3, 4, None, "B")
    with pytest.raises(ValueError, match="does not exist"):
        select_heads("best", 1, 4, probe, "B")


def test_word_weights_average_pieces_and_heads_over_real_regions():
    maps = np.zeros((2, 2, 5, 3))  # (layers, heads, L, R)
    maps[1, 0, 2] = [0.2, 0.4, 0.9]
    maps[1, 0, 3] = [0.4, 0.0, 0.9]
    maps[1, 1, 2] = [0.0, 0.2, 0.9]
    maps[1, 1, 3] = [0.2, 0.2, 0.9]
    example = _example()
    weights = word_weights(maps, example, select_heads("last", 2, 2), regions=2)
    assert weights.shape == (3, 2)  # the third region is padding
    np.testing.assert_allclose(weights[1], [0.2, 0.2])  # "man": 2 pieces x 2 heads
    np.testing.assert_allclose(weights[0], [0.0, 0.0])
    one = word_weights(
        maps,
        example,
        select_heads(
            "best",
            2,
            2,
            {"systems": {"S": {"entity": {"best_head": {"layer": 2, "head": 1}}}}},
            "S",
        ),
        regions=2,
    )
    np.testing.assert_allclose(one[1], [0.3, 0.2])


def test_word_gold_and_shown_words():
    outer = Source(ENTITY, (1, 2, 3), "a man", "1", ((0.0, 0.0, 5.0, 5.0),), 1)
    inner = Source(ENTITY, (2, 3), "man", "2", ((1.0, 1.0, 2.0, 2.0),), 1)
    example = _example(entities=(outer, inner))
    gold = word_gold(example)
    assert gold == [[[0.0, 0.0, 5.0, 5.0]], [[1.0, 1.0, 2.0, 2.0]], []]  # innermost phrase
    assert shown_words(example) == [0, 1]  # punctuation is not drawn


def test_region_word_mrr_by_hand():
    # Three classes; class words along x (a), y (b) and z (c): two words of a, of different
    # lengths (cosine, so the length does not count). Region of a: nearest a (rank 1);
    # region of b, ten times longer: nearest b (rank 1); region of c: nearer a and b than c
    # (rank 3). MRR (1 + 1 + 1/3) / 3 = 7/9, where chance is (1 + 1/2 + 1/3) / 3 = 11/18.
    vectors = np.array(
        [
            [1, 0, 0],
            [3, 0.3, 0],
            [0, 1, 0],
            [0, 0, 1],
            [0.9, 0.2, 0.1],
            [1, 10, 3],
            [0.8, 0.5, 0.2],
        ],
        dtype=float,
    )
    reps = Representations(
        vectors, ["a", "a", "b", "c", "a", "b", "c"], ["word"] * 4 + ["region"] * 3
    )
    mrr, chance = region_word_mrr(reps)
    assert mrr == pytest.approx(7 / 9)
    assert chance == pytest.approx(11 / 18)
    # A region tied with a wrong class keeps its rank (only strictly closer classes count).
    tied = Representations(
        np.array([[1, 0], [0, 1], [1, 1], [0, 2]], dtype=float),
        ["a", "b", "a", "b"],
        ["word", "word", "region", "region"],
    )
    assert region_word_mrr(tied) == pytest.approx((1.0, 0.75))


def test_sample_instances_takes_the_most_frequent_classes_reproducibly():
    example = _example()
    instances = [
        Instance(example, cls, 1, k)
        for k, cls in enumerate(["dog"] * 5 + ["cat"] * 3 + ["ant"] * 3 + ["cow"])
    ]
    first = sample_instances(instances, classes=3, per_class=2, seed=0)
    assert [i.cls for i in first] == ["dog", "dog", "ant", "ant", "cat", "cat"]
    assert first == sample_instances(instances, classes=3, per_class=2, seed=0)
    assert {i.region for i in first if i.cls == "dog"} <= {0, 1, 2, 3, 4}
    assert len(sample_instances(instances, classes=10, per_class=10, seed=0)) == 12


def test_make_batch_pads_regions_and_gives_tags_their_region_box():
    def regions(n, width):
        boxes = np.tile(np.array([[0, 0, width / 2, 50]], np.float32), (n, 1))
        return ImageRegions(
            "x", width, 100, boxes, np.ones((n, 3), np.float32), np.ones(n, np.float32), ()
        )

    batch = make_batch(
        [[101, 7, 102], [101, 8, 9, 102]],
        [regions(2, 100), regions(1, 200)],
        owners=[[-1, 1, -1], [-1, 0, 0, -1]],
    )
    assert batch.input_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert batch.region_mask.tolist() == [[1, 1], [1, 0]]
    assert batch.text_is_tag.tolist() == [[0, 1, 0, 0], [0, 1, 1, 0]]
    torch.testing.assert_close(batch.text_boxes[0, 1], batch.region_boxes[0, 1])
    torch.testing.assert_close(batch.region_boxes[1, 0], torch.tensor([0, 0, 0.5, 0.5, 0.25]))
