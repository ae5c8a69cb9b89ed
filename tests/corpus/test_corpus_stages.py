"""Each corpus-builder stage on tiny data with hand-checkable answers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mmf_uvlp.corpus.detections import Detection, DetectionReader
from mmf_uvlp.corpus.config import TagsConfig
from mmf_uvlp.corpus.tag_query import kept_regions, ranked_tags, tag_query
from mmf_uvlp.errors import FormatError
from mmf_uvlp.utils.error_policy import ErrorPolicy

from helpers.corpus import (
    IMAGES,
    SENTENCES,
    TAG_QUERIES,
    features_row,
    obj,
    predictions_row,
    shared_resources,
    write_tiny_world,
)


def _read_all(paths, **kw):
    reader = DetectionReader(predictions=paths["predictions"], features=paths["features"], **kw)
    return list(reader), reader


# ---------------------------------------------------------------- detections + tag queries
def test_reader_and_tag_queries(tmp_path):
    paths = write_tiny_world(tmp_path)
    items, reader = _read_all(paths)
    assert reader.positions == 6 and reader.feature_dim == 8
    rule = TagsConfig()
    queries = {d.image_id: tag_query(d, rule) for _, _, d in items}
    assert queries.pop("img4") == ""  # only a 0.1-confidence box
    assert queries == TAG_QUERIES
    img0 = items[0][2]
    assert kept_regions(img0, rule) == [0, 1, 3]  # grass: conf .2; ball: 0.25% of the image


def test_tag_rule_is_configurable():
    det = Detection(
        "x",
        100,
        100,
        [[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 90, 90], [0, 0, 20, 20]],
        ["Cup", "cup", "table", "dog"],
        [0.9, 0.9, 0.9, 0.29],
    )
    assert ranked_tags(det, TagsConfig()) == ["table", "cup"]  # cup: 6.67+.1, table: 3.33+8.1
    assert ranked_tags(det, TagsConfig(area_weight=0)) == ["cup", "table"]
    assert ranked_tags(det, TagsConfig(min_conf=0.2)) == ["table", "cup", "dog"]
    assert ranked_tags(det, TagsConfig(min_area_ratio=0.05)) == ["table"]
    assert ranked_tags(det, TagsConfig(max_tags=1)) == ["table"]
    assert ranked_tags(det, TagsConfig(lowercase=False)) == ["table", "Cup", "cup"]


BAD_PREDICTIONS = {
    "malformed row": ("img9 no tab here", "columns"),
    "bad json": ("img9\t{not json", "json"),
    "box outside image": (
        predictions_row("img9", [obj([0, 0, 150, 50], "dog", 0.9)]),
        "objects[0].rect",
    ),
    "NaN box": (
        "img9\t"
        + json.dumps(
            {
                "image_h": 100,
                "image_w": 100,
                "objects": [{"rect": [0, 0, float("nan"), 5], "class": "dog", "conf": 0.9}],
            }
        ),
        "objects[0].rect",
    ),
    "empty line": ("", "row"),
    "blank line": (" \t ", "row"),
}


@pytest.mark.parametrize("case", sorted(BAD_PREDICTIONS))
def test_bad_predictions_row_names_file_line_field(tmp_path, case):
    line, field = BAD_PREDICTIONS[case]
    lines = [predictions_row(i, o) for i, o in IMAGES]
    lines[2] = line
    paths = write_tiny_world(tmp_path, predictions_lines=lines)
    items, _ = _read_all(paths, validate_features=False)
    errors = [(p, e) for p, _, e in items if isinstance(e, Exception)]
    assert len(errors) == 1 and errors[0][0] == 2
    err = errors[0][1]
    assert isinstance(err, FormatError) and err.line == 3 and err.field == field
    assert "predictions.tsv:3" in str(err)
    with pytest.raises(FormatError, match=r"predictions\.tsv:3"):
        ErrorPolicy("raise").handle("predictions", err)


def test_blank_and_non_utf8_rows_are_skipped_and_counted(tmp_path):
    lines = [predictions_row(i, o) for i, o in IMAGES]
    lines[1], lines[4] = "", "   "
    paths = write_tiny_world(tmp_path, predictions_lines=lines)
    with open(paths["predictions"], "ab") as f:
        f.write(b"img6\t\xff{}\n")
    items, reader = _read_all(paths, validate_features=False)
    assert reader.positions == 7
    policy = ErrorPolicy("skip")
    for _, source, item in items:
        if isinstance(item, Exception):
            policy.handle(source, item)
    assert policy.counts == {"predictions: row": 2, "predictions: encoding": 1}
    assert any("predictions.tsv:2" in e for e in policy.examples["predictions: row"])
    assert [d.image_id for _, _, d in items if isinstance(d, Detection)] == [
        "img0",
        "img2",
        "img3",
        "img5",
    ]


def test_blank_features_row_is_counted(tmp_path):
    lines = [features_row(i, len(o), s) for s, (i, o) in enumerate(IMAGES)]
    lines[3] = ""
    paths = write_tiny_world(tmp_path, features_lines=lines)
    items, _ = _read_all(paths)
    errors = [(p, s, e) for p, s, e in items if isinstance(e, Exception)]
    assert [(p, s, e.field, e.line) for p, s, e in errors] == [(3, "features", "row", 4)]
    assert "features.tsv:4" in str(errors[0][2])


def _outcome(items):
    """(errors as (position, source, field, line), ids of the good rows)."""
    errors = [(p, s, e.field, e.line) for p, s, e in items if isinstance(e, Exception)]
    return errors, [d.image_id for _, _, d in items if isinstance(d, Detection)]


ALL_IDS = [i for i, _ in IMAGES]


def test_blank_lines_pair_the_rows_by_image(tmp_path):
    """A blank line takes the other file's row only when it stands where that row belongs."""
    preds = [predictions_row(i, o) for i, o in IMAGES]
    feats = [features_row(i, len(o), s) for s, (i, o) in enumerate(IMAGES)]
    cases = {  # name: (predictions, features, errors, good ids)
        "inserted in predictions": (
            preds[:2] + [""] + preds[2:],
            feats,
            [(2, "predictions", "row", 3)],
            ALL_IDS,
        ),
        "inserted in features": (
            preds,
            feats[:2] + [""] + feats[2:],
            [(2, "features", "row", 3)],
            ALL_IDS,
        ),
        "inserted in both": (
            preds[:2] + [""] + preds[2:],
            feats[:2] + [""] + feats[2:],
            [(2, "predictions", "row", 3), (3, "features", "row", 3)],
            ALL_IDS,
        ),
        "predictions row blanked": (
            preds[:2] + [""] + preds[3:],
            feats,
            [(2, "predictions", "row", 3)],
            ["img0", "img1", "img3", "img4", "img5"],
        ),
        "features row blanked": (
            preds,
            feats[:2] + [""] + feats[3:],
            [(2, "features", "row", 3)],
            ["img0", "img1", "img3", "img4", "img5"],
        ),
        "blank at the ends": (
            preds + [""],
            feats + [""],
            [(6, "predictions", "row", 7), (6, "features", "row", 7)],
            ALL_IDS,
        ),
    }
    for name, (p, f, errors, ids) in cases.items():
        paths = write_tiny_world(tmp_path / name.replace(" ", "_"), p, f)
        assert _outcome(_read_all(paths)[0]) == (errors, ids), name


def test_duplicate_image_id_names_both_lines(tmp_path):
    preds = [predictions_row(i, o) for i, o in IMAGES]
    feats = [features_row(i, len(o), s) for s, (i, o) in enumerate(IMAGES)]
    for name, f in (
        ("without its features row", feats),
        ("with its features row", feats[:2] + [feats[1]] + feats[2:]),
    ):
        paths = write_tiny_world(
            tmp_path / name.replace(" ", "_"), preds[:2] + [preds[1]] + preds[2:], f
        )
        items, reader = _read_all(paths)
        assert _outcome(items) == ([(2, "predictions", "image_id", 3)], ALL_IDS), name
        (err,) = [e for _, _, e in items if isinstance(e, Exception)]
        assert "predictions.tsv:3: field 'image_id'" in str(err)
        assert f"{paths['predictions']}:2 has it already), got 'img1'" in str(err)
    only_mine = DetectionReader(predictions=paths["predictions"], features=paths["features"])
    items = list(only_mine.select(lambda p: p >= 2))  # a shard sees the earlier rows' ids too
    assert _outcome(items)[0] == [(2, "predictions", "image_id", 3)]


def test_missing_and_extra_features_rows(tmp_path):
    lines = [features_row(i, len(o), s) for s, (i, o) in enumerate(IMAGES)]
    paths = write_tiny_world(tmp_path, features_lines=lines[:5])
    items, _ = _read_all(paths)
    errors = [(p, s, e) for p, s, e in items if isinstance(e, Exception)]
    assert [(p, s, e.field) for p, s, e in errors] == [(5, "features", "row")]
    assert "end of file" in str(errors[0][2])
    paths = write_tiny_world(tmp_path, features_lines=lines + [lines[0]])
    with pytest.raises(FormatError, match=r"features\.tsv:7: field 'row'"):
        _read_all(paths)


def _nan_features():
    feats = np.zeros((3, 14), dtype=np.float32)
    feats[1, 2] = np.nan
    import base64

    return f"img1\t3\t{base64.b64encode(feats.tobytes()).decode()}"


BAD_FEATURES = {
    "bad base64": ("img1\t3\t@@@not-base64@@@", "features"),
    "wrong size": (features_row("img1", 3, dim=5), "features"),
    "NaN": (_nan_features(), "features"),
    "box count": (features_row("img1", 2), "num_boxes"),
}


@pytest.mark.parametrize("case", sorted(BAD_FEATURES))
def test_bad_features_row(tmp_path, case):
    line, field = BAD_FEATURES[case]
    lines = [features_row(i, len(o), s) for s, (i, o) in enumerate(IMAGES)]
    lines[1] = line
    paths = write_tiny_world(tmp_path, features_lines=lines)
    items, _ = _read_all(paths)
    errors = [(p, s, e) for p, s, e in items if isinstance(e, Exception)]
    assert [(p, s) for p, s, _ in errors] == [(1, "features")]
    assert errors[0][2].field == field and errors[0][2].line == 2
    assert "features.tsv:2" in str(errors[0][2])
    policy = ErrorPolicy("skip")
    policy.handle("features", errors[0][2])
    assert policy.counts == {f"features: {field}": 1}


def test_features_out_of_step_is_fatal(tmp_path):
    lines = [features_row(i, len(o), s) for s, (i, o) in enumerate(IMAGES)]
    lines[0], lines[1] = lines[1], lines[0]
    paths = write_tiny_world(tmp_path, features_lines=lines)
    with pytest.raises(FormatError, match="image_id"):
        _read_all(paths)


# ---------------------------------------------------------------- sentences
def test_sentence_index_fetch_and_bad_lines(tmp_path):
    from mmf_uvlp.corpus.sentences import SentenceStore, build_sentence_index, text_hash

    corpus = tmp_path / "c.txt"
    corpus.write_bytes("  Ünïcode café  \r\nsecond line\n\n".encode() + b"\xff bad\nlast\n")
    with pytest.raises(FormatError, match=r"c\.txt:3.*'text'"):
        build_sentence_index([str(corpus)], str(tmp_path / "a"), ErrorPolicy("raise"))
    policy = ErrorPolicy("skip")
    counts = build_sentence_index([str(corpus)], str(tmp_path / "b"), policy)
    assert counts == {"sentences": 3, "lines": 5, "distinct_texts": 3}
    assert policy.counts == {"corpus: text": 1, "corpus: encoding": 1}
    store = SentenceStore(str(tmp_path / "b"), [str(corpus)])
    assert store.texts([0, 1, 2]) == ["Ünïcode café", "second line", "last"]
    assert store.texts_range(0, 3) == store.texts([0, 1, 2])
    assert store.source(2) == f"{corpus}:5"
    assert text_hash("Second line!") == int(store.hashes[1])
    assert store.in_pool(np.array([text_hash("LAST"), text_hash("nope")], np.uint64)).tolist() == [
        True,
        False,
    ]


# ---------------------------------------------------------------- embeddings
def test_embeddings_memmap_match_encode(tmp_path):
    from mmf_uvlp.corpus.config import EmbedConfig
    from mmf_uvlp.corpus.embed import embed_corpus, encode
    from mmf_uvlp.corpus.sentences import SentenceStore, build_sentence_index

    paths = write_tiny_world(tmp_path)
    build_sentence_index([paths["corpus"]], str(tmp_path / "s"), ErrorPolicy())
    store = SentenceStore(str(tmp_path / "s"), [paths["corpus"]])
    model = shared_resources().sentence_model(EmbedConfig())
    path = embed_corpus(store, str(tmp_path / "s"), model, chunk_size=5, batch_size=4)
    emb = np.load(path, mmap_mode="r")
    assert emb.dtype == np.float32 and emb.shape == (12, 384)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    bare = model.encode(SENTENCES, normalize_embeddings=True)
    np.testing.assert_allclose(emb, bare, atol=1e-5)
    np.testing.assert_array_equal(encode(model, SENTENCES[5:10], 4), emb[5:10])


# ---------------------------------------------------------------- retrieval
def _random_unit(n, d, seed):
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_flat_topk_matches_brute_force():
    from mmf_uvlp.corpus.config import RetrieveConfig
    from mmf_uvlp.corpus.retrieve import build_index, retrieve

    emb, queries = _random_unit(500, 16, 0), _random_unit(20, 16, 1)
    hashes = np.arange(500, dtype=np.uint64)  # all texts distinct
    index = build_index(emb, "flat", RetrieveConfig())
    ids, scores, _ = retrieve(index, queries, emb, hashes, k=5, overfetch=3)
    brute = queries.astype(np.float64) @ emb.T.astype(np.float64)
    expected = np.argsort(-brute, axis=1)[:, :5]
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(brute, expected, 1), atol=1e-6)


def test_own_caption_exclusion_and_unique_texts():
    from mmf_uvlp.corpus.config import RetrieveConfig
    from mmf_uvlp.corpus.retrieve import build_index, retrieve

    emb = _random_unit(50, 8, 2)
    emb[7] = emb[3]  # a duplicate text of sentence 3 (same hash)
    hashes = np.arange(50, dtype=np.uint64)
    hashes[7] = 3
    query = emb[3:4].copy()
    index = build_index(emb, "flat", RetrieveConfig())
    ids, _, _ = retrieve(index, query, emb, hashes, k=3, overfetch=0)
    assert ids[0, 0] == 3 and 7 not in ids[0]  # tie broken by id, duplicate removed
    ids2, _, _ = retrieve(index, query, emb, hashes, k=3, overfetch=0, unique_texts=False)
    assert ids2[0, :2].tolist() == [3, 7]
    ids3, _, dropped = retrieve(index, query, emb, hashes, k=3, overfetch=0, excluded=[{3}])
    assert 3 not in ids3[0] and 7 not in ids3[0] and dropped == 2
    np.testing.assert_array_equal(ids3[0], ids[0, [1, 2]].tolist() + [ids3[0, 2]])


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_report_recall(tmp_path, kind):
    from mmf_uvlp.corpus.config import RetrieveConfig
    from mmf_uvlp.corpus.retrieve import build_index, recall_at_k, search

    centers = _random_unit(20, 16, 3)
    rng = np.random.default_rng(4)
    emb = centers[rng.integers(0, 20, 2000)] + 0.3 * _random_unit(2000, 16, 5)
    emb = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).astype(np.float32)
    cfg = RetrieveConfig(ivf_nlist=20, ivf_nprobe=5)
    index = build_index(emb, kind, cfg, cache_dir=str(tmp_path))
    _, approx = search(index, emb[:50], 5)
    recall = recall_at_k(approx, emb[:50], emb, 5)
    assert recall.mean() > 0.9
    assert any(p.name.startswith(f"faiss-{kind}") for p in tmp_path.iterdir())  # shared
    again = build_index(emb, kind, cfg, cache_dir=str(tmp_path))
    np.testing.assert_array_equal(search(again, emb[:50], 5)[1], approx)


# ---------------------------------------------------------------- noun phrases
def test_noun_phrases_spans():
    from mmf_uvlp.corpus.config import PhrasesConfig
    from mmf_uvlp.corpus.noun_phrases import PhraseExtractor

    extractor = PhraseExtractor(shared_resources().nlp(PhrasesConfig()))
    text = "A young woman sitting on a red sofa next to the couch."
    (phrases,) = extractor([11], [text])
    assert [p["text"] for p in phrases] == ["A young woman", "a red sofa", "the couch"]
    assert [p["char_span"] for p in phrases] == [[0, 13], [25, 35], [44, 53]]
    assert [p["token_span"] for p in phrases] == [[0, 3], [5, 8], [10, 12]]
    assert all(text[s:e] == p["text"] for p in phrases for s, e in [p["char_span"]])
    assert phrases[0]["words"] == ["young", "woman"] and phrases[1]["head"] == "sofa"
    extractor([11, 11], [text, text])
    assert extractor.parsed == 1  # each distinct sentence parsed once


# ---------------------------------------------------------------- links
def _phrase(text, words, head):
    return {"text": text, "words": words, "head": head}


def test_glove_links():
    from mmf_uvlp.corpus.link import Linker

    linker = Linker("glove", "head", 0.65, "none", glove=shared_resources().glove(None))
    labels, confs = ["woman", "couch", "table", "couch"], [0.9, 0.5, 0.9, 0.8]
    cands = [0, 1, 2, 3]
    region, sim, score, linked = linker.link(
        _phrase("a red sofa", ["red", "sofa"], "sofa"), labels, confs, cands
    )
    assert region == 3 and linked and score == sim and 0.65 < sim < 0.75  # surer couch wins
    assert linker.link(_phrase("A young woman", ["young", "woman"], "woman"), labels, confs, cands)[
        :2
    ] == (0, pytest.approx(1.0))
    assert linker.link(_phrase("He", [], "he"), labels, confs, cands) == (None, None, 0.0, False)
    region, sim, score, linked = linker.link(
        _phrase("the stock market", ["stock", "market"], "market"), labels, confs, cands
    )
    assert not linked and score == 0.0 and sim < 0.65
    assert linker.link(_phrase("a sofa", ["sofa"], "sofa"), labels, confs, [0, 2])[0] in (0, 2)
    mean = Linker("glove", "mean", 0.65, "divide", glove=shared_resources().glove(None))
    region, sim, score, linked = mean.link(_phrase("a dog", ["dog"], "dog"), ["dog"], [1], [0])
    assert linked and score == pytest.approx(1 / 0.65)


def test_rescale_modes():
    from mmf_uvlp.corpus.link import rescale

    assert rescale(0.8, 0.5, "none") == 0.8
    assert rescale(0.8, 0.5, "divide") == pytest.approx(1.6)  # reference (s/0.5)
    assert rescale(0.8, 0.5, "minmax") == pytest.approx(0.6)


def test_sbert_links():
    from mmf_uvlp.corpus.config import EmbedConfig
    from mmf_uvlp.corpus.link import Linker

    model = shared_resources().sentence_model(EmbedConfig())
    linker = Linker("sbert", threshold=0.5, sbert_model=model)
    linker.precompute(["a red sofa"])
    region, sim, _, linked = linker.link(
        _phrase("a red sofa", ["red", "sofa"], "sofa"),
        ["woman", "couch", "pizza"],
        [0.9, 0.9, 0.9],
        [0, 1, 2],
    )
    assert region == 1 and linked and sim > 0.5


# ---------------------------------------------------------------- config
def test_default_yaml_mirrors_dataclasses_and_overrides():
    import yaml

    from mmf_uvlp.corpus.config import DEFAULT_CONFIG_PATH, CorpusConfig, load_config

    assert yaml.safe_load(DEFAULT_CONFIG_PATH.read_text()) == CorpusConfig().to_dict()
    cfg = load_config(
        overrides=["retrieve.k=10", "link.glove.threshold=0.7", "inputs.corpus=[a.txt, b.txt]"]
    )
    assert (cfg.retrieve.k, cfg.link.glove.threshold, cfg.inputs.corpus) == (
        10,
        0.7,
        ["a.txt", "b.txt"],
    )
    with pytest.raises(KeyError, match="retrieve.kk"):
        load_config(overrides=["retrieve.kk=1"])
    with pytest.raises(ValueError, match="retrieve.index"):
        load_config(
            data={"inputs": {"predictions": "p", "corpus": ["c"]}, "retrieve": {"index": "lsh"}}
        ).validate()
