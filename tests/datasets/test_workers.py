"""Data loading with ``training.num_workers > 0``: each worker reads the features LMDB
through its own environment, readers survive pickling (spawned workers), workers persist,
and the batches, random masks included, equal those of ``num_workers = 0`` across an epoch
end and in a resumed epoch (LMDB and ``.npy`` features); with resident features the
workers' batches carry table rows, and the features the model's device makes from them
equal those read by the workers."""

import os
import pickle

import lmdb
import numpy as np
import pytest
import torch

import mmf  # noqa: F401  (applies the compatibility fixes)
from mmf.common.registry import registry
from mmf.datasets.databases.readers.feature_readers import LMDBFeatureReader
from mmf_uvlp.datasets import resident_features
from mmf_uvlp.trainers.train_loaders import REGISTERED, seeded_loaders
from mmf_uvlp.utils import lmdb_envs

from helpers import REPO


@pytest.fixture
def features_lmdb(tmp_path):
    """An MMF feature LMDB of 6 images, written with py-lmdb as MMF's extractor writes it."""
    path = str(tmp_path / "features.lmdb")
    writer = lmdb.open(path, map_size=1 << 24)
    with writer.begin(write=True) as txn:
        for index in range(6):
            record = {"features": np.full((2, 4), index, np.float32), "image_id": f"img_{index}"}
            txn.put(f"img_{index}".encode(), pickle.dumps(record))
        txn.put(b"keys", pickle.dumps([f"img_{index}".encode() for index in range(6)]))
    writer.close()
    return path


class _ReaderDataset(torch.utils.data.Dataset):
    """Each sample: the process reading it, the process whose environment it read through,
    and the features."""

    def __init__(self, path: str):
        self.path, self.reader = path, LMDBFeatureReader(10, path)

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int):
        features = self.reader._load(f"{self.path}/img_{index}.npy")["features"]
        return os.getpid(), lmdb_envs.opened_in(self.reader.env), features


def test_each_worker_reads_through_its_own_lmdb_environment(features_lmdb):
    dataset = _ReaderDataset(features_lmdb)
    dataset[0]  # the parent opened the environment before the workers fork
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, num_workers=2, persistent_workers=True
    )
    for epoch in range(2):
        rows = list(loader)
        readers = {pid for pid, _, _ in rows}
        assert len(readers) == 2 and os.getpid() not in readers
        assert all(pid == opened for pid, opened, _ in rows), rows
        assert [int(features[0, 0]) for _, _, features in rows] == list(range(6))
    assert dataset[5][1] == os.getpid()  # the parent still reads through its own


def test_a_feature_reader_pickles_for_spawned_workers(features_lmdb):
    dataset = _ReaderDataset(features_lmdb)
    before = dataset[3][2]
    copy = pickle.loads(pickle.dumps(dataset))  # what a spawn / forkserver worker receives
    assert torch.equal(torch.as_tensor(copy[3][2]), torch.as_tensor(before))


PRETRAIN = """
includes:
- {repo}/projects/uvla/pretrain.yaml
datasets: uvla_region_tag
dataset_config:
  uvla_region_tag:
    holdout_every: 6
    features:
      train: [{features}]
      val: [{features}]
      test: [{features}]
"""


@pytest.fixture
def registry_kept():
    missing = object()
    saved = {key: registry.get(key, missing, no_warning=True) for key in REGISTERED}
    yield
    for key, value in saved.items():
        if value is missing:
            registry.unregister(key)
        else:
            registry.register(key, value)


def _batches(
    tmp_path, world, features: str, workers: int, resume_at: int = 0, epochs=(1, 2), options=()
) -> list:
    """The epochs' batches of the R-T train loader that the ``uvlp`` trainer builds; with
    ``resume_at``, the first epoch resumed after that many batches, as a checkpoint does."""
    config_file = tmp_path / "pretrain.yaml"
    config_file.write_text(PRETRAIN.format(repo=REPO, features=features))
    loader = seeded_loaders(
        [
            f"config={config_file}",
            f"env.data_dir={world}",
            "training.batch_size=8",
            f"training.num_workers={workers}",
            *options,
        ]
    )
    train = loader.train_loader
    assert [one.persistent_workers for one in train.loaders] == [workers > 0]
    batches = []
    if resume_at:
        train.resume_at(
            {"consumed": [resume_at], "current_index": 0, "finished": [], "used_once": []}
        )
    for epoch in epochs:
        loader.seed_sampler("train", epoch)
        for batch in train:
            width = batch.region_features.shape[-1]  # as the workers made it
            batches.append(train.prepare_batch(batch))
            batches[-1]["width_from_workers"] = width
    return batches


@pytest.mark.parametrize("features", ["features/cc.lmdb", "features/cc"], ids=["lmdb", "npy"])
def test_workers_give_the_same_batches_as_no_workers(
    tiny_corpus, tmp_path, registry_kept, features
):
    world = tiny_corpus.parent
    alone = _batches(tmp_path, world, features, workers=0)
    with_workers = _batches(tmp_path, world, features, workers=2)
    assert len(alone) == len(with_workers) > 2
    for one, other in zip(alone, with_workers):
        _assert_same(one, other)
    assert alone[0].image_id != alone[len(alone) // 2].image_id  # the epochs' orders differ
    assert any((batch.lm_label_ids != -1).any() for batch in alone)  # random masks drawn


def test_a_resumed_epoch_with_workers_gives_the_uninterrupted_batches(
    tiny_corpus, tmp_path, registry_kept
):
    world = tiny_corpus.parent
    whole = _batches(tmp_path, world, "features/cc.lmdb", workers=0, epochs=(1,))
    resumed = _batches(tmp_path, world, "features/cc.lmdb", workers=2, resume_at=2, epochs=(1,))
    assert len(resumed) == len(whole) - 2 > 0
    for one, other in zip(whole[2:], resumed):
        _assert_same(one, other)


def _assert_same(one, other, where: str = "batch") -> None:
    """The same fields with equal values (tensors, lists, nested mappings)."""
    assert sorted(one.keys()) == sorted(other.keys()), where
    for key in one.keys():
        if torch.is_tensor(one[key]):
            assert torch.equal(one[key], other[key]), f"{where}.{key}"
        elif isinstance(one[key], dict):
            _assert_same(one[key], other[key], f"{where}.{key}")
        else:
            assert one[key] == other[key], f"{where}.{key}"


@pytest.mark.parametrize("features", ["features/cc.lmdb", "features/cc"], ids=["lmdb", "npy"])
def test_resident_features_give_the_batches_read_by_the_workers(
    tiny_corpus, tmp_path, registry_kept, features
):
    world = tiny_corpus.parent
    read = _batches(tmp_path, world, features, workers=2)
    resident = _batches(
        tmp_path,
        world,
        features,
        workers=2,
        options=["dataset_config.uvla_region_tag.resident_features=True"],
    )
    assert len(read) == len(resident) > 2
    zeroed = 0
    for one, other in zip(read, resident):
        assert other.width_from_workers == 0  # no feature values left the workers
        assert one.width_from_workers == one.region_features.shape[-1] > 0
        assert (other.region_feature_rows >= 0).equal(one.region_mask != 0)
        # prepare_batch made the resident batch's features from the dataset's table
        del other["region_feature_rows"], one["region_restore_rows"], other["region_restore_rows"]
        del one["width_from_workers"], other["width_from_workers"]
        _assert_same(one, other)
        zeroed += int(one.region_zeroed.sum())
    assert zeroed > 0  # masked regions were zeroed, and their originals came back equal


def test_resident_features_are_refused_when_the_table_does_not_fit():
    resident_features.check_fits(nbytes=2**30, free=4 * 2**30)
    with pytest.raises(
        MemoryError,
        match=r"resident_features: the feature table takes 3.00 "
        r"GiB, more than 50% of the device's 4.00 GiB free",
    ):
        resident_features.check_fits(nbytes=3 * 2**30, free=4 * 2**30)


def test_resident_features_take_a_boolean():
    assert resident_features.option({"resident_features": True}, "uvla_region_tag") is True
    assert resident_features.option({}, "uvla_region_tag") is False
    with pytest.raises(
        ValueError,
        match=r"dataset_config.uvla_region_tag.resident_features: "
        r"expected True or False, got 'true'",
    ):
        resident_features.option({"resident_features": "true"}, "uvla_region_tag")
