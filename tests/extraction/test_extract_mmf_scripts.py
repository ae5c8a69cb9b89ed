"""The files of MMF's own feature scripts (extract_features_vinvl.py, extract_features_vmb.py),
written out by hand from the scripts' code, and read back through MMF's FeatureReader."""

import numpy as np
import pytest

from helpers.extraction import NO_DETECTRON2

pytest.importorskip("detectron2", reason=NO_DETECTRON2)

from mmf_uvlp.extraction.detector import Detections  # noqa: E402
from mmf_uvlp.extraction.mmf_scripts import ScriptOutput  # noqa: E402
from mmf_uvlp.utils.safe_loading import OutsideFolderError  # noqa: E402


def _detections(classes=5, extra=None):
    rng = np.random.default_rng(0)
    return Detections(
        boxes=np.array([[10, 20, 110, 60], [0, 0, 200, 100]], np.float32),
        features=rng.normal(size=(2, 8)).astype(np.float32),
        classes=np.array([0, 3]),
        scores=np.array([0.9, 0.4], np.float32),
        attributes=[[], []],
        attr_scores=[[], []],
        extra=extra or {},
    )


def _read(folder, key):
    from mmf.datasets.databases.readers.feature_readers import FeatureReader

    reader = FeatureReader(str(folder), depth_first=False, max_features=4)
    features, info = reader.read(f"{key}.npy")
    return features.numpy(), info


def test_vinvl_files_are_the_box_features_and_six_box_values(tmp_path):
    extra = {
        "scores_all": np.ones((2, 6), np.float32),
        "boxes_all": np.ones((2, 6, 4), np.float32),
        "attr_labels": np.ones((2, 16), np.int64),
        "attr_scores": np.ones((2, 16), np.float32),
    }
    det = _detections(extra=extra)
    ScriptOutput(str(tmp_path), "vinvl").write("photo", det, width=200, height=100)
    features, info = _read(tmp_path, "photo")
    assert features.shape == (4, 8 + 6)  # MMF pads to max_features
    assert np.array_equal(features[:2, :8], det.features)
    # x1/W, y1/H, x2/W, y2/H, width/W, height/H of [10, 20, 110, 60] in 200 x 100
    assert np.allclose(features[0, 8:], [0.05, 0.2, 0.55, 0.6, 0.5, 0.4])
    assert np.allclose(features[1, 8:], [0, 0, 1, 1, 1, 1])
    assert sorted(info) == sorted(
        [
            "labels",
            "scores",
            "box_features",
            "scores_all",
            "boxes_all",
            "attr_labels",
            "attr_scores",
            "bbox",
            "image_width",
            "image_height",
            "max_features",
        ]
    )
    assert info["labels"].tolist() == [1, 4]  # 1-based, as scene_graph_benchmark's labels
    assert (info["image_width"], info["image_height"]) == (200, 100)
    assert int(info["max_features"]) == 2


def test_vmb_files_are_the_features_and_the_class_probabilities(tmp_path):
    cls_prob = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]], np.float32)
    det = _detections(extra={"cls_prob": cls_prob, "num_boxes": 1})
    ScriptOutput(str(tmp_path), "vmb").write("photo", det, width=200, height=100)
    features, info = _read(tmp_path, "photo")
    assert np.array_equal(features[:2], det.features)
    assert sorted(info) == sorted(
        ["bbox", "num_boxes", "objects", "cls_prob", "image_width", "image_height", "max_features"]
    )
    assert info["objects"].tolist() == [1, 0]
    assert np.array_equal(info["cls_prob"], cls_prob)
    assert np.array_equal(info["bbox"], det.boxes) and info["num_boxes"] == 1


def test_a_key_that_leaves_the_folder_is_refused(tmp_path):
    det = _detections(extra={"cls_prob": np.ones((2, 3), np.float32), "num_boxes": 2})
    with pytest.raises(OutsideFolderError):
        ScriptOutput(str(tmp_path / "out"), "vmb").write("../escape", det, 200, 100)
    assert not (tmp_path / "escape.npy").exists()
