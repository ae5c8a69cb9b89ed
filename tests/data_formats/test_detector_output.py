"""A detector's raw output as it comes: label maps, hw.tsv, raw rows, and the corpus built
from them (the worked example's hand-written files in tests/fixtures/own_data)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mmf_uvlp.corpus import iter_records
from mmf_uvlp.corpus.detections import DetectionReader
from mmf_uvlp.data_formats import FormatError
from mmf_uvlp.data_formats.labelmap import load_labelmap
from mmf_uvlp.data_formats.vinvl_raw import (
    ImageSizes,
    infer_embedded_feature_dim,
    parse_detector_row,
    read_detector_rows,
)

from helpers import REPO
from helpers.own_data import EXAMPLE, hand_written


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _b64(values) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")


def _raw_row(key: str, objects: list[dict]) -> str:
    return f"{key}\t{json.dumps({'objects': objects, 'relations': None})}"


def _obj(cls="dog", rect=(1.0, 2.0, 30.0, 40.0), conf=0.9, feature=(1, 2, 3, 4), **more):
    obj = {"rect": list(rect), "bbox_id": 0, "class": cls, "conf": conf}
    if feature is not None:
        obj["feature"] = _b64(feature)
    obj.update(more)
    return obj


# ------------------------------------------------------------------ label maps
def test_vinvl_json_label_map_by_name_by_id_or_both(tmp_path):
    example = load_labelmap(EXAMPLE / "labelmap.json")
    assert example.names == {
        1: "dog",
        2: "cat",
        3: "ball",
        4: "tree",
        5: "car",
        6: "person",
        7: "bench",
        8: "bicycle",
    }
    assert example.num_columns == 9
    by_name = tmp_path / "by_name.json"
    by_name.write_text(json.dumps({"label_to_idx": {"dog": 1, "cat": 3}}))
    by_id = tmp_path / "by_id.json"
    by_id.write_text(json.dumps({"idx_to_label": {"1": "dog", "3": "cat"}}))
    for path in (by_name, by_id):
        labels = load_labelmap(path)
        assert labels.names == {1: "dog", 3: "cat"} and labels.num_columns == 4
        assert labels.name_of(3, "p.tsv", 1, "objects[0].class") == "cat"
        assert labels.name_of("dog", "p.tsv", 1, "objects[0].class") == "dog"
        assert labels.id_of("cat", "p.tsv", 1, "objects[0].class") == 3


def test_tsv_label_map_numbers_classes_by_line(tmp_path):
    labels = load_labelmap(_write(tmp_path / "labelmap.tsv", ["dog", "cat\textra column"]))
    assert labels.names == {1: "dog", 2: "cat"}


@pytest.mark.parametrize(
    "name, content, field, where",
    [
        ("a.json", {"label_to_idx": {"dog": 0}}, "id", " [key 'label_to_idx.dog']"),
        ("a.json", {"label_to_idx": {"dog": 1, "cat": 1}}, "id", " [key 'label_to_idx.cat']"),
        (
            "a.json",
            {"label_to_idx": {"dog": 1}, "idx_to_label": {"1": "cat"}},
            "idx_to_label",
            " [key 'idx_to_label.1']",
        ),
        ("a.json", {"classes": ["dog"]}, "label_to_idx", ""),
        ("a.tsv", "dog\ncat\ndog\n", "name", ":3"),
        ("a.tsv", "dog\n\ncat\n", "name", ":2"),
    ],
)
def test_bad_label_maps_name_file_and_place(tmp_path, name, content, field, where):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(FormatError) as info:
        load_labelmap(path)
    assert info.value.field == field and f"{path}{where}" in str(info.value)


# ------------------------------------------------------------------ hw.tsv
def test_hw_tsv_of_the_example():
    sizes = ImageSizes(EXAMPLE / "detector" / "cc" / "hw.tsv")
    for key, (width, height, _) in hand_written().CC.items():
        assert sizes.size_of(key, "predictions.tsv", 1) == (height, width)


@pytest.mark.parametrize(
    "line, field",
    [
        ('img2\t[{"height": 20, "width": 30}]', "image_id"),  # the same key again
        ('img3\t{"height": 20, "width": 30}', "hw"),  # not a list of one object
        ('img3\t[{"height": 0, "width": 30}]', "height"),
        ('img3\t[{"height": 20}]', "width"),
        ("img3", "columns"),
    ],
)
def test_bad_hw_rows_name_file_and_line(tmp_path, line, field):
    path = _write(
        tmp_path / "hw.tsv",
        ['img1\t[{"height": 20, "width": 30}]', 'img2\t[{"height": 20, "width": 30}]', line],
    )
    with pytest.raises(FormatError) as info:
        ImageSizes(path)
    assert (info.value.line, info.value.field) == (3, field)
    assert f"{path}:3" in str(info.value)
    if field == "image_id":
        assert f"{path}:2 has it already" in str(info.value)


# ------------------------------------------------------------------ raw rows
@pytest.fixture
def sizes(tmp_path) -> ImageSizes:
    return ImageSizes(_write(tmp_path / "hw.tsv", ['a\t[{"height": 50, "width": 40}]']))


def test_raw_row_takes_its_size_from_hw_tsv_and_decodes_its_features(tmp_path, sizes):
    labels = load_labelmap(EXAMPLE / "labelmap.json")
    raw = _raw_row("a", [_obj(), _obj(cls=2, rect=(0, 0, 40, 50), feature=(5, 6, 7, 8))])
    row = parse_detector_row(raw.encode(), "p.tsv", 1, sizes, labels)
    assert (row.prediction.image_h, row.prediction.image_w) == (50, 40)
    assert [o.cls for o in row.prediction.objects] == ["dog", "cat"]
    assert row.features.dtype == np.float32
    assert row.features.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]] and row.feature_dim == 4
    assert row.scores_all is None


def test_raw_rows_without_sizes_say_to_give_hw_tsv(tmp_path):
    raw = _raw_row("a", [_obj()]).encode()
    with pytest.raises(FormatError, match=r"p\.tsv:4: field 'image_h': .*give its hw\.tsv"):
        parse_detector_row(raw, "p.tsv", 4)


@pytest.mark.parametrize(
    "objects, key, field, expected",
    [
        ([_obj()], "b", "image_id", "an image with a row in"),  # no hw row
        ([_obj(), _obj(feature=(1, 2, 3))], "a", "objects[1].feature", "4 float32 values"),
        ([_obj(), _obj(feature=None)], "a", "objects[1].feature", "a 'feature' in every object"),
        ([_obj(feature=(1, 2, float("nan"), 4))], "a", "objects[0].feature", "finite values"),
        ([_obj(cls=3)], "a", "objects[0].class", "a class name (a class id needs"),
        ([_obj(rect=(0, 0, 41.5, 50))], "a", "objects[0].rect", "inside the 40x50 image"),
    ],
)
def test_bad_raw_rows_name_file_line_and_field(tmp_path, sizes, objects, key, field, expected):
    raw = _raw_row(key, objects).encode()
    with pytest.raises(FormatError) as info:
        parse_detector_row(raw, "p.tsv", 7, sizes, feature_dim=4)
    assert (info.value.line, info.value.field) == (7, field)
    assert str(info.value).startswith("p.tsv:7:") and expected in str(info.value)
    if field == "image_id":
        assert str(sizes.path) in str(info.value)


def test_a_size_in_the_row_must_agree_with_hw_tsv(sizes):
    record = {"image_h": 60, "image_w": 40, "objects": [_obj()]}
    with pytest.raises(FormatError, match=r"p\.tsv:1: field 'image_h': expected 50"):
        parse_detector_row(f"a\t{json.dumps(record)}".encode(), "p.tsv", 1, sizes)


def test_unknown_class_names_and_ids_are_refused_with_a_label_map(sizes):
    labels = load_labelmap(EXAMPLE / "labelmap.json")
    for cls in ("unicorn", 12):
        with pytest.raises(FormatError, match=r"objects\[0\]\.class': expected a class"):
            parse_detector_row(_raw_row("a", [_obj(cls=cls)]).encode(), "p.tsv", 1, sizes, labels)


def test_d_is_the_majority_of_the_first_rows(tmp_path):
    rows = [_raw_row(f"i{k}", [_obj(feature=(1, 2, 3))]) for k in range(3)]
    path = _write(tmp_path / "p.tsv", [_raw_row("bad", [_obj(feature=(1, 2))])] + rows)
    assert infer_embedded_feature_dim(path) == 3


def test_every_example_row_reads_as_its_hand_written_detections():
    literals = hand_written()
    labels = load_labelmap(EXAMPLE / "labelmap.json")
    for folder, images in (
        ("cc", {k: v[2] for k, v in literals.CC.items()}),
        ("nlvr2", literals.NLVR2),
        ("flickr30k", literals.FLICKR30K),
    ):
        path = EXAMPLE / "detector" / folder / "predictions.tsv"
        rows = list(read_detector_rows(path, ImageSizes(path.with_name("hw.tsv")), labels))
        assert [r.prediction.image_id for r in rows] == list(images)
        for row, objects in zip(rows, images.values()):
            names = [c if isinstance(c, str) else labels.names[c] for c, *_ in objects]
            assert [o.cls for o in row.prediction.objects] == names
            assert [list(o.rect) for o in row.prediction.objects] == [o[2] for o in objects]
            assert row.features.tolist() == [
                np.float32(literals.appearance(c, p, k)).tolist()
                for k, (c, p, *_) in enumerate(objects)
            ]


# ------------------------------------------------------------------ the corpus builder
def test_detection_reader_reads_raw_output_with_hw_tsv():
    literals = hand_written()
    folder = EXAMPLE / "detector" / "cc"
    reader = DetectionReader(
        predictions=str(folder / "predictions.tsv"),
        hw=str(folder / "hw.tsv"),
        labelmap=str(EXAMPLE / "labelmap.json"),
    )
    items = list(reader)
    assert [source for _, source, _ in items] == ["predictions"] * 12
    for (_, _, det), (key, (width, height, objects)) in zip(items, literals.CC.items()):
        assert det.image_id == key and (det.image_w, det.image_h) == (width, height)
        assert det.labels == [o[0] for o in objects] and det.feature_dim == 8
    assert reader.feature_dim == 8


def test_detection_reader_refuses_a_features_tsv_beside_embedded_features():
    folder = EXAMPLE / "detector" / "cc"
    reader = DetectionReader(
        predictions=str(folder / "predictions.tsv"),
        hw=str(folder / "hw.tsv"),
        features=str(EXAMPLE / "detector" / "coco" / "features.tsv"),
    )
    with pytest.raises(ValueError, match="embeds its features"):
        list(reader)


def test_detection_reader_counts_a_missing_hw_row_as_a_bad_row(tmp_path):
    folder = EXAMPLE / "detector" / "cc"
    hw = _write(tmp_path / "hw.tsv", (folder / "hw.tsv").read_text().splitlines()[:-1])
    items = list(DetectionReader(predictions=str(folder / "predictions.tsv"), hw=str(hw)))
    position, source, error = items[-1]
    assert (position, source) == (11, "predictions") and isinstance(error, FormatError)
    assert str(error).startswith(f"{folder / 'predictions.tsv'}:12: field 'image_id'")
    assert str(hw) in str(error)


@pytest.mark.slow
def test_corpus_built_from_raw_detector_output(tmp_path):
    literals = hand_written()
    folder = EXAMPLE / "detector" / "flickr30k"
    out = tmp_path / "corpus"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "build_corpus.py"),
            "run",
            "--predictions",
            str(folder / "predictions.tsv"),
            "--hw",
            str(folder / "hw.tsv"),
            "--labelmap",
            str(EXAMPLE / "labelmap.json"),
            "--corpus",
            str(EXAMPLE / "text" / "corpus.txt"),
            "--k",
            "2",
            "--no-progress",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    records = list(iter_records(out))
    labels = load_labelmap(EXAMPLE / "labelmap.json").names
    hw = ImageSizes(folder / "hw.tsv")
    assert [r["image_id"] for r in records] == list(literals.FLICKR30K)
    for record, objects in zip(records, literals.FLICKR30K.values()):
        assert [(r["label"], r["box"], r["conf"]) for r in record["regions"]] == [
            (labels[c], rect, conf) for c, conf, rect in objects
        ]
        assert (record["image_h"], record["image_w"]) == hw.size_of(record["image_id"], "", 0)
        assert record["feature_key"] == record["image_id"] and len(record["sentences"]) == 2
    stats = json.loads(next((out / "stats").glob("chunk-*.json")).read_text())
    assert stats["detections"]["feature_dim"] == 8
