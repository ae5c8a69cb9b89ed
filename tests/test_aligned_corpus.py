"""The aligned-corpus annotation database behind the pre-training datasets."""

import pytest

from mmf_uvlp.corpus.shards import write_index, write_part
from mmf_uvlp.datasets.databases.aligned_corpus import AlignedCorpusDatabase


def _record(position: int, sentences: int) -> dict:
    return {
        "image_id": f"img{position}", "feature_key": f"img{position}", "position": position,
        "image_w": 100, "image_h": 80, "tag_query": "dog",
        "regions": [{"box": [0, 0, 10, 10], "label": "dog", "conf": 0.9}],
        "sentences": [
            {"rank": rank, "sentence_id": 10 * position + rank, "text": f"s{position}.{rank}",
             "score": 1.0 - rank / 10, "noun_phrases": []}
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
    with pytest.raises(FileNotFoundError, match="build_corpus"):
        AlignedCorpusDatabase(str(tmp_path / "absent"), "image", "train")
    with pytest.raises(ValueError, match="no image items for the train split"):
        AlignedCorpusDatabase(corpus, "image", "train", holdout_every=1)
