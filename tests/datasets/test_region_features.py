"""The plugin's datasets read MMF's feature files without MMF's padding: the real rows only,
the same images and values as MMF's reader, and the same safe loading (no code runs, names
stay inside their folder, a NaN or a missing key is an error naming file and image)."""

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import mmf  # noqa: F401  (applies the compatibility fixes)
from mmf.datasets.databases.readers.feature_readers import FeatureReader
from mmf_uvlp.errors import FormatError
from mmf_uvlp.datasets.region_features import RegionFeaturesDatabase, check_finite

from helpers.crafted import CreatesFile, write_lmdb


def _record(n: int, dim: int = 4, value: float = 1.0) -> dict:
    return {
        "features": np.arange(n * dim, dtype=np.float32).reshape(n, dim) + value,
        "bbox": np.zeros((n, 4), np.float32),
        "num_boxes": n,
        "image_width": 10,
        "image_height": 10,
        "objects": np.arange(n),
        "image_id": "img",
    }


def _write_npy(folder: Path, name: str, record: dict) -> None:
    folder.mkdir(exist_ok=True)
    record = dict(record)
    np.save(folder / f"{name}.npy", record.pop("features"))
    np.save(folder / f"{name}_info.npy", record, allow_pickle=True)


@pytest.fixture
def locations(tmp_path):
    """The same three images (3, 7 and 2 rows) as an LMDB and as an npy folder."""
    records = {"img_a": _record(3), "coco_17": _record(7, value=5.0), "img_c": _record(2)}
    lmdb_path = write_lmdb(
        tmp_path / "features.lmdb",
        {"img_a": records["img_a"], "17": records["coco_17"], "img_c": records["img_c"]},
    )
    for name, record in records.items():
        _write_npy(tmp_path / "npy", name, record)
    return {"lmdb": lmdb_path, "npy": str(tmp_path / "npy")}


@pytest.mark.parametrize("kind", ["lmdb", "npy"])
def test_the_real_rows_of_what_mmf_reads(locations, kind):
    path = locations[kind]
    db = RegionFeaturesDatabase(path, max_features=5)
    mmf_reader = FeatureReader(path, depth_first=False, max_features=5)
    for name, rows in (("img_a.npy", 3), ("coco_17.npy", 5), ("img_c.npy", 2)):
        item = db.from_path(name)
        padded, info = mmf_reader.read(name)
        features, mine = item["image_feature_0"], item["image_info_0"]
        assert features.shape == (rows, 4) and features.dtype == torch.float32
        assert torch.equal(features, padded[:rows]), name
        assert not padded[rows:].any()  # all MMF added is zeros
        assert int(mine["max_features"]) == int(info["max_features"])  # the image's rows
        assert np.array_equal(mine["bbox"], info["bbox"]) and mine["image_width"] == 10
        features.add_(1)  # a writable tensor of its own
    assert int(db.from_path("coco_17.npy")["image_info_0"]["max_features"]) == 7


def test_a_payload_in_a_feature_file_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "created"
    path = write_lmdb(
        tmp_path / "features.lmdb",
        {"good": _record(2), "evil": dict(_record(2), objects=CreatesFile(marker))},
    )
    db = RegionFeaturesDatabase(path, 4)
    assert db.from_path("good.npy")["image_feature_0"].shape == (2, 4)
    with pytest.raises(FormatError, match=r"features\.lmdb \[key 'evil'\].*refused"):
        db.from_path("evil.npy")
    _write_npy(tmp_path / "npy", "evil", dict(_record(2), objects=CreatesFile(marker)))
    with pytest.raises(FormatError, match=r"evil_info\.npy.*refused"):
        RegionFeaturesDatabase(str(tmp_path / "npy"), 4).from_path("evil.npy")
    assert not marker.exists()


def test_names_leaving_the_npy_folder_are_refused(tmp_path):
    _write_npy(tmp_path / "elsewhere", "evil", _record(2))
    _write_npy(tmp_path / "features", "inside", _record(2))
    (tmp_path / "features" / "linked.npy").symlink_to(tmp_path / "elsewhere" / "evil.npy")
    db = RegionFeaturesDatabase(str(tmp_path / "features"), 4)
    assert db.from_path("inside.npy")["image_feature_0"].shape == (2, 4)
    for name in ("../elsewhere/evil.npy", str(tmp_path / "elsewhere" / "evil.npy"), "linked.npy"):
        with pytest.raises(FormatError, match="stays inside"):
            db.from_path(name)


def test_a_nan_in_a_real_row_and_a_missing_key_name_file_and_image(tmp_path):
    bad = _record(3)
    bad["features"][2, 1] = np.nan
    padded_nan = _record(6)
    padded_nan["features"][5, 0] = np.inf  # beyond max_features: never read
    path = write_lmdb(tmp_path / "features.lmdb", {"bad": bad, "cut": padded_nan})
    db = RegionFeaturesDatabase(path, 5)
    with pytest.raises(FormatError) as found:
        db.from_path("bad.npy")
    assert path in str(found.value) and "'bad'" in str(found.value)
    assert "1 NaN (first in row 2)" in str(found.value)
    assert db.from_path("cut.npy")["image_feature_0"].shape == (5, 4)
    with pytest.raises(FormatError, match=r"features\.lmdb.*b'keys'.*'gone'"):
        db.from_path("gone.npy")


def test_the_finiteness_check_tells_large_finite_values_from_non_finite_ones():
    huge = np.full((4, 8), 3e38, np.float32)  # finite, though their sum overflows
    check_finite(huge, "f", "k")
    huge[3, 7] = -np.inf
    with pytest.raises(FormatError, match="1 inf"):
        check_finite(huge, "f", "k")


def test_a_reader_pickles_for_spawned_workers(locations):
    db = RegionFeaturesDatabase(locations["lmdb"], 5)
    before = db.from_path("img_a.npy")["image_feature_0"]
    copy = pickle.loads(pickle.dumps(db))
    assert torch.equal(copy.from_path("img_a.npy")["image_feature_0"], before)


def test_one_feature_location_per_split(locations):
    with pytest.raises(ValueError, match="one feature location"):
        RegionFeaturesDatabase(f"{locations['lmdb']},{locations['npy']}", 5)


@pytest.mark.usefixtures("mmf_registry")
def test_the_pretraining_datasets_read_the_real_rows(tiny_corpus, tmp_path):
    """R-T over a copy of the tiny world's LMDB, built by MMF: each image's real rows."""
    import os

    from omegaconf import OmegaConf

    from mmf.common.registry import registry
    from mmf.utils.build import build_dataset

    path = tmp_path / "cc.lmdb"
    shutil.copytree(tiny_corpus.parent / "features" / "cc.lmdb", path)
    registry.register("config", OmegaConf.create({"training": {"batch_size": 2}}))
    registry.register("current_device", torch.device("cpu"))
    splits = ("train", "val", "test")
    config = OmegaConf.create(
        {
            "data_dir": str(tiny_corpus.parent),
            "use_features": True,
            "use_images": False,
            "return_features_info": True,
            "max_features": 24,
            "holdout_every": 0,
            "annotations": {t: ["corpus"] for t in splits},
            "features": {t: [str(path)] for t in splits},
            "processors": {
                "masking_processor": {
                    "type": "uvla_region_tag_masking",
                    "params": {
                        "tokenizer_path": os.environ["UVLP_BERT"],
                        "max_seq_length": 24,
                        "max_regions": 24,
                    },
                }
            },
        }
    )
    dataset = build_dataset("uvla_region_tag", config, "train")
    config.fast_read = True  # MMF's preloading: refused, not silently ignored
    with pytest.raises(ValueError, match=r"uvla_region_tag\.fast_read: not supported"):
        build_dataset("uvla_region_tag", config, "train")
    assert isinstance(dataset.features_db, RegionFeaturesDatabase)
    counts = []
    for index in range(4):
        features = dataset.features_db.from_path(dataset.annotation_db[index]["feature_path"])
        rows = int(features["image_info_0"]["max_features"])
        assert features["image_feature_0"].shape[0] == rows
        counts.append(rows)
    assert max(counts) < 24  # MMF's reader would have handed over 24 rows each
    assert dataset[0]["region_features"].shape[0] == 24  # one sample alone: fixed size
