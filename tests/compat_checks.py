"""One behavioural check per compatibility fix, runnable in a fresh process.

``python tests/compat_checks.py NAME`` exits 0 when the behaviour that fix
``NAME`` repairs works, non-zero otherwise. tests/test_compat.py runs every
check in-process (all fixes on) and in a subprocess with ``NAME`` disabled via
``$MMF_UVLP_DISABLE_FIXES`` (the check must then fail).
"""

from __future__ import annotations

import argparse
import collections
import signal
import sys
import types
import warnings
from typing import Any, Callable, Dict, List

CHECKS: Dict[str, Callable[[], None]] = {}


def check(name: str) -> Callable:
    def decorator(fn: Callable[[], None]) -> Callable[[], None]:
        CHECKS[name] = fn
        return fn

    return decorator


def _empty_config_file(text: str = "{}\n") -> str:
    """An empty user config (``config=`` of a check without one: MMF main reads
    ``opts.config`` without a default), or one holding ``text``, removed when the process
    ends."""
    import atexit
    import os
    import tempfile

    handle, path = tempfile.mkstemp(suffix=".yaml")
    os.write(handle, text.encode())
    os.close(handle)
    atexit.register(os.remove, path)
    return path


# The checks configure plugin runs: the plugin's training behaviour (fixes of scope
# "plugin") acts on those only (tests/test_plugin_scope.py checks MMF's own runs). The key
# is set in the user config (MMF main's defaults do not have it).
PLUGIN_RUN = "training:\n  uvlp_behaviour: True\n"


def _plugin_run() -> None:
    """Register the config of a plugin run, for checks that call MMF's classes directly."""
    _configuration(["model=visual_bert", "dataset=vqa2"])


def _configuration(opts: List[str]) -> Any:
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    setup_imports()
    if not any(opt.startswith("config=") for opt in opts):
        opts = [f"config={_empty_config_file(PLUGIN_RUN)}", *opts]
    return Configuration(argparse.Namespace(config_override=None, opts=opts))


@check("collections_abc_aliases")
def _collections() -> None:
    from mmf.utils.logger import Logger

    fake = types.SimpleNamespace(_is_master=False, write=lambda info: None)
    Logger.log_progress(fake, {"progress": "1/1"})
    assert collections.Mapping is collections.abc.Mapping


@check("demjson_alias")
def _demjson() -> None:
    from mmf.utils.configuration import Configuration

    config = Configuration._build_demjson_config(None, "{a: 1, b: [2, 3]}")
    assert config.a == 1 and list(config.b) == [2, 3]


@check("transformers_2x_module_paths")
def _transformers() -> None:
    import mmf.models.visual_bert  # noqa: F401  (the first ``import mmf`` adds the aliases)
    from transformers.modeling_bert import BertLayerNorm
    from transformers.optimization import AdamW

    import torch

    assert BertLayerNorm is torch.nn.LayerNorm
    parameter = torch.nn.Parameter(torch.ones(2))
    optimizer = AdamW([parameter], lr=0.1)
    assert optimizer.defaults["weight_decay"] == 0.0 and optimizer.defaults["eps"] == 1e-6


@check("torchvision_without_compiled_ops")
def _torchvision() -> None:
    from torchvision import transforms

    import mmf.datasets.processors.image_processors  # noqa: F401
    import torch

    assert transforms.Normalize([0.5], [0.5])(torch.ones(1, 2, 2)).sum() == 4


@check("torchtext_stub")
def _torchtext() -> None:
    import mmf.utils.vocab as vocab

    try:
        vocab.vocab.GloVe
    except ImportError as error:
        assert "torchtext" in str(error)
    else:
        raise AssertionError("torchtext's GloVe should be reported as unavailable")


@check("omegaconf_2_0_semantics")
def _omegaconf() -> None:
    import os

    from omegaconf import OmegaConf

    _configuration(["model=visual_bert", "dataset=vqa2"])
    config = OmegaConf.create({"present": 1})
    assert config.missing is None and config["missing"] is None
    assert "present: 1" in config.pretty()
    os.environ["MMF_UVLP_CHECK_VAR"] = "from-env"
    env = OmegaConf.create({"a": "${env:MMF_UVLP_CHECK_VAR,x}", "b": "${env:MMF_UVLP_UNSET, d}"})
    assert env.a == "from-env" and env.b == "d"


@check("model_and_datasets_from_config_file")
def _model_from_file() -> None:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
        handle.write("model: visual_bert\ndatasets: vqa2,nlvr2\n")
        handle.flush()
        config = _configuration([f"config={handle.name}"]).get_config()
        assert config.model == "visual_bert" and config.datasets == "vqa2,nlvr2"
        assert "visual_bert" in config.model_config and "nlvr2" in config.dataset_config
        overridden = _configuration([f"config={handle.name}", "model=vilbert"]).get_config()
        assert overridden.model == "vilbert" and "vilbert" in overridden.model_config
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
        handle.write("model: visual_bert\ndataset: nlvr2\n")
        handle.flush()
        config = _configuration([f"config={handle.name}"]).get_config()
        assert config.datasets == "nlvr2" and "nlvr2" in config.dataset_config


@check("rc10_default_config_keys")
def _default_keys() -> None:
    config = _configuration(["model=visual_bert", "dataset=vqa2"]).get_config()
    assert config.training.stdout_capture is False
    assert config.training.detect_anomaly is False


def _tiny_visual_bert(**overrides: Any) -> Any:
    from omegaconf import OmegaConf

    from mmf.models.visual_bert import VisualBERT

    _configuration(["model=visual_bert", "dataset=vqa2"])
    config = OmegaConf.create(
        {
            "model": "visual_bert",
            "bert_model_name": None,
            "training_head_type": "classification",
            "num_labels": 3,
            "visual_embedding_dim": 8,
            "hidden_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 32,
            "vocab_size": 50,
            "special_visual_initialize": True,
            "embedding_strategy": "plain",
            "bypass_transformer": False,
            "output_attentions": False,
            "output_hidden_states": False,
            "random_initialize": True,
            "freeze_base": False,
            "finetune_lr_multiplier": 1,
            "hidden_dropout_prob": 0.1,
            "losses": [],
        }
    )
    config.merge_with(overrides)
    model = VisualBERT(config)
    model.build()
    model.init_losses()
    return model


@check("hard_coded_cuda")
def _cuda() -> None:
    import torch

    from mmf.common.sample import Sample, SampleList

    samples = []
    for _ in range(2):
        sample = Sample()
        sample.input_ids = torch.tensor([1, 2, 3, 0])
        sample.input_mask = torch.tensor([1, 1, 1, 0])
        sample.segment_ids = torch.zeros(4, dtype=torch.long)
        sample.image_feature_0 = torch.randn(5, 8)
        sample.image_info_0 = {"max_features": torch.tensor(5)}
        sample.targets = torch.zeros(3)
        samples.append(sample)
    batch = SampleList(samples)
    batch.dataset_name, batch.dataset_type = "vqa2", "train"
    output = _tiny_visual_bert()(batch)
    assert output["scores"].shape == (2, 3)


@check("visual_bert_output_attentions")
def _visual_bert_attentions() -> None:
    import torch

    from mmf.common.sample import Sample, SampleList

    for head in ("classification", "pretraining"):
        samples = []
        for _ in range(2):
            sample = Sample()
            sample.input_ids = torch.tensor([1, 2, 3, 0])
            sample.input_mask = torch.tensor([1, 1, 1, 0])
            sample.segment_ids = torch.zeros(4, dtype=torch.long)
            sample.image_feature_0 = torch.randn(5, 8)
            sample.image_info_0 = {"max_features": torch.tensor(3)}
            sample.lm_label_ids = torch.tensor([-1, 5, -1, -1])  # pretraining: one masked word
            samples.append(sample)
        batch = SampleList(samples)
        batch.dataset_name, batch.dataset_type = "vqa2", "val"
        model = _tiny_visual_bert(training_head_type=head, num_hidden_layers=2,
                                  output_attentions=True).eval()
        with torch.no_grad():
            output = model.forward(batch)
        (maps,) = output["attention_weights"]
        assert len(maps) == 2 and maps[0].shape == (2, 2, 9, 9), [m.shape for m in maps]
        torch.testing.assert_close(maps[1].sum(-1), torch.ones(2, 2, 9))
        assert float(maps[1][..., [3, 7, 8]].max()) < 1e-6  # padding text and regions


@check("dataset_imdb_attribute")
def _imdb() -> None:
    from mmf.datasets.builders.nlvr2.dataset import NLVR2Dataset

    fake = types.SimpleNamespace(annotation_db=["record"])
    assert NLVR2Dataset.imdb.fget(fake) == ["record"]


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


@check("multitasking_sampling_ratios")
def _sampling_ratios() -> None:
    from omegaconf import OmegaConf

    from mmf.datasets.multi_dataset_loader import MultiDatasetLoader
    from mmf_uvlp.utils.user_config import UserConfigError

    config = _configuration(["model=visual_bert", "dataset=vqa2",
                             "multitasking.type=random"]).get_config()
    assert config.multitasking.type == "random", config.multitasking

    logged: List[str] = []
    writer = types.SimpleNamespace(write=lambda message, *args, **kwargs: logged.append(message))

    def probabilities(multitasking: dict, dataset_type: str = "train") -> List[float]:
        instance = MultiDatasetLoader(dataset_type)
        instance.writer = writer
        instance.config = OmegaConf.create({"training": {}, "multitasking": multitasking})
        instance._given_datasets = ["rt", "rn", "is"]
        instance._num_datasets = 3
        instance._per_dataset_lengths = [10, 40, 50]
        instance._total_length = 100
        instance._infer_dataset_probabilities()
        return [round(p, 6) for p in instance._dataset_probabilities]

    ratios = {"type": "ratios", "params": {"sampling_ratios": {"rt": 2, "rn": 1, "is": 1}}}
    assert probabilities(ratios) == [0.5, 0.25, 0.25]
    assert logged == ["Using per-dataset sampling probabilities: rt: 0.500, rn: 0.250, is: 0.250"]
    assert probabilities(ratios, "val") == [0.1, 0.4, 0.5]
    assert probabilities({"type": "random"}) == [round(1 / 3, 6)] * 3
    assert probabilities({"type": "size_proportional"}) == [0.1, 0.4, 0.5]
    only_first = MultiDatasetLoader("train")
    only_first.writer = writer
    only_first.config = OmegaConf.create({"training": {}, "multitasking": ratios})
    only_first.config.multitasking.params.sampling_ratios.update(rn=0, **{"is": 0})
    only_first._given_datasets = ["rt", "rn", "is"]
    only_first._per_dataset_lengths, only_first._total_length = [2, 1, 1], 4
    only_first._num_datasets, only_first._is_master, only_first.current_index = 3, True, 0
    only_first._datasets = ["rt", "rn", "is"]
    only_first._loaders = [[("rt", 0), ("rt", 1)], [("rn", 0)], [("is", 0)]]
    only_first._infer_dataset_probabilities()
    _alarm(10)
    try:
        epochs = [list(only_first) for _ in range(2)]  # an epoch ends when "rt" runs out
    finally:
        signal.alarm(0)
    assert epochs == [[("rt", 0), ("rt", 1)]] * 2, epochs
    for bad, expected in (({"rt": 1, "rn": 1}, "no ratio for ['is']"),
                          ({"rt": -1, "rn": 1, "is": 1}, "non-negative")):
        try:
            probabilities({"type": "ratios", "params": {"sampling_ratios": bad}})
        except UserConfigError as e:
            assert expected in str(e), e
        else:
            raise AssertionError(f"sampling_ratios {bad} accepted")


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
    from mmf_uvlp.data_formats.errors import FormatError

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


@check("mixed_precision")
def _mixed_precision() -> None:
    import tempfile

    import torch

    from mmf.common.registry import registry
    from mmf.common.report import Report
    from mmf.common.sample import Sample, SampleList
    from mmf.trainers.base_trainer import BaseTrainer

    silent = types.SimpleNamespace(write=lambda *a, **k: None)
    registry.register("writer", silent)
    seen = []

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 4)

        def forward(self, batch: Any) -> Dict[str, Any]:
            seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
            return {"losses": {"loss": (self.layer(batch["x"]).float() ** 2).mean()}}

    model = Model()
    layer = model.layer
    with tempfile.TemporaryDirectory() as save_dir:
        for dtype, scaled in (("bfloat16", False), ("float16", True)):
            config = _configuration([
                "model=visual_bert", "dataset=vqa2", "training.fp16=True",
                f"training.amp_dtype={dtype}", f"env.save_dir={save_dir}"]).get_config()
            trainer = BaseTrainer(config)
            trainer.writer, trainer.device, trainer.model = silent, torch.device("cpu"), model
            trainer.optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
            trainer.load_extras()
            trainer.dataset_loader = types.SimpleNamespace(prepare_batch=lambda batch: batch)
            batch = SampleList([Sample({"x": torch.randn(4)}), Sample({"x": torch.randn(4)})])
            report = trainer._forward_pass(batch)
            assert isinstance(report, Report) and seen[-1] == (True, getattr(torch, dtype)), seen
            trainer._backward(trainer._extract_loss(report))
            assert trainer.scaler.is_enabled() is scaled and trainer.num_updates == 1
            if scaled:  # the update went through the GradScaler
                assert trainer.scaler.state_dict()["_growth_tracker"] == 1


@check("max_updates_stop")
def _max_updates() -> None:
    import torch
    from omegaconf import OmegaConf

    from mmf.common.registry import registry
    from mmf.trainers.base_trainer import BaseTrainer

    silent = types.SimpleNamespace(write=lambda *a, **k: None)
    registry.register("writer", silent)

    class CountingTrainer(BaseTrainer):
        def __init__(self) -> None:
            self.config = OmegaConf.create({"training": {}})
            self.writer, self.model, self.run_type = silent, torch.nn.Linear(1, 1), "train"
            self.max_epochs, self.max_updates, self.num_updates = None, 3, 0
            self.current_epoch = self.current_iteration = 0
            self.log_interval = 1000
            self.dataset_loader = types.SimpleNamespace(seed_sampler=lambda *a: None)
            self.train_loader = list(range(10))

        def profile(self, *args: Any) -> None:
            pass

        def _forward_pass(self, batch: Any) -> None:
            return None

        def _extract_loss(self, report: Any) -> None:
            return None

        def _backward(self, loss: Any) -> None:
            self.num_updates += 1

        def _try_snapshot(self) -> None:
            pass

        def _try_full_validation(self, force: bool = False) -> bool:
            return False

        def finalize(self) -> None:
            pass

    trainer = CountingTrainer()
    trainer.train()
    assert trainer.num_updates == 3, trainer.num_updates


@check("per_dataset_evaluation")
def _evaluation() -> None:
    import torch

    from mmf.common.report import Report
    from mmf.common.sample import Sample, SampleList
    from mmf.modules.metrics import Metrics
    from mmf.trainers.base_trainer import BaseTrainer

    def batch(name: str, width: int, hit: bool) -> tuple:
        sample_list = SampleList([Sample({"targets": torch.tensor(1)}), Sample({"targets": torch.tensor(0)})])
        sample_list.dataset_name, sample_list.dataset_type = name, "val"
        scores = torch.zeros(2, width)
        scores[0, 1 if hit else 0] = 5.0
        return sample_list, {"scores": scores, "losses": {f"val/{name}/loss": torch.tensor(1.0)}}

    batches = [batch("wide", 5, True), batch("narrow", 2, False), batch("wide", 5, True)]
    trainer = types.SimpleNamespace(
        model=torch.nn.Linear(1, 1),
        metrics=Metrics(["accuracy"]),
        _forward_pass=lambda item: Report(*item),
    )
    trainer._update_meter = lambda *a, **k: BaseTrainer._update_meter(trainer, *a, **k)
    trainer.meter = None
    _, meter = BaseTrainer.evaluate(trainer, batches)
    values = {key: meter.meters[key].global_avg for key in meter.meters}
    assert values["val/wide/accuracy"] == 1.0, values
    # narrow: row 0 predicts 0 for target 1, row 1 predicts 0 for target 0
    assert values["val/narrow/accuracy"] == 0.5, values


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

    config = OmegaConf.create({"device_id": 0, "start_rank": 0,
                               "distributed": {"no_spawn": True, "rank": 1}})
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
    with warnings.catch_warnings(record=True) as caught:
        _configuration(["model=visual_bert", "dataset=vqa2"])
        config = _configuration(["model=visual_bert", "dataset=vqa2"]).get_config()
        assert config.env.user_dir is not None
    noisy = [str(w.message) for w in caught if "deprecated" in str(w.message) or "elements are missing" in str(w.message)]
    assert not noisy, noisy



@check("seed_zero_seeds")
def _seed_zero() -> None:
    _plugin_run()
    import torch

    from mmf.utils.env import set_seed

    draws = []
    for _ in range(2):
        set_seed(0)
        draws.append(torch.rand(4))
    assert torch.equal(draws[0], draws[1]), draws


class _Indexed(list):
    """A dataset of 12 MMF samples holding their own index."""

    dataset_name, dataset_type = "numbers", "train"

    def __init__(self) -> None:
        import torch

        from mmf.common.sample import Sample

        super().__init__(Sample({"index": torch.tensor(i)}) for i in range(12))


@check("seeded_resumable_data_order")
def _data_order() -> None:
    import torch
    from omegaconf import OmegaConf

    from mmf.common.registry import registry
    from mmf.utils.build import build_dataloader_and_sampler

    saved = {key: registry.get(key, None, no_warning=True) for key in ("config", "seed")}
    registry.register("config", OmegaConf.create({"training": {"batch_size": 4,
                                                               "uvlp_behaviour": True}}))
    registry.register("seed", 5)
    training = OmegaConf.create({"num_workers": 0, "pin_memory": False})
    orders = []
    try:
        for global_seed in (1, 2):
            torch.manual_seed(global_seed)  # dropout and masking move the global stream
            loader, sampler = build_dataloader_and_sampler(_Indexed(), training)
            sampler.set_epoch(3)
            orders.append([i for batch in loader for i in batch.index.tolist()])
    finally:
        for key, value in saved.items():
            registry.register(key, value)
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(12)), orders
    sampler.set_epoch(3)
    sampler.skip_next(8)  # a run resumed after two batches of epoch 3
    assert [i for batch in loader for i in batch.index.tolist()] == orders[0][8:]


class RunsCode:
    """Unpickling this creates the file ``path`` (a stand-in for any code)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self) -> Any:
        return (open, (self.path, "w"))


@check("persistent_dataloader_workers")
def _persistent_workers() -> None:
    from omegaconf import OmegaConf

    from mmf.common.registry import registry
    from mmf.utils.build import build_dataloader_and_sampler

    saved = registry.get("config", None, no_warning=True)
    try:
        for workers, persistent in ((2, True), (0, False)):
            training = OmegaConf.create({"batch_size": 4, "num_workers": workers,
                                         "pin_memory": False, "persistent_workers": True,
                                         "uvlp_behaviour": True})
            registry.register("config", OmegaConf.create({"training": training}))
            loader, _ = build_dataloader_and_sampler(_Indexed(), training)
            assert loader.persistent_workers is persistent, (workers, loader.persistent_workers)
    finally:
        registry.register("config", saved)


@check("resumable_checkpoints")
def _damaged_checkpoint() -> None:
    _plugin_run()
    import errno
    import os
    import tempfile

    import torch

    import mmf.utils.checkpoint as checkpoint_module
    from mmf.utils.checkpoint import Checkpoint

    loader = types.SimpleNamespace(device="cpu")
    with tempfile.TemporaryDirectory() as folder:
        damaged = os.path.join(folder, "damaged.ckpt")
        with open(damaged, "wb") as handle:
            handle.write(b"PK\x03\x04 truncated")
        try:
            Checkpoint._torch_load(loader, damaged)
        except Exception as exc:  # rc10: a zip-reader error that names no file
            assert damaged in str(exc), str(exc)
        else:
            raise AssertionError("a damaged checkpoint loaded")

        crafted, ran = os.path.join(folder, "crafted.ckpt"), os.path.join(folder, "ran")
        torch.save({"model": {}, "extra": RunsCode(ran)}, crafted)
        os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"  # torch.load's default: unpickle anything
        try:
            Checkpoint._torch_load(loader, crafted)
        except Exception as exc:
            assert f"checkpoint {crafted} refused: it holds objects that are not plain data " \
                   "(io.open)" in str(exc), str(exc)
        else:
            raise AssertionError("a checkpoint holding code loaded")
        finally:
            del os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"]
        assert not os.path.exists(ran), "loading the checkpoint ran its code"

        # the disk is full: the write of the checkpoint's temporary file fails with ENOSPC
        target = os.path.join(folder, "model_4.ckpt")
        os.symlink("/dev/full", f"{target}.tmp-{os.getpid()}")
        try:
            checkpoint_module.torch.save({"model": {"w": torch.zeros(1000)}}, target)
        except Exception as exc:  # rc10: RuntimeError ... iostream error, no path
            assert str(exc).startswith(f"cannot write checkpoint {target}: ENOSPC"), str(exc)
            assert getattr(exc, "errno", None) == errno.ENOSPC
        else:
            raise AssertionError("a checkpoint was written to a full disk")
        assert not os.path.lexists(target)


def nan_batch_and_model() -> Any:
    """A training batch of 4 whose sample cc_000002 has a NaN feature, and a model whose loss
    reads the features."""
    import math

    import torch

    from mmf.common.registry import registry
    from mmf.common.sample import Sample, SampleList

    if not hasattr(registry.get("writer", None, no_warning=True), "write"):
        registry.register("writer", types.SimpleNamespace(write=lambda *a, **k: None))
    samples = [Sample({"image_id": f"cc_00000{i}", "region_features": torch.ones(3, 2)}) for i in range(4)]
    samples[2].region_features[1, 0] = math.nan
    batch = SampleList(samples)
    batch.dataset_name, batch.dataset_type = "uvla_region_tag", "train"

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, batch: Any) -> Dict[str, Any]:
            return {"losses": {"train/uvla_region_tag/uvla_mrfr": self.linear(batch.region_features).mean()}}

    return batch, Model()


def expect_non_finite_loss_named(forward: Callable[[], Any]) -> None:
    """``forward()`` (a trainer's forward pass at update 7 over :func:`nan_batch_and_model`'s
    batch) stops, naming the update, the dataset and the sample."""
    try:
        forward()
    except Exception as exc:  # MMF: the NaN loss goes on to its backward pass and update
        message = str(exc)
        assert message.startswith("non-finite loss at update 7 on dataset uvla_region_tag"), message
        assert "image_id cc_000002 has non-finite values in region_features" in message, message
    else:
        raise AssertionError("a NaN loss went on to its update")


@check("non_finite_loss_stops")
def _non_finite_loss() -> None:
    _plugin_run()
    from mmf.trainers.base_trainer import BaseTrainer

    batch, model = nan_batch_and_model()
    from omegaconf import OmegaConf

    trainer = types.SimpleNamespace(model=model, num_updates=6, profile=lambda *a: None,
                                    config=OmegaConf.create({"training": {}}),
                                    dataset_loader=types.SimpleNamespace(prepare_batch=lambda b: b))
    expect_non_finite_loss_named(lambda: BaseTrainer._forward_pass(trainer, batch))


@check("evaluation_keeps_training_stream")
def _evaluation_stream() -> None:
    _plugin_run()
    import torch

    from mmf.common.report import Report
    from mmf.common.sample import Sample, SampleList
    from mmf.modules.metrics import Metrics
    from mmf.trainers.base_trainer import BaseTrainer

    def forward(_: Any) -> Report:
        sample_list = SampleList([Sample({"targets": torch.tensor(1)})])
        sample_list.dataset_name, sample_list.dataset_type = "masked", "val"
        return Report(sample_list, {"scores": torch.rand(1, 2), "losses": {}})

    trainer = types.SimpleNamespace(model=torch.nn.Linear(1, 1), metrics=Metrics(["accuracy"]),
                                    _forward_pass=forward, meter=None)
    trainer._update_meter = lambda *a, **k: BaseTrainer._update_meter(trainer, *a, **k)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    BaseTrainer.evaluate(trainer, [None, None])
    assert torch.equal(torch.get_rng_state(), before), "evaluation moved the training generator"


@check("literal_command_line_values")
def _literal_values() -> None:
    from mmf_uvlp.utils.user_config import UserConfigError

    try:
        _configuration(["model=visual_bert", "dataset=vqa2", "training.lr_scheduler=true"]).get_config()
    except UserConfigError as error:
        assert "write training.lr_scheduler=True" in str(error), str(error)
    else:
        raise AssertionError("training.lr_scheduler=true was accepted as the string 'true'")
    refusals = {
        "dataset_config.vqa2.features.train=[features/cc.lmdb]":
            "write \"dataset_config.vqa2.features.train=['features/cc.lmdb']\"",
        "dataset_config.vqa2.annotations.train[0]=x.npy":
            "give the whole list as a Python literal, e.g. \"dataset_config.vqa2.annotations.train=[",
    }
    for override, spelling in refusals.items():
        try:
            _configuration(["model=visual_bert", "dataset=vqa2", override]).get_config()
        except UserConfigError as error:
            assert spelling in str(error), str(error)
        else:
            raise AssertionError(f"{override} was accepted")
    config = _configuration(["model=visual_bert", "dataset=vqa2",
                             "dataset_config.vqa2.features.train=['a.lmdb','b.lmdb']"]).get_config()
    assert list(config.dataset_config.vqa2.features.train) == ["a.lmdb", "b.lmdb"]


@check("relative_data_dir")
def _relative_data_dir() -> None:
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            config = _configuration(["model=visual_bert", "dataset=vqa2",
                                     "env.data_dir=worlds/mine"]).get_config()
        finally:
            os.chdir(cwd)
        expected = os.path.join(os.path.realpath(folder), "worlds", "mine")
        assert os.path.realpath(config.env.data_dir) == expected, config.env.data_dir
        dataset_dir = os.path.realpath(config.dataset_config.vqa2.data_dir)
        # rc10: ${env.data_dir}; MMF main: ${env.data_dir}/datasets
        assert dataset_dir in (expected, os.path.join(expected, "datasets")), dataset_dir


@check("one_line_user_errors")
def _one_line_errors() -> None:
    import contextlib
    import io

    import mmf_cli.run

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            mmf_cli.run.run(opts=[f"config={_empty_config_file(PLUGIN_RUN)}", "model=visual_bert",
                                  "dataset=vqa2", "training.lr_scheduler=true"])
    except SystemExit as exit_:
        assert exit_.code == 2, exit_.code
    lines = stderr.getvalue().strip().splitlines()
    assert lines and lines[-1].startswith("mmf_run: error: command line: training.lr_scheduler=true"), lines
    expect_run_stopped_in_one_line()


def expect_run_stopped_in_one_line() -> None:
    """A run stopped by its data or disk (a RunStopped raised while training) ends in one line
    and exit status 1."""
    import contextlib
    import io

    import mmf_cli.run

    from mmf_uvlp.utils.run_errors import RunStopped

    def stopped(*args: Any, **kwargs: Any) -> None:
        raise RunStopped("cannot write checkpoint save/current.ckpt: ENOSPC (No space left on device)")

    main, mmf_cli.run.main = mmf_cli.run.main, stopped
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            mmf_cli.run.run(opts=[f"config={_empty_config_file()}", "model=visual_bert",
                                  "dataset=vqa2"])
    except SystemExit as exit_:
        assert exit_.code == 1, exit_.code
    else:
        raise AssertionError("mmf_run went on after the run stopped")
    finally:
        mmf_cli.run.main = main
    output = stderr.getvalue()  # MMF main's configuration may warn before the run starts
    assert "Traceback" not in output, output
    assert output.strip().splitlines()[-1] == (
        "mmf_run: error: cannot write checkpoint save/current.ckpt: ENOSPC (No space left on "
        "device)"), output


@check("run_folder_lock")
def _run_folder_lock() -> None:
    import contextlib
    import io
    import os
    import tempfile

    import mmf_cli.run
    from mmf_uvlp.training.run_lock import RunLock

    class TrainerBuilt(Exception):
        pass

    def build_trainer(config: Any) -> None:
        raise TrainerBuilt

    build = mmf_cli.run.build_trainer
    mmf_cli.run.build_trainer = build_trainer
    stderr, code = io.StringIO(), None
    with tempfile.TemporaryDirectory() as save_dir:
        owner = RunLock(save_dir)
        owner.acquire()  # this process runs in the folder already
        try:
            config = os.path.join(save_dir, "config.yaml")  # MMF main reads config= always
            with open(config, "w") as handle:
                handle.write(PLUGIN_RUN + "  seed: 1\n")
            with contextlib.redirect_stderr(stderr):
                mmf_cli.run.run(opts=[f"config={config}", "model=visual_bert", "dataset=vqa2",
                                      f"env.save_dir={save_dir}"])
        except SystemExit as exit_:
            code = exit_.code
        except TrainerBuilt:
            code = "a second run started in the folder"
        finally:
            mmf_cli.run.build_trainer = build
            owner.release()
    assert code == 2, code
    line = stderr.getvalue().strip().splitlines()[-1]
    assert line.startswith(f"mmf_run: error: run folder {save_dir} is in use by pid "
                           f"{os.getpid()} on host "), line


def _tiny_vilbert(head: str, **overrides: Any) -> Any:
    """A randomly initialised two-stream ViLBERT (bert_model_name: null) in eval mode."""
    import torch

    from mmf.models.vilbert import ViLBERT
    from mmf.utils.configuration import load_yaml

    _configuration(["model=vilbert", "dataset=nlvr2"])
    config = load_yaml("configs/models/vilbert/defaults.yaml").model_config.vilbert
    config.merge_with(dict(
        bert_model_name=None, training_head_type=head, num_labels=2, losses=[], vocab_size=50,
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        v_feature_size=8, v_target_size=5, v_hidden_size=16, v_num_hidden_layers=1,
        v_num_attention_heads=2, v_intermediate_size=32, bi_hidden_size=16,
        bi_num_attention_heads=2, bi_intermediate_size=32, v_biattention_id=[0],
        t_biattention_id=[0], **overrides,
    ))
    torch.manual_seed(0)
    model = ViLBERT(config)
    model.build()
    model.init_losses()
    return model.eval()


def _vilbert_image(regions: int, rows: int = 4) -> Any:
    """One image of ``regions`` detections, features padded to ``rows`` as MMF's reader does."""
    import numpy as np
    import torch

    from mmf.common.sample import Sample

    image = Sample()
    image.image_feature_0 = torch.zeros(rows, 8)
    image.image_feature_0[:regions] = torch.randn(regions, 8)
    boxes = np.tile(np.array([[1.0, 2.0, 6.0, 9.0]], dtype=np.float32), (regions, 1))
    image.image_info_0 = {"max_features": torch.tensor(regions), "bbox": boxes,
                          "image_width": 10, "image_height": 10,
                          "cls_prob": np.full((regions, 5), 0.2, dtype=np.float32)}
    return image


def _vilbert_text(sample: Any) -> Any:
    import torch

    sample.input_ids = torch.tensor([1, 7, 8, 2, 0])
    sample.input_mask = torch.tensor([1, 1, 1, 1, 0])
    sample.segment_ids = torch.zeros(5, dtype=torch.long)
    sample.lm_label_ids = torch.tensor([-1, 7, -1, -1, -1])
    return sample


@check("vilbert_variable_region_counts")
def _vilbert_region_counts() -> None:
    import torch

    from mmf.common.sample import SampleList

    samples = []
    for regions in (4, 2, 6):  # the third image has more boxes than feature rows
        sample = _vilbert_text(_vilbert_image(min(regions, 4)))
        if regions > 4:
            sample.image_info_0["bbox"] = torch.ones(regions, 4).numpy()
            sample.image_info_0["cls_prob"] = torch.full((regions, 5), 0.2).numpy()
        sample.image_labels = [1, -1, 1, -1]
        samples.append(sample)
    batch = SampleList(samples)
    batch.dataset_name, batch.dataset_type = "masked_coco", "train"
    output = _tiny_vilbert("pretraining")(batch)
    losses = output["losses"]
    assert set(losses) == {"masked_coco/train/masked_lm_loss", "masked_coco/train/masked_img_loss"}
    assert all(torch.isfinite(value).all() for value in losses.values()), losses


@check("vilbert_nlvr2_pairs")
def _vilbert_nlvr2() -> None:
    import torch

    from mmf.common.sample import Sample, SampleList

    torch.manual_seed(1)
    examples = []
    for _ in range(3):
        example = _vilbert_text(Sample())
        example.img0, example.img1 = _vilbert_image(4), _vilbert_image(4)
        example.targets = torch.tensor(0)
        examples.append(example)
    model = _tiny_vilbert("nlvr2")

    def scores() -> torch.Tensor:
        batch = SampleList(examples)
        batch.dataset_name, batch.dataset_type = "nlvr2", "val"
        with torch.no_grad():
            return model(batch)["scores"]

    before = scores()
    examples[1].img1.image_feature_0[:4] = torch.randn(4, 8) * 3  # example 1's second image
    changed = (scores() - before).abs().sum(-1) > 1e-6
    assert changed.tolist() == [False, True, False], f"rows whose score changed: {changed.tolist()}"


@check("vilbert_random_init")
def _vilbert_random() -> None:
    model = _tiny_vilbert("classification")
    embeddings = model.model.bert.embeddings.word_embeddings
    assert embeddings.num_embeddings == 50 and float(embeddings.weight.std()) > 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("name", choices=sorted(CHECKS))
    CHECKS[parser.parse_args().name]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
