"""Every training config a user runs has its learning-rate schedule switched on."""


import pytest

from helpers import REPO


PROJECT_CONFIGS = sorted(
    path for path in (REPO / "projects").rglob("*.yaml") if path.name != "defaults.yaml"
)


def test_there_are_project_configs():
    assert len(PROJECT_CONFIGS) >= 10, PROJECT_CONFIGS


@pytest.mark.parametrize("path", PROJECT_CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_training_config_runs_its_lr_schedule(path):
    from mmf.utils.configuration import load_yaml

    config = load_yaml(str(path))
    assert config.training.lr_scheduler is True, f"{path}: training.lr_scheduler must be true"
    assert config.scheduler.type, f"{path}: scheduler.type is missing"
    steps = config.scheduler.params._get_node("num_training_steps")._value()
    assert steps == "${training.max_updates}", f"{path}: the schedule must end at training.max_updates"
