"""Every training config a user runs has its learning-rate schedule switched on."""

import pytest

from helpers import REPO


PROJECT_CONFIGS = sorted(
    path
    for path in (REPO / "projects").rglob("*.yaml")
    # defaults and the toy world's table are included by the run configs, never run alone
    if path.name not in ("defaults.yaml", "toy_world.yaml")
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
    assert steps == "${training.max_updates}", (
        f"{path}: the schedule must end at training.max_updates"
    )


@pytest.mark.parametrize(
    "opt,message",
    [
        (
            "model_config.uvla.attention=flash",
            "model_config.uvla.attention must be one of ('sdpa', 'eager'), got 'flash'",
        ),
        (
            "model_config.uvla.visual_lr_multiplier=-1",
            "model_config.uvla.visual_lr_multiplier must be > 0, got -1.0",
        ),
        (
            "model_config.uvla.curriculum.start_epoch=-1",
            "model_config.uvla.curriculum.start_epoch must be a number of epochs >= 0, got -1",
        ),
        (
            "dataset_config.uvla_region_tag.processors.masking_processor.params.max_seq_length=2",
            "processor RegionTagMaskingProcessor: params.max_seq_length must be a whole number "
            ">= 3, got 2",
        ),
    ],
)
def test_a_bad_model_config_value_ends_mmf_run_in_one_line(tiny_corpus, tmp_path, opt, message):
    from helpers import pretrain

    output = pretrain(tmp_path, tiny_corpus.parent, tmp_path / "save", opt, ok=False)
    errors = [line for line in output.splitlines() if line.startswith("mmf_run: error:")]
    assert errors == [f"mmf_run: error: {message}"] and "Traceback" not in output, output[-3000:]
