"""NLVR2 under lil-lab's file names: uvlp-convert-nlvr2 and what MMF reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import mmf_uvlp  # noqa: F401  (installs the compatibility layer before MMF)
from mmf.datasets.databases.annotation_database import AnnotationDatabase
from mmf_uvlp.data_formats import FormatError
from mmf_uvlp.data_formats.annotations import read_nlvr2
from mmf_uvlp.data_formats.nlvr2_files import convert_nlvr2, image_keys

from helpers import REPO


LIL_LAB = REPO / "tests" / "fixtures" / "own_data" / "nlvr2"
NAMES = ("train", "dev", "test1")


def test_mmf_reads_lil_labs_json_only_once_converted(tmp_path):
    with pytest.raises(json.JSONDecodeError, match="Extra data"):
        AnnotationDatabase(OmegaConf.create({}), str(LIL_LAB / "train.json"))
    counts = convert_nlvr2([LIL_LAB / f"{n}.json" for n in NAMES], tmp_path)
    assert counts == {
        str(tmp_path / "train.jsonl"): {"records": 7, "True": 4, "False": 3},
        str(tmp_path / "dev.jsonl"): {"records": 2, "True": 1, "False": 1},
        str(tmp_path / "test1.jsonl"): {"records": 2, "True": 1, "False": 1},
    }
    for name in NAMES:
        database = AnnotationDatabase(OmegaConf.create({}), str(tmp_path / f"{name}.jsonl"))
        original = [
            json.loads(line) for line in (LIL_LAB / f"{name}.json").read_text().splitlines()
        ]
        assert [database[i] for i in range(len(database))] == original


def test_image_keys_are_those_mmfs_nlvr2_dataset_looks_up():
    assert image_keys("dev-850-0-3") == ("dev-850-0-img0", "dev-850-0-img1")


def _write(path: Path, records: list) -> Path:
    path.write_text("".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in records))
    return path


GOOD = {"identifier": "train-1-0-0", "sentence": "A dog.", "label": "True"}


@pytest.mark.parametrize(
    "records, line, field, expected",
    [
        (
            [GOOD, dict(GOOD, identifier="train-2-0-0", label="yes")],
            2,
            "label",
            '"True" or "False"',
        ),
        ([GOOD, "", dict(GOOD, identifier="train-2-0")], 3, "identifier", "<split>-<set>"),
        ([GOOD, dict(GOOD, sentence="Two dogs.")], 2, "identifier", ":1 has it already"),
        ([GOOD, {"identifier": "train-2-0-0", "label": "True"}], 2, "sentence", "fields"),
        ([GOOD, "{not json"], 2, "json", "valid json"),
    ],
)
def test_bad_records_name_file_line_and_field(tmp_path, records, line, field, expected):
    source = _write(tmp_path / "train.json", records)
    with pytest.raises(FormatError) as info:
        convert_nlvr2([source], tmp_path / "out")
    assert str(info.value).startswith(f"{source}:{line}: field '{field}'")
    assert expected in str(info.value)
    assert not (tmp_path / "out" / "train.jsonl").exists()
    assert not (tmp_path / "out" / "train.jsonl.tmp").exists()


def test_read_nlvr2_names_the_line_after_blank_lines(tmp_path):
    source = _write(tmp_path / "dev.jsonl", [GOOD, "", dict(GOOD, label="maybe")])
    with pytest.raises(FormatError, match=r"dev\.jsonl:3: field 'label'"):
        list(read_nlvr2(source))


def test_pairs_whose_images_are_not_in_the_features_are_refused(tmp_path):
    features = tmp_path / "features"
    features.mkdir()
    for key in ("train-1-0-img0", "train-1-0-img1", "train-2-0-img0"):
        (features / f"{key}.npy").write_bytes(b"")
    source = _write(tmp_path / "train.json", [GOOD, dict(GOOD, identifier="train-2-0-0")])
    with pytest.raises(
        FormatError,
        match=r"train\.json:2: field 'identifier': expected a pair "
        r"whose images are in .*missing train-2-0-img1",
    ):
        convert_nlvr2([source], tmp_path / "out", features=features)


def test_the_cli_writes_the_jsonl_files_or_one_error_line(tmp_path):
    tool = [sys.executable, "-m", "mmf_uvlp.cli.convert_nlvr2"]
    done = subprocess.run(
        tool + [str(LIL_LAB / f"{n}.json") for n in NAMES] + ["--out", str(tmp_path / "ok")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert f"{tmp_path / 'ok' / 'dev.jsonl'}: 2 records (1 True, 1 False)" in done.stdout
    bad = _write(tmp_path / "dev.json", [GOOD, GOOD])
    failed = subprocess.run(
        tool + [str(bad), "--out", str(tmp_path / "bad")], capture_output=True, text=True
    )
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1
    assert failed.stderr.startswith(f"convert_nlvr2: error: {bad}:2: field 'identifier'")


def _records(identifiers: list) -> list:
    return [dict(GOOD, identifier=identifier) for identifier in identifiers]


def test_two_inputs_of_one_name_are_refused_naming_both_and_nothing_is_written(tmp_path, capsys):
    from mmf_uvlp.cli.convert_nlvr2 import main

    (tmp_path / "x1").mkdir()
    (tmp_path / "x2").mkdir()
    first = _write(tmp_path / "x1" / "train.json", _records([f"train-{i}-0-0" for i in range(3)]))
    second = _write(
        tmp_path / "x2" / "train.json", _records([f"train-{i}-0-0" for i in range(10, 14)])
    )
    assert main([str(first), str(second), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("convert_nlvr2: error: ")
    assert (
        f"{first} and {second} would both be written to {tmp_path / 'out' / 'train.jsonl'}" in error
    )
    assert not (tmp_path / "out" / "train.jsonl").exists()


def test_a_null_sentence_is_refused_naming_file_and_line(tmp_path, capsys):
    from mmf_uvlp.cli.convert_nlvr2 import main

    source = _write(
        tmp_path / "train.json", [GOOD, dict(GOOD, identifier="train-2-0-0", sentence=None)]
    )
    assert main([str(source), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error == (
        f"convert_nlvr2: error: {source}:2: field 'sentence': expected a non-empty "
        "string, got 'null'\n"
    )
    assert not (tmp_path / "out" / "train.jsonl").exists()


def test_a_byte_that_is_not_utf8_is_named_with_file_and_line(tmp_path, capsys):
    from mmf_uvlp.cli.convert_nlvr2 import main

    source = tmp_path / "dev.json"
    source.write_bytes(
        (json.dumps(GOOD) + "\n").encode()
        + json.dumps(dict(GOOD, identifier="dev-2-0-0", sentence="caf\u00e9"))
        .encode()
        .replace(b"\\u00e9", b"\xe9")
        + b"\n"
    )
    assert main([str(source), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith(
        f"convert_nlvr2: error: {source}:2: field 'text': expected UTF-8 text "
        "(invalid continuation byte at byte "
    ), error
    assert not (tmp_path / "out" / "dev.jsonl").exists()
