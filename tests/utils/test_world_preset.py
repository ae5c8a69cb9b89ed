"""``$PRESET`` chooses the toy world of the run configs of ``projects/uvla``: the values of
``projects/uvla/toy_world.yaml`` read through MMF's own config loader, and one line for a
world those configs do not know."""

from __future__ import annotations

import pytest
from mmf.utils.configuration import load_yaml
from omegaconf import OmegaConf

from mmf_uvlp.errors import UserConfigError
from mmf_uvlp.utils.world_preset import register_resolver, world_preset

from helpers import REPO


def _selected(monkeypatch, preset):
    if preset is None:
        monkeypatch.delenv("PRESET", raising=False)
    else:
        monkeypatch.setenv("PRESET", preset)
    register_resolver()
    config = load_yaml(str(REPO / "projects/uvla/finetune/vqa2.yaml"))
    return {
        key: OmegaConf.select(config, key)
        for key in ("env.data_dir", "model_config.uvla.feature_dim", "training.max_updates")
    }


@pytest.mark.parametrize(
    "preset, folder, dim",
    [
        (None, "data/toy_world_demo", 128),
        ("tiny", "data/toy_world_tiny", 64),
        ("calibrated", "data/toy_world_calibrated", 128),
    ],
)
def test_preset_moves_the_folder_and_the_feature_size(monkeypatch, preset, folder, dim):
    selected = _selected(monkeypatch, preset)
    assert selected["env.data_dir"] == folder
    assert selected["model_config.uvla.feature_dim"] == dim
    assert selected["training.max_updates"] == (20 if preset == "tiny" else 300)


def test_a_world_the_configs_do_not_know_is_one_line(monkeypatch):
    monkeypatch.setenv("PRESET", "bench")
    with pytest.raises(
        UserConfigError,
        match=r"^\$PRESET='bench': the run configs of "
        r"projects/uvla train on the toy worlds demo, tiny, "
        r"calibrated; unset PRESET",
    ):
        world_preset()
