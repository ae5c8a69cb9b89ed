"""Step-speed settings: AdamW fused where every parameter is on a GPU, explicit otherwise;
``training.compile`` compiles uvla's encoder in place and changes no loss, and is taken on
``mmf_run``'s command line with ``training.pad_to_multiple``."""
# ruff: noqa: F811  (pytest fixtures imported from helpers.collated are test parameters)

import os
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

import mmf  # noqa: F401  (applies the compatibility fixes)
import mmf.modules.optimizers  # noqa: F401  (registers adam_w)
from mmf.common.registry import registry
from mmf_uvlp.trainers.throughput import default_num_workers, fused_adamw_default, run_cpus

from helpers import pretrain
from helpers.collated import both_batches, processors, registry_state, tiny_model  # noqa: F401


def _gpu_like():
    return SimpleNamespace(is_cuda=True, is_floating_point=lambda: True)


def test_adamw_is_fused_by_default_only_when_every_parameter_is_on_a_gpu():
    cpu = torch.nn.Parameter(torch.ones(2))
    assert fused_adamw_default([_gpu_like(), {"params": [_gpu_like()]}])
    assert not fused_adamw_default([_gpu_like(), {"params": [cpu]}])
    assert not fused_adamw_default([cpu]) and not fused_adamw_default([])


def test_mmf_adam_w_takes_fused_and_keeps_the_cpu_default():
    adam_w = registry.get_optimizer_class("adam_w")
    weight = torch.nn.Parameter(torch.ones(2))
    default = adam_w((w for w in [weight]), lr=0.1)  # MMF passes a generator
    assert not default.param_groups[0]["fused"]
    fused = adam_w([weight], lr=0.1, fused=True)
    assert fused.param_groups[0]["fused"] is True
    weight.grad = torch.ones(2)
    fused.step()
    assert torch.all(weight < 1)


def _trainer_with(compile_value: Any, model: Any) -> Any:
    """The ``uvlp`` trainer of this MMF, just far enough to parallelize ``model`` (one CPU
    process: MMF's parallelize_model leaves it as it is)."""
    trainer_class = registry.get_trainer_class("uvlp")
    trainer = trainer_class.__new__(trainer_class)
    config = OmegaConf.merge(registry.get("config"), {"training": {"compile": compile_value}})
    trainer.config, trainer.model = config, model
    trainer.device, trainer.distributed, trainer.local_rank = torch.device("cpu"), False, 0
    trainer.training_config = config.training
    return trainer


def test_the_model_does_not_read_training_compile_from_the_registry(processors):
    config = registry.get("config")
    registry.register("config", OmegaConf.merge(config, {"training": {"compile": True}}))
    try:
        model = tiny_model()
    finally:
        registry.register("config", config)
    assert model.encoder._compiled_call_impl is None and model._cuda_graphs is False


@pytest.mark.parametrize("compile_value", [True, "reduce-overhead", False])
def test_the_trainer_has_the_model_compile_itself_for_training_compile(
    processors, compile_value, monkeypatch
):
    import mmf_uvlp.models.uvla as uvla

    calls = []
    monkeypatch.setattr(
        uvla, "compile_in_place", lambda module, what, mode: calls.append((what, mode)) or True
    )
    model = tiny_model()
    trainer = _trainer_with(compile_value, model)
    trainer.parallelize_model()
    assert trainer.model is model
    mode = {True: "default", False: None}.get(compile_value, compile_value)
    assert calls == ([] if mode is None else [("uvla's encoder", mode)])
    assert model._cuda_graphs is (mode == "reduce-overhead")


def test_training_compile_of_a_model_that_cannot_compile_itself_is_refused(processors):
    from mmf_uvlp.errors import UserConfigError

    trainer = _trainer_with(True, torch.nn.Linear(2, 2))
    trainer.config.model = "visual_bert"
    with pytest.raises(UserConfigError, match=r"training.compile=True: model visual_bert cannot"):
        trainer.parallelize_model()


@pytest.mark.slow
@pytest.mark.parametrize("compile_value", [True, "reduce-overhead"])
def test_training_compile_compiles_the_encoder_and_changes_no_loss(
    processors, compile_value, monkeypatch
):
    import mmf_uvlp.models.uvla as uvla

    _, batch = both_batches(processors, "rt")
    eager = tiny_model()(batch)["losses"]
    steps = []
    monkeypatch.setattr(uvla, "mark_cuda_graph_step", lambda: steps.append(1))
    model = tiny_model()
    _trainer_with(compile_value, model).parallelize_model()
    assert model.encoder._compiled_call_impl is not None  # compiled in place
    assert all(not key.startswith("encoder._orig_mod") for key in model.state_dict())
    from torch._dynamo.utils import counters

    counters.clear()
    compiled = model(batch)["losses"]
    assert counters["stats"]["unique_graphs"] >= 1  # a graph was compiled, not run eagerly
    # Inductor fuses and reorders float32 arithmetic: the losses agree to this tolerance.
    for name, value in eager.items():
        torch.testing.assert_close(compiled[name], value, rtol=1e-4, atol=1e-5, msg=name)
    # CUDA graphs ("reduce-overhead"): each forward pass begins a new step of graph replays
    assert steps == ([1] if compile_value == "reduce-overhead" else [])


def test_training_compile_takes_true_or_a_torch_compile_mode():
    from mmf_uvlp.errors import UserConfigError
    from mmf_uvlp.trainers.throughput import compile_mode

    with pytest.raises(
        UserConfigError,
        match=r"training.compile='fast': expected True, "
        r"False or one of \['default', 'reduce-overhead', 'max-autotune'\]",
    ):
        compile_mode({"compile": "fast"})
    assert compile_mode({"compile": False}) is None and compile_mode({}) is None


def test_mmf_run_takes_training_compile_and_pad_to_multiple_on_its_command_line(
    tiny_corpus, tmp_path
):
    save = tmp_path / "save"
    output = pretrain(
        tmp_path,
        tiny_corpus.parent,
        save,
        "training.compile=True",
        "training.pad_to_multiple=8",
        "training.max_updates=2",
        "training.log_interval=1",
    )
    assert "progress: 2/2" in (save / "train.log").read_text() and "AttributeError" not in output
    assert "uvla's encoder compiled with torch.compile, mode default" in output
    training = OmegaConf.load(save / "config.yaml").training
    assert training.compile is True and training.pad_to_multiple == 8
    refused = pretrain(
        tmp_path,
        tiny_corpus.parent,
        tmp_path / "refused",
        "training.pad_to_multiple=0",
        "training.max_updates=2",
        ok=False,
    )
    assert "training.pad_to_multiple=0: expected a whole number of 1 or more" in refused


def test_workers_are_sized_from_the_cpus_only_with_a_gpu():
    assert default_num_workers(cpus=16, gpu=True) == 4
    assert default_num_workers(cpus=4, gpu=True) == 1 and default_num_workers(1, True) == 1
    assert default_num_workers(cpus=64, gpu=False) == 0


def test_a_run_s_workers_come_from_its_share_of_the_cpus(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # one of four runs on 16 CPUs (replicate --jobs 4)
    assert run_cpus() == 4 and default_num_workers(gpu=True) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "16")
    assert default_num_workers(gpu=True) == 4
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6}, raising=False)
    assert run_cpus() == 7 and default_num_workers(gpu=True) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "")  # unset in effect: the affinity decides
    assert run_cpus() == 7


def test_the_pretraining_config_resolves_workers_and_pinning_here():
    import argparse

    from mmf.utils.configuration import Configuration

    from helpers import REPO

    opts = [f"config={REPO / 'projects/uvla/pretrain.yaml'}"]
    config = Configuration(argparse.Namespace(config_override=None, opts=opts)).get_config()
    gpu = torch.cuda.is_available()
    assert config.training.num_workers == default_num_workers()
    assert config.training.pin_memory is gpu
    assert (config.training.num_workers > 0) is gpu
