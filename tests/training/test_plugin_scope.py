"""The plugin's training behaviour acts on plugin runs only: an MMF model of MMF's own on MMF's
own dataset keeps MMF's data order, seeding and checkpoint contents unless its config asks
(training.uvlp_behaviour=True)."""

import argparse
import subprocess
import sys

import pytest
import torch

from helpers import REPO
from helpers.visual_bert import TRAINING, num_answers, run_visual_bert


BEHAVIOUR = "training.uvlp_behaviour=True"


def _run_config(*opts: str):
    """MMF's configuration of a run, registered as ``mmf_run`` registers it."""
    from mmf.utils.configuration import Configuration
    from mmf.utils.env import setup_imports

    setup_imports()
    args = argparse.Namespace(config_override=None, opts=list(opts))
    return Configuration(args).get_config()


@pytest.mark.parametrize("opts, expected", [
    (["model=visual_bert", "dataset=vqa2"], None),
    (["model=vilbert", "dataset=nlvr2"], None),
    (["model=uvla", "dataset=vqa2"], "model uvla is the plugin's"),
    (["model=visual_bert", "dataset=refcoco_plus"], "dataset refcoco_plus is the plugin's"),
    (["model=visual_bert", "dataset=vqa2", BEHAVIOUR], BEHAVIOUR),
    (["model=uvla", "dataset=vqa2", "training.uvlp_behaviour=False"], None),
    # the project's baselines: MMF's own models, asking for the plugin's behaviour
    ([f"config={REPO / 'projects/baselines/visual_bert/vqa2.yaml'}"], BEHAVIOUR),
    ([f"config={REPO / 'projects/baselines/vilbert/finetune/nlvr2.yaml'}"], BEHAVIOUR),
])
def test_a_run_is_a_plugin_run_by_its_components_or_its_config_key(opts, expected):
    from mmf_uvlp.training import scope

    assert scope.reason(_run_config(*opts)) == expected


class _Indexed(list):
    dataset_name, dataset_type = "numbers", "train"

    def __init__(self) -> None:
        from mmf.common.sample import Sample

        super().__init__(Sample({"index": torch.tensor(i)}) for i in range(12))


@pytest.mark.parametrize("asked", [False, True])
def test_mmf_s_own_run_keeps_mmf_s_sampler_and_seeding_unless_asked(asked):
    from mmf.utils.build import build_dataloader_and_sampler
    from mmf.utils.env import set_seed
    from mmf_uvlp.utils.reproducibility import EpochSampler

    opts = ["model=visual_bert", "dataset=vqa2", "training.seed=0"] + ([BEHAVIOUR] if asked else [])
    config = _run_config(*opts)
    loader, _ = build_dataloader_and_sampler(_Indexed(), config.training)
    assert isinstance(loader.sampler, EpochSampler) is asked, type(loader.sampler)
    draws = []
    for _ in range(2):
        set_seed(0)  # MMF's set_seed seeds nothing for 0; the plugin's seeds everything
        draws.append(torch.rand(4))
    assert torch.equal(draws[0], draws[1]) is asked, draws


@pytest.mark.slow
def test_mmf_s_own_run_keeps_mmf_s_checkpoint_contents_unless_asked(tiny_world, tmp_path):
    config = tmp_path / "run.yaml"  # MMF's own benchmark config on the toy world's vqa2
    config.write_text("\n".join([
        "includes:", "- projects/visual_bert/configs/vqa2/defaults.yaml",
        f"- {REPO / 'configs/datasets/toy_world/vqa2.yaml'}",
        f"- {REPO / 'configs/models/visual_bert/tiny_random.yaml'}", TRAINING]))
    base = ["model=visual_bert", "dataset=vqa2", "run_type=train", "training.max_updates=2",
            f"model_config.visual_bert.num_labels={num_answers(tiny_world)}"]
    plugin_keys = {"uvlp_run_state", "fp16_scaler"}  # run state; mixed precision's scaler
    keys = {}
    for asked in (False, True):
        save = tmp_path / f"save_{asked}"
        run_visual_bert(config, tiny_world, save, *base, *([BEHAVIOUR] if asked else []))
        keys[asked] = set(torch.load(save / "current.ckpt", weights_only=False))
        assert (keys[asked] & plugin_keys == plugin_keys) is asked, (asked, sorted(keys[asked]))
    assert keys[True] - keys[False] == plugin_keys, keys


def test_doctor_says_why_each_entry_is_on_or_off_for_a_run():
    def doctor(*opts):
        result = subprocess.run([sys.executable, "-m", "mmf_uvlp.doctor", "--run", *opts],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        lines = result.stdout.splitlines()
        return {name: lines[i + 1].strip() for i, line in enumerate(lines)
                for name in ("seed_zero_seeds", "demjson_alias") if f"] {name}:" in line}

    mmf_s_own = doctor("model=visual_bert", "dataset=vqa2")
    assert mmf_s_own["seed_zero_seeds"].startswith("off for `model=visual_bert dataset=vqa2`: "
                                                   "not a plugin run")
    assert mmf_s_own["demjson_alias"] == "on for every MMF run (global fix: MMF needs it on this stack)"
    asked = doctor("model=visual_bert", "dataset=vqa2", BEHAVIOUR)
    assert asked["seed_zero_seeds"].endswith(f": {BEHAVIOUR}")
    assert doctor("model=uvla", "dataset=vqa2")["seed_zero_seeds"].endswith(": model uvla is the plugin's")
