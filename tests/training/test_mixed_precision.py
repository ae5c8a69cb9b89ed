"""Mixed precision (``training.fp16`` / ``training.amp_dtype``) on CPU: the keys, the bf16
autocast path of uvla with its float32 losses, the GradScaler state in the checkpoint, a
resumed fp16 run equal to the uninterrupted one, and checkpoints moved between a GPU and
the CPU (emulated where no GPU exists)."""

import os
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data.dataloader import default_collate

import mmf  # noqa: F401  (registers the plugin's components)
from mmf.common.registry import registry
from mmf.common.sample import SampleList
from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.losses.curriculum import CurriculumWeighting
from mmf_uvlp.losses.mrfr import MaskedRegionFeatureRegressionLoss
from mmf_uvlp.models.uvla import UVLA
from mmf_uvlp.processors.image_sentence_masking import ImageSentenceMaskingProcessor
from mmf_uvlp.processors.region_tag_masking import RegionTagMaskingProcessor
from mmf_uvlp.trainers.precision import SCALER_KEY, MixedPrecision, Precision
from mmf_uvlp.trainers.progress import clear_train_samples, register_train_samples
from mmf_uvlp.trainers.seeding import set_rng_state

from helpers import HOLDOUT, REPO, TINY, mmf_run


D, L, R = 6, 16, 5


# ------------------------------------------------------------------------------ the keys
@pytest.fixture
def bf16_gpu(monkeypatch):
    """torch as it answers on a GPU with native bfloat16 (compute capability >= 8.0), under
    MMF 1.0.0rc10; ``bf16_gpu(native=False)`` / ``bf16_gpu(mmf_main=True)`` change that."""
    import mmf_uvlp.trainers.precision as mixed_precision

    def gpu(native: bool = True, mmf_main: bool = False) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(
            torch.cuda,
            "is_bf16_supported",
            lambda including_emulation=True: native or including_emulation,
        )
        monkeypatch.setattr(mixed_precision, "mmf_main_installed", lambda: mmf_main)

    gpu()
    return gpu


def test_bfloat16_is_the_default_on_a_gpu_that_has_it_float32_elsewhere(bf16_gpu):
    from omegaconf import OmegaConf

    from mmf_uvlp.replication.provenance import precision
    from mmf_uvlp.trainers.precision import record_in_config

    cuda = torch.device("cuda")
    default = Precision.from_config({}, cuda)
    assert (default.name, default.dtype, default.grad_scaler().is_enabled()) == (
        "bf16",
        torch.bfloat16,
        False,
    )
    assert Precision.from_config({}, "cpu").name == "fp32"  # the CPU of a GPU machine
    assert Precision.from_config({"fp16": False}, cuda).name == "fp32"  # chosen explicitly
    assert Precision.from_config({"fp16": True}, cuda).name == "fp16"  # MMF's float16 switch
    training = OmegaConf.create({"batch_size": 4})
    record_in_config(default, training)  # what the checkpoints and the records read
    assert (training.fp16, training.amp_dtype) == (True, "bfloat16")
    assert precision(("mmf_run", "config=projects/uvla/pretrain.yaml")) == "bf16"
    assert (
        precision(("mmf_run", "config=projects/uvla/pretrain.yaml", "training.fp16=False"))
        == "fp32"
    )
    for elsewhere in ({"native": False}, {"mmf_main": True}):  # emulated; MMF main's trainer
        bf16_gpu(**elsewhere)
        assert Precision.from_config({}, cuda).name == "fp32", elsewhere
        assert precision(("mmf_run", "config=projects/uvla/pretrain.yaml")) == "fp32"


def test_a_run_of_the_plugin_s_config_gets_the_bf16_default_through_mmf_s_configuration(bf16_gpu):
    """The default reaches a real run: MMF's configuration of ``projects/uvla/pretrain.yaml``
    leaves ``training.fp16`` and ``amp_dtype`` unset (the trainer's keys declare them null),
    while a run that sets ``training.fp16=False`` keeps float32."""
    import argparse

    import mmf_cli.run  # noqa: F401  (MMF's command line: the entry-point fixes apply)
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    setup_imports()

    def training(*opts: str):
        args = argparse.Namespace(
            config_override=None, opts=[f"config={REPO / 'projects/uvla/pretrain.yaml'}", *opts]
        )
        return Configuration(args).get_config().training

    cuda = torch.device("cuda")
    assert Precision.from_config(training(), cuda).name == "bf16"
    assert Precision.from_config(training("training.fp16=False"), cuda).name == "fp32"


def test_the_benchmark_s_mmf_run_computes_in_each_precision_it_names_on_a_bf16_gpu(
    bf16_gpu, monkeypatch
):
    """tools/bench/pretrain_throughput.py's ``mmf_run`` rows: the options of each precision,
    through MMF's configuration of the config it runs, give that precision on a GPU whose
    default is bf16 (its fp32 row asks for float32), and the run's record says the same."""
    import argparse
    import importlib.util

    import mmf_cli.run  # noqa: F401  (MMF's command line: the entry-point fixes apply)
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    from mmf_uvlp.replication.provenance import precision

    spec = importlib.util.spec_from_file_location(
        "pretrain_throughput", REPO / "tools/bench/pretrain_throughput.py"
    )
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclasses look it up there
    spec.loader.exec_module(bench)
    setup_imports()
    for name in ("fp32", "fp16", "bf16"):
        opts = [f"config={REPO / 'projects/uvla/pretrain.yaml'}", *bench.precision_options(name)]
        config = Configuration(argparse.Namespace(config_override=None, opts=opts)).get_config()
        assert Precision.from_config(config.training, torch.device("cuda")).name == name
        assert precision(opts) == name


def test_training_keys_as_mmf_main_spells_them_plus_the_autocast_dtype():
    cpu = torch.device("cpu")
    assert Precision.from_config({}, cpu).name == "fp32"
    assert Precision.from_config({"fp16": False}, cpu).name == "fp32"
    fp16 = Precision.from_config({"fp16": True}, cpu)
    assert (fp16.name, fp16.dtype, fp16.grad_scaler().is_enabled()) == ("fp16", torch.float16, True)
    bf16 = Precision.from_config({"fp16": True, "amp_dtype": "bfloat16"}, "cpu")
    assert (bf16.name, bf16.dtype, bf16.grad_scaler().is_enabled()) == (
        "bf16",
        torch.bfloat16,
        False,
    )
    for training, wanted in [
        ({"fp16": True, "amp_dtype": "bf16"}, "training.amp_dtype='bf16': expected one of"),
        ({"fp16": False, "amp_dtype": "bfloat16"}, "takes effect only with training.fp16=True"),
        ({"fp16": "true"}, "training.fp16='true': expected True or False"),
    ]:
        with pytest.raises(UserConfigError, match=wanted.replace("(", r"\(")):
            Precision.from_config(training, cpu)


# ------------------------------------------------------------------ bf16 autocast on CPU
@pytest.fixture
def registered_training():
    saved = {key: registry.get(key, None, no_warning=True) for key in ("config", "num_updates")}
    saved_sizes = registry.get("uvla_train_samples", {}, no_warning=True)
    registry.register(
        "config",
        OmegaConf.create({"evaluation": {"predict": False}, "training": {"batch_size": 4}}),
    )
    clear_train_samples()
    register_train_samples("toy", 8)
    registry.register("num_updates", 2)  # epoch 1: the curriculum weights are on
    yield
    for key, value in saved.items():
        registry.register(key, value)
    registry.register("uvla_train_samples", saved_sizes)


def _uvla() -> UVLA:
    torch.manual_seed(0)
    model = UVLA(
        OmegaConf.create(
            {
                "bert_model_name": None,
                "bert_config": {
                    "vocab_size": 30522,
                    "hidden_size": 32,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 4,
                    "intermediate_size": 64,
                },
                "attention": "sdpa",
                "feature_dim": D,
                "num_region_classes": 7,
                "heads": ["mlm", "mrc", "mrfr", "pmrtc", "itm"],
                "curriculum": {"enabled": True, "start_epoch": 1},
                "losses": [
                    {"type": f"uvla_{name}"} for name in ("mlm", "mrc", "mrfr", "pmrtc", "itm")
                ],
            }
        )
    )
    model.build()
    model.init_losses()
    return model


def _batch(kind: str) -> SampleList:
    params = {
        "tokenizer_path": os.environ["UVLP_BERT"],
        "max_seq_length": L,
        "max_regions": R,
        "mask_prob": 0.5,
    }
    processor = (RegionTagMaskingProcessor if kind == "rt" else ImageSentenceMaskingProcessor)(
        params
    )
    g = torch.Generator().manual_seed(1)
    items = []
    for i in range(4):
        x1 = torch.rand(R, generator=g) * 40
        image = {
            "features": torch.randn(R, D, generator=g) * 3,
            "image_width": 100,
            "image_height": 100,
            "boxes": torch.stack([x1, x1, x1 + 30, x1 + 50], dim=1),
        }
        if kind == "rt":
            raw = dict(
                image,
                region_labels=["dog", "man", "wall", "tree", "sky"],
                region_classes=[1, 2, 3, 4, 5],
            )
        else:
            raw = dict(image, sentence="a red sofa near the white wall", itm_label=i % 2)
        items.append(processor(raw, g))
    batch = SampleList(default_collate(items))
    batch.dataset_name, batch.dataset_type = "toy", "train"
    return batch


@pytest.mark.parametrize("kind", ["rt", "is"])
def test_bf16_autocast_trains_uvla_on_cpu_with_float32_losses(registered_training, kind):
    model, batch = _uvla(), _batch(kind)
    precision = Precision.from_config({"fp16": True, "amp_dtype": "bfloat16"}, "cpu")
    seen = []
    model.encoder.layer[0].attention.self.query.register_forward_hook(
        lambda module, args, output: seen.append(output.dtype)
    )
    with precision.autocast():
        output = model(batch)
    assert seen and set(seen) == {torch.bfloat16}  # the matmuls ran in bf16 ...
    losses = output["losses"]
    assert {loss.dtype for loss in losses.values()} == {torch.float32}  # ... the losses in fp32
    total = sum(loss.mean() for loss in losses.values())
    assert torch.isfinite(total) and total > 0
    total.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)
    with torch.no_grad():
        float32 = sum(loss.mean() for loss in model(batch)["losses"].values())
    assert total.item() == pytest.approx(float32.item(), rel=0.05)  # same losses, bf16 rounding
    if kind == "is":
        assert output["curriculum_weights"].dtype == torch.float32


def test_curriculum_weights_are_a_float32_softmax_of_half_precision_logits():
    logits = torch.tensor([[0.0, 3.3], [1.0, -2.0]]).to(torch.bfloat16)
    weights = CurriculumWeighting(0.0, epoch_fn=lambda: 1.0).weights(
        logits, torch.tensor([True, False])
    )
    assert weights.dtype == torch.float32
    assert weights[0].item() == torch.softmax(logits.float(), -1)[0, 1].item()
    assert weights[1].item() == 1.0


def test_mrfr_regresses_to_the_float32_features_not_their_bf16_rounding():
    original = torch.tensor([[[1.001, 2.003, 250.7]]])  # not representable in bf16
    predicted = original[0].to(torch.bfloat16)  # (M=1, D)
    loss = MaskedRegionFeatureRegressionLoss()(
        {"region_features_target": original},
        {"mrfr_features": predicted, "mrfr_index": torch.tensor([[0, 0]])},
    )
    expected = ((predicted.float() - original[0]) ** 2).mean()
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert loss.item() > 0


# ------------------------------------------------------ checkpoints between GPU and CPU
def _save_as_if_on_cuda(obj, path: Path) -> None:
    """``torch.save`` writing every storage with the location tag ``cuda:0``, as a run on a
    GPU writes it (the bytes a GPU run writes, but for the values)."""
    entry = (-1, lambda storage: "cuda:0", lambda storage, location: None)
    torch.serialization._package_registry.append(entry)
    torch.serialization._package_registry.sort(key=lambda item: item[0])
    try:
        torch.save(obj, path)
    finally:
        torch.serialization._package_registry.remove(entry)


class DeviceTensor(torch.Tensor):
    """A tensor as MMF's ``map_location=<cuda device>`` load leaves it: host-only uses raise
    the error a CUDA tensor gives, until ``.cpu()`` copies it to the host."""

    def numpy(self, *args, **kwargs):
        raise TypeError("can't convert cuda:0 device type tensor to numpy")

    def tolist(self):
        raise TypeError("tolist() of a cuda:0 tensor in this emulation")

    def item(self):
        raise TypeError("item() of a cuda:0 tensor in this emulation")

    def cpu(self, *args, **kwargs):
        return self.as_subclass(torch.Tensor).clone()


def _on_device(value):
    if isinstance(value, torch.Tensor):
        return value.as_subclass(DeviceTensor)
    if isinstance(value, dict):
        return {key: _on_device(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_device(item) for item in value)
    return value


class _Writer:
    def __init__(self):
        self.messages = []

    def write(self, message, level="info"):
        self.messages.append(message)


def _mixed(precision: Precision) -> MixedPrecision:
    """The trainer's precision component, its messages kept (``_writer.messages``)."""
    return MixedPrecision(precision, _Writer())


def _scaler_after_overflow() -> torch.amp.GradScaler:
    """A CPU GradScaler whose scale went down once (an inf gradient skipped a step)."""
    parameter = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([parameter], lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(parameter.sum() * float("inf")).backward()
    scaler.step(optimizer)
    scaler.update()
    return scaler


def test_the_scaler_state_restores_from_a_gpu_mapped_checkpoint():
    state = _scaler_after_overflow().state_dict()
    assert state["scale"] == 32768.0
    assert not any(isinstance(value, torch.Tensor) for value in state.values())
    mixed = _mixed(Precision.from_config({"fp16": True}, "cpu"))
    checkpoint = _on_device({SCALER_KEY: state, "config": {"training": {"fp16": True}}})
    mixed.load_state_dict(checkpoint.get(SCALER_KEY), checkpoint.get("config"), "current.ckpt")
    assert mixed.scaler.state_dict() == state and mixed._writer.messages == []
    other = _mixed(Precision.from_config({"fp16": True, "amp_dtype": "bfloat16"}, "cpu"))
    with pytest.warns(UserWarning, match="trained in fp16, this run continues in bf16"):
        other.load_state_dict(checkpoint.get(SCALER_KEY), checkpoint.get("config"), "current.ckpt")


def test_a_checkpoint_written_on_a_gpu_loads_on_the_cpu(tmp_path):
    """Storages tagged cuda:0 (what a GPU run writes) restore the model, the optimizer, the
    random-number states and the scaler on a CPU-only machine."""
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    from mmf_uvlp.trainers.seeding import rng_state

    rng = dict(rng_state(), cuda=[torch.get_rng_state()])  # what torch.cuda adds on a GPU
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "uvlp_run_state": {"rng": rng},
        SCALER_KEY: _scaler_after_overflow().state_dict(),
        "config": {"training": {"fp16": True, "amp_dtype": "float16"}},
    }
    path = tmp_path / "gpu.ckpt"
    _save_as_if_on_cuda(checkpoint, path)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):  # the tags are really cuda:0
            torch.load(path, weights_only=False)
    # MMF rc10's Checkpoint._torch_load on a CPU trainer
    loaded = torch.load(path, map_location=lambda storage, location: storage, weights_only=False)
    restored = torch.nn.Linear(3, 2)
    restored.load_state_dict(loaded["model"])
    assert all(
        torch.equal(a, b)
        for a, b in zip(restored.state_dict().values(), model.state_dict().values())
    )
    torch.optim.AdamW(restored.parameters()).load_state_dict(loaded["optimizer"])
    set_rng_state(rng)
    first = torch.rand(3)
    torch.rand(5)
    set_rng_state(loaded["uvlp_run_state"]["rng"])
    assert torch.equal(torch.rand(3), first)
    mixed = _mixed(Precision.from_config({"fp16": True}, "cpu"))
    mixed.load_state_dict(loaded.get(SCALER_KEY), loaded.get("config"), str(path))
    assert mixed.scaler.get_scale() == 32768.0


def test_a_checkpoint_written_on_the_cpu_restores_when_mapped_to_a_gpu(tmp_path):
    """The reverse: MMF maps every tensor of the checkpoint to the GPU; the host-side states
    (random numbers, loss scale) still restore (emulated by tensors whose host-only uses
    raise, as a CUDA tensor's do)."""
    from mmf_uvlp.trainers.seeding import rng_state

    checkpoint = {
        "uvlp_run_state": {"rng": rng_state()},
        SCALER_KEY: _scaler_after_overflow().state_dict(),
        "config": {"training": {"fp16": True, "amp_dtype": "float16"}},
    }
    path = tmp_path / "cpu.ckpt"
    torch.save(checkpoint, path)
    mapped = _on_device(torch.load(path, weights_only=False))
    expected = torch.rand(4)
    set_rng_state(mapped["uvlp_run_state"]["rng"])
    assert torch.equal(torch.rand(4), expected)
    mixed = _mixed(Precision.from_config({"fp16": True}, "cpu"))
    mixed.load_state_dict(mapped.get(SCALER_KEY), mapped.get("config"), str(path))
    assert mixed.scaler.get_scale() == 32768.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cpu_checkpoint_resumes_on_a_real_gpu(tmp_path):
    from mmf_uvlp.trainers.seeding import rng_state

    path = tmp_path / "cpu.ckpt"
    torch.save({"uvlp_run_state": {"rng": rng_state()}}, path)
    mapped = torch.load(path, map_location=torch.device("cuda"), weights_only=False)
    expected = torch.rand(4)
    set_rng_state(mapped["uvlp_run_state"]["rng"])
    assert torch.equal(torch.rand(4), expected)


# ------------------------------------------------------------ mmf_run end to end (slow)
SCHEDULE = ["scheduler.params.num_warmup_steps=2", "scheduler.params.num_training_steps=8"]


def _mmf_run(tmp_path: Path, world: Path, save: Path, *opts: str) -> str:
    config = tmp_path / "pretrain.yaml"
    config.write_text(TINY.format(repo=REPO))
    return mmf_run(
        f"config={config}",
        f"env.data_dir={world}",
        f"env.save_dir={save}",
        *HOLDOUT,
        *SCHEDULE,
        *opts,
        timeout=900,
    )


def _load(path: Path) -> dict:
    return torch.load(path, weights_only=False)


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


@pytest.mark.slow
def test_fp16_run_stopped_and_resumed_is_the_uninterrupted_run(tiny_corpus, tmp_path):
    world, fp16 = tiny_corpus.parent, "training.fp16=True"
    _mmf_run(tmp_path, world, tmp_path / "straight", fp16, "training.max_updates=8")
    straight = _load(tmp_path / "straight/current.ckpt")
    output = _mmf_run(tmp_path, world, tmp_path / "resumed", fp16, "training.max_updates=4")
    assert "autocast to torch.float16 on cpu, GradScaler on" in output
    at_4 = _load(tmp_path / "resumed/current.ckpt")
    # the loss scale moved (inf gradients skipped steps): the resume needs its state
    assert at_4[SCALER_KEY]["scale"] < 65536.0
    _save_as_if_on_cuda(at_4, tmp_path / "gpu_at_4.ckpt")  # the same state, written on a GPU
    _mmf_run(
        tmp_path,
        world,
        tmp_path / "resumed",
        fp16,
        "training.max_updates=8",
        "checkpoint.resume=True",
    )
    resumed = _load(tmp_path / "resumed/current.ckpt")
    assert _same_weights(straight["model"], resumed["model"])
    assert straight[SCALER_KEY] == resumed[SCALER_KEY]
    _mmf_run(
        tmp_path,
        world,
        tmp_path / "from_gpu",
        fp16,
        "training.max_updates=8",
        f"checkpoint.resume_file={tmp_path / 'gpu_at_4.ckpt'}",
    )
    from_gpu = _load(tmp_path / "from_gpu/current.ckpt")
    assert _same_weights(straight["model"], from_gpu["model"])
    # control: the same resume with a fresh loss scale is another run
    _mmf_run(
        tmp_path,
        world,
        tmp_path / "reset",
        fp16,
        "training.max_updates=8",
        f"checkpoint.resume_file={tmp_path / 'gpu_at_4.ckpt'}",
        "checkpoint.reset.fp16_scaler=True",
    )
    assert not _same_weights(straight["model"], _load(tmp_path / "reset/current.ckpt")["model"])


@pytest.mark.slow
def test_bf16_pretraining_through_mmf_run(tiny_corpus, tmp_path):
    output = _mmf_run(
        tmp_path,
        tiny_corpus.parent,
        tmp_path / "bf16",
        "training.fp16=True",
        "training.amp_dtype=bfloat16",
        "training.max_updates=4",
    )
    assert "autocast to torch.bfloat16 on cpu, GradScaler off" in output
    checkpoint = _load(tmp_path / "bf16/current.ckpt")
    assert checkpoint["num_updates"] == 4 and checkpoint[SCALER_KEY] == {}
    assert all(torch.isfinite(value).all() for value in checkpoint["model"].values())
