"""The calibration knobs of the toy world: caption style, NLVR2 statements, classes and pairs;
each changes only its own files."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mmf_uvlp.data_formats.annotations import read_nlvr2
from mmf_uvlp.data_formats.text import read_captions
from mmf_uvlp.toy_world import PRESETS, generate_world
from mmf_uvlp.toy_world import downstream as ds
from mmf_uvlp.toy_world.vocabulary import CLASSES, ClassSet, round_robin_foreground

from helpers.toy_world import classes_named, files_under, ground_truth


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
    scenes = ground_truth(out, "cc")
    captions = dict(read_captions(out / "text/captions_gt.tsv"))
    assert sorted(captions) == sorted(scenes)
    sizes = Counter()
    for image_id, text in captions.items():
        named = classes_named([text])
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
    scenes = ground_truth(out, "cc")
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
            described = [
                o
                for o in objects
                if " ".join(words[1:]).endswith(o["class"])
                and set(words[1 : -len(o["class"].split())]) <= set(o["attributes"].values())
            ]
            assert described, (image_id, phrase, objects)
            with_attributes += len(words) > 1 + len(described[0]["class"].split())
    assert set(sizes) == {1, 2, 3}
    assert with_attributes > sum(n * c for n, c in sizes.items()) / 2


@pytest.mark.parametrize(
    "style, fixture",
    [("objects", "object_caption_world"), ("attributes", "attribute_caption_world")],
)
def test_caption_style_changes_only_the_pretraining_captions(
    world, style, fixture, request, tmp_path
):
    """The same seed gives the same scenes, features and downstream files in every style;
    only the two caption files (and world.json's record of the style) differ, and each
    style is byte-deterministic too."""
    web, styled = files_under(world[0]), files_under(request.getfixturevalue(fixture))
    assert sorted(web) == sorted(styled)
    differ = sorted(name for name in web if web[name] != styled[name])
    assert differ == ["text/caption_corpus.txt", "text/captions_gt.tsv", "world.json"]
    assert json.loads(styled["world.json"])["config"]["caption_style"] == style
    generate_world(replace(PRESETS["tiny"], caption_style=style), tmp_path / "again")
    assert files_under(tmp_path / "again") == styled


def test_nlvr2_statements_change_only_the_nlvr2_files(world, tmp_path):
    """``nlvr2_statements="presence"`` rewrites NLVR2's annotations and the features of its
    images, and the vocabulary lists the statements' words; every other file is the mixed
    world's, byte for byte."""
    out = tmp_path / "presence"
    generate_world(replace(PRESETS["tiny"], nlvr2_statements="presence"), out)
    mixed, presence = files_under(world[0]), files_under(out)
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
    every, other = files_under(tmp_path / "all"), files_under(tmp_path / "changed")
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
    base = replace(
        PRESETS["tiny"], nlvr2_statements="presence", nlvr2_pairs=(400, 8, 8), nlvr2_classes=4
    )
    _assert_only_nlvr2_differs(base, replace(base, nlvr2_classes_percent=50), tmp_path)
    named = {CLASSES[c].name for c in base.class_set().first(4).foreground}
    records = list(read_nlvr2(tmp_path / "changed" / "mmf/nlvr2/annotations/train.jsonl"))
    share = np.mean([any(re.search(rf"\b{n}\b", r["sentence"]) for n in named) for r in records])
    active = len(base.class_set().foreground)
    expected = 0.5 + 0.5 * 4 / active  # the other half names a named class 4 / active times
    assert abs(share - expected) < 0.08, (share, expected)


def test_nlvr2_pairs_change_only_the_nlvr2_files(world, tmp_path):
    """More NLVR2 pairs draw from NLVR2's own random stream and image pool: every file that
    a VQA, VE, RefCOCO+ or pre-training run reads is the default world's, byte for byte (so
    runs of those tasks stay valid when only NLVR2's size changes)."""
    out = tmp_path / "more_pairs"
    generate_world(replace(PRESETS["tiny"], nlvr2_pairs=(40, 8, 8)), out)
    default, more = files_under(world[0]), files_under(out)
    added = set(more) - set(default)
    assert added and all("nlvr2" in name for name in added), sorted(added)
    assert set(default) <= set(more)
    differ = {name for name in default if default[name] != more[name]} | added
    assert "mmf/nlvr2/annotations/train.jsonl" in differ
    others = differ - {"world.json", "world_files.txt", "mmf/vocabs/vocabulary_toy.txt"}
    assert others and all("nlvr2" in name for name in others), sorted(others)
    assert len(list(read_nlvr2(out / "mmf/nlvr2/annotations/train.jsonl"))) == 40


def test_unknown_nlvr2_statements_are_refused():
    with pytest.raises(
        ValueError,
        match=r"WorldConfig\.nlvr2_statements must be one of "
        r"\['mixed', 'presence'\], got 'counts'",
    ):
        replace(PRESETS["tiny"], nlvr2_statements="counts")


def test_unknown_caption_style_is_refused():
    with pytest.raises(
        ValueError,
        match=r"WorldConfig\.caption_style must be one of "
        r"\['attributes', 'objects', 'web'\], got 'plain'",
    ):
        replace(PRESETS["tiny"], caption_style="plain")
