"""uvlp-extract-features against an independent implementation: MMF's frcnn port
(tools/scripts/features/frcnn/modeling_frcnn.py in MMF's source) on the same random
bottom-up-attention weights (faster_rcnn_from_caffe_attr.pkl's names and shapes, seed 0) and
the same photograph. The port's numbers are the fixture tools/reference/frcnn_port.py wrote
(tools/check_mmf_main.sh runs the port again against MMF main); the extractor runs LXMERT's
36-box recipe, the port's selection.

Tolerances (tools/reference/frcnn_port.py: TOLERANCE): boxes 1e-2 px, class and attribute
scores 1e-5, every 16th feature dimension 1e-4, each feature's norm 1e-3 and sum 1e-2 (of
2,048 values); class and attribute ids equal."""

import base64
import importlib.util
import json

import numpy as np
import pytest

from helpers import REPO
from helpers.checkpoints import (
    BOTTOM_UP_ATTR,
    COMPARISON_SIZE,
    comparison_photo,
    public_checkpoint,
)
from helpers.extraction import NO_DETECTRON2, extract_cli

pytest.importorskip("detectron2", reason=NO_DETECTRON2)

FIXTURE = REPO / "tests" / "fixtures" / "frcnn_port" / "bottom_up_attr_lxmert36.npz"
SPEC = importlib.util.spec_from_file_location(
    "frcnn_port", REPO / "tools" / "reference" / "frcnn_port.py"
)
port = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(port)


@pytest.fixture(scope="module")
def fixture():
    with np.load(FIXTURE, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def extracted(fixture, tmp_path_factory):
    """The extractor's regions, in the fixture's arrays."""
    folder = tmp_path_factory.mktemp("port")
    pkl = public_checkpoint(
        BOTTOM_UP_ATTR, folder / "faster_rcnn_from_caffe_attr.pkl", seed=int(fixture["seed"])
    )
    comparison_photo(folder / "images")
    for what, n in (("classes", 1600), ("attributes", 400)):  # names: c0, c1, ...; a0, ...
        (folder / f"{what}.txt").write_text("".join(f"{what[0]}{i}\n" for i in range(n)))
    out = folder / "raw"
    extract_cli(
        "--images",
        folder / "images",
        "--out",
        out,
        "--recipe",
        "lxmert-36",
        "--weights",
        pkl,
        "--classes",
        folder / "classes.txt",
        "--attributes",
        folder / "attributes.txt",
        "--threads",
        "1",
        "--no-progress",
        "--proposals",
        str(port.PROPOSALS),
        "--opts",
        "INPUT.MIN_SIZE_TEST",
        str(COMPARISON_SIZE),
        "INPUT.MAX_SIZE_TEST",
        "1000",
    )
    row = json.loads((out / "predictions.tsv").read_text().split("\t")[1])["objects"]
    features = np.stack([np.frombuffer(base64.b64decode(o["feature"]), "<f4") for o in row]).astype(
        np.float64
    )
    return {
        "boxes": np.array([o["rect"] for o in row], dtype=np.float32),
        "classes": np.array([int(o["class"][1:]) for o in row]),
        "scores": np.array([o["conf"] for o in row], dtype=np.float32),
        "attributes": np.array([int(o["attributes"][0][1:]) for o in row]),
        "attr_scores": np.array([o["attr_scores"][0] for o in row], dtype=np.float32),
        "feature_columns": features[:, :: port.FEATURE_STRIDE].astype(np.float32),
        "feature_sums": features.sum(axis=1),
        "feature_norms": np.linalg.norm(features, axis=1),
        "image_size": fixture["image_size"],
    }


def test_the_fixture_is_the_port_s_36_regions_of_the_photo(fixture):
    assert fixture["boxes"].shape == (36, 4) and fixture["feature_columns"].shape == (36, 128)
    assert list(fixture["image_size"]) == [COMPARISON_SIZE, 288]
    assert len(set(fixture["classes"].tolist())) > 1  # a network that discriminates


@pytest.mark.parametrize("key", sorted(port.TOLERANCE) + ["classes", "attributes"])
def test_the_extractor_equals_mmf_s_port(fixture, extracted, key):
    diff = port.compare(extracted, {key: fixture[key]})[key]
    assert diff <= port.TOLERANCE.get(key, 0), (key, diff)
