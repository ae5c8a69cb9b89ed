"""Inside an MMF main environment (1.0.0rc12 from source; tools/check_mmf_main.sh runs this).

Every fix of ``mmf_uvlp/compat/mmf_main.py`` repairs its error there (its check passes, and
fails with the fix disabled, as tests/compat/test_compat.py does for rc10), and in a real
``mmf_run`` the curriculum's epoch follows the trainer's update count, under MMF main's own
trainer and under its Lightning trainer (whose run stops at ``training.max_updates`` and
whose ``current.ckpt`` loads as ``pretrained_checkpoint``), and a run of the plugin's
trainer resumed from a checkpoint is the uninterrupted run. Skipped under any
other MMF version: CI has rc10, where tests/compat/test_mmf_main.py fakes what can be faked.

``python tests/compat/test_mmf_main_env.py NAME`` runs the check of fix NAME (exit 0: it works).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest
import torch

from mmf_uvlp import compat

ON_MAIN = compat.installed_mmf_version() == compat.MMF_MAIN_VERSION
pytestmark = pytest.mark.skipif(not ON_MAIN, reason="needs MMF main: tools/check_mmf_main.sh")
REPO = Path(__file__).resolve().parents[2]


def _rc10_check(name: str) -> Callable[[], None]:
    """rc10's check of a fix that mmf_main.py applies unchanged (the behaviour is the same)."""

    def check() -> None:
        import compat_checks

        compat_checks.CHECKS[name]()

    return check


def _plugin_resolvers_kept() -> None:
    from mmf.utils.configuration import Configuration
    from mmf_uvlp.utils.bert_source import bert_source

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
        handle.write("uvlp_check: ${uvlp_bert:bert-base-uncased}\n")
        handle.flush()
        opts = [f"config={handle.name}", "model=visual_bert", "dataset=vqa2"]
        config = Configuration(argparse.Namespace(config_override=None, opts=opts)).get_config()
    assert config.uvlp_check == bert_source()


def _one_line_user_errors() -> None:
    import compat_checks

    compat_checks.expect_run_stopped_in_one_line()


def _plain_data_checkpoint_loads() -> None:
    import torch
    from omegaconf import OmegaConf

    import compat_checks
    from mmf.utils.checkpoint import Checkpoint

    loader = types.SimpleNamespace(device="cpu")
    with tempfile.TemporaryDirectory() as folder:
        resumable = os.path.join(folder, "current.ckpt")
        betas = OmegaConf.create({"betas": [0.9, 0.999]}).betas  # as in MMF main's optimizer state
        torch.save(
            {"model": {"w": torch.ones(2)}, "optimizer": {"param_groups": [{"betas": betas}]}},
            resumable,
        )
        loaded = Checkpoint._torch_load(loader, resumable)
        assert list(loaded["optimizer"]["param_groups"][0]["betas"]) == [0.9, 0.999]
        compat_checks.expect_crafted_checkpoint_refused(
            lambda path: Checkpoint._torch_load(loader, path), folder
        )


def _lightning_follows_training_keys() -> None:
    from compat_checks import _configuration
    from mmf.trainers.lightning_trainer import LightningTrainer

    opts = [
        "model=visual_bert",
        "dataset=vqa2",
        "training.trainer=lightning",
        "training.max_updates=8",
        "training.evaluation_interval=4",
    ]
    params = LightningTrainer(_configuration(opts).get_config()).trainer_config
    assert (params.max_steps, params.val_check_interval) == (8, 4), params


CHECKS: Dict[str, Callable[[], None]] = {
    "model_and_datasets_from_config_file": _rc10_check("model_and_datasets_from_config_file"),
    "shared_lmdb_environments": _rc10_check("shared_lmdb_environments"),
    "feature_files_run_no_code": _rc10_check("feature_files_run_no_code"),
    "plugin_resolvers_kept": _plugin_resolvers_kept,
    "command_line_values": _rc10_check("command_line_values"),
    "relative_data_dir": _rc10_check("relative_data_dir"),
    "one_line_user_errors": _one_line_user_errors,
    "plain_data_checkpoint_loads": _plain_data_checkpoint_loads,
    "run_folder_lock": _rc10_check("run_folder_lock"),
    "lightning_follows_training_keys": _lightning_follows_training_keys,
    "nlvr2_ve_predictions": _rc10_check("nlvr2_ve_predictions"),
}
FIX_NAMES = [fix.name for fix in compat.fix_set_for(compat.MMF_MAIN_VERSION).fixes]


def _run_check(name: str, disabled: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, **{compat.DISABLE_VARIABLE: disabled})
    return subprocess.run(
        [sys.executable, __file__, name], env=env, capture_output=True, text=True, timeout=300
    )


def test_the_main_fix_set_is_active_and_applied():
    import mmf  # noqa: F401
    import mmf.trainers.lightning_trainer  # noqa: F401  (triggers the Lightning fix)
    import mmf_cli.run  # noqa: F401  (triggers the command-line fix)
    from mmf.common.registry import registry

    fix_set = compat.active_fix_set()
    assert fix_set is not None and fix_set.mmf_version == compat.MMF_MAIN_VERSION
    assert [fix.name for fix in fix_set.fixes if not fix.applied] == []
    assert registry.get_model_class("uvla") is not None
    assert registry.get_builder_class("uvla_region_tag") is not None


@pytest.mark.parametrize("name", FIX_NAMES)
def test_fix_repairs_its_error(name):
    result = _run_check(name)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("name", FIX_NAMES)
def test_check_fails_without_the_fix(name):
    result = _run_check(name, disabled=name)
    assert result.returncode != 0, f"{name}: the check passed with the fix disabled"


def _bare_uvlp_trainer(**attributes):
    """MMF main's ``uvlp`` trainer with ``attributes`` and the components its methods use."""
    from mmf_uvlp.trainers.finite_loss import NonFiniteLossStop
    from mmf_uvlp.trainers.mmf_main_trainer import UVLPTrainer
    from mmf_uvlp.trainers.seeding import RandomState

    trainer = UVLPTrainer.__new__(UVLPTrainer)
    trainer.__dict__.update(
        random_state=RandomState(), non_finite=NonFiniteLossStop(), optimizer=None, **attributes
    )
    return trainer


def test_the_uvlp_trainer_is_mmf_main_s_trainer_with_the_plugin_s_checkpoint():
    import mmf  # noqa: F401  (registers the plugin's components)
    from mmf.common.registry import registry
    from mmf.trainers.mmf_trainer import MMFTrainer

    from mmf_uvlp.trainers.mmf_main_trainer import UVLPCheckpoint, UVLPTrainer

    assert registry.get_trainer_class("uvlp") is UVLPTrainer and issubclass(UVLPTrainer, MMFTrainer)
    import compat_checks

    config = compat_checks._configuration(
        ["model=visual_bert", "dataset=vqa2", "training.seed=0"]
    ).get_config()
    trainer = _bare_uvlp_trainer(config=config, training_config=config.training)
    draws = []
    for _ in range(2):
        trainer.configure_seed()  # MMF main's set_seed seeds nothing for 0
        draws.append(torch.rand(4))
    assert torch.equal(draws[0], draws[1]), draws
    with tempfile.TemporaryDirectory() as folder:
        target = os.path.join(folder, "current.ckpt")
        os.symlink("/dev/full", target)  # every write of it finds the disk full
        checkpoint = UVLPCheckpoint.__new__(UVLPCheckpoint)
        with pytest.raises(Exception, match=f"cannot write checkpoint {target}: ENOSPC"):
            with open(target, "wb") as handle:  # what MMF main's open_if_main gives save_func
                checkpoint.save_func({"model": {"w": torch.zeros(1000)}}, handle)


def test_the_uvlp_trainer_stops_a_non_finite_loss_naming_its_sample():
    from omegaconf import OmegaConf

    import compat_checks

    compat_checks._plugin_run()
    batch, model = compat_checks.nan_batch_and_model()
    trainer = _bare_uvlp_trainer(
        model=model,
        num_updates=6,
        device=torch.device("cpu"),
        profile=lambda *a: None,
        training_config=OmegaConf.create({"fp16": False, "exit_on_nan_losses": True}),
    )
    compat_checks.expect_non_finite_loss_named(lambda: trainer._forward(batch), trainer)


TINY = """
includes:
- {repo}/projects/uvla/pretrain.yaml
- {repo}/configs/models/uvla/tiny_random.yaml
model_config:
  uvla:
    feature_dim: 64
    curriculum:
      start_epoch: 0.2          # tiny world: 200 train samples, 0.08 epochs an update
training:
  batch_size: 16
  max_updates: 6
  log_interval: 6
  evaluation_interval: 6
  checkpoint_interval: 6
"""


LIGHTNING = ("training.trainer=lightning", "trainer.params.gpus=0")  # CPU: no accelerator


def _pretrain_in_process(tmp_path: Path, world: Path, *opts: str) -> List[Tuple[int, float, bool]]:
    """(updates done, epoch, curriculum active) at each training forward of a real mmf_run."""
    import mmf_cli.run  # first: importing MMF registers the plugin's components

    from mmf_uvlp.losses.curriculum import CurriculumWeighting
    from mmf_uvlp.trainers.progress import updates_done

    seen: List[Tuple[int, float, bool]] = []
    active = CurriculumWeighting.active

    def spy(self: CurriculumWeighting) -> bool:
        result = active(self)
        model = self.epoch_fn.__self__  # the curriculum's clock is its model's epochs_done
        seen.append((updates_done(model), self.epoch_fn(), result))
        return result

    config = tmp_path / "pretrain.yaml"
    config.write_text(TINY.format(repo=REPO))
    holdout = [
        f"dataset_config.uvla_{name}.holdout_every=6"
        for name in ("region_tag", "region_phrase", "image_sentence")
    ]
    CurriculumWeighting.active = spy
    try:
        mmf_cli.run.run(
            opts=[
                f"config={config}",
                f"env.data_dir={world}",
                f"env.save_dir={tmp_path / 'save'}",
                *holdout,
                *opts,
            ]
        )
    finally:
        CurriculumWeighting.active = active
    return seen


@pytest.fixture(scope="module")
def lightning_pretraining(
    tiny_corpus, tmp_path_factory
) -> Tuple[List[Tuple[int, float, bool]], Path]:
    """A real pre-training run under MMF main's Lightning trainer: what the curriculum saw, and
    the run's folder."""
    folder = tmp_path_factory.mktemp("lightning")
    return _pretrain_in_process(folder, tiny_corpus.parent, *LIGHTNING), folder / "save"


def _check_the_curriculum_clock(seen: List[Tuple[int, float, bool]]) -> None:
    from mmf_uvlp.trainers.progress import registered_train_samples

    training = seen[:6]  # one forward per update; the evaluation forwards follow
    assert [updates for updates, _, _ in training] == [0, 1, 2, 3, 4, 5]
    total = sum(registered_train_samples().values())
    for updates, epoch, active in training:
        assert epoch == pytest.approx(updates * 16 / total)
        assert active == (epoch >= 0.2)
    assert {active for _, _, active in training} == {False, True}, (training, total)


def test_the_curriculum_follows_the_trainers_update_count(tiny_corpus, tmp_path):
    _check_the_curriculum_clock(_pretrain_in_process(tmp_path, tiny_corpus.parent))


def test_under_lightning_the_curriculum_follows_lightnings_step_count(lightning_pretraining):
    seen, _ = lightning_pretraining
    _check_the_curriculum_clock(seen)


def test_under_lightning_the_run_stops_at_training_max_updates(lightning_pretraining):
    import torch

    seen, save = lightning_pretraining
    last = torch.load(save / "current.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 6  # trainer.params.max_steps would have been 22000
    assert [updates for updates, _, _ in seen if updates < 6] == [0, 1, 2, 3, 4, 5]
    assert max(updates for updates, _, _ in seen) == 6  # the evaluation after the last update


def test_a_lightning_checkpoint_loads_as_pretrained_checkpoint(lightning_pretraining):
    from omegaconf import OmegaConf

    from mmf_uvlp.models.uvla import UVLA, read_uvla_state

    _, save = lightning_pretraining
    checkpoint = str(save / "current.ckpt")
    run = OmegaConf.load(REPO / "configs/models/uvla/tiny_random.yaml").model_config.uvla
    config = OmegaConf.merge(
        OmegaConf.load(UVLA.config_path()).model_config.uvla,
        run,
        {
            "feature_dim": 64,
            "heads": ["pooled_classifier"],
            "num_labels": 3,
            "losses": [{"type": "cross_entropy"}],
            "curriculum": {"enabled": False},
            "pretrained_checkpoint": checkpoint,
        },
    )
    model = UVLA(config)
    model.build()
    state = read_uvla_state(checkpoint)
    assert model.pretrained_report["loaded"] and not model.pretrained_report["missing"]
    for key in model.pretrained_report["loaded"]:
        assert model.state_dict()[key].equal(state[key]), key


def test_without_the_progress_callback_the_curriculum_says_what_to_add(tiny_corpus, tmp_path):
    with pytest.raises(
        RuntimeError, match="training.callbacks must include .type: uvla_training_progress"
    ):
        _pretrain_in_process(tmp_path, tiny_corpus.parent, "training.callbacks=[]")


@pytest.mark.slow
def test_a_resumed_run_of_the_uvlp_trainer_is_the_uninterrupted_run(tiny_corpus, tmp_path):
    """As tests/training/test_resume_exact.py on rc10: at update 12 of 16 (tiny world, batch
    16) R-T and R-N have finished epoch 1, so the resume re-enters an epoch in progress."""
    from helpers import assert_resume_at_12_is_the_uninterrupted_run

    assert_resume_at_12_is_the_uninterrupted_run(tmp_path, tiny_corpus.parent)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("name", choices=sorted(CHECKS))
    sys.path.insert(0, str(Path(__file__).parent))
    CHECKS[parser.parse_args().name]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
