"""The aligned-corpus annotation database behind the pre-training datasets."""

import os
from pathlib import Path

import pytest

from mmf_uvlp.corpus.shards import write_index, write_part
from mmf_uvlp.datasets.databases.aligned_corpus import AlignedCorpusDatabase


def _record(position: int, sentences: int) -> dict:
    return {
        "image_id": f"img{position}",
        "feature_key": f"img{position}",
        "position": position,
        "image_w": 100,
        "image_h": 80,
        "tag_query": "dog",
        "regions": [{"box": [0, 0, 10, 10], "label": "dog", "conf": 0.9}],
        "sentences": [
            {
                "rank": rank,
                "sentence_id": 10 * position + rank,
                "text": f"s{position}.{rank}",
                "score": 1.0 - rank / 10,
                "noun_phrases": [],
            }
            for rank in reversed(range(sentences))  # stored out of rank order on purpose
        ],
    }


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus" / "annotations"
    write_part(str(folder), 0, [_record(p, 3) for p in range(6)], "jsonl")
    write_index(str(folder), [{"file": "part-000000.jsonl", "images": 6}], {})
    return str(tmp_path / "corpus")


def test_units_and_holdout_split(corpus):
    train = AlignedCorpusDatabase(corpus, "image", "train", holdout_every=3)
    val = AlignedCorpusDatabase(corpus, "image", "val", holdout_every=3)
    assert [item["image_id"] for item in train] == ["img1", "img2", "img4", "img5"]
    assert [item["image_id"] for item in val] == ["img0", "img3"]
    assert train[0]["feature_path"] == "img1.npy" and train[0]["region_labels"] == ["dog"]
    everything = AlignedCorpusDatabase(corpus, "sentence", "val", holdout_every=0)
    assert len(everything) == 18


def test_top_k_keeps_the_best_ranked_sentences(corpus):
    pairs = AlignedCorpusDatabase(corpus, "sentence", "train", top_k=2)
    assert len(pairs) == 12
    assert [pairs[i]["sentence"]["text"] for i in range(2)] == ["s0.0", "s0.1"]


def test_bad_settings_are_clear_errors(corpus, tmp_path):
    with pytest.raises(ValueError, match="unit must be one of"):
        AlignedCorpusDatabase(corpus, "pair", "train")
    with pytest.raises(ValueError, match="top_k must be"):
        AlignedCorpusDatabase(corpus, "sentence", "train", top_k=0)
    with pytest.raises(FileNotFoundError, match="uvlp-build-corpus"):
        AlignedCorpusDatabase(str(tmp_path / "absent"), "image", "train")
    with pytest.raises(ValueError) as info:
        AlignedCorpusDatabase(corpus, "image", "train", holdout_every=1)
    assert str(info.value) == (
        f"aligned corpus: no image items: a split needs at least 1 image(s), but the train "
        f"split of aligned corpus {corpus!r} holds 0 of its 6 images (aligned corpus."
        "holdout_every=1 puts the images at positions divisible by 1 in val/test and the "
        "others in train); set aligned corpus.holdout_every to 5 (the largest value that "
        "leaves 1 image(s) in each split) or smaller, or to 0 (no hold-out)"
    )


def test_a_split_too_small_names_holdout_every_and_a_value_that_fits(corpus):
    val = AlignedCorpusDatabase(
        corpus, "sentence", "val", holdout_every=50, config_key="dataset_config.uvla_image_sentence"
    )
    val.require_images(1, "anything needs")
    with pytest.raises(ValueError) as info:
        val.require_images(2, "negatives (negative_prob > 0) need")
    key = "dataset_config.uvla_image_sentence.holdout_every"
    assert str(info.value) == (
        "dataset_config.uvla_image_sentence: negatives (negative_prob > 0) need at least "
        f"2 image(s), but the val split of aligned corpus {corpus!r} holds 1 of its 6 images "
        f"({key}=50 puts the images at positions divisible by 50 in val/test and the others "
        f"in train); set {key} to 5 (the largest value that leaves 2 image(s) in each split) "
        "or smaller, or to 0 (no hold-out)"
    )
    fits = AlignedCorpusDatabase(corpus, "sentence", "val", holdout_every=5)
    assert [image["image_id"] for image in fits.images] == ["img0", "img5"]
    everything = AlignedCorpusDatabase(corpus, "sentence", "val", holdout_every=0)
    with pytest.raises(
        ValueError,
        match=r"holds 6 of its 6 images .*; build a corpus of at "
        r"least 7 images$",
    ):
        everything.require_images(7, "a test needs")


@pytest.mark.usefixtures("mmf_registry")
def test_image_sentence_dataset_names_holdout_every(corpus, tmp_path):
    """The I-S dataset of the tiny world's default hold-out: MMF's own build path."""
    import torch
    from omegaconf import OmegaConf

    import mmf  # noqa: F401  (registers the plugin's components)
    from mmf.common.registry import registry
    from mmf.utils.build import build_dataset

    registry.register("config", OmegaConf.create({"training": {"batch_size": 2}}))
    registry.register("current_device", torch.device("cpu"))
    (tmp_path / "features").mkdir()
    for position in range(6):  # the dataset checks, when built, that every image has features
        (tmp_path / "features" / f"img{position}.npy").touch()
    splits = ("train", "val", "test")
    config = OmegaConf.create(
        {
            "data_dir": os.path.dirname(corpus),
            "use_features": True,
            "use_images": False,
            "return_features_info": True,
            "max_features": 4,
            "fast_read": False,
            "holdout_every": 50,
            "negative_prob": 0.5,
            "annotations": {t: [os.path.basename(corpus)] for t in splits},
            "features": {t: [str(tmp_path / "features")] for t in splits},
            "processors": {
                "masking_processor": {
                    "type": "uvla_image_sentence_masking",
                    "params": {
                        "tokenizer_path": os.environ["UVLP_BERT"],
                        "max_seq_length": 16,
                        "max_regions": 4,
                    },
                }
            },
        }
    )
    with pytest.raises(
        ValueError,
        match=r"^dataset_config\.uvla_image_sentence: negatives "
        r"\(negative_prob > 0\) need at least 2 image.*"
        r"set dataset_config\.uvla_image_sentence\."
        r"holdout_every to 5 ",
    ):
        build_dataset("uvla_image_sentence", config, "val")


def test_top_k_above_the_corpus_k_is_refused(corpus):
    with open(os.path.join(corpus, "config.yaml"), "w") as handle:
        handle.write("retrieve:\n  k: 3\n")
    assert len(AlignedCorpusDatabase(corpus, "sentence", "train", top_k=3)) == 18
    with pytest.raises(ValueError, match=r"top_k=10: the corpus .* holds only the top 3 .*--k 10"):
        AlignedCorpusDatabase(corpus, "sentence", "train", top_k=10, config_key="dataset_config.x")


@pytest.mark.slow
def test_pretraining_on_a_corpus_with_a_damaged_part_stops_naming_the_file(tiny_corpus, tmp_path):
    import shutil

    from helpers import pretrain

    world = tmp_path / "world"
    world.mkdir()
    for entry in tiny_corpus.parent.iterdir():
        if entry.name != "corpus":
            (world / entry.name).symlink_to(entry)
    shutil.copytree(tiny_corpus, world / "corpus")
    part = world / "corpus" / "annotations" / "part-000000.jsonl.gz"
    part.write_bytes(part.read_bytes()[:50])
    output = pretrain(tmp_path, world, tmp_path / "save", "training.max_updates=1", ok=False)
    last = output.strip().splitlines()[-1]
    assert last.startswith(
        f"mmf_run: error: {part}:1: field 'gzip': expected a complete gzip "
        "stream (damaged or cut short: rebuild it), got 'EOFError: "
    ), output[-3000:]
    assert "Traceback" not in output


def _features_with_other_region_counts(source, target) -> tuple:
    """``source``'s feature LMDB copied to ``target`` with every 3rd image's regions removed
    (0 rows) and the next image's given 2 more rows; the ids of both sets."""
    import pickle

    import lmdb
    import numpy as np

    import shutil

    none, more = [], []
    # read from a copy: py-lmdb refuses a second open of a file that another test of this
    # process holds open
    copy = Path(str(target) + ".source")
    (shutil.copytree if source.is_dir() else shutil.copy2)(source, copy)
    try:
        with (
            lmdb.open(str(copy), readonly=True, lock=False, subdir=copy.is_dir()) as old,
            lmdb.open(str(target), map_size=1 << 30) as new,
            old.begin() as read,
            new.begin(write=True) as write,
        ):
            keys = pickle.loads(read.get(b"keys"))
            write.put(b"keys", read.get(b"keys"))
            for index, key in enumerate(keys):
                record = pickle.loads(read.get(key))
                if index % 3 == 0:
                    record = {
                        k: v[:0] if isinstance(v, np.ndarray) else v for k, v in record.items()
                    }
                    record["num_boxes"] = 0
                    none.append(record["image_id"])
                elif index % 3 == 1:
                    record = {
                        k: np.concatenate([v, v[:2]]) if isinstance(v, np.ndarray) else v
                        for k, v in record.items()
                    }
                    record["num_boxes"] += 2
                    more.append(record["image_id"])
                write.put(key, pickle.dumps(record))
    finally:
        (shutil.rmtree if copy.is_dir() else os.remove)(copy)
    return none, more


@pytest.mark.slow
def test_region_count_disagreements_are_counted_and_reported_both_ways(tiny_corpus, tmp_path):
    from helpers import pretrain

    world = tmp_path / "world"
    (world / "features").mkdir(parents=True)
    for entry in tiny_corpus.parent.iterdir():
        if entry.name != "features":
            (world / entry.name).symlink_to(entry)
    for entry in (tiny_corpus.parent / "features").iterdir():
        if entry.name != "cc.lmdb":
            (world / "features" / entry.name).symlink_to(entry)
    none, more = _features_with_other_region_counts(
        tiny_corpus.parent / "features" / "cc.lmdb", world / "features" / "cc.lmdb"
    )
    output = pretrain(tmp_path, world, tmp_path / "save", "training.max_updates=2")
    for direction, images in (("fewer", none), ("more", more)):
        told = [
            line
            for line in output.splitlines()
            if f"1 image(s) so far whose features hold {direction} regions than the corpus "
            "lists (latest: image " in line
        ]
        assert told, output[-3000:]
        image = told[0].split("latest: image ")[1].split(",")[0]
        assert image in images and "different detector outputs" in told[0], told[0]
        if direction == "fewer":
            assert " regions in the corpus, 0 feature rows in " in told[0], told[0]
