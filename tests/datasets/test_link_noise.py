"""Links made noisier on purpose (``link_noise``): the link-quality ablation of R-N."""

import json

import pytest
from mmf.common.registry import registry

from mmf_uvlp.corpus.shards import write_index
from mmf_uvlp.datasets.databases.aligned_corpus import AlignedCorpusDatabase
from mmf_uvlp.replication.steps import Settings, system_steps
from mmf_uvlp.replication.study import SYSTEMS, TABLES
from mmf_uvlp.replication.world import World

REGIONS = 6


def _line(position: int) -> str:
    """One image record as the corpus builder writes it, spelled out by hand: three
    sentences of four phrases, three linked to regions 0-5 and one unlinked."""
    sentences = []
    for rank in range(3):
        phrases = [
            {
                "text": f"p{k}",
                "char_span": [3 * k, 3 * k + 2],
                "token_span": [k, k + 1],
                "region": (rank + k) % REGIONS,
                "similarity": 1.0,
                "link_score": 0.9,
                "linked": True,
            }
            for k in range(3)
        ]
        phrases.append(
            {
                "text": "p3",
                "char_span": [9, 11],
                "token_span": [3, 4],
                "region": None,
                "similarity": 0.1,
                "link_score": 0.1,
                "linked": False,
            }
        )
        sentences.append(
            {
                "rank": rank,
                "sentence_id": 10 * position + rank,
                "text": "p0 p1 p2 p3",
                "score": 0.5,
                "noun_phrases": phrases,
            }
        )
    regions = [{"box": [0, 0, 10, 10], "label": "dog", "conf": 0.9}] * REGIONS
    return json.dumps(
        {
            "image_id": f"img{position}",
            "feature_key": f"img{position}",
            "position": position,
            "image_w": 100,
            "image_h": 80,
            "tag_query": "dog",
            "regions": regions,
            "sentences": sentences,
        }
    )


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus" / "annotations"
    folder.mkdir(parents=True)
    (folder / "part-000000.jsonl").write_text(
        "".join(_line(p) + "\n" for p in range(40)), encoding="utf-8"
    )
    write_index(str(folder), [{"file": "part-000000.jsonl", "images": 40}], {})
    return str(tmp_path / "corpus")


def _links(db: AlignedCorpusDatabase) -> dict:
    return {
        (image["image_id"], s, k): phrase["region"]
        for image in db.images
        for s, sentence in enumerate(image["sentences"])
        for k, phrase in enumerate(sentence["noun_phrases"])
    }


def test_a_share_of_the_links_points_at_another_region_of_the_image(corpus, monkeypatch):
    clean = _links(AlignedCorpusDatabase(corpus, "sentence", "train"))
    lines = []  # the run's log: what MMF registers as its writer
    monkeypatch.setitem(
        registry.mapping["state"],
        "writer",
        type("Log", (), {"write": staticmethod(lines.append)})(),
    )
    noisy = _links(
        AlignedCorpusDatabase(
            corpus,
            "sentence",
            "train",
            link_noise=0.5,
            config_key="dataset_config.uvla_region_phrase",
        )
    )
    changed = [key for key in clean if clean[key] != noisy[key]]
    linked = [key for key in clean if clean[key] is not None]
    assert len(linked) == 40 * 3 * 3
    assert 0.4 < len(changed) / len(linked) < 0.6
    assert all(clean[key] is not None and 0 <= noisy[key] < REGIONS for key in changed)
    assert all(noisy[key] is None for key in clean if clean[key] is None)  # unlinked stay
    assert len(lines) == 1 and f"{len(changed)} of 360 linked phrases" in lines[0]
    assert lines[0].startswith("dataset_config.uvla_region_phrase (train split of ")


def test_the_noise_is_the_corpus_s_whatever_the_split_and_nested_across_shares(corpus):
    everything = _links(AlignedCorpusDatabase(corpus, "sentence", "train", link_noise=0.5))
    again = _links(AlignedCorpusDatabase(corpus, "sentence", "train", link_noise=0.5))
    assert everything == again
    val = _links(AlignedCorpusDatabase(corpus, "sentence", "val", holdout_every=4, link_noise=0.5))
    assert val and all(everything[key] == region for key, region in val.items())
    clean = _links(AlignedCorpusDatabase(corpus, "sentence", "train"))
    quarter = _links(AlignedCorpusDatabase(corpus, "sentence", "train", link_noise=0.25))
    changed = {key for key in clean if quarter[key] != clean[key]}
    assert changed and all(everything[key] == quarter[key] for key in changed)
    assert _links(AlignedCorpusDatabase(corpus, "sentence", "train", link_noise=0.0)) == clean


def test_a_share_outside_zero_to_one_names_its_key(corpus):
    with pytest.raises(
        ValueError,
        match=r"^dataset_config\.uvla_region_phrase\.link_noise: "
        r"expected a share between 0 and 1, got 1\.5$",
    ):
        AlignedCorpusDatabase(
            corpus,
            "sentence",
            "train",
            link_noise=1.5,
            config_key="dataset_config.uvla_region_phrase",
        )


def test_the_link_and_budget_tables_run_their_systems_with_their_settings(tmp_path):
    settings = Settings(
        world=World(tmp_path / "world"), runs=tmp_path / "runs", pretrain_updates=100
    )
    assert TABLES["links"].systems() == ["uvla", "link_noise25", "link_noise50", "aligned_vlp"]
    assert TABLES["budget"].systems() == ["uvla", "uvla_2x", "aligned_vlp", "aligned_vlp_2x"]

    def pretrain(key: str) -> tuple:
        return next(
            s for s in system_steps(SYSTEMS[key], 0, settings) if s.kind == "pretrain"
        ).command

    noisy = pretrain("link_noise25")
    assert "config=projects/uvla/ablations/link_noise25.yaml" in noisy
    for key, updates in (("uvla", 100), ("uvla_2x", 200), ("aligned_vlp_2x", 200)):
        command = pretrain(key)
        assert f"training.max_updates={updates}" in command
        assert f"scheduler.params.num_warmup_steps={updates // 10}" in command
    assert pretrain("uvla_2x")[1] == pretrain("uvla")[1]
