"""Checks of the fixes of MMF's training loop: multi-dataset loading, features, anomaly
detection, distributed runs and warnings."""

from __future__ import annotations

import signal
import types
import warnings
from typing import Any, List

from compat_checks_common import _configuration, check


def _alarm(seconds: int) -> None:
    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still iterating after {seconds}s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)


@check("multi_dataset_loader_epoch_reset")
def _multi_loader() -> None:
    import numpy as np

    from mmf.datasets.multi_dataset_loader import MultiDatasetLoader

    def loader(batches: List[list], probabilities: List[float]) -> MultiDatasetLoader:
        instance = MultiDatasetLoader.__new__(MultiDatasetLoader)
        instance.__init__("train")
        instance._num_datasets = len(batches)
        instance._datasets = [name for name, *_ in batches]
        instance._loaders = [rest for _, *rest in batches]
        instance._dataset_probabilities = probabilities
        instance._proportional_sampling = True
        instance._is_master = True
        instance.current_index = 0
        return instance

    _alarm(10)
    try:
        two = loader([["a", ("a", 0), ("a", 1)], ["b", ("b", 0)]], [0.5, 0.5])
        epochs = [sorted(two) for _ in range(3)]
        # evaluation: MMF switches datasets after every batch (prepare_batch), so a
        # switch can land on an exhausted dataset, then on another exhausted one
        evaluations = []
        for seed in range(20):
            np.random.seed(seed)
            three = loader([["a", ("a", 0)], ["b", ("b", 0)], ["c", ("c", 0)]], [0.45, 0.45, 0.1])
            seen = []
            for batch in three:
                seen.append(batch)
                three.change_dataloader()
            evaluations.append(sorted(seen))
    finally:
        signal.alarm(0)
    assert all(epoch == [("a", 0), ("a", 1), ("b", 0)] for epoch in epochs), epochs
    assert all(seen == [("a", 0), ("b", 0), ("c", 0)] for seen in evaluations), evaluations


@check("shared_lmdb_environments")
def _shared_lmdb() -> None:
    import pickle
    import tempfile

    import lmdb
    import numpy as np

    from mmf.datasets.databases.readers.feature_readers import LMDBFeatureReader

    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/features.lmdb"
        record = {"features": np.ones((2, 4), np.float32), "image_id": "img_1"}
        writer = lmdb.open(path, map_size=1 << 24)
        with writer.begin(write=True) as txn:
            txn.put(b"img_1", pickle.dumps(record))
            txn.put(b"keys", pickle.dumps([b"img_1"]))
        writer.close()
        readers = [LMDBFeatureReader(10, path) for _ in ("train", "val")]
        loaded = [reader._load(f"{path}/img_1.npy") for reader in readers]
    assert all(info["features"].shape == (2, 4) for info in loaded)


class _CreatesFile:
    """Pickles into a call of ``open(path, "w")``: loading it creates ``path``."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self) -> Any:
        return open, (self.path, "w")


@check("feature_files_run_no_code")
def _feature_files() -> None:
    import os
    import pickle
    import tempfile

    import lmdb
    import numpy as np

    from mmf.datasets.databases.readers.feature_readers import FeatureReader, LMDBFeatureReader
    from mmf_uvlp.errors import FormatError

    with tempfile.TemporaryDirectory() as folder:
        path, marker = f"{folder}/features.lmdb", f"{folder}/created"
        writer = lmdb.open(path, map_size=1 << 24)
        with writer.begin(write=True) as txn:
            txn.put(b"img_1", pickle.dumps({"features": _CreatesFile(marker)}))
            txn.put(b"keys", pickle.dumps([b"img_1"]))
        writer.close()
        try:
            LMDBFeatureReader(10, path)._load(f"{path}/img_1.npy")
        except FormatError as error:
            assert path in str(error) and "refused" in str(error), error
        assert not os.path.exists(marker), "an LMDB value ran code"
        npy = f"{folder}/npy"
        os.mkdir(npy)
        features = np.ones((2, 4), np.float32)
        features[1, 2] = np.nan
        np.save(f"{npy}/img_2.npy", features)
        try:
            FeatureReader(npy, depth_first=False, max_features=4).read("img_2.npy")
        except FormatError as error:
            assert npy in str(error) and "NaN" in str(error), error
        else:
            raise AssertionError("a NaN feature was read")


@check("anomaly_detection_switch")
def _anomaly() -> None:
    import torch
    from omegaconf import OmegaConf

    from mmf.common.registry import registry
    from mmf.trainers.base_trainer import BaseTrainer

    seen = []
    silent = types.SimpleNamespace(write=lambda *a, **k: None)
    registry.register("writer", silent)

    class Stop(Exception):
        pass

    def stop_at_first_batch(*args: Any) -> None:
        seen.append(torch.is_anomaly_enabled())
        raise Stop

    for wanted in (False, True):
        trainer = types.SimpleNamespace(
            config=OmegaConf.create({"training": {"detect_anomaly": wanted}}),
            writer=silent,
            model=torch.nn.Linear(1, 1),
            run_type="train",
            max_epochs=None,
            max_updates=1,
            num_updates=0,
            current_epoch=0,
            profile=lambda *a: None,
            dataset_loader=types.SimpleNamespace(seed_sampler=lambda *a: None),
            train_loader=[None],
            current_iteration=0,
            _forward_pass=stop_at_first_batch,
        )
        try:
            BaseTrainer.train(trainer)
        except Stop:
            pass
    torch.autograd.set_detect_anomaly(False)
    assert seen == [False, True], seen


def _gloo_worker(rank: int, port: int, result_file: str) -> None:
    import torch

    import mmf.utils.distributed as distributed

    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=2, rank=rank
    )
    value = distributed.reduce_tensor(torch.tensor([float(rank + 1)]))
    if rank == 0:
        with open(result_file, "w") as handle:
            handle.write(f"{distributed.get_world_size()} {value.item()}")
    torch.distributed.destroy_process_group()


@check("cpu_distributed_gloo")
def _gloo() -> None:
    import random
    import tempfile

    import torch.multiprocessing

    with tempfile.NamedTemporaryFile("r", suffix=".txt") as result:
        port = random.randint(20000, 30000)
        torch.multiprocessing.spawn(_gloo_worker, args=(port, result.name), nprocs=2)
        world_size, mean = result.read().split()
    assert int(world_size) == 2 and float(mean) == 1.5, (world_size, mean)


@check("cpu_distributed_spawn")
def _spawn() -> None:
    import torch.multiprocessing

    import mmf_cli.run

    calls = []
    spawn = torch.multiprocessing.spawn
    torch.multiprocessing.spawn = lambda fn, args, nprocs: calls.append(nprocs)
    try:
        mmf_cli.run.run(opts=["model=visual_bert", "dataset=vqa2", "distributed.world_size=2"])
    finally:
        torch.multiprocessing.spawn = spawn
    assert calls == [2], calls


@check("torchrun_local_rank")
def _torchrun_local_rank() -> None:
    import os

    import mmf_cli.run as cli
    from omegaconf import OmegaConf

    config = OmegaConf.create(
        {"device_id": 0, "start_rank": 0, "distributed": {"no_spawn": True, "rank": 1}}
    )
    configuration = types.SimpleNamespace(get_config=lambda: config)
    seen = []
    main, cli.main = cli.main, lambda configuration, **kwargs: seen.append(config.device_id)
    os.environ["LOCAL_RANK"] = "1"
    try:
        cli.distributed_main(0, configuration)  # what rc10's run() calls under torchrun
    finally:
        cli.main = main
        del os.environ["LOCAL_RANK"]
    assert seen == [1], seen


@check("quiet_known_warnings")
def _quiet() -> None:
    import mmf_cli.run  # noqa: F401  (MMF's command line, as mmf_run imports it)

    with warnings.catch_warnings(record=True) as caught:
        _configuration(["model=visual_bert", "dataset=vqa2"])
        config = _configuration(["model=visual_bert", "dataset=vqa2"]).get_config()
        assert config.env.user_dir is not None
    noisy = [
        str(w.message)
        for w in caught
        if "deprecated" in str(w.message) or "elements are missing" in str(w.message)
    ]
    assert not noisy, noisy
