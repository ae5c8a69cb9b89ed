"""Files a user is handed run no code and names from data files stay in their folder;
damaged files fail in one line naming the file.

The crafted pickles carry a payload that creates a file when unpickled (``open(path, "w")``):
every test asserts the file was not created and that the error names the loaded file.
"""

import gzip
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import lmdb
import numpy as np
import pytest
import torch

from mmf_uvlp.cli import probe_grounding, probe_visual_reliance
from mmf_uvlp.errors import FormatError

from helpers import HOLDOUT, MMF_RUN, REPO, tiny_uvla_template
from helpers.crafted import CreatesFile, write_lmdb


TINY = str(REPO / "configs" / "models" / "uvla" / "tiny_random.yaml")
FEATURE_DIM = 64  # the tiny preset's


class LegacyExtra:
    """A harmless object of the kind old checkpoints hold besides their tensors."""

    def __init__(self, note: str):
        self.note = note


def _tiny_uvla(**overrides):
    from omegaconf import OmegaConf

    from mmf_uvlp.analysis.systems import uvla_config
    from mmf_uvlp.models.uvla import UVLA

    config = OmegaConf.merge(
        uvla_config(TINY),
        {
            "feature_dim": FEATURE_DIM,
            "heads": ["mlm"],
            "losses": [],
            "curriculum": {"enabled": False},
        },
        overrides,
    )
    torch.manual_seed(0)
    model = UVLA(config)
    model.build()
    return model


@pytest.fixture(scope="module")
def state_dict():
    return _tiny_uvla().state_dict()


# ------------------------------------------------------------------ checkpoints
def test_pretrained_checkpoint_with_a_payload_is_refused_naming_the_file(state_dict, tmp_path):
    marker, evil = tmp_path / "created", tmp_path / "evil.pth"
    torch.save({"model": state_dict, "extra": CreatesFile(marker)}, evil)
    with pytest.raises(FormatError) as refused:
        _tiny_uvla(pretrained_checkpoint=str(evil))
    assert not marker.exists()
    message = str(refused.value)
    assert str(evil) in message and "refused" in message and "io.open" in message
    assert "model_config.uvla.trust_checkpoint=True" in message


def test_trust_checkpoint_opts_in_to_a_legacy_file(state_dict, tmp_path):
    legacy, name = tmp_path / "legacy.pth", "embeddings.text.word_embeddings.weight"
    trained = dict(state_dict, **{name: state_dict[name] + 1.0})
    torch.save({"model": trained, "extra": LegacyExtra("saved by an old trainer")}, legacy)
    with pytest.raises(FormatError, match="refused"):
        _tiny_uvla(pretrained_checkpoint=str(legacy))
    model = _tiny_uvla(pretrained_checkpoint=str(legacy), trust_checkpoint=True)
    assert torch.equal(model.state_dict()[name], trained[name])


def test_plain_checkpoints_load_as_before(state_dict, tmp_path):
    """A state dict and an MMF .ckpt (weights, optimizer state, plain config) need no opt-in."""
    torch.save(state_dict, tmp_path / "uvla_final.pth")
    torch.save(
        {
            "model": state_dict,
            "optimizer": {"state": {}, "param_groups": [{"lr": 1e-4}]},
            "config": {"model": "uvla", "training": {"seed": 0}},
            "num_updates": 4,
        },
        tmp_path / "model_4.ckpt",
    )
    for name in ("uvla_final.pth", "model_4.ckpt"):
        model = _tiny_uvla(pretrained_checkpoint=str(tmp_path / name))
        assert model.pretrained_report["loaded"]


def test_a_checkpoint_with_flipped_bytes_loads_or_fails_in_one_line_naming_it(tmp_path):
    """Byte flips anywhere in a ``torch.save`` file: each copy loads, or fails as a
    FormatError naming the file in one line (a flipped pickle opcode argument raises
    KeyError, IndexError or TypeError inside torch.load)."""
    import random

    from mmf_uvlp.utils.safe_loading import load_checkpoint

    whole = tmp_path / "whole.pth"
    torch.save({"model": {"w": torch.randn(30, 30), "b": torch.randn(30)}, "step": 3}, whole)
    data, rng, path = whole.read_bytes(), random.Random(0), tmp_path / "flipped.pth"
    outcomes = set()
    for _ in range(400):
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        path.write_bytes(bytes(flipped))
        try:
            load_checkpoint(path)
        except FormatError as error:
            assert str(path) in str(error) and "\n" not in str(error), error
            outcomes.add(type(error.__context__).__name__)
        else:
            outcomes.add("loaded")
    assert "loaded" in outcomes and outcomes & {"KeyError", "IndexError", "TypeError"}, outcomes


def test_a_detectron2_pickle_with_flipped_bytes_loads_or_fails_in_one_line_naming_it(tmp_path):
    """The same for a detectron2 ``.pkl`` (a pickled dict: ``model`` of numpy arrays by
    name, ``__author__``, ``matching_heuristics``): a flipped byte in the numpy reconstruct
    arguments raised LookupError or OverflowError from the restricted unpickler."""
    import random

    from mmf_uvlp.utils.safe_loading import restricted_load

    weights = {"backbone.res2.0.conv1.weight": np.random.default_rng(0).random((20, 20))}
    public = {"model": weights, "__author__": "Caffe2", "matching_heuristics": True}
    data, rng, path = pickle.dumps(public, protocol=2), random.Random(0), tmp_path / "model.pkl"
    outcomes = set()
    for _ in range(1000):
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        path.write_bytes(bytes(flipped))
        try:
            with open(path, "rb") as handle:
                restricted_load(handle, path, arrays=True, encoding="latin1")
        except FormatError as error:
            assert str(path) in str(error) and "\n" not in str(error), error
            outcomes.add(type(error.__context__).__name__)
        else:
            outcomes.add("loaded")
    assert "loaded" in outcomes and outcomes & {"LookupError", "OverflowError"}, outcomes


def test_an_npy_with_a_flipped_header_byte_loads_or_fails_in_one_line_naming_it(tmp_path):
    """The same for a feature ``.npy`` (numpy's format: magic, version, header length, a
    Python-literal header): a flipped header byte raised tokenize's TokenError."""
    import random

    from mmf_uvlp.utils.safe_loading import load_npy

    whole = tmp_path / "whole.npy"
    np.save(whole, np.random.default_rng(0).random((10, 16), dtype=np.float32))
    data, rng, path = whole.read_bytes(), random.Random(0), tmp_path / "flipped.npy"
    outcomes = set()
    for _ in range(300):
        flipped = bytearray(data)
        flipped[rng.randrange(128)] = rng.randrange(256)  # the header: 128 bytes in version 1.0
        path.write_bytes(bytes(flipped))
        for mmap_mode in (None, "r"):
            try:
                load_npy(path, mmap_mode=mmap_mode)
            except FormatError as error:
                assert str(path) in str(error) and "\n" not in str(error), error
                outcomes.add(type(error.__context__).__name__)
            else:
                outcomes.add("loaded")
    assert "loaded" in outcomes and "TokenError" in outcomes, outcomes


def _analysis_args(world, model_spec, out):
    return [
        "--world",
        str(world),
        "--split",
        "all",
        "--config",
        TINY,
        "--model",
        model_spec,
        "--out",
        str(out),
    ]


def test_analysis_tools_refuse_a_checkpoint_with_a_payload(
    tiny_world, state_dict, tmp_path, capsys
):
    marker, evil = tmp_path / "created", tmp_path / "evil.pth"
    torch.save({"model": state_dict, "extra": CreatesFile(marker)}, evil)
    with pytest.raises(SystemExit) as refused:
        probe_grounding.main(_analysis_args(tiny_world, f"X={evil}", tmp_path / "p"))
    assert str(evil) in str(refused.value.code) and "--trust-checkpoint" in str(refused.value.code)
    assert not marker.exists()
    reliance = probe_visual_reliance.main(
        [
            "--world",
            str(tiny_world),
            "--config",
            TINY,
            "--opt",
            "model_config.uvla.feature_dim=64",
            "--holdout-every",
            "6",
            "--model",
            f"X={evil}",
        ]
    )
    assert reliance == 2 and not marker.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(evil) in err[0] and "refused" in err[0]


def test_analysis_tools_name_a_truncated_checkpoint(tiny_world, state_dict, tmp_path, capsys):
    whole, cut = tmp_path / "whole.pth", tmp_path / "cut.pth"
    torch.save(state_dict, whole)
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(SystemExit) as failed:
        probe_grounding.main(_analysis_args(tiny_world, f"X={cut}", tmp_path / "p"))
    message = str(failed.value.code)
    assert str(cut) in message and "truncated" in message and "\n" not in message
    assert (
        probe_visual_reliance.main(
            [
                "--world",
                str(tiny_world),
                "--config",
                TINY,
                "--opt",
                "model_config.uvla.feature_dim=64",
                "--holdout-every",
                "6",
                "--model",
                f"X={cut}",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(cut) in err[0]


# ------------------------------------------------------------------ refer pickle
def _refer_folder(root: Path, refs: list) -> Path:
    folder = root / "refcoco+"
    folder.mkdir(parents=True)
    with open(folder / "refs(unc).p", "wb") as f:
        pickle.dump(refs, f)
    instances = {
        "images": [
            {"id": 1, "file_name": "COCO_train2014_000000000001.jpg", "width": 100, "height": 80}
        ],
        "annotations": [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20]}],
        "categories": [{"id": 1, "name": "car", "supercategory": "vehicle"}],
    }
    (folder / "instances.json").write_text(json.dumps(instances))
    return folder


REF = {
    "ref_id": 0,
    "ann_id": 5,
    "image_id": 1,
    "split": "train",
    "category_id": 1,
    "sentences": [{"sent": "red car", "tokens": ["red", "car"], "raw": "red car", "sent_id": 0}],
}


def test_refer_pickle_with_a_payload_is_refused_naming_file_and_global(tmp_path):
    from mmf_uvlp.data_formats.refer import Refer

    marker = tmp_path / "created"
    folder = _refer_folder(tmp_path / "evil", [REF, CreatesFile(marker)])
    with pytest.raises(FormatError) as refused:
        Refer(folder.parent)
    assert not marker.exists()
    assert str(folder / "refs(unc).p") in str(refused.value) and "io.open" in str(refused.value)


def test_refer_pickle_of_plain_data_loads_whatever_the_protocol(tmp_path):
    from mmf_uvlp.data_formats.refer import Refer

    for protocol in (0, 2, 4, 5):
        folder = tmp_path / f"p{protocol}" / "refcoco+"
        _refer_folder(folder.parent, [])
        with open(folder / "refs(unc).p", "wb") as f:
            pickle.dump([dict(REF, sent_ids={0})], f, protocol=protocol)  # a set: a global in 0-2
        (expression,) = Refer(folder.parent).expressions()
        assert expression.sentence == "red car"


# ------------------------------------------------------------------ feature files
def _feature_record(n: int = 2, dim: int = 4) -> dict:
    return {
        "features": np.ones((n, dim), np.float32),
        "bbox": np.zeros((n, 4), np.float32),
        "num_boxes": n,
        "image_width": 10,
        "image_height": 10,
        "objects": np.zeros(n, np.int64),
        "cls_prob": np.full((n, 3), 0.5, np.float32),
        "image_id": "img",
    }


def test_lmdb_feature_value_with_a_payload_is_refused_by_both_readers(tmp_path):
    from mmf.datasets.databases.readers.feature_readers import LMDBFeatureReader
    from mmf_uvlp.data_formats.mmf_features import LmdbFeatures

    marker, path = tmp_path / "created", tmp_path / "features.lmdb"
    write_lmdb(
        path,
        {"good": _feature_record(), "evil": dict(_feature_record(), objects=CreatesFile(marker))},
    )
    with LmdbFeatures(path) as db:
        assert db["good"]["num_boxes"] == 2
        with pytest.raises(FormatError, match=r"features\.lmdb \[key 'evil'\].*refused"):
            db["evil"]
    with pytest.raises(FormatError, match=r"features\.lmdb \[key 'evil'\].*refused"):
        LMDBFeatureReader(10, str(path))._load(f"{path}/evil.npy")
    assert not marker.exists()


def test_info_npy_with_a_payload_is_refused_by_both_readers(tmp_path):
    from mmf.datasets.databases.readers.feature_readers import FeatureReader
    from mmf_uvlp.data_formats.mmf_features import load_npy

    marker, folder = tmp_path / "created", tmp_path / "npy"
    folder.mkdir()
    record = _feature_record()
    np.save(folder / "img.npy", record.pop("features"))
    np.save(folder / "img_info.npy", dict(record, objects=CreatesFile(marker)), allow_pickle=True)
    with pytest.raises(FormatError, match=r"img_info\.npy.*refused"):
        load_npy(folder, "img")
    with pytest.raises(FormatError, match=r"img_info\.npy.*refused"):
        FeatureReader(str(folder), depth_first=False, max_features=4).read("img.npy")
    assert not marker.exists()
    np.save(folder / "img_info.npy", record, allow_pickle=True)  # the real format still loads
    feature, info = FeatureReader(str(folder), depth_first=False, max_features=4).read("img.npy")
    assert feature.shape == (4, 4) and info["num_boxes"] == 2


def test_npy_given_as_an_open_file_is_read_with_the_same_rules(tmp_path):
    """MMF main's ``load_feat`` hands ``np.load`` an open file, not a path."""
    from mmf_uvlp.utils.safe_loading import load_npy

    marker = tmp_path / "created"
    record = _feature_record()
    np.save(tmp_path / "img.npy", record.pop("features"))
    np.save(tmp_path / "img_info.npy", record, allow_pickle=True)
    np.save(tmp_path / "bad_info.npy", dict(record, objects=CreatesFile(marker)), allow_pickle=True)
    with open(tmp_path / "img.npy", "rb") as handle:
        assert np.array_equal(load_npy(handle), np.load(tmp_path / "img.npy"))
    with open(tmp_path / "img_info.npy", "rb") as handle:
        assert load_npy(handle).item()["num_boxes"] == 2
    with (
        open(tmp_path / "bad_info.npy", "rb") as handle,
        pytest.raises(FormatError, match=r"bad_info\.npy.*refused"),
    ):
        load_npy(handle)
    assert not marker.exists()


def test_feature_names_leaving_the_folder_are_refused(tmp_path):
    from mmf.datasets.databases.readers.feature_readers import FeatureReader
    from mmf_uvlp.data_formats.mmf_features import load_npy

    # "features2" shares the folder's name as a prefix: a string-prefix check would let it in
    folder, elsewhere, beside = (
        tmp_path / "features",
        tmp_path / "elsewhere",
        tmp_path / "features2",
    )
    for made in (folder, elsewhere, beside):
        made.mkdir()
    record = _feature_record()
    for target in (folder / "inside", elsewhere / "evil", beside / "evil"):
        np.save(f"{target}.npy", record["features"])
        np.save(
            f"{target}_info.npy",
            {k: v for k, v in record.items() if k != "features"},
            allow_pickle=True,
        )
    (folder / "linked.npy").symlink_to(elsewhere / "evil.npy")
    (folder / "linked_info.npy").symlink_to(elsewhere / "evil_info.npy")
    (folder / "beside.npy").symlink_to(beside / "evil.npy")
    (folder / "beside_info.npy").symlink_to(beside / "evil_info.npy")
    assert load_npy(folder, "inside")["num_boxes"] == 2
    for name in (
        "../elsewhere/evil",
        str(elsewhere / "evil"),
        "linked",
        "../features2/evil",
        "beside",
    ):
        with pytest.raises(FormatError, match="stays inside"):
            load_npy(folder, name)
        with pytest.raises(FormatError, match="stays inside"):
            FeatureReader(str(folder), depth_first=False, max_features=4).read(f"{name}.npy")


def _copy_corpus(corpus: Path, out: Path, edit) -> Path:
    """A copy of ``corpus``'s annotations whose records pass through ``edit(line, record)``."""
    shutil.copytree(corpus / "annotations", out / "annotations")
    part = out / "annotations" / "part-000000.jsonl.gz"
    with gzip.open(part, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    for line, record in enumerate(records, start=1):
        edit(line, record)
    with gzip.open(part, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(record) + "\n" for record in records)
    return part


def test_corpus_feature_key_traversal_is_refused_naming_part_and_line(tiny_corpus, tmp_path):
    from mmf_uvlp.datasets.databases.aligned_corpus import AlignedCorpusDatabase

    def escape(line, record):
        if line == 3:
            record["feature_key"] = "../../elsewhere/evil"

    part = _copy_corpus(tiny_corpus, tmp_path / "corpus", escape)
    with pytest.raises(FormatError) as refused:
        AlignedCorpusDatabase(str(tmp_path / "corpus"), "image", "train")
    assert str(refused.value).startswith(f"{part}:3: field 'feature_key'")
    assert "'..'" in str(refused.value)


# ------------------------------------------------------------------ NaN features
def test_a_nan_feature_is_named_where_mmf_reads_it(tiny_world, tmp_path):
    """One NaN in one image of a copy of the tiny world's feature LMDB."""
    from mmf.datasets.databases.readers.feature_readers import FeatureReader
    from mmf_uvlp.data_formats.mmf_features import LmdbFeatures

    path = tmp_path / "cc.lmdb"
    shutil.copytree(tiny_world / "features" / "cc.lmdb", path)
    env = lmdb.open(str(path), map_size=1 << 30)
    with env.begin(write=True) as txn:
        keys = pickle.loads(txn.get(b"keys"))
        record = pickle.loads(txn.get(keys[5]))
        record["features"][0, 3] = np.nan
        txn.put(keys[5], pickle.dumps(record))
    env.close()
    name = keys[5].decode()
    reader = FeatureReader(str(path), depth_first=False, max_features=24)
    assert torch.isfinite(reader.read(f"{keys[4].decode()}.npy")[0]).all()
    with pytest.raises(FormatError) as found:
        reader.read(f"{name}.npy")
    assert str(path) in str(found.value) and name in str(found.value)
    assert "1 NaN (first in row 0)" in str(found.value)
    with LmdbFeatures(path) as db, pytest.raises(FormatError, match=f"{name}.*1 NaN"):
        db[name]


# ------------------------------------------------------------------ damaged files
def test_truncated_data_mdb_is_refused_before_it_is_read(tiny_world, tmp_path):
    from mmf.datasets.databases.readers.feature_readers import LMDBFeatureReader
    from mmf_uvlp.errors import LmdbOpenError

    path = tmp_path / "cc.lmdb"
    path.mkdir()
    data = (tiny_world / "features" / "cc.lmdb" / "data.mdb").read_bytes()
    (path / "data.mdb").write_bytes(data[: len(data) // 2])
    # In a child process: before the check, reading the missing pages kills it (Bus error).
    code = (
        "import sys\nfrom mmf_uvlp.data_formats.mmf_features import read_lmdb\n"
        "try:\n    sum(1 for _ in read_lmdb(sys.argv[1]))\n"
        "except OSError as e:\n    print(e)\n    sys.exit(3)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 3, (child.returncode, child.stderr[-2000:])
    assert f"{path / 'data.mdb'}: truncated LMDB data file" in child.stdout
    with pytest.raises(LmdbOpenError, match="truncated"):
        LMDBFeatureReader(10, str(path))._load(f"{path}/x.npy")


def test_truncated_imdb_npy_names_the_file(tiny_world, tmp_path):
    from mmf.datasets.databases.annotation_database import AnnotationDatabase
    from mmf_uvlp.data_formats.annotations import read_vqa2_imdb

    manifest = json.loads((tiny_world / "world.json").read_text())
    whole = tiny_world / manifest["paths"]["vqa2"]["train"]
    cut = tmp_path / "imdb_train.npy"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(FormatError, match=r"imdb_train\.npy.*truncated"):
        list(read_vqa2_imdb(cut))
    with pytest.raises(FormatError, match=r"imdb_train\.npy.*truncated"):
        AnnotationDatabase({}, str(cut))
    assert len(AnnotationDatabase({}, str(whole))) > 0  # the whole file still loads


# ------------------------------------------------------------------ through mmf_run
PRETRAIN = tiny_uvla_template(batch_size=8, max_updates=1, evaluation_interval=1000)


def _mmf_run(tmp_path: Path, data_dir: Path) -> subprocess.CompletedProcess:
    config = tmp_path / "pretrain.yaml"
    config.write_text(PRETRAIN.format(repo=REPO))
    command = [
        MMF_RUN,
        f"config={config}",
        f"env.data_dir={data_dir}",
        f"env.save_dir={tmp_path / 'save'}",
        *HOLDOUT,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)


def _last_line(result: subprocess.CompletedProcess) -> str:
    return (result.stdout + result.stderr).strip().splitlines()[-1]


@pytest.mark.slow
def test_mmf_run_names_a_corpus_image_missing_from_the_features(tiny_corpus, tmp_path):
    """Before: training started and failed 25 frames deep with ``KeyError: b'cc_999999'``."""
    data = tmp_path / "data"

    def missing(line, record):
        if line == 7:
            record["feature_key"] = "cc_999999"

    part = _copy_corpus(tiny_corpus, data / "corpus", missing)
    (data / "features").symlink_to(tiny_corpus.parent / "features")
    result = _mmf_run(tmp_path, data)
    assert result.returncode == 2, (result.stdout + result.stderr)[-3000:]
    assert _last_line(result) == (
        f"mmf_run: error: {part}:7: field 'feature_key': expected an image of the features "
        f"{data / 'features' / 'cc.lmdb'}, got 'cc_999999'"
    )
    assert not (tmp_path / "save" / "models").exists()


@pytest.mark.slow
def test_mmf_run_refuses_a_truncated_data_mdb_in_one_line(tiny_corpus, tmp_path):
    """Before: the process died with ``Bus error`` (exit status 135) and no message."""
    data = tmp_path / "data"
    (data / "features" / "cc.lmdb").mkdir(parents=True)
    mdb = tiny_corpus.parent / "features" / "cc.lmdb" / "data.mdb"
    (data / "features" / "cc.lmdb" / "data.mdb").write_bytes(
        mdb.read_bytes()[: mdb.stat().st_size // 2]
    )
    (data / "corpus").symlink_to(tiny_corpus)
    result = _mmf_run(tmp_path, data)
    assert result.returncode == 2, (result.returncode, (result.stdout + result.stderr)[-3000:])
    last = _last_line(result)
    assert last.startswith(
        f"mmf_run: error: {data / 'features' / 'cc.lmdb' / 'data.mdb'}: truncated LMDB data file"
    ), last
