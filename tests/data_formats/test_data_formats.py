"""Readers of mmf_uvlp.data_formats: round trips and clear errors on malformed records."""

from __future__ import annotations

import base64
import json
import pickle

import lmdb
import numpy as np
import pytest

from mmf_uvlp.data_formats import FormatError
from mmf_uvlp.data_formats.annotations import read_nlvr2, read_visual_entailment
from mmf_uvlp.data_formats.mmf_features import LmdbFeatures, load_npy, read_lmdb
from mmf_uvlp.data_formats.refer import Refer
from mmf_uvlp.data_formats.text import read_captions
from mmf_uvlp.data_formats.vinvl import (
    FeatureTsvIndex,
    infer_feature_dim,
    parse_detections_jsonl_row,
    parse_features_row,
    parse_predictions_row,
    read_detections_jsonl,
    read_features,
    read_predictions,
    read_vinvl,
)

from helpers.crafted import write_lmdb

GOOD_JSON = {
    "image_h": 100,
    "image_w": 200,
    "num_boxes": 1,
    "objects": [
        {
            "rect": [10.0, 20.0, 110.0, 90.0],
            "class": "dog",
            "conf": 0.9,
            "attributes": ["brown"],
            "attr_scores": [0.8],
        }
    ],
}


def _feature_row(image_id: str, array: np.ndarray, num_boxes: int | None = None) -> str:
    blob = base64.b64encode(array.astype("<f4").tobytes()).decode("ascii")
    return f"{image_id}\t{len(array) if num_boxes is None else num_boxes}\t{blob}"


def _good_features(n: int = 1, d: int = 4) -> np.ndarray:
    geometry = np.tile([[0.05, 0.2, 0.55, 0.9, 0.5, 0.7]], (n, 1))
    return np.concatenate([np.ones((n, d)), geometry], axis=1).astype(np.float32)


def _write(tmp_path, name: str, lines: list[str]):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_predictions_round_trip(tmp_path):
    path = _write(tmp_path, "predictions.tsv", ["img1\t" + json.dumps(GOOD_JSON)])
    (pred,) = read_predictions(path)
    assert pred.image_id == "img1" and (pred.image_w, pred.image_h) == (200, 100)
    assert pred.objects[0].cls == "dog" and pred.objects[0].attributes == ("brown",)
    assert pred.objects[0].area == 100.0 * 70.0


def _bad_object(**changes) -> str:
    record = json.loads(json.dumps(GOOD_JSON))
    record["objects"][0].update(changes)
    return json.dumps(record)


@pytest.mark.parametrize(
    "row, field",
    [
        ("img2\t{}\textra".format(json.dumps(GOOD_JSON)), "columns"),
        ("img2", "columns"),
        ("img2\t{not json", "json"),
        ("img2\t" + json.dumps(dict(GOOD_JSON, num_boxes=3)), "num_boxes"),
        ("img2\t" + json.dumps(dict(GOOD_JSON, image_h="100")), "image_h"),
        ("img2\t" + _bad_object(rect=[10, 20, 250, 90]), "objects[0].rect"),
        ("img2\t" + _bad_object(rect=[100, 20, 10, 90]), "objects[0].rect"),
        ("img2\t" + _bad_object(rect=[10, 20, 30]), "objects[0].rect"),
        ("img2\t" + _bad_object(conf=float("nan")), "objects[0].conf"),
        ("img2\t" + _bad_object(conf=1.5), "objects[0].conf"),
        ("img2\t" + _bad_object(attr_scores=[]), "objects[0].attr_scores"),
        ("img2\t" + _bad_object(**{"class": ""}), "objects[0].class"),
    ],
)
def test_malformed_prediction_rows(tmp_path, row, field):
    path = _write(tmp_path, "predictions.tsv", ["img1\t" + json.dumps(GOOD_JSON), row])
    with pytest.raises(FormatError) as info:
        list(read_predictions(path))
    error = info.value
    assert (error.line, error.field) == (2, field)
    assert f"{path}:2" in str(error) and field in str(error) and "expected" in str(error)


def test_features_round_trip_and_index(tmp_path):
    rows = [
        _feature_row("a", _good_features(2)),
        _feature_row("b", _good_features(0)),
        _feature_row("c", _good_features(3)),
    ]
    path = _write(tmp_path, "features.tsv", rows)
    parsed = list(read_features(path))
    assert [p.image_id for p in parsed] == ["a", "b", "c"]
    assert parsed[0].features.shape == (2, 10) and parsed[0].appearance.shape == (2, 4)
    assert parsed[1].features.shape == (0, 10)
    index = FeatureTsvIndex(path, feature_dim=4)
    assert len(index) == 3 and "c" in index
    np.testing.assert_array_equal(index["c"].features, parsed[2].features)
    with pytest.raises(KeyError):
        index["zzz"]


def _nan_features() -> np.ndarray:
    f = _good_features(2)
    f[1, 0] = np.nan
    return f


def _outside_features() -> np.ndarray:
    f = _good_features(1)
    f[0, -4] = 1.4  # x2 / W beyond the image
    return f


@pytest.mark.parametrize(
    "row, field, feature_dim",
    [
        ("x\t1", "columns", None),
        ("x\tone\tAAAA", "num_boxes", None),
        ("x\t1\t%%%not-base64%%%", "features", None),
        ("x\t1\t" + base64.b64encode(b"abcde").decode(), "features", None),
        (_feature_row("x", _good_features(2), num_boxes=3), "features", None),
        (_feature_row("x", _good_features(1, d=5)), "features", 4),
        (_feature_row("x", _nan_features()), "features", None),
        (_feature_row("x", _outside_features()), "features", None),
    ],
)
def test_malformed_feature_rows(tmp_path, row, field, feature_dim):
    path = _write(tmp_path, "features.tsv", [_feature_row("ok", _good_features(1)), row])
    with pytest.raises(FormatError) as info:
        list(read_features(path, feature_dim))
    assert (info.value.line, info.value.field) == (2, field)
    assert f"{path}:2" in str(info.value)


def test_feature_dim_must_stay_constant(tmp_path):
    path = _write(
        tmp_path,
        "features.tsv",
        [_feature_row("a", _good_features(1, d=4)), _feature_row("b", _good_features(1, d=8))],
    )
    with pytest.raises(FormatError, match=":2"):
        list(read_features(path))


def test_a_corrupt_first_row_does_not_set_d(tmp_path):
    """D is the majority of the rows (or the configured one), not the first row's."""
    rows = [_feature_row("a", _good_features(2, d=5))] + [
        _feature_row(name, _good_features(3)) for name in "bcd"
    ]
    path = _write(tmp_path, "features.tsv", rows)
    assert infer_feature_dim(path) == 4
    reader = read_features(path)
    with pytest.raises(FormatError) as info:
        next(reader)
    assert (info.value.line, info.value.field) == (1, "features")
    assert "2 x (4 + 6) float32 values" in str(info.value)
    assert next(read_features(path, feature_dim=5)).image_id == "a"  # configured D wins
    with pytest.raises(FormatError, match=r"features\.tsv:1: "):
        FeatureTsvIndex(path)["a"]
    assert FeatureTsvIndex(path)["b"].feature_dim == 4
    assert infer_feature_dim(_write(tmp_path, "none.tsv", ["x\t0\t", "y\t2\t%%%"])) is None


def test_feature_index_names_both_lines_of_a_duplicate(tmp_path):
    rows = [_feature_row(name, _good_features(1)) for name in ("a", "b", "a")]
    path = _write(tmp_path, "features.tsv", rows)
    with pytest.raises(FormatError) as info:
        FeatureTsvIndex(path)
    assert (info.value.line, info.value.field) == (3, "image_id")
    assert f"{path}:3" in str(info.value) and f"{path}:1 has it already" in str(info.value)


def test_read_vinvl_checks_alignment(tmp_path):
    preds = _write(
        tmp_path, "p.tsv", ["a\t" + json.dumps(GOOD_JSON), "b\t" + json.dumps(GOOD_JSON)]
    )
    feats = _write(
        tmp_path,
        "f.tsv",
        [_feature_row("a", _good_features(1)), _feature_row("c", _good_features(1))],
    )
    reader = read_vinvl(preds, feats)
    assert next(reader)[0].image_id == "a"
    with pytest.raises(FormatError, match="image_id"):
        next(reader)


def test_detections_jsonl(tmp_path):
    record = {
        "image_id": "a",
        "image_h": 10,
        "image_w": 10,
        "objects": [{"rect": [0, 0, 5, 5], "class": "cat", "conf": 0.5}],
    }
    path = _write(tmp_path, "d.jsonl", [json.dumps(record), json.dumps({"image_h": 3})])
    reader = read_detections_jsonl(path)
    assert next(reader).objects[0].cls == "cat"
    with pytest.raises(FormatError) as info:
        next(reader)
    assert (info.value.line, info.value.field) == (2, "image_id")


JSONL_RECORD = {
    "image_id": "a",
    "image_h": 10,
    "image_w": 10,
    "objects": [{"rect": [0, 0, 5, 5], "class": "cat", "conf": 0.5}],
}


@pytest.mark.parametrize(
    "name, good, read",
    [
        ("predictions.tsv", "img1\t" + json.dumps(GOOD_JSON), read_predictions),
        ("detections.jsonl", json.dumps(JSONL_RECORD), read_detections_jsonl),
        ("features.tsv", _feature_row("a", _good_features(1)), read_features),
        ("features.tsv", _feature_row("a", _good_features(1)), FeatureTsvIndex),
    ],
)
@pytest.mark.parametrize("bad, field", [("", "row"), (" \t ", "row"), ("\udcff", "encoding")])
def test_blank_or_undecodable_line_is_an_error(tmp_path, name, good, read, bad, field):
    path = tmp_path / name
    path.write_bytes((good + "\n" + bad + "\n" + good + "\n").encode("utf-8", "surrogateescape"))
    with pytest.raises(FormatError) as info:
        list(read(path))
    assert (info.value.line, info.value.field) == (2, field)
    assert f"{path}:2" in str(info.value) and "expected" in str(info.value)


def test_row_parsers_name_file_and_line():
    pred = parse_predictions_row(b"img1\t" + json.dumps(GOOD_JSON).encode() + b"\r\n", "p.tsv", 7)
    assert pred.image_id == "img1" and pred.objects[0].attr_scores == (0.8,)
    with pytest.raises(FormatError, match=r"p\.tsv:7: field 'row'.*end of file"):
        parse_predictions_row(b"", "p.tsv", 7)
    record = dict(JSONL_RECORD, image_id=17, image_w=10.0)
    det = parse_detections_jsonl_row(json.dumps(record).encode(), "d.jsonl", 1)
    assert (det.image_id, det.image_w) == ("17", 10)
    with pytest.raises(FormatError, match=r"d\.jsonl:3: field 'image_w'"):
        parse_detections_jsonl_row(json.dumps(dict(record, image_w=10.5)).encode(), "d.jsonl", 3)
    with pytest.raises(FormatError, match=r"d\.jsonl:2: field 'json'"):
        parse_detections_jsonl_row(b"[1, 2]", "d.jsonl", 2)
    feats = parse_features_row(
        _feature_row("img1", _good_features(1)).encode(), "f.tsv", 4, match=pred
    )
    with pytest.raises(FormatError) as info:
        parse_features_row(_feature_row("a", _good_features(1)).encode(), "f.tsv", 4, match=pred)
    assert (info.value.field, info.value.line) == ("image_id", 4)
    assert feats.feature_dim == 4


def test_features_without_boxes_take_the_inferred_d(tmp_path):
    path = _write(
        tmp_path,
        "features.tsv",
        [
            _feature_row("a", _good_features(0)),
            _feature_row("b", _good_features(2)),
            _feature_row("c", _good_features(1, d=8)),
        ],
    )
    reader = read_features(path)
    assert next(reader).features.shape == (0, 10)  # D = 4: a tie goes to the D seen first
    assert next(reader).feature_dim == 4
    with pytest.raises(FormatError, match=":3"):
        next(reader)
    with pytest.raises(FormatError, match=r":1: field 'features'"):
        list(read_features(_write(tmp_path, "f2.tsv", ["a\t0\tAAAA"])))


def test_read_vinvl_missing_extra_and_miscounted_rows(tmp_path):
    preds = _write(
        tmp_path, "p.tsv", ["a\t" + json.dumps(GOOD_JSON), "b\t" + json.dumps(GOOD_JSON)]
    )
    one = _feature_row("a", _good_features(1))
    for rows, line, field in [
        ([one], 2, "row"),
        (
            [one, _feature_row("b", _good_features(1)), _feature_row("c", _good_features(1))],
            3,
            "row",
        ),
        ([one, _feature_row("b", _good_features(2))], 2, "num_boxes"),
    ]:
        feats = _write(tmp_path, "f.tsv", rows)
        with pytest.raises(FormatError) as info:
            list(read_vinvl(preds, feats))
        assert (info.value.line, info.value.field) == (line, field)
        assert f"{feats}:{line}" in str(info.value)


def _mmf_record(n: int = 2, d: int = 4) -> dict:
    return {
        "image_id": "x",
        "image_width": 100,
        "image_height": 50,
        "num_boxes": n,
        "features": np.ones((n, d), dtype=np.float32),
        "bbox": np.tile(np.array([[1, 2, 30, 40]], dtype=np.float32), (n, 1)),
        "objects": np.zeros(n, dtype=np.int64),
        "cls_prob": np.full((n, 5), 0.2, np.float32),
    }


def test_lmdb_round_trip_and_errors(tmp_path):
    bad_nan = _mmf_record()
    bad_nan["features"][0, 0] = np.nan
    bad_box = _mmf_record()
    bad_box["bbox"][1] = [1, 2, 130, 40]
    write_lmdb(tmp_path / "f.lmdb", {"good": _mmf_record(), "nan": bad_nan, "box": bad_box})
    with LmdbFeatures(tmp_path / "f.lmdb", feature_dim=4, num_classes=5) as db:
        assert db.keys() == ["good", "nan", "box"] and len(db) == 3
        assert db["good"]["features"].shape == (2, 4)
        with pytest.raises(FormatError) as info:
            db["nan"]
        assert info.value.field == "features" and "'nan'" in str(info.value)
        with pytest.raises(FormatError, match="bbox"):
            db["box"]
        with pytest.raises(FormatError, match="D = 8"):
            LmdbFeatures(tmp_path / "f.lmdb", feature_dim=8)["good"]
    with pytest.raises(FormatError, match="nan"):
        list(read_lmdb(tmp_path / "f.lmdb"))


def test_a_path_that_is_no_lmdb_is_named(tmp_path):
    """Ours and MMF's own LMDB reader: one line naming the path and what was expected."""
    from mmf.datasets.databases.readers.feature_readers import LMDBFeatureReader

    from mmf_uvlp.errors import LmdbOpenError

    (tmp_path / "empty.lmdb").mkdir()
    (tmp_path / "text.lmdb").write_text("not an lmdb")
    expected = "expected an LMDB environment (a folder holding data.mdb, or an LMDB file)"
    for name, found in (
        ("empty.lmdb", "a folder without data.mdb"),
        ("missing.lmdb", "nothing at that path"),
        ("text.lmdb", "a file lmdb cannot open"),
    ):
        path = tmp_path / name
        with pytest.raises(LmdbOpenError) as info:
            LmdbFeatures(path)
        assert str(info.value).startswith(f"{path}: {expected}, found {found}")
        if path.exists():  # MMF names a missing path itself
            with pytest.raises(LmdbOpenError, match=f"found {found}"):
                LMDBFeatureReader(10, str(path)).read("img.npy")


def test_lmdb_without_keys_entry(tmp_path):
    env = lmdb.open(str(tmp_path / "k.lmdb"), map_size=1 << 20, subdir=True, lock=False)
    with env.begin(write=True) as txn:
        txn.put(b"a", pickle.dumps(_mmf_record()))
    env.close()
    with pytest.raises(FormatError, match="keys"):
        LmdbFeatures(tmp_path / "k.lmdb")


def test_npy_folder(tmp_path):
    record = _mmf_record(3)
    np.save(tmp_path / "img.npy", record["features"])
    np.save(
        tmp_path / "img_info.npy",
        {k: v for k, v in record.items() if k not in ("features", "image_id")},
    )
    loaded = load_npy(tmp_path, "img", feature_dim=4)
    assert loaded["features"].shape == (3, 4) and loaded["num_boxes"] == 3
    np.save(tmp_path / "bad.npy", record["features"][:2])
    np.save(tmp_path / "bad_info.npy", {k: v for k, v in record.items() if k != "features"})
    with pytest.raises(FormatError, match="features"):
        load_npy(tmp_path, "bad")


def _write_refer(root, split: str = "train", bbox=(10, 10, 20, 20)):
    folder = root / "refcoco+"
    folder.mkdir(parents=True)
    ref = {
        "ref_id": 0,
        "ann_id": 5,
        "image_id": 1,
        "split": split,
        "category_id": 1,
        "sentences": [
            {"sent": "red car", "tokens": ["red", "car"], "raw": "red car", "sent_id": 0}
        ],
    }
    with open(folder / "refs(unc).p", "wb") as f:
        pickle.dump([ref], f)
    instances = {
        "images": [
            {"id": 1, "file_name": "COCO_train2014_000000000001.jpg", "width": 100, "height": 80}
        ],
        "annotations": [{"id": 5, "image_id": 1, "category_id": 1, "bbox": list(bbox)}],
        "categories": [{"id": 1, "name": "car", "supercategory": "vehicle"}],
    }
    (folder / "instances.json").write_text(json.dumps(instances))


def test_refer_round_trip_and_errors(tmp_path):
    _write_refer(tmp_path / "good")
    (expr,) = Refer(tmp_path / "good").expressions()
    assert expr.sentence == "red car" and expr.box == (10, 10, 30, 30)
    _write_refer(tmp_path / "split", split="testC")
    with pytest.raises(FormatError, match="split"):
        list(Refer(tmp_path / "split").expressions())
    _write_refer(tmp_path / "box", bbox=(90, 10, 50, 20))
    with pytest.raises(FormatError, match="inside the 100x80 image"):
        Refer(tmp_path / "box")


def test_annotation_jsonl_errors(tmp_path):
    nlvr = _write(
        tmp_path,
        "n.jsonl",
        [
            json.dumps({"identifier": "train-1-0-0", "sentence": "s", "label": "True"}),
            json.dumps({"identifier": "train-1-1-0", "sentence": "s", "label": "yes"}),
        ],
    )
    with pytest.raises(FormatError) as info:
        list(read_nlvr2(nlvr))
    assert (info.value.line, info.value.field) == (2, "label")
    ve = _write(tmp_path, "v.jsonl", ['{"Flikr30kID": "1.jpg"'])
    with pytest.raises(FormatError, match="json"):
        list(read_visual_entailment(ve))


def test_captions_tsv_errors(tmp_path):
    path = _write(tmp_path, "c.tsv", ["a\ta dog", "b\t"])
    reader = read_captions(path)
    assert next(reader) == ("a", "a dog")
    with pytest.raises(FormatError, match=":2"):
        next(reader)
