"""The public bottom-up-attention checkpoints as a user hands them to uvlp-extract-features:
random tensors under the public files' names and shapes (tests/fixtures/detector_checkpoints),
in their real format. A whole file loads; one renamed or mis-shaped key, a crafted pickle or
yaml is refused in one line before the first image."""

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from helpers.checkpoints import BOTTOM_UP, BOTTOM_UP_ATTR, manifest, public_checkpoint
from helpers.extraction import NO_DETECTRON2, extract_cli

pytest.importorskip("detectron2", reason=NO_DETECTRON2)

# one small photograph, few proposals: a few CPU seconds for the R101 detector
SMALL = [
    "--threads",
    "1",
    "--no-progress",
    "--proposals",
    "40",
    "--opts",
    "INPUT.MIN_SIZE_TEST",
    "160",
    "INPUT.MAX_SIZE_TEST",
    "240",
]
VOCAB = {"classes": 1600, "attributes": 400}


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    from PIL import Image
    from skimage import data

    folder = tmp_path_factory.mktemp("photo")
    Image.fromarray(data.chelsea()).save(folder / "chelsea.png")
    return folder


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    """Visual Genome's vocabulary files as users have them: a name a line."""
    folder = tmp_path_factory.mktemp("vocab")
    for what, n in VOCAB.items():
        (folder / f"{what}.txt").write_text("".join(f"{what[:-1]}{i}\n" for i in range(n)))
    return folder


@pytest.fixture(scope="module")
def attr_pkl(tmp_path_factory):
    return public_checkpoint(
        BOTTOM_UP_ATTR, tmp_path_factory.mktemp("w") / "faster_rcnn_from_caffe_attr.pkl"
    )


def _one_line_error(result):
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


def _refusal(photo: Path, vocab: Path, tmp_path: Path, *arguments: Any) -> str:
    """The one error line of an extraction of ``photo`` refused for ``arguments`` (the
    class list of ``vocab`` and the small sizes given)."""
    return _one_line_error(
        extract_cli(
            "--images",
            photo,
            "--out",
            tmp_path / "out",
            *arguments,
            "--classes",
            vocab / "classes.txt",
            *SMALL,
            check=False,
        )
    )


def test_the_attribute_checkpoint_loads_whole_with_its_recipe(photo, vocab, attr_pkl, tmp_path):
    out = tmp_path / "raw"
    result = extract_cli(
        "--images",
        photo,
        "--out",
        out,
        "--recipe",
        "bottom-up-attention",
        "--weights",
        attr_pkl,
        "--classes",
        vocab / "classes.txt",
        "--attributes",
        vocab / "attributes.txt",
        "--max-boxes",
        "20",
        *SMALL,
    )
    report = json.loads((out / "report.json").read_text())
    weights = report["weights"]
    assert weights["status"] == "whole" and weights["layout"] == "detectron2"
    assert weights["loaded"] == weights["tensors_in_file"] == len(manifest(BOTTOM_UP_ATTR))
    assert weights["missing"]["count"] == weights["unexpected"]["count"] == 0
    assert report["num_attributes"] == 400
    row = json.loads((out / "predictions.tsv").read_text().split("\t")[1])
    assert 10 <= len(row["objects"]) <= 20
    assert "attributes" in row["objects"][0]
    assert "1 of 1 images" in result.stdout


def test_the_checkpoint_without_attributes_needs_no_attribute_names(photo, vocab, tmp_path):
    pkl = public_checkpoint(BOTTOM_UP, tmp_path / "faster_rcnn_from_caffe.pkl")
    out = tmp_path / "raw"
    extract_cli(
        "--images",
        photo,
        "--out",
        out,
        "--recipe",
        "lxmert-36",
        "--weights",
        pkl,
        "--classes",
        vocab / "classes.txt",
        *SMALL,
    )
    report = json.loads((out / "report.json").read_text())
    assert report["weights"]["status"] == "whole"
    assert report["weights"]["loaded"] == len(manifest(BOTTOM_UP)) == 531
    assert report["num_attributes"] == 0
    objects = json.loads((out / "predictions.tsv").read_text().split("\t")[1])["objects"]
    assert len(objects) == 36  # the recipe's exactly 36
    assert all(o["attributes"] == [] and o["attr_scores"] == [] for o in objects)
    assert json.loads((out / "labelmap.json").read_text())["attribute_to_idx"] == {}


@pytest.mark.parametrize("change", ["rename", "reshape"])
def test_one_renamed_or_reshaped_key_is_refused_before_the_first_image(
    photo, vocab, tmp_path, change
):
    key = "roi_heads.box_predictor.fc_attr.weight"
    pkl = public_checkpoint(
        BOTTOM_UP_ATTR,
        tmp_path / "faster_rcnn_from_caffe_attr.pkl",
        rename=(key, key.replace("fc_attr", "fc")) if change == "rename" else None,
        reshape=key if change == "reshape" else None,
    )
    args = [
        "--images",
        photo,
        "--recipe",
        "bottom-up-attention",
        "--weights",
        pkl,
        "--classes",
        vocab / "classes.txt",
        "--attributes",
        vocab / "attributes.txt",
        "--max-boxes",
        "20",
        *SMALL,
    ]
    line = _one_line_error(extract_cli(*args, "--out", tmp_path / "refused", check=False))
    assert str(pkl) in line
    if change == "rename":
        assert "535 of the file's 536 tensors fit the detector, which has 535 to fill" in line
        assert f"1 missing (first: {key})" in line
        assert "1 unexpected (first: roi_heads.box_predictor.fc.weight)" in line
    else:
        assert "535 of the file's 536 tensors" in line
        assert f"1 mis-shaped (first: {key} (file 513x2304, detector 512x2304))" in line
    assert "--allow-partial-weights" in line
    assert not (tmp_path / "refused" / "predictions.tsv").exists()
    if change == "rename":  # the opt-in runs, and says so
        out = tmp_path / "partial"
        extract_cli(*args, "--out", out, "--allow-partial-weights")
        weights = json.loads((out / "report.json").read_text())["weights"]
        assert weights["status"] == "partial" and weights["missing"]["first"] == [key]


def test_random_weights_are_recorded_and_said_after_the_read_back(photo, vocab, tmp_path):
    out, features = tmp_path / "raw", tmp_path / "features" / "photo.lmdb"
    result = extract_cli(
        "--images",
        photo,
        "--out",
        out,
        "--recipe",
        "lxmert-36",
        "--arch",
        "VG-R101-C4",
        "--random-weights",
        "3",
        "--classes",
        vocab / "classes.txt",
        "--mmf-out",
        features,
        *SMALL,
    )
    weights = json.loads((out / "report.json").read_text())["weights"]
    assert weights["status"] == "random" and weights["random_seed"] == 3
    assert "--random-weights 3" in result.stderr
    assert "read back through MMF's FeaturesDatabase: 1 of 1 images identical" in result.stdout
    assert (
        f"WARNING: {features}: read back, but its regions come from a RANDOMLY "
        "INITIALISED detector (--random-weights 3)"
    ) in result.stdout
    assert json.loads((features / "detector.json").read_text())["weights"]["status"] == "random"


class _Runs:
    """What a crafted pickle calls: os.system, writing a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(photo, vocab, tmp_path):
    marker = tmp_path / "ran"
    pkl = tmp_path / "faster_rcnn_from_caffe_attr.pkl"
    with open(pkl, "wb") as handle:
        pickle.dump(
            {"model": {"backbone.stem.conv1.weight": _Runs(marker)}, "__author__": "someone"},
            handle,
        )
    line = _refusal(photo, vocab, tmp_path, "--recipe", "lxmert-36", "--weights", pkl)
    assert str(pkl) in line and "refused to load" in line and "system" in line
    assert not marker.exists()


def test_a_pth_that_would_run_code_is_refused_and_runs_nothing(photo, vocab, tmp_path):
    import torch

    marker = tmp_path / "ran"
    pth = tmp_path / "model.pth"
    torch.save({"model": {"x": _Runs(marker)}}, pth)
    line = _refusal(
        photo, vocab, tmp_path, "--arch", "VG-R101-C4", "--weights", pth, "--max-boxes", "20"
    )
    assert str(pth) in line and "refused to load" in line
    assert not marker.exists()


def test_an_arch_yaml_that_would_run_code_is_refused_unless_trusted(photo, vocab, tmp_path):
    marker = tmp_path / "ran"
    arch = tmp_path / "arch.yaml"
    arch.write_text(
        "MODEL:\n  ROI_HEADS:\n    NUM_CLASSES: !!python/object/apply:os.system "
        f"['touch {marker}']\n"
    )
    line = _refusal(
        photo, vocab, tmp_path, "--arch", arch, "--random-weights", "0", "--max-boxes", "20"
    )
    assert f"{arch}:3: --arch refused" in line and "--trust-arch" in line
    assert not marker.exists()
    base = tmp_path / "base.yaml"
    base.write_text("_BASE_: https://example.com/Base-RCNN-C4.yaml\n")
    line = _refusal(
        photo, vocab, tmp_path, "--arch", base, "--random-weights", "0", "--max-boxes", "20"
    )
    assert str(base) in line and "a URL would be downloaded" in line


def test_a_truncated_pkl_is_refused_in_one_line_naming_it(photo, vocab, attr_pkl, tmp_path):
    cut = tmp_path / "faster_rcnn_from_caffe_attr.pkl"
    cut.write_bytes(attr_pkl.read_bytes()[:1_000_000])
    line = _refusal(photo, vocab, tmp_path, "--recipe", "bottom-up-attention", "--weights", cut)
    assert str(cut) in line and "a complete pickle" in line


def test_a_plain_yaml_and_its_base_merge_and_a_trusted_one_is_read_detectron2_s_way(tmp_path):
    from detectron2.config import get_cfg

    from mmf_uvlp.extraction.arch_yaml import merge_yaml

    (tmp_path / "configs").mkdir()
    (tmp_path / "Base.yaml").write_text("MODEL:\n  ROI_HEADS:\n    NUM_CLASSES: 7\n")
    (tmp_path / "configs" / "arch.yaml").write_text(
        "_BASE_: ../Base.yaml\nINPUT:\n  MIN_SIZE_TEST: 123\n"
    )
    cfg = get_cfg()
    merge_yaml(cfg, str(tmp_path / "configs" / "arch.yaml"))
    assert (cfg.MODEL.ROI_HEADS.NUM_CLASSES, cfg.INPUT.MIN_SIZE_TEST) == (7, 123)
    marker = tmp_path / "ran"
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text(f"VERSION: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ValueError, match="tagged.yaml:1: --arch refused"):
        merge_yaml(get_cfg(), str(tagged))
    assert not marker.exists()
    merge_yaml(get_cfg(), str(tagged), trusted=True)  # the opt-in: detectron2's reader runs it
    assert marker.exists()
