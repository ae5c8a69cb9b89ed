"""A run chooses the plugin's training behaviour by choosing its trainer
(``training.trainer: uvlp``, which the plugin's configs set); a run of MMF's own model with
MMF's trainer is MMF's own run: MMF's data order, seeding and checkpoint contents."""

import argparse
import subprocess
import sys

import pytest
import torch

from helpers import REPO, fork_server
from helpers.visual_bert import TRAINING, num_answers, run_visual_bert

CHOOSE = "training.trainer=uvlp"


def _run_config(*opts: str):
    """MMF's configuration of a run, registered as ``mmf_run`` registers it."""
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    setup_imports()
    args = argparse.Namespace(config_override=None, opts=list(opts))
    return Configuration(args).get_config()


@pytest.mark.parametrize(
    "opts, trainer",
    [
        (["model=visual_bert", "dataset=vqa2"], "base_trainer"),
        (["model=vilbert", "dataset=nlvr2"], "base_trainer"),
        (["model=uvla", "dataset=vqa2"], "uvlp"),
        (["model=visual_bert_uvlp", "dataset=vqa2"], "uvlp"),
        (["model=vl_bert", "dataset=vqa2"], "uvlp"),
        (["model=visual_bert", "dataset=vqa2", CHOOSE], "uvlp"),
        (["model=uvla", "dataset=vqa2", "training.trainer=base_trainer"], "base_trainer"),
        # the project's baselines: MMF's own models, trained by the plugin's trainer
        ([f"config={REPO / 'projects/baselines/visual_bert/vqa2.yaml'}"], "uvlp"),
        ([f"config={REPO / 'projects/baselines/vilbert/finetune/nlvr2.yaml'}"], "uvlp"),
        ([f"config={REPO / 'projects/uvla/pretrain.yaml'}"], "uvlp"),
    ],
)
def test_a_run_s_trainer_comes_from_its_config(opts, trainer):
    from mmf.common.registry import registry
    from mmf.trainers.base_trainer import BaseTrainer

    from mmf_uvlp.trainers.choice import chosen_by
    from mmf_uvlp.trainers.uvlp_trainer import UVLPTrainer

    config = _run_config(*opts)
    assert config.training.trainer == trainer and chosen_by(config) is (trainer == "uvlp")
    assert registry.get_trainer_class(trainer) is (
        UVLPTrainer if trainer == "uvlp" else BaseTrainer
    )


class _Indexed(list):
    dataset_name, dataset_type = "numbers", "train"

    def __init__(self) -> None:
        from mmf.common.sample import Sample

        super().__init__(Sample({"index": torch.tensor(i)}) for i in range(12))


def test_mmf_s_own_builders_and_seeding_are_mmf_s():
    from mmf.utils.build import build_dataloader_and_sampler
    from mmf.utils.env import set_seed

    config = _run_config("model=uvla", "dataset=vqa2", "training.seed=0")
    loader, sampler = build_dataloader_and_sampler(_Indexed(), config.training)
    assert sampler is None and isinstance(loader.sampler, torch.utils.data.RandomSampler)
    draws = []
    for _ in range(2):
        set_seed(0)  # MMF's set_seed seeds nothing for 0 (the uvlp trainer seeds it)
        draws.append(torch.rand(4))
    assert not torch.equal(draws[0], draws[1]), draws


@pytest.mark.slow
def test_the_trainer_s_checkpoint_carries_the_run_state_mmf_s_does_not(tiny_world, tmp_path):
    config = tmp_path / "run.yaml"  # MMF's own benchmark config on the toy world's vqa2
    config.write_text(
        "\n".join(
            [
                "includes:",
                "- projects/visual_bert/configs/vqa2/defaults.yaml",
                f"- {REPO / 'configs/datasets/toy_world/vqa2.yaml'}",
                f"- {REPO / 'configs/models/visual_bert/tiny_random.yaml'}",
                TRAINING,
            ]
        )
    )
    base = [
        "model=visual_bert",
        "dataset=vqa2",
        "run_type=train",
        "training.max_updates=2",
        f"model_config.visual_bert.num_labels={num_answers(tiny_world)}",
    ]
    plugin_keys = {"uvlp_run_state", "fp16_scaler"}  # run state; mixed precision's scaler
    keys = {}
    for chosen in (False, True):
        save = tmp_path / f"save_{chosen}"
        run_visual_bert(config, tiny_world, save, *base, *([CHOOSE] if chosen else []))
        keys[chosen] = set(torch.load(save / "current.ckpt", weights_only=False))
        assert (keys[chosen] & plugin_keys == plugin_keys) is chosen, (chosen, sorted(keys[chosen]))
    assert keys[True] - keys[False] == plugin_keys, keys


def test_doctor_says_which_trainer_a_run_uses():
    def doctor(*opts):
        result = subprocess.run(
            [sys.executable, "-m", "mmf_uvlp.doctor", "--run", *opts],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return next(line for line in result.stdout.splitlines() if line.startswith("run "))

    assert doctor("model=visual_bert", "dataset=vqa2").endswith(
        "trainer base_trainer: MMF's own training behaviour (training.trainer=uvlp chooses "
        "the plugin's)"
    )
    assert ": trainer uvlp: the plugin's training behaviour" in doctor("model=uvla", "dataset=vqa2")


# a run of MMF with the plugin's components unregistered and its entry-point fixes off: MMF
# and the compatibility fixes only (the uvlp_bert resolver stays: the toy world's yaml uses it)
WITHOUT_PLUGIN = """
import sys
import mmf_uvlp.plugin
from mmf_uvlp.utils.bert_source import register_resolver
mmf_uvlp.plugin.register_components = register_resolver
import mmf_cli.run
from mmf.common.registry import registry
assert registry.get_trainer_class("uvlp") is None and registry.get_model_class("uvla") is None
sys.argv = ["mmf_run", *sys.argv[1:]]
mmf_cli.run.run()
"""


@pytest.mark.slow
def test_mmf_s_own_visual_bert_run_is_byte_for_byte_the_run_without_the_plugin(
    tiny_world, tmp_path
):
    import os

    from mmf_uvlp import compat
    from mmf_uvlp.training.entry_point import hooks_for

    from helpers import MMF_RUN, rows, train_log

    config = tmp_path / "run.yaml"  # MMF's own benchmark config on the toy world's vqa2
    config.write_text(
        "\n".join(
            [
                "includes:",
                "- projects/visual_bert/configs/vqa2/defaults.yaml",
                f"- {REPO / 'configs/datasets/toy_world/vqa2.yaml'}",
                f"- {REPO / 'configs/models/visual_bert/tiny_random.yaml'}",
                TRAINING,
            ]
        )
    )
    save = tmp_path / "save"
    opts = [
        f"config={config}",
        f"env.data_dir={tiny_world}",
        f"env.save_dir={save}",
        "model=visual_bert",
        "dataset=vqa2",
        "run_type=train_val",
        "model_config.visual_bert.visual_embedding_dim=64",
        f"model_config.visual_bert.num_labels={num_answers(tiny_world)}",
    ]
    entry = ",".join(hook.name for hook in hooks_for("1.0.0rc10"))
    outputs, files = [], []
    for argv, disabled in (([MMF_RUN, *opts], ""), (["-c", WITHOUT_PLUGIN, *opts], entry)):
        env = dict(os.environ, **{compat.DISABLE_VARIABLE: disabled})
        result = fork_server().run(argv, env=env, cwd=REPO)
        assert result["returncode"] == 0, str(result["output"])[-4000:]
        log = train_log(save)  # MMF's full progress lines
        logged = rows(log) + rows(log, "val")
        outputs.append(
            [
                {
                    key: value
                    for key, value in row.items()  # losses, metrics: no times
                    if "/" in key or key == "progress"
                }
                for row in logged
            ]
        )
        files.append(
            {
                name: (save / name).read_bytes()
                for name in ("current.ckpt", "models/model_2.ckpt", "visual_bert_final.pth")
            }
        )
        save.rename(tmp_path / f"save_{len(files)}")
    assert outputs[0] and outputs[0] == outputs[1]
    assert files[0] == files[1], [name for name in files[0] if files[0][name] != files[1][name]]


def test_the_trainer_s_keys_are_declared_at_their_defaults_and_present_values_stay():
    from omegaconf import OmegaConf

    from mmf_uvlp.trainers.choice import declare_switches, switches

    config = OmegaConf.create(
        {
            "checkpoint": {"resume": False, "overwrite": True, "reset": {"all": False}},
            "training": {"trainer": "uvlp", "fp16": False},
        }
    )
    OmegaConf.set_struct(config, True)
    declare_switches(config)
    assert OmegaConf.to_container(config.checkpoint) == {
        "resume": False,
        "overwrite": True,
        "reset": {"all": False, "fp16_scaler": False},
        "accept_mismatch": False,
        "trust_resume_file": False,
    }
    assert (config.training.fp16, config.training.amp_dtype) == (False, None)
    assert OmegaConf.to_container(config.multitasking) == switches()["multitasking"]
    bare = OmegaConf.create({"training": {"trainer": "uvlp"}})
    OmegaConf.set_struct(bare, True)
    declare_switches(bare)
    assert OmegaConf.to_container(bare.checkpoint) == switches()["checkpoint"]


def test_a_trainer_subclassing_the_plugin_s_gets_its_keys_and_behaviour():
    """A user's trainer registered as a subclass of ``uvlp`` (as an ``env.user_dir`` plugin
    registers one) is the plugin's trainer for its keys and behaviour; MMF's is not."""
    from mmf.common.registry import registry

    from mmf_uvlp.trainers.uvlp_trainer import UVLPTrainer
    from mmf_uvlp.trainers.choice import is_plugin_trainer

    name = "uvlp_subclass_of_a_test"
    registry.register_trainer(name)(type("UserTrainer", (UVLPTrainer,), {}))
    try:
        assert is_plugin_trainer(name) and is_plugin_trainer("uvlp")
        assert not is_plugin_trainer("base_trainer") and not is_plugin_trainer("not_registered")
        config = _run_config(
            "model=visual_bert",
            "dataset=vqa2",
            f"training.trainer={name}",
            "checkpoint.overwrite=True",
            "training.fp16=True",
            "training.exit_on_nan_losses=False",
        )
        assert (config.checkpoint.overwrite, config.training.fp16) == (True, True)
        assert config.training.exit_on_nan_losses is False  # MMF main's key, on rc10 too
        assert config.checkpoint.trust_resume_file is False  # declared at its default
    finally:
        registry.mapping["trainer_name_mapping"].pop(name)
