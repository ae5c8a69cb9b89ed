"""uvlp-convert-features: VinVL detector output (raw and released) to MMF's LMDB and .npy
layouts, read back by MMF's own builders; resumption; bad input named by file and line.

Expected values come from the worked example's hand-written detections
(tests/fixtures/own_data/encode_detector_output.py), not from the readers under test.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import lmdb
import numpy as np
import pytest
from omegaconf import OmegaConf

import mmf_uvlp  # noqa: F401  (installs the compatibility layer before MMF)
from mmf.common.registry import registry
from mmf.utils.build import build_dataset
from mmf_uvlp.data_formats import FormatError
from mmf_uvlp.data_formats import convert as convert_module
from mmf_uvlp.data_formats.convert import Sources, convert_features
from mmf_uvlp.data_formats.mmf_features import LmdbFeatures, load_npy
from mmf_uvlp.data_formats.nlvr2_files import convert_nlvr2

from helpers.own_data import EXAMPLE, hand_written

LABELMAP = str(EXAMPLE / "labelmap.json")
CLASS_IDS = {
    "dog": 1,
    "cat": 2,
    "ball": 3,
    "tree": 4,
    "car": 5,
    "person": 6,
    "bench": 7,
    "bicycle": 8,
}


def raw(folder: str, **changes) -> Sources:
    detector = EXAMPLE / "detector" / folder
    return Sources(
        predictions=str(detector / "predictions.tsv"),
        labelmap=LABELMAP,
        hw=str(detector / "hw.tsv"),
        **changes,
    )


def released(folder: str = "coco", **changes) -> Sources:
    detector = EXAMPLE / "detector" / folder
    return Sources(
        predictions=str(detector / "predictions.tsv"),
        labelmap=LABELMAP,
        features=str(detector / "features.tsv"),
        **changes,
    )


def _convert_command(sources: Sources, *arguments: str) -> list:
    """``python -m mmf_uvlp.cli.convert_features`` on a raw output's ``sources`` (its label
    map when it names one), without progress bars, then ``arguments``."""
    labelmap = ["--labelmap", sources.labelmap] if sources.labelmap else []
    return [
        sys.executable,
        "-m",
        "mmf_uvlp.cli.convert_features",
        "--predictions",
        sources.predictions,
        "--hw",
        sources.hw,
        *labelmap,
        "--no-progress",
        *arguments,
    ]


def expected_images(folder: str) -> dict:
    """image key -> (class ids, confs, boxes, appearance (N, 8)) of the hand-written literals."""
    literals = hand_written()
    images = {
        "cc": {k: v[2] for k, v in literals.CC.items()},
        "coco": {k: v[2] for k, v in literals.COCO.items()},
        "nlvr2": literals.NLVR2,
        "flickr30k": literals.FLICKR30K,
    }[folder]
    out = {}
    for key, objects in images.items():
        ids = [CLASS_IDS[c] if isinstance(c, str) else c for c, *_ in objects]
        out[key] = (
            ids,
            [o[1] for o in objects],
            [o[2] for o in objects],
            np.array(
                [literals.appearance(c, p, k) for k, (c, p, *_) in enumerate(objects)],
                dtype=np.float32,
            ).reshape(-1, 8),
        )
    return out


def assert_record(record: dict, expected: tuple, size=None) -> None:
    ids, confs, boxes, features = expected
    assert record["features"].dtype == np.float32
    assert np.array_equal(record["features"], features)
    assert record["num_boxes"] == len(ids) and record["objects"].tolist() == ids
    assert record["bbox"].dtype == np.float32 and record["bbox"].tolist() == boxes
    assert record["cls_prob"].shape == (len(ids), 9)
    for k, (class_id, conf) in enumerate(zip(ids, confs)):
        row = record["cls_prob"][k]
        assert row[class_id] == np.float32(conf) and np.count_nonzero(row) == 1
    if size is not None:
        assert (record["image_width"], record["image_height"]) == size


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    """The worked example's four image sets, converted once for this module."""
    data = tmp_path_factory.mktemp("converted")
    convert_features(raw("cc"), str(data / "features" / "cc.lmdb"), progress=False)
    convert_features(released("coco"), str(data / "features" / "coco.lmdb"), progress=False)
    convert_features(raw("nlvr2"), str(data / "features" / "nlvr2.lmdb"), progress=False)
    convert_features(raw("flickr30k"), str(data / "features" / "flickr30k"), progress=False)
    return data


# ------------------------------------------------------------------ the files written
def test_raw_output_to_lmdb_holds_the_hand_written_detections(converted):
    sizes = {k: v[:2] for k, v in hand_written().CC.items()}
    expected = expected_images("cc")
    path = converted / "features" / "cc.lmdb"
    env = lmdb.open(str(path), readonly=True, lock=False)
    with env.begin() as txn:
        keys = pickle.loads(txn.get(b"keys"))
    env.close()
    assert keys == [k.encode() for k in expected]  # input order
    with LmdbFeatures(path, feature_dim=8, num_classes=9) as db:
        for key in expected:
            record = db[key]
            assert record["image_id"] == key
            assert_record(record, expected[key], sizes[key])


def test_released_tsv_drops_the_geometry_dims(converted):
    sizes = {k: v[:2] for k, v in hand_written().COCO.items()}
    expected = expected_images("coco")
    with LmdbFeatures(converted / "features" / "coco.lmdb", feature_dim=8) as db:
        assert db.keys() == list(expected)
        for key in expected:
            assert_record(db[key], expected[key], sizes[key])


def test_npy_folder_of_classes_given_by_id(converted):
    folder = converted / "features" / "flickr30k"
    expected = expected_images("flickr30k")
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".npy") == sorted(
        [f"{k}.npy" for k in expected] + [f"{k}_info.npy" for k in expected]
    )
    for key in expected:
        assert_record(load_npy(folder, key, feature_dim=8, num_classes=9), expected[key])


def test_the_cli_converts_reads_back_and_prints_the_config_values(tmp_path):
    out = tmp_path / "cc.lmdb"
    result = subprocess.run(
        _convert_command(raw("cc"), "--out", str(out)), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "12 images, 28 regions, D = 8" in result.stdout
    assert "read back through MMF's FeaturesDatabase: 12 of 12 images identical" in result.stdout
    assert "model_config.uvla.feature_dim=8 model_config.uvla.num_region_classes=9" in result.stdout
    again = subprocess.run(
        _convert_command(raw("cc"), "--out", str(out)), capture_output=True, text=True
    )
    assert again.returncode == 0 and "nothing to do" in again.stdout


# ------------------------------------------------------------------ read by MMF's builders
@pytest.fixture(autouse=True)
def _fresh_processors():
    """MMF reuses a processor registered under ``<dataset>_text_processor``; start clean."""
    yield
    for name in ("vqa2", "nlvr2", "visual_entailment"):
        registry.unregister(f"{name}_text_processor")
        registry.unregister(f"{name}_answer_processor")


def _text_processor() -> dict:
    return {
        "type": "bert_tokenizer",
        "params": {
            "tokenizer_config": {
                "type": os.environ["UVLP_BERT"],
                "params": {"do_lower_case": True},
            },
            "mask_probability": 0,
            "max_seq_length": 16,
        },
    }


def _config(data_dir: Path, features: str, annotations: dict, **more) -> OmegaConf:
    config = {
        "data_dir": str(data_dir),
        "use_features": True,
        "return_features_info": True,
        "max_features": 5,
        "fast_read": False,
        "use_images": False,
        "features": {t: [features] for t in ("train", "val", "test")},
        "annotations": annotations,
        "processors": {"text_processor": _text_processor()},
    }
    config.update(more)
    return OmegaConf.create(config)


def _check_image(feature, info, expected: tuple) -> None:
    ids, _, boxes, appearance = expected
    n = len(ids)
    assert feature.shape == (5, 8)
    assert np.array_equal(feature[:n].numpy(), appearance) and not feature[n:].any()
    assert int(info["max_features"]) == n and np.asarray(info["bbox"]).tolist() == boxes


def test_mmfs_vqa2_builder_reads_the_converted_lmdb(converted):
    annotations = {t: [str(EXAMPLE / "vqa2" / f"imdb_{t}.json")] for t in ("train", "val", "test")}
    answers = {
        "type": "vqa_answer",
        "params": {
            "num_answers": 10,
            "vocab_file": str(EXAMPLE / "vqa2" / "answers_vqa.txt"),
            "preprocessor": {"type": "simple_word", "params": {}},
        },
    }
    config = _config(
        converted,
        "features/coco.lmdb",
        annotations,
        processors={"text_processor": _text_processor(), "answer_processor": answers},
    )
    dataset = build_dataset("vqa2", config, "train").datasets[0]
    expected = expected_images("coco")
    records = json.loads((EXAMPLE / "vqa2" / "imdb_train.json").read_text())["data"]
    assert len(dataset) == len(records) == 8
    for index, record in enumerate(records):
        sample = dataset[index]
        _check_image(sample.image_feature_0, sample.image_info_0, expected[record["image_name"]])


def test_mmfs_nlvr2_builder_reads_the_converted_lmdb_and_lil_lab_files(converted, tmp_path):
    sources = [EXAMPLE / "nlvr2" / f"{name}.json" for name in ("train", "dev", "test1")]
    convert_nlvr2(sources, tmp_path / "nlvr2", features=converted / "features" / "nlvr2.lmdb")
    annotations = {
        "train": [str(tmp_path / "nlvr2" / "train.jsonl")],
        "val": [str(tmp_path / "nlvr2" / "dev.jsonl")],
        "test": [str(tmp_path / "nlvr2" / "test1.jsonl")],
    }
    dataset = build_dataset(
        "nlvr2", _config(converted, "features/nlvr2.lmdb", annotations), "val"
    ).datasets[0]
    expected = expected_images("nlvr2")
    lines = (EXAMPLE / "nlvr2" / "dev.json").read_text().splitlines()
    assert len(dataset) == len(lines) == 2
    for index, line in enumerate(lines):
        record, sample = json.loads(line), dataset[index]
        stem = record["identifier"].rsplit("-", 1)[0]
        _check_image(
            sample.img0.image_feature_0, sample.img0.image_info_0, expected[f"{stem}-img0"]
        )
        _check_image(
            sample.img1.image_feature_0, sample.img1.image_info_0, expected[f"{stem}-img1"]
        )
        assert int(sample.targets) == (record["label"] == "True")


def test_mmfs_visual_entailment_builder_reads_the_converted_npy_folder(converted):
    annotations = {
        t: [str(EXAMPLE / "snli_ve" / f"snli_ve_{name}.jsonl")]
        for t, name in (("train", "train"), ("val", "dev"), ("test", "test"))
    }
    dataset = build_dataset(
        "visual_entailment", _config(converted, "features/flickr30k", annotations), "test"
    ).datasets[0]
    expected = expected_images("flickr30k")
    lines = (EXAMPLE / "snli_ve" / "snli_ve_test.jsonl").read_text().splitlines()
    assert len(dataset) == 3
    for index, line in enumerate(lines):
        sample = dataset[index]
        key = json.loads(line)["Flikr30kID"].split(".")[0]
        _check_image(sample.image_feature_0, sample.image_info_0, expected[key])


# ------------------------------------------------------------------ resumption
def _contents(out: Path) -> tuple:
    """(keys in order, {key: record}) of an LMDB or .npy output."""
    if out.name.endswith(".lmdb"):
        with LmdbFeatures(out) as db:
            return db.keys(), {k: db[k] for k in db.keys()}
    keys = sorted(p.name[:-4] for p in out.glob("*.npy") if not p.name.endswith("_info.npy"))
    return keys, {k: load_npy(out, k) for k in keys}


def _same(a: tuple, b: tuple) -> None:
    assert a[0] == b[0]
    for key in a[0]:
        assert a[1][key].keys() == b[1][key].keys()
        for field, value in a[1][key].items():
            assert np.array_equal(np.asarray(value), np.asarray(b[1][key][field])), (key, field)


class Interrupted(Exception):
    """Stands for a kill at a given point of the conversion."""


@pytest.mark.parametrize("name", ["cc.lmdb", "cc_npy"])
@pytest.mark.parametrize("where", ["write", "save"])
def test_an_interrupted_conversion_resumes_to_the_same_output(tmp_path, monkeypatch, name, where):
    """Killed after 2 commits of 3 images, in the writer (images of the next commit half
    written) or just before a state save (images and keys written, state not): the same
    command finishes with the output of an uninterrupted conversion."""
    whole = tmp_path / "whole" / name
    whole_summary = convert_features(raw("cc"), str(whole), commit_every=3, progress=False)
    out = tmp_path / "resumed" / name
    target = {
        "write": (
            convert_module._LmdbWriter if name.endswith(".lmdb") else convert_module._NpyWriter,
            "write",
        ),
        "save": (convert_module._State, "save"),
    }[where]
    original = getattr(*target)
    calls = []

    def dies_on_the_third(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3 + (where == "save"):  # the first save writes the empty state
            if where == "write":
                original(self, args[0][:1])  # one image of the commit reaches the disk
            raise Interrupted
        return original(self, *args, **kwargs)

    monkeypatch.setattr(*target, dies_on_the_third)
    with pytest.raises(Interrupted):
        convert_features(raw("cc"), str(out), commit_every=3, progress=False)
    monkeypatch.undo()
    state = json.loads((out / ".convert" / "state.json").read_text())
    assert state["images"] == 6 and not state["complete"]
    summary = convert_features(raw("cc"), str(out), commit_every=3, progress=False)
    assert summary.resumed and summary.verified == 12
    assert (summary.images, summary.regions, summary.rows) == (
        whole_summary.images,
        whole_summary.regions,
        whole_summary.rows,
    )
    _same(_contents(whole), _contents(out))
    assert (out / ".convert" / "keys.tsv").read_text() == (
        whole / ".convert" / "keys.tsv"
    ).read_text()


@pytest.mark.slow
def test_a_conversion_killed_with_sigkill_resumes_to_the_same_output(tmp_path):
    """A real ``kill -9`` of the command at some commit, then the same command again."""
    predictions, hw = tmp_path / "predictions.tsv", tmp_path / "hw.tsv"
    rows = (EXAMPLE / "detector" / "cc" / "predictions.tsv").read_text().splitlines()
    sizes = (EXAMPLE / "detector" / "cc" / "hw.tsv").read_text().splitlines()
    with open(predictions, "w") as p, open(hw, "w") as h:
        for copy in range(250):  # 3,000 images: the example's 12, each under 250 keys
            for row, size in zip(rows, sizes):
                p.write(row.replace("cc_0000", f"cc_{copy:04d}_", 1) + "\n")
                h.write(size.replace("cc_0000", f"cc_{copy:04d}_", 1) + "\n")
    command = _convert_command(
        Sources(str(predictions), LABELMAP, hw=str(hw)),
        "--commit-every",
        "1",
        "--out",
        str(tmp_path / "killed.lmdb"),
    )
    state = tmp_path / "killed.lmdb" / ".convert" / "state.json"
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 600
    while time.time() < deadline and process.poll() is None:
        if state.exists() and json.loads(state.read_text())["images"] >= 20:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the conversion ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.communicate()
    killed_at = json.loads(state.read_text())["images"]
    assert 20 <= killed_at < 3000
    resumed = subprocess.run(command, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "3000 images" in resumed.stdout and "3000 of 3000 images identical" in resumed.stdout
    whole = tmp_path / "whole.lmdb"
    convert_features(
        Sources(str(predictions), LABELMAP, hw=str(hw)),
        str(whole),
        commit_every=500,
        progress=False,
        verify=False,
    )
    _same(_contents(whole), _contents(tmp_path / "killed.lmdb"))


def test_other_inputs_in_an_existing_output_are_refused_unless_restarted(tmp_path):
    out = tmp_path / "features.lmdb"
    convert_features(raw("nlvr2"), str(out), progress=False)
    with pytest.raises(ValueError, match="other inputs or settings.*--restart"):
        convert_features(raw("cc"), str(out), progress=False)
    summary = convert_features(raw("cc"), str(out), restart=True, progress=False)
    assert summary.images == 12 and _contents(out)[0] == list(expected_images("cc"))
    foreign = tmp_path / "foreign.lmdb"
    foreign.mkdir()
    (foreign / "data.mdb").write_bytes(b"")
    for restart in (False, True):
        with pytest.raises(FileExistsError, match="not written by convert_features"):
            convert_features(raw("cc"), str(foreign), restart=restart, progress=False)
    assert (foreign / "data.mdb").exists()


def _convert_cli(sources: Sources, out: Path, *options: str) -> list:
    from mmf_uvlp.cli.convert_features import main

    return main(
        [
            "--predictions",
            sources.predictions,
            "--hw",
            sources.hw,
            "--labelmap",
            sources.labelmap,
            "--out",
            str(out),
            "--no-progress",
            *options,
        ]
    )


def test_restart_deletes_only_what_the_conversion_wrote(tmp_path, capsys):
    out = tmp_path / "features"
    assert _convert_cli(raw("nlvr2"), out) == 0
    earlier = sorted(p.name for p in out.glob("*.npy"))
    (out / "notes.txt").write_text("the user's own file")
    (out / "extra.npy").write_bytes(b"the user's own array")
    assert _convert_cli(raw("cc"), out, "--restart") == 0, capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "the user's own file"
    assert (out / "extra.npy").read_bytes() == b"the user's own array"
    left = {p.name for p in out.glob("*.npy")} - {"extra.npy"}
    assert not left & set(earlier)  # the nlvr2 images are gone, the cc images written
    assert left == {f"{key}{end}" for key in expected_images("cc") for end in (".npy", "_info.npy")}


def test_restart_refuses_a_symlinked_output_naming_it(tmp_path, capsys):
    real, link = tmp_path / "real.lmdb", tmp_path / "link.lmdb"
    assert _convert_cli(raw("nlvr2"), real) == 0
    link.symlink_to(real)
    before = sorted(os.listdir(real))
    capsys.readouterr()
    assert _convert_cli(raw("cc"), link, "--restart") == 2
    error = capsys.readouterr().err
    assert error == (
        f"convert_features: error: {link} is a symbolic link (to {real}); --restart "
        "deletes files only in a folder of its own: give the folder itself as the "
        "output, or choose another output\n"
    )
    assert sorted(os.listdir(real)) == before and link.is_symlink()


# ------------------------------------------------------------------ bad input
def _copy(tmp_path: Path, folder: str) -> dict:
    """The example's files of ``folder`` as editable copies: name -> lines."""
    paths = {}
    for source in (EXAMPLE / "detector" / folder).iterdir():
        target = tmp_path / source.name
        target.write_text(source.read_text())
        paths[source.name] = target
    return paths


def _edit(path: Path, line: int, change) -> None:
    lines = path.read_text().splitlines()
    lines[line - 1] = change(lines[line - 1])
    path.write_text("".join(l + "\n" for l in lines))


def _shorter_feature(line: str) -> str:
    key, text = line.split("\t")
    record = json.loads(text)
    record["objects"][1]["feature"] = record["objects"][0]["feature"][:-8] + "AAA="
    return f"{key}\t{json.dumps(record)}"


def _bad_case(tmp_path: Path, case: str):
    """(sources, the file and line the error must name, its field)."""
    if case in ("raw wrong dims", "missing hw row", "raw duplicate id"):
        paths = _copy(tmp_path, "cc")
        sources = Sources(str(paths["predictions.tsv"]), LABELMAP, hw=str(paths["hw.tsv"]))
        if case == "raw wrong dims":
            _edit(paths["predictions.tsv"], 4, _shorter_feature)
            return sources, (paths["predictions.tsv"], 4), "objects[1].feature"
        if case == "missing hw row":
            _edit(paths["hw.tsv"], 5, lambda line: line.replace("cc_000005", "cc_000099"))
            return sources, (paths["predictions.tsv"], 5), "image_id"
        _edit(paths["predictions.tsv"], 3, lambda line: line.replace("cc_000003", "cc_000001"))
        return sources, (paths["predictions.tsv"], 3), "image_id"  # both images are 640x480
    paths = _copy(tmp_path, "coco")
    sources = Sources(str(paths["predictions.tsv"]), LABELMAP, features=str(paths["features.tsv"]))
    if case == "released wrong dims":
        _edit(paths["features.tsv"], 3, lambda line: line[:-8] + "AAAAAAA=")
        return sources, (paths["features.tsv"], 3), "features"
    if case == "released duplicate id":
        for name in ("predictions.tsv", "features.tsv"):
            _edit(paths[name], 6, lambda line: line.replace("000000000042", "000000000009"))
        return sources, (paths["predictions.tsv"], 6), "image_id"
    sources.feature_dim = 16  # "feature-dim mismatch": the rows hold 8 + 6
    return sources, (paths["features.tsv"], 1), "features"


CASES = [
    "raw wrong dims",
    "missing hw row",
    "raw duplicate id",
    "released wrong dims",
    "released duplicate id",
    "feature-dim mismatch",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_naming_file_and_line(tmp_path, case):
    sources, (path, line), field = _bad_case(tmp_path, case)
    with pytest.raises(FormatError) as info:
        convert_features(sources, str(tmp_path / "out.lmdb"), progress=False, verify=False)
    assert str(info.value).startswith(f"{path}:{line}: field '{field}'")
    if case.endswith("duplicate id"):
        assert "has it already" in str(info.value)
    if case == "missing hw row":
        assert str(tmp_path / "hw.tsv") in str(info.value)


@pytest.mark.parametrize("case", ["raw wrong dims", "missing hw row", "raw duplicate id"])
def test_the_cli_names_the_bad_row_in_one_line_or_skips_and_counts_it(tmp_path, case):
    sources, (path, line), field = _bad_case(tmp_path, case)
    command = _convert_command(sources)
    failed = subprocess.run(
        command + ["--out", str(tmp_path / "a.lmdb")], capture_output=True, text=True
    )
    assert failed.returncode == 2
    assert failed.stderr.startswith(f"convert_features: error: {path}:{line}: field '{field}'")
    assert failed.stderr.count("\n") == 1
    skipped = subprocess.run(
        command + ["--out", str(tmp_path / "b.lmdb"), "--on-error", "skip"],
        capture_output=True,
        text=True,
    )
    assert skipped.returncode == 0, skipped.stderr
    assert "11 images" in skipped.stdout and "1 skipped" in skipped.stdout
    assert "11 of 11 images identical" in skipped.stdout
    state = json.loads((tmp_path / "b.lmdb" / ".convert" / "state.json").read_text())
    assert state["skipped"]["counts"] == {f"predictions: {field.replace('[1]', '[]')}": 1}


def test_keys_mmf_cannot_look_up_are_refused(tmp_path):
    paths = _copy(tmp_path, "nlvr2")
    for name in ("predictions.tsv", "hw.tsv"):
        _edit(paths[name], 2, lambda line: line.replace("train-1-0-img1", "train/1-0-img1"))
    sources = Sources(str(paths["predictions.tsv"]), LABELMAP, hw=str(paths["hw.tsv"]))
    with pytest.raises(
        FormatError,
        match=r"predictions\.tsv:2: field 'image_id': expected a "
        r"file name for the \.npy folder",
    ):
        convert_features(sources, str(tmp_path / "npy"), progress=False)
    assert convert_features(sources, str(tmp_path / "ok.lmdb"), progress=False).verified == 16


def test_reading_back_through_mmf_finds_keys_it_resolves_to_another_image(tmp_path):
    """MMF's LMDB reader looks ``img_1`` up as image ``1`` when an image ``1`` exists."""
    paths = _copy(tmp_path, "nlvr2")
    for name in ("predictions.tsv", "hw.tsv"):
        _edit(paths[name], 1, lambda line: line.replace("train-1-0-img0", "photo_2"))
        _edit(paths[name], 2, lambda line: line.replace("train-1-0-img1", "2"))
    sources = Sources(str(paths["predictions.tsv"]), LABELMAP, hw=str(paths["hw.tsv"]))
    with pytest.raises(
        FormatError,
        match=r"\[key 'photo_2'\]: field 'features': expected "
        r"MMF's FeaturesDatabase to read back",
    ):
        convert_features(sources, str(tmp_path / "out.lmdb"), progress=False)


# ------------------------------------------------------------------ without a label map
def test_classes_given_by_name_need_no_label_map(tmp_path):
    """The ids then follow the names' sorted order, and the label map written beside the
    output gives another file the same ids."""
    from mmf_uvlp.data_formats.labelmap import load_labelmap

    out = tmp_path / "cc.lmdb"
    result = subprocess.run(
        _convert_command(replace(raw("cc"), labelmap=None), "--out", str(out)),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    names = sorted(CLASS_IDS)
    written = load_labelmap(out / "labelmap.tsv")
    assert written.names == {index: name for index, name in enumerate(names, start=1)}
    ids = {name: names.index(name) + 1 for name in names}
    with LmdbFeatures(out, feature_dim=8, num_classes=len(names) + 1) as db:
        for key, (by_name, confs, boxes, features) in expected_images("cc").items():
            by_id = [ids[next(n for n, i in CLASS_IDS.items() if i == c)] for c in by_name]
            assert_record_ids(db[key], by_id, boxes, features)
    again = tmp_path / "coco.lmdb"
    convert_features(
        replace(released("coco"), labelmap=str(out / "labelmap.tsv")), str(again), progress=False
    )
    assert not (again / "labelmap.tsv").exists()  # its ids are the given file's


def assert_record_ids(record: dict, ids: list, boxes: list, features: np.ndarray) -> None:
    assert record["objects"].tolist() == ids and record["bbox"].tolist() == boxes
    assert np.array_equal(record["features"], features)


def test_a_class_given_by_id_without_a_label_map_names_its_row(tmp_path):
    with pytest.raises(FormatError) as refused:
        convert_features(
            replace(raw("flickr30k"), labelmap=None), str(tmp_path / "f"), progress=False
        )
    assert str(refused.value).endswith(
        "flickr30k/predictions.tsv:1: field 'objects[0].class': expected a class name (a class "
        "id needs the detector's label map: give --labelmap), got 1"
    )


@pytest.fixture
def full_disk(tmp_path):
    """A folder on a 12 KiB tmpfs: a disk that fills at the first commit (mounting needs
    the right to mount; elsewhere the test skips)."""
    folder = tmp_path / "full"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=12k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"no small disk to fill: mount -t tmpfs: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_disk_during_an_lmdb_conversion_ends_in_one_line_naming_the_file(full_disk):
    out = full_disk / "cc.lmdb"
    result = subprocess.run(
        _convert_command(raw("cc"), "--out", str(out)), capture_output=True, text=True
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"convert_features: error: cannot write {out}/data.mdb: ")
    assert "No space left on device" in result.stderr
