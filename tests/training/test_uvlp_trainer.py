"""The ``uvlp`` trainer's behaviour, each through the trainer's own classes: seeding, the
seeded resumable data order and its loaders, persistent workers, the multitasking mix, mixed
precision, the checkpoint (plain-data loads, atomic writes), the non-finite loss stop and
the evaluation stream. End-to-end runs of the trainer: test_resume_exact.py,
test_reproducibility.py, test_mixed_precision.py, test_checkpoint_errors.py,
test_nonfinite.py, test_run_lock.py."""

import argparse
import errno
import os
import random
import signal
import sys
import time
import types
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import mmf  # noqa: F401  (registers the plugin's components)
from mmf.common.registry import registry
from mmf.common.report import Report
from mmf.common.sample import Sample, SampleList
from mmf.modules.metrics import Metrics
from mmf.utils.build import build_dataloader_and_sampler

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.trainers.finite_loss import NonFiniteLossStop
from mmf_uvlp.trainers.rc10_checkpoint import UVLPCheckpoint
from mmf_uvlp.trainers.rc10_loaders import SeededMultiDatasetLoader
from mmf_uvlp.trainers.rc10_trainer import UVLPTrainer
from mmf_uvlp.trainers.checkpoint import atomic_torch_save
from mmf_uvlp.trainers.data_order import seeded_dataloader
from mmf_uvlp.trainers.precision import FLOAT32, MixedPrecision
from mmf_uvlp.trainers.data_order import EpochSampler
from mmf_uvlp.trainers.seeding import RandomState
from mmf_uvlp.trainers.side_stream import CopiedBatch, SideStreamCopy

from helpers.crafted import CreatesFile

# compat_checks: the batch and the expectations MMF main's trainers are checked with
sys.path.insert(0, str(Path(__file__).parents[1] / "compat"))
SILENT = types.SimpleNamespace(write=lambda *a, **k: None)


def _config(*opts: str, user: str = "training:\n  trainer: uvlp\n", tmp_path=None) -> Any:
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    setup_imports()
    path = tmp_path / "run.yaml"
    path.write_text(user)
    return Configuration(
        argparse.Namespace(config_override=None, opts=[f"config={path}", *opts])
    ).get_config()


@pytest.fixture
def registered(mmf_registry):
    """MMF's registry with a writer that writes nothing; as it was again after the test."""
    mmf_registry.register("writer", SILENT)
    return mmf_registry


class _Indexed(list):
    """A dataset of 12 MMF samples holding their own index."""

    dataset_name, dataset_type = "numbers", "train"

    def __init__(self, size: int = 12) -> None:
        super().__init__(Sample({"index": torch.tensor(i)}) for i in range(size))

    def prepare_batch(self, batch: Any) -> Any:
        return batch


def test_a_seed_of_zero_seeds_every_generator(tmp_path):
    config = _config("model=visual_bert", "dataset=vqa2", "training.seed=0", tmp_path=tmp_path)
    trainer = UVLPTrainer(config)
    draws = []
    for _ in range(2):
        trainer.config_based_setup()  # MMF's set_seed seeds nothing for 0
        draws.append(
            (
                torch.rand(4).tolist(),
                np.random.rand(4).tolist(),
                [random.random() for _ in range(4)],
            )
        )
    assert draws[0] == draws[1], draws


def test_the_data_order_is_a_function_of_seed_and_epoch_and_resumes_mid_epoch(registered):
    registered.register("seed", 5)
    training = OmegaConf.create({"batch_size": 4, "num_workers": 0, "pin_memory": False})
    orders = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)  # dropout and masking move the global stream
        loader, _ = seeded_dataloader(
            build_dataloader_and_sampler(_Indexed(), training)[0], training
        )
        loader.sampler.set_epoch(3)
        orders.append([i for batch in loader for i in batch.index.tolist()])
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(12)), orders
    loader.sampler.set_epoch(3)
    loader.sampler.skip_next(8)  # a run resumed after two batches of epoch 3
    assert [i for batch in loader for i in batch.index.tolist()] == orders[0][8:]


def test_each_epoch_gives_every_sample_new_draws():
    """A sample's masks and ITM draws follow its seed: no seed of one epoch comes back in the
    next, at any position (else every epoch would repeat the masks of the one before)."""
    sampler = EpochSampler(12, seed=5)
    seeds = {}
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        seeds[epoch] = [index.seed for index in sampler]
    assert len(set(seeds[1])) == 12 and not set(seeds[1]) & set(seeds[2]), seeds


def test_workers_persist_across_epochs_when_there_are_workers(registered):
    for workers, persistent in ((2, True), (0, False)):
        training = OmegaConf.create(
            {
                "batch_size": 4,
                "num_workers": workers,
                "pin_memory": False,
                "persistent_workers": True,
            }
        )
        loader, _ = seeded_dataloader(
            build_dataloader_and_sampler(_Indexed(), training)[0], training
        )
        assert loader.persistent_workers is persistent, (workers, loader.persistent_workers)


class _LoggedReads(_Indexed):
    """:class:`_Indexed`, each read of a sample appended to a file (by whichever worker)."""

    def __init__(self, log: str) -> None:
        super().__init__()
        self.log = log

    def __getitem__(self, index: Any) -> Sample:
        with open(self.log, "a") as file:
            file.write(f"{int(index)}\n")
        return super().__getitem__(index)


def _training_loader(dataset: Any, workers: int, *more: Any) -> SeededMultiDatasetLoader:
    """The ``uvlp`` trainer's training loader over ``dataset`` (and ``more``), batches of 4."""
    instance = SeededMultiDatasetLoader("train")
    instance.config = OmegaConf.create(
        {"training": {"batch_size": 4, "num_workers": workers, "pin_memory": False}}
    )
    registry.register("config", instance.config)  # MMF's batch size
    datasets = [dataset, *more]
    instance._datasets, instance._num_datasets = datasets, len(datasets)
    instance._per_dataset_lengths = [len(one) for one in datasets]
    instance._total_length = sum(instance._per_dataset_lengths)
    instance.current_index, instance.current_dataset = 0, dataset
    instance._is_master = True
    instance._infer_dataset_probabilities()
    instance.build_dataloaders()
    return instance


def _epoch(loader: SeededMultiDatasetLoader, epoch: int) -> List[int]:
    loader.seed_sampler(epoch)
    return [i for batch in loader for i in loader.prepare_batch(batch).index.tolist()]


def test_the_training_loader_reads_the_next_epoch_before_this_one_ends(registered, tmp_path):
    registered.register("seed", 3)
    log = tmp_path / "reads"
    loader = _training_loader(_LoggedReads(str(log)), workers=2)
    reads_at_the_last_batch = []
    loader.seed_sampler(1)
    for position, batch in enumerate(loader, 1):
        loader.prepare_batch(batch)
        if position == 3:  # the epoch's last batch: the workers go on into epoch 2
            _alarm(20)
            try:
                while len(log.read_text().split()) <= 12:
                    time.sleep(0.01)
            finally:
                signal.alarm(0)
            reads_at_the_last_batch = log.read_text().split()
    assert len(reads_at_the_last_batch) > 12
    no_workers = _training_loader(_Indexed(), workers=0)
    assert _epoch(loader, 2) == _epoch(no_workers, 2)  # epoch 2 as the seed orders it
    assert sorted(_epoch(loader, 3)) == list(range(12)) and _epoch(loader, 3) != _epoch(loader, 2)


def test_a_resume_at_the_end_of_an_epoch_continues_with_the_next(registered):
    registered.register("seed", 3)
    whole = _training_loader(_Indexed(), workers=0)
    epochs = {epoch: _epoch(whole, epoch) for epoch in (1, 2)}
    for consumed, expected in ((3, []), (1, epochs[1][4:])):
        resumed = _training_loader(_Indexed(), workers=2)
        resumed.resume_at(
            {"consumed": [consumed], "current_index": 0, "finished": [], "used_once": []}
        )
        _alarm(60)  # a skip carried into epoch 2 leaves the loader waiting for batches
        try:
            assert _epoch(resumed, 1) == expected
            assert resumed.consumed == [3]
            assert _epoch(resumed, 2) == epochs[2]
        finally:
            signal.alarm(0)


class _RecordingCopy:
    """What :class:`SideStreamCopy` is asked to do on a GPU, recorded: which batch's copy
    began (``start``) and which copied batch was handed to the step (``ready``)."""

    enabled = True

    def __init__(self) -> None:
        self.events: List[tuple] = []
        self._started: Dict[int, Any] = {}

    def start(self, batch: Any) -> CopiedBatch:
        moved = batch.copy()  # the batch "on the device"
        self._started[id(moved)] = moved
        self.events.append(("start", batch.index.tolist()))
        return CopiedBatch(moved, None)

    def ready(self, copied: CopiedBatch) -> Any:
        assert self._started.pop(id(copied.batch)) is copied.batch  # each copy handed out once
        self.events.append(("ready", copied.batch.index.tolist()))
        return copied.batch


def test_on_a_gpu_the_next_batch_is_copied_while_the_step_computes(registered):
    registered.register("seed", 3)
    import numpy as np

    epochs, prepared = {}, []
    for copied in (False, True):
        loader = _training_loader(_Indexed(12), 0, _Indexed(6))
        if copied:
            recording = loader._copy = _RecordingCopy()
        np.random.seed(0)  # MMF's choice of the next dataset
        epochs[copied] = []
        for epoch in (1, 2):
            loader.seed_sampler(epoch)
            batches = [loader.prepare_batch(batch).index.tolist() for batch in loader]
            epochs[copied].append([i for batch in batches for i in batch])
            if copied:
                prepared.append(batches)
        assert loader.consumed == [3, 2]
    assert epochs[True] == epochs[False]  # the same batches, in the same order
    events = recording.events
    readies = [batch for kind, batch in events if kind == "ready"]
    # copied late: each epoch's first batch, and the one MMF takes when the dataset it
    # chose runs out (it switches inside its __next__)
    assert len(readies) == 7 and sum(len(batches) for batches in prepared) == 10, events
    for before, after in zip(events, events[1:]):  # each copy begins as its step is prepared
        if after[0] == "ready":
            assert before == ("start", after[1]), events
    for batches in prepared:  # each epoch's first batch is not copied ahead
        assert batches[0] not in readies and batches[1] in readies, (batches, readies)
    assert SideStreamCopy("cpu").enabled is False  # a CPU: nothing is copied ahead
    cpu = _training_loader(_Indexed(), 0)
    assert cpu._copy is not None and not cpu._copy.enabled


def _alarm(seconds: int) -> None:
    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still iterating after {seconds}s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)


def test_multitasking_ratios_choose_the_datasets_of_training(registered):
    logged: List[str] = []
    writer = types.SimpleNamespace(write=lambda message, *args, **kwargs: logged.append(message))

    def loader(multitasking: dict, dataset_type: str = "train") -> SeededMultiDatasetLoader:
        instance = SeededMultiDatasetLoader(dataset_type)
        instance.writer = writer
        instance.config = OmegaConf.create({"training": {}, "multitasking": multitasking})
        instance._given_datasets = ["rt", "rn", "is"]
        instance._num_datasets = 3
        instance._per_dataset_lengths = [10, 40, 50]
        instance._total_length = 100
        return instance

    def probabilities(multitasking: dict, dataset_type: str = "train") -> List[float]:
        instance = loader(multitasking, dataset_type)
        instance._infer_dataset_probabilities()
        return [round(p, 6) for p in instance._dataset_probabilities]

    ratios = {"type": "ratios", "params": {"sampling_ratios": {"rt": 2, "rn": 1, "is": 1}}}
    assert probabilities(ratios) == [0.5, 0.25, 0.25]
    assert logged == ["Using per-dataset sampling probabilities: rt: 0.500, rn: 0.250, is: 0.250"]
    assert probabilities(ratios, "val") == [0.1, 0.4, 0.5]
    assert probabilities({"type": "random"}) == [round(1 / 3, 6)] * 3
    assert probabilities({"type": "size_proportional"}) == [0.1, 0.4, 0.5]
    only_first = loader(
        {"type": "ratios", "params": {"sampling_ratios": {"rt": 1, "rn": 0, "is": 0}}}
    )
    only_first._per_dataset_lengths, only_first._total_length = [2, 1, 1], 4
    only_first._is_master, only_first.current_index = True, 0
    only_first._datasets = ["rt", "rn", "is"]
    only_first._loaders = [[("rt", 0), ("rt", 1)], [("rn", 0)], [("is", 0)]]
    only_first._infer_dataset_probabilities()
    _alarm(10)
    try:
        epochs = [list(only_first) for _ in range(2)]  # an epoch ends when "rt" runs out
    finally:
        signal.alarm(0)
    assert epochs == [[("rt", 0), ("rt", 1)]] * 2, epochs
    for bad, expected in (
        ({"rt": 1, "rn": 1}, "no ratio for ['is']"),
        ({"rt": -1, "rn": 1, "is": 1}, "non-negative"),
    ):
        with pytest.raises(UserConfigError, match=expected.replace("[", r"\[")):
            probabilities({"type": "ratios", "params": {"sampling_ratios": bad}})


def test_mixed_precision_autocasts_the_forward_pass_and_scales_float16(registered, tmp_path):
    seen = []

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 4)

        def forward(self, batch: Any) -> Dict[str, Any]:
            seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
            return {"losses": {"loss": (self.layer(batch["x"]).float() ** 2).mean()}}

    model = Model()
    for dtype, scaled in (("bfloat16", False), ("float16", True)):
        config = _config(
            "model=visual_bert",
            "dataset=vqa2",
            "training.fp16=True",
            f"training.amp_dtype={dtype}",
            f"env.save_dir={tmp_path / dtype}",
            tmp_path=tmp_path,
        )
        trainer = UVLPTrainer(config)
        trainer.writer, trainer.device, trainer.model = SILENT, torch.device("cpu"), model
        trainer.optimizer = torch.optim.SGD(model.layer.parameters(), lr=0.1)
        trainer.load_extras()
        trainer.dataset_loader = types.SimpleNamespace(prepare_batch=lambda batch: batch)
        # inputs of 0.1: the gradients scaled by GradScaler's 2**16 stay finite in float16
        batch = SampleList(
            [Sample({"x": torch.full((4,), 0.1)}), Sample({"x": torch.full((4,), -0.1)})]
        )
        report = trainer._forward_pass(batch)
        assert isinstance(report, Report) and seen[-1] == (True, getattr(torch, dtype)), seen
        trainer._backward(trainer._extract_loss(report))
        scaler = trainer.mixed_precision.scaler
        assert scaler.is_enabled() is scaled and trainer.num_updates == 1
        if scaled:  # the update went through the GradScaler
            assert scaler.state_dict()["_growth_tracker"] == 1


def test_the_checkpoint_loads_plain_data_only_and_names_a_damaged_file(tmp_path, monkeypatch):
    loader = types.SimpleNamespace(device="cpu")
    damaged = tmp_path / "damaged.ckpt"
    damaged.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(Exception, match=f"checkpoint {damaged} cannot be read"):
        UVLPCheckpoint._torch_load(loader, str(damaged))
    crafted, ran = tmp_path / "crafted.ckpt", tmp_path / "ran"
    torch.save({"model": {}, "extra": CreatesFile(ran)}, crafted)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # torch.load would run it
    with pytest.raises(Exception, match="not plain data .io.open."):
        UVLPCheckpoint._torch_load(loader, str(crafted))
    assert not ran.exists(), "loading the checkpoint ran its code"


def test_a_checkpoint_write_to_a_full_disk_names_enospc_and_leaves_no_file(tmp_path):
    target = tmp_path / "model_4.ckpt"
    os.symlink("/dev/full", f"{target}.tmp-{os.getpid()}")
    with pytest.raises(Exception, match=f"cannot write checkpoint {target}: ENOSPC") as raised:
        atomic_torch_save({"model": {"w": torch.zeros(1000)}}, str(target))
    assert getattr(raised.value, "errno", None) == errno.ENOSPC
    assert not os.path.lexists(target)


def _bare_trainer(**attributes: Any) -> UVLPTrainer:
    """The ``uvlp`` trainer with ``attributes`` and the components its methods use."""
    trainer = UVLPTrainer.__new__(UVLPTrainer)
    trainer.__dict__.update(random_state=RandomState(), non_finite=NonFiniteLossStop())
    trainer.__dict__.update(attributes)
    return trainer


def test_a_non_finite_training_loss_stops_the_run_naming_update_dataset_and_sample(registered):
    import compat_checks

    batch, model = compat_checks.nan_batch_and_model()
    trainer = _bare_trainer(
        model=model,
        num_updates=6,
        profile=lambda *a: None,
        mixed_precision=MixedPrecision(FLOAT32),
        optimizer=None,
        config=OmegaConf.create({"training": {}}),
        dataset_loader=types.SimpleNamespace(prepare_batch=lambda b: b),
    )
    trainer._forward_pass(batch)  # the check waits for no device: read at the next one
    # as before a checkpoint, an evaluation, the end
    compat_checks.expect_non_finite_loss_named(trainer.non_finite.flush)
    trainer.config = OmegaConf.create({"training": {"exit_on_nan_losses": False}})
    trainer._forward_pass(batch)  # MMF main's switch turns it off: nothing to read later
    trainer.non_finite.flush()
    trainer.config = OmegaConf.create({"training": {}})
    trainer._forward_pass(batch)  # rc10's evaluation reads the check still pending first
    compat_checks.expect_non_finite_loss_named(lambda: trainer.evaluate([], single_batch=True))


def test_evaluation_leaves_the_training_stream_as_it_was(registered):
    def forward(_: Any) -> Report:
        sample_list = SampleList([Sample({"targets": torch.tensor(1)})])
        sample_list.dataset_name, sample_list.dataset_type = "masked", "val"
        return Report(sample_list, {"scores": torch.rand(1, 2), "losses": {}})

    trainer = _bare_trainer(model=torch.nn.Linear(1, 1), metrics=Metrics(["accuracy"]), meter=None)
    trainer._forward_pass = forward
    trainer.config = OmegaConf.create({"evaluation": {"metrics": ["accuracy"]}})
    torch.manual_seed(0)
    before = torch.get_rng_state()
    trainer.evaluate([None, None])
    assert torch.equal(torch.get_rng_state(), before), "evaluation moved the training generator"


EPOCHS_WITHOUT_THE_FIX = """
import signal
signal.alarm(60)  # a loader that spins dies here
import numpy as np
import mmf  # registers the plugin; the compat fix of MMF's own loader is disabled
from mmf.datasets.multi_dataset_loader import MultiDatasetLoader
from mmf_uvlp.trainers.rc10_loaders import SeededMultiDatasetLoader

assert "multi_dataset_loader_epoch_reset" in __import__("os").environ["MMF_UVLP_DISABLE_FIXES"]
def loader(batches, probabilities):
    instance = SeededMultiDatasetLoader.__new__(SeededMultiDatasetLoader)
    instance.__init__("val")
    instance._num_datasets = len(batches)
    instance._datasets = [name for name, *_ in batches]
    instance._loaders = [rest for _, *rest in batches]
    instance._dataset_probabilities = probabilities
    instance._proportional_sampling = True
    instance._is_master = True
    instance.current_index = 0
    return instance

two = loader([["a", ("a", 0), ("a", 1)], ["b", ("b", 0)]], [0.5, 0.5])
epochs = [sorted(two) for _ in range(3)]
assert all(epoch == [("a", 0), ("a", 1), ("b", 0)] for epoch in epochs), epochs
for seed in range(20):  # evaluation switches datasets after every batch (prepare_batch)
    np.random.seed(seed)
    three = loader([["a", ("a", 0)], ["b", ("b", 0)], ["c", ("c", 0)]], [0.45, 0.45, 0.1])
    seen = []
    for batch in three:
        seen.append(batch)
        three.change_dataloader()
    assert sorted(seen) == [("a", 0), ("b", 0), ("c", 0)], (seed, seen)
"""


def test_the_loaders_epochs_need_no_compat_fix():
    """The trainer's rc10 loader runs every epoch over every dataset with the compat fix of
    MMF's own MultiDatasetLoader (``multi_dataset_loader_epoch_reset``) disabled."""
    import subprocess

    from mmf_uvlp import compat

    result = subprocess.run(
        [sys.executable, "-c", EPOCHS_WITHOUT_THE_FIX],
        env=dict(os.environ, **{compat.DISABLE_VARIABLE: "multi_dataset_loader_epoch_reset"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
