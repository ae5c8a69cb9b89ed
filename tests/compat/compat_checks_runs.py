"""Checks of the fixes that make a run safe to stop, resume and get wrong: checkpoints,
non-finite losses, the evaluation stream, command-line values, the data folder, one-line
errors and the run-folder lock."""

from __future__ import annotations

import types
from typing import Any, Callable, Dict

from compat_checks_common import PLUGIN_RUN, _configuration, _empty_config_file, check


class RunsCode:
    """Unpickling this creates the file ``path`` (a stand-in for any code)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self) -> Any:
        return (open, (self.path, "w"))


def expect_crafted_checkpoint_refused(load: Callable[[str], Any], folder: str) -> None:
    """``load`` of a checkpoint in ``folder`` holding code is refused, naming the file and
    the global, and runs nothing, even with ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (which
    makes torch.load unpickle anything; MMF main environments set it)."""
    import os

    import torch

    crafted, ran = os.path.join(folder, "crafted.ckpt"), os.path.join(folder, "ran")
    torch.save({"model": {}, "extra": RunsCode(ran)}, crafted)
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        load(crafted)
    except Exception as exc:
        assert (
            f"checkpoint {crafted} refused: it holds objects that are not plain data "
            "(io.open)" in str(exc)
        ), str(exc)
    else:
        raise AssertionError("a checkpoint holding code loaded")
    finally:
        del os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"]
    assert not os.path.exists(ran), "loading the checkpoint ran its code"


def nan_batch_and_model() -> Any:
    """A training batch of 4 whose sample cc_000002 has a NaN feature, and a model whose loss
    reads the features."""
    import math

    import torch

    from mmf.common.registry import registry
    from mmf.common.sample import Sample, SampleList

    if not hasattr(registry.get("writer", None, no_warning=True), "write"):
        registry.register("writer", types.SimpleNamespace(write=lambda *a, **k: None))
    samples = [
        Sample({"image_id": f"cc_00000{i}", "region_features": torch.ones(3, 2)}) for i in range(4)
    ]
    samples[2].region_features[1, 0] = math.nan
    batch = SampleList(samples)
    batch.dataset_name, batch.dataset_type = "uvla_region_tag", "train"

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, batch: Any) -> Dict[str, Any]:
            return {
                "losses": {
                    "train/uvla_region_tag/uvla_mrfr": self.linear(batch.region_features).mean()
                }
            }

    return batch, Model()


def expect_non_finite_loss_named(forward: Callable[[], Any], trainer: Any = None) -> None:
    """``forward()`` (a trainer's forward pass at update 7 over :func:`nan_batch_and_model`'s
    batch) stops, naming the update, the dataset and the sample; with ``trainer``, at the
    latest when its check is read (as before a checkpoint: the check waits for no device)."""
    try:
        forward()
        if trainer is not None:
            trainer.non_finite.flush()
    except Exception as exc:  # MMF: the NaN loss goes on to its backward pass and update
        message = str(exc)
        assert message.startswith("non-finite loss at update 7 on dataset uvla_region_tag"), message
        assert "image_id cc_000002 has non-finite values in region_features" in message, message
    else:
        raise AssertionError("a NaN loss went on to its update")


@check("command_line_values")
def _command_line_values() -> None:
    _literal_values()
    _trainer_switches()


def _literal_values() -> None:
    import mmf_cli.run  # noqa: F401  (MMF's command line: the entry-point fixes apply)
    from mmf_uvlp.errors import UserConfigError

    try:
        _configuration(
            ["model=visual_bert", "dataset=vqa2", "training.lr_scheduler=true"]
        ).get_config()
    except UserConfigError as error:
        assert "write training.lr_scheduler=True" in str(error), str(error)
    else:
        raise AssertionError("training.lr_scheduler=true was accepted as the string 'true'")
    refusals = {
        "dataset_config.vqa2.features.train=[features/cc.lmdb]": "write \"dataset_config.vqa2.features.train=['features/cc.lmdb']\"",
        "dataset_config.vqa2.annotations.train[0]=x.npy": 'give the whole list as a Python literal, e.g. "dataset_config.vqa2.annotations.train=[',
    }
    for override, spelling in refusals.items():
        try:
            _configuration(["model=visual_bert", "dataset=vqa2", override]).get_config()
        except UserConfigError as error:
            assert spelling in str(error), str(error)
        else:
            raise AssertionError(f"{override} was accepted")
    config = _configuration(
        [
            "model=visual_bert",
            "dataset=vqa2",
            "dataset_config.vqa2.features.train=['a.lmdb','b.lmdb']",
        ]
    ).get_config()
    assert list(config.dataset_config.vqa2.features.train) == ["a.lmdb", "b.lmdb"]
    # what mmf_predict appends to every command line
    config = _configuration(
        ["model=visual_bert", "dataset=vqa2", "evaluation.predict=true"]
    ).get_config()
    assert config.evaluation.predict is True, config.evaluation.predict


def _trainer_switches() -> None:
    import mmf_cli.run  # noqa: F401  (MMF's command line: the entry-point fixes apply)

    # MMF's own model, trained by the plugin's trainer: the trainer's switches are declared
    config = _configuration(
        ["model=visual_bert", "dataset=vqa2", "training.trainer=uvlp", "checkpoint.overwrite=True"]
    ).get_config()
    assert (
        config.checkpoint.overwrite,
        config.checkpoint.accept_mismatch,
        config.checkpoint.trust_resume_file,
    ) == (True, False, False), config.checkpoint
    # MMF's own run (its own trainer) has none of them
    own = _configuration(
        [f"config={_empty_config_file()}", "model=visual_bert", "dataset=vqa2"]
    ).get_config()
    assert "overwrite" not in own.checkpoint, own.checkpoint


@check("relative_data_dir")
def _relative_data_dir() -> None:
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            config = _configuration(
                ["model=visual_bert", "dataset=vqa2", "env.data_dir=worlds/mine"]
            ).get_config()
        finally:
            os.chdir(cwd)
        expected = os.path.join(os.path.realpath(folder), "worlds", "mine")
        assert os.path.realpath(config.env.data_dir) == expected, config.env.data_dir
        dataset_dir = os.path.realpath(config.dataset_config.vqa2.data_dir)
        # rc10: ${env.data_dir}; MMF main: ${env.data_dir}/datasets
        assert dataset_dir in (expected, os.path.join(expected, "datasets")), dataset_dir


@check("one_line_user_errors")
def _one_line_errors() -> None:
    import contextlib
    import io

    import mmf_cli.run

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            mmf_cli.run.run(
                opts=[
                    f"config={_empty_config_file(PLUGIN_RUN)}",
                    "model=visual_bert",
                    "dataset=vqa2",
                    "training.lr_scheduler=true",
                ]
            )
    except SystemExit as exit_:
        assert exit_.code == 2, exit_.code
    lines = stderr.getvalue().strip().splitlines()
    assert lines and lines[-1].startswith(
        "mmf_run: error: command line: training.lr_scheduler=true"
    ), lines
    expect_run_stopped_in_one_line()


def expect_run_stopped_in_one_line() -> None:
    """A run stopped by its data or disk (a RunStopped raised while training) ends in one line
    and exit status 1."""
    import contextlib
    import io

    import mmf_cli.run

    from mmf_uvlp.errors import RunStopped

    def stopped(*args: Any, **kwargs: Any) -> None:
        raise RunStopped(
            "cannot write checkpoint save/current.ckpt: ENOSPC (No space left on device)"
        )

    main, mmf_cli.run.main = mmf_cli.run.main, stopped
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            mmf_cli.run.run(
                opts=[f"config={_empty_config_file()}", "model=visual_bert", "dataset=vqa2"]
            )
    except SystemExit as exit_:
        assert exit_.code == 1, exit_.code
    else:
        raise AssertionError("mmf_run went on after the run stopped")
    finally:
        mmf_cli.run.main = main
    output = stderr.getvalue()  # MMF main's configuration may warn before the run starts
    assert "Traceback" not in output, output
    assert output.strip().splitlines()[-1] == (
        "mmf_run: error: cannot write checkpoint save/current.ckpt: ENOSPC (No space left on "
        "device)"
    ), output


@check("run_folder_lock")
def _run_folder_lock() -> None:
    import contextlib
    import io
    import os
    import tempfile

    import mmf_cli.run
    from mmf_uvlp.training.run_lock import RunLock

    class TrainerBuilt(Exception):
        pass

    def build_trainer(config: Any) -> None:
        raise TrainerBuilt

    build = mmf_cli.run.build_trainer
    mmf_cli.run.build_trainer = build_trainer
    stderr, code = io.StringIO(), None
    with tempfile.TemporaryDirectory() as save_dir:
        owner = RunLock(save_dir)
        owner.acquire()  # this process runs in the folder already
        try:
            config = os.path.join(save_dir, "config.yaml")  # MMF main reads config= always
            with open(config, "w") as handle:
                handle.write(PLUGIN_RUN + "  seed: 1\n")
            with contextlib.redirect_stderr(stderr):
                mmf_cli.run.run(
                    opts=[
                        f"config={config}",
                        "model=visual_bert",
                        "dataset=vqa2",
                        f"env.save_dir={save_dir}",
                    ]
                )
        except SystemExit as exit_:
            code = exit_.code
        except TrainerBuilt:
            code = "a second run started in the folder"
        finally:
            mmf_cli.run.build_trainer = build
            owner.release()
    assert code == 2, code
    line = stderr.getvalue().strip().splitlines()[-1]
    assert line.startswith(
        f"mmf_run: error: run folder {save_dir} is in use by pid {os.getpid()} on host "
    ), line
