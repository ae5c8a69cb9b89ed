"""A training run does not write into a folder holding another run's final checkpoint
(mmf_uvlp/training/run_folder.py); the refusal through ``mmf_run`` is run by
tests/e2e/test_quick_start.py."""

from __future__ import annotations

from omegaconf import OmegaConf

from mmf_uvlp.training.run_folder import another_runs_final_checkpoint


def _config(folder, run_type="train", resume=False, overwrite=False, name="uvla_pretrain"):
    return OmegaConf.create(
        {
            "run_type": run_type,
            "env": {"save_dir": str(folder)},
            "training": {"experiment_name": name},
            "checkpoint": {"resume": resume, "overwrite": overwrite},
        }
    )


def test_an_empty_or_unfinished_folder_is_free(tmp_path):
    assert another_runs_final_checkpoint(_config(tmp_path / "none")) is None
    (tmp_path / "current.ckpt").write_bytes(b"x")
    assert another_runs_final_checkpoint(_config(tmp_path)) is None


def test_a_training_into_another_runs_final_checkpoint_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "uvla_pretrain"
    folder.mkdir()
    (folder / "uvla_final.pth").write_bytes(b"x")
    message = another_runs_final_checkpoint(_config(folder))
    assert message is not None and "\n" not in message
    assert message.startswith(
        f"{folder} holds the final checkpoint of another run (uvla_final.pth, written "
    )
    assert "training.experiment_name=<name> or env.save_dir=<folder>" in message
    assert message.endswith("or replace it with checkpoint.overwrite=True")
    # a folder not named after the experiment: only env.save_dir changes it
    assert "experiment_name" not in another_runs_final_checkpoint(_config(folder, name="run"))


def test_overwrite_resume_and_inference_may_use_the_folder(tmp_path):
    (tmp_path / "uvla_final.pth").write_bytes(b"x")
    assert another_runs_final_checkpoint(_config(tmp_path, overwrite=True)) is None
    assert another_runs_final_checkpoint(_config(tmp_path, run_type="inference")) is None
    assert another_runs_final_checkpoint(_config(tmp_path, run_type="test")) is None
    assert another_runs_final_checkpoint(_config(tmp_path, run_type="train_inference")) is not None
    # resuming needs the run's current.ckpt: without one it would start another run
    assert another_runs_final_checkpoint(_config(tmp_path, resume=True)) is not None
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "model_8.ckpt").write_bytes(b"x")  # current.ckpt lost: falls back
    assert another_runs_final_checkpoint(_config(tmp_path, resume=True)) is None
